"""GET /api/v1/events: a WebSocket of the caller's events (admins: everyone's).

Authenticate with the ``Authorization`` header or ``?token=`` (browsers cannot
set headers on a WebSocket). As on the JSON routes, no token or one nobody
knows is 401, and a token whose user may not use the service (in JupyterHub
mode: the hub knows her, but the token lacks the service's access scope, or
it is a hub service's) is 403. Each message is one JSON event: ``hello`` on
connect, then ``task``, ``version``, ``job`` and ``metrics`` events of the
caller's tasks (``job`` carries the status, accuracy, cost and, when
finished, the metrics), and every scheduler ``decision``, anonymised for
non-admins (``scheduler_view.py``). A notebook kernel sends
``{"type": "heartbeat", "session": id}`` on its stream to keep its
registered session alive (``notebooks.py``). A GET without a WebSocket upgrade is
answered 426 and other methods 405 (with ``Allow``), in the API's JSON error
shape.

Rights follow the token while the stream is open: a revoke of its user's
ease.ml token (``DELETE /users/{name}/tokens``) or the deletion of its
user closes it at once (code 1008; ``EventBus.close_user``), before any
later event. Besides, every ``RECHECK_SECONDS`` the token is looked up
again (through the same cache as a request), and a stream whose token no
longer gives the same account (``auth.same_user``: the id, which SQLite
gives again after a deletion, and the account's creation time, origin and
name) with the same admin flag is closed (code 1008). A user has at most
``MAX_STREAMS_PER_USER`` open streams; one more is answered 429. A stream opened with ``?passive=1``
(the magics' notifications) counts as no activity: it keeps no idle
service from stopping (``Service.idle_seconds``).
"""

from __future__ import annotations

import json
from typing import Any

import tornado.web
import tornado.websocket
from tornado.ioloop import IOLoop, PeriodicCallback

from ..errors import DataError, NotFoundError
from .auth import parse_authorization, same_user
from .core import Service

RECHECK_SECONDS = 5.0
MAX_STREAMS_PER_USER = 32
POLICY_VIOLATION = 1008  # the WebSocket close code for "your rights are gone"


class EventsHandler(tornado.websocket.WebSocketHandler):
    def initialize(self, service: Service) -> None:
        self.service = service
        self.user = None
        self._sid: int | None = None
        self._token: str | None = None
        self._recheck: PeriodicCallback | None = None
        self._counted = False
        self._passive = False

    def check_origin(self, origin: str) -> bool:
        return True  # the token, not the origin, authorises; cookies are never used

    def prepare(self) -> None:
        token = parse_authorization(self.request.headers.get("Authorization")) or self.get_query_argument("token", None)
        self._token = token
        self._passive = self.get_query_argument("passive", "") in ("1", "true")
        # JupyterHub mode (hub.HubTokens) tells a refused caller from an unknown one; ease.ml tokens alone cannot
        identify = getattr(self.service.tokens, "identify", self.service.tokens.user)
        try:
            self.user = identify(token)
        except PermissionError as refused:
            self._json_error(403, "forbidden", str(refused))  # handlers.error_of's answer to the same refusal
            return
        if self.user is None:
            self._json_error(401, "unauthorized", "missing or invalid token", field="Authorization",
                             expected="token <token>, Bearer <token> or ?token=")
        elif self.service.streams[self.user.id] >= MAX_STREAMS_PER_USER:
            self._json_error(429, "too_many_streams", f"{self.user.name} has {MAX_STREAMS_PER_USER} event streams "
                             "open already; close one first", field="streams",
                             found=self.service.streams[self.user.id], expected=f"at most {MAX_STREAMS_PER_USER}")

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
        self.service.streams[self.user.id] += 1
        self.service.passive_streams += self._passive
        self._counted = True
        # None (everyone's events) only for the token's admin rights now: the decision
        # events take who is an admin from this alone (scheduler_view.decision_event)
        self._sid = self.service.events.subscribe(None if self.user.is_admin else self.user.id, self._send,
                                                  IOLoop.current(), owner=self.user.id, close=self._rights_gone)
        self._recheck = PeriodicCallback(self._check_rights, RECHECK_SECONDS * 1000)
        self._recheck.start()
        self.write_message(json.dumps({"type": "hello", "user": self.user.name, "admin": self.user.is_admin}))
        # A revoke or deletion that closed her streams before this one subscribed: caught here.
        self._check_rights()

    def _check_rights(self) -> None:
        """Close the stream once its token no longer gives the rights it opened with."""
        if not same_user(self.service.tokens.user(self._token), self.user):
            self._rights_gone()

    def _rights_gone(self) -> None:
        if self.ws_connection is not None and not self.ws_connection.is_closing():
            self.close(POLICY_VIOLATION, "the token was revoked or its rights changed: connect again")

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
            return
        try:
            request = json.loads(message)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return  # not ours to answer: the stream carries events, a stray message changes nothing
        if isinstance(request, dict) and request.get("type") == "heartbeat":
            self._heartbeat(request)

    def _heartbeat(self, request: dict[str, Any]) -> None:
        """``{"type": "heartbeat", "session": id, "tasks": [...]}``: refresh the
        caller's notebook session (``notebooks.py``) and tie it to this
        stream; answered ``{"type": "heartbeat", "session": id, "ok": true,
        "timeout": s}`` or, for a session that is not hers (or that a
        restarted service does not know), ``"ok": false`` with ``status``
        404 and the error: the kernel then registers again."""
        session_id = request.get("session")
        try:
            self.service.notebooks.heartbeat(self.user.id, session_id, request.get("tasks"), stream=self._sid)
            reply = {"type": "heartbeat", "session": session_id, "ok": True,
                     "timeout": self.service.notebooks.timeout}
        except (NotFoundError, DataError) as error:
            status, code = (404, "not_found") if isinstance(error, NotFoundError) else (400, "bad_data")
            reply = {"type": "heartbeat", "session": str(session_id)[:40], "ok": False, "status": status,
                     "error": {"code": code, "message": str(error)}}
        self._send(reply)

    def on_close(self) -> None:
        if self._recheck is not None:
            self._recheck.stop()
        if self._counted:
            self._counted = False
            self.service.streams[self.user.id] -= 1
            self.service.passive_streams -= self._passive
        if self._sid is not None:
            self.service.events.unsubscribe(self._sid)
            # Its sessions stay until their timeout: a closed stream may be a network blip.
            self.service.notebooks.detach(self._sid)
            self._sid = None
