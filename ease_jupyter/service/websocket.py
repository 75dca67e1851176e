"""GET /api/v1/events: a WebSocket of the caller's events (admins: everyone's).

Authenticate with the ``Authorization`` header or ``?token=`` (browsers cannot
set headers on a WebSocket). Each message is one JSON event: ``hello`` on
connect, then ``task``, ``version``, ``job`` and ``metrics`` events of the
caller's tasks (``job`` carries the status, accuracy, cost and, when
finished, the metrics), and every scheduler ``decision``, anonymised for
non-admins (``scheduler_view.py``). A GET without a WebSocket upgrade is
answered 426 and other methods 405 (with ``Allow``), in the API's JSON error
shape.
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
            self._json_error(401, "unauthorized", "missing or invalid token", field="Authorization",
                             expected="token <token>, Bearer <token> or ?token=")

    async def get(self, *args: Any, **kwargs: Any) -> None:
        # tornado would answer a plain GET with a text/html 400; this API speaks JSON.
        headers = self.request.headers
        if (headers.get("Upgrade", "").lower() != "websocket"
                or "upgrade" not in [part.strip().lower() for part in headers.get("Connection", "").split(",")]):
            self.set_header("Upgrade", "websocket")
            self._json_error(426, "upgrade_required",
                             "this route is a WebSocket: send 'Upgrade: websocket' and 'Connection: Upgrade'",
                             field="Upgrade", found=headers.get("Upgrade"), expected="websocket")
            return
        await super().get(*args, **kwargs)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """tornado's own refusals (another method: 405) in the API's JSON shape."""
        if status_code == 405:
            self.set_header("Allow", "GET")
            self._json_error(405, "method_not_allowed", "only GET (a WebSocket upgrade) is allowed here",
                             field="method")
        elif status_code == 400:  # e.g. a body tornado cannot parse: this GET takes none
            self._json_error(400, "bad_request", "malformed request; a WebSocket upgrade is a GET without a body",
                             field="request")
        else:
            self._json_error(status_code, "http_error", self._reason)

    def _json_error(self, status: int, code: str, message: str, *, field: str | None = None, found: Any = None,
                    expected: Any = None) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish({"error": {"code": code, "field": field, "found": found, "expected": expected, "message": message}})

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
