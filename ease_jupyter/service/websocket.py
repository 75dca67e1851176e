"""GET /api/v1/events: a WebSocket of the caller's events (admins: everyone's).

Authenticate with the ``Authorization`` header or ``?token=`` (browsers cannot
set headers on a WebSocket). Each message is one JSON event: ``hello`` on
connect, then ``task``, ``version``, ``job`` and ``metrics`` events of the
caller's tasks (``job`` carries the status, accuracy, cost and, when
finished, the metrics), and every scheduler ``decision``, anonymised for
non-admins (``scheduler_view.py``).
"""

from __future__ import annotations

import json
from typing import Any

import tornado.web
import tornado.websocket
from tornado.ioloop import IOLoop

from .auth import parse_authorization
from .core import Service


class EventsHandler(tornado.websocket.WebSocketHandler):
    def initialize(self, service: Service) -> None:
        self.service = service
        self.user = None
        self._sid: int | None = None

    def check_origin(self, origin: str) -> bool:
        return True  # the token, not the origin, authorises; cookies are never used

    def prepare(self) -> None:
        token = parse_authorization(self.request.headers.get("Authorization")) or self.get_query_argument("token", None)
        self.user = self.service.tokens.user(token)
        if self.user is None:
            self.set_status(401)
            self.set_header("Content-Type", "application/json; charset=utf-8")
            self.finish({"error": {"code": "unauthorized", "field": "Authorization", "found": None,
                                   "expected": "token <token>, Bearer <token> or ?token=",
                                   "message": "missing or invalid token"}})

    def open(self, *args: Any) -> None:
        self._sid = self.service.events.subscribe(None if self.user.is_admin else self.user.id, self._send,
                                                  IOLoop.current())
        self.write_message(json.dumps({"type": "hello", "user": self.user.name, "admin": self.user.is_admin}))

    def _send(self, event: dict[str, Any]) -> None:
        if self.ws_connection is None or self.ws_connection.is_closing():
            return
        try:
            self.write_message(json.dumps(event))
        except tornado.websocket.WebSocketClosedError:
            pass

    def on_message(self, message: str | bytes) -> None:
        if message == "ping":
            self.write_message(json.dumps({"type": "pong"}))

    def on_close(self) -> None:
        if self._sid is not None:
            self.service.events.unsubscribe(self._sid)
            self._sid = None
