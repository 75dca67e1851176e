"""The notebook sessions attached to the service (docs/service.md, "Notebook sessions").

A kernel registers (``POST /api/v1/notebooks``) with what it knows about
itself (``ease_jupyter.kernel_info``): the hub user and server name, its
kernel id, its notebook path, the gateway serving it; the caller's token
says whose session it is. It then heartbeats over its event stream (a
``{"type": "heartbeat", "session": id}`` message on ``/api/v1/events``) or
``POST /api/v1/notebooks/{id}/heartbeat``, and adds the tasks it touches. A
session unheard of for ``timeout`` seconds is gone: still listed, with
``alive`` false, until it is forgotten a while later (``FORGET_AFTER``).

The registry lives in memory, not in the store. A session is liveness, not
data: a heartbeat every few seconds per kernel would be a write each, taking
the store's write lock beside the feeds, for state that is stale the moment
the service stops anyway. A restarted service knows no sessions; each kernel
registers again when its event stream reconnects, so the list is whole again
within a heartbeat of the restart.

A session id is the service's (random, never reused) and bound to its owner:
another user's session id is unknown to the caller (404), and so is any
heartbeat or goodbye for it. A kernel id belongs to the user whose session
registered it for as long as the service remembers that session, alive or
gone: another user's registration of it is refused (403 naming ``kernel_id``,
``KernelIdTaken``), whatever state the holder's session is in, so the refusal
tells nothing of it. A gone session does not give its kernel id up, because
gone is not dead: a kernel whose stream is down (a network outage, a retry
waiting up to ``notebook_session.MAX_RETRY_SECONDS``, longer than the
timeout) comes back to a session it must find still its own, not squatted by
someone who read the id off a screen. Kernel ids are UUIDs, so no other user
needs the same one; the one exception is the same hub user under another
account (``easeml users link`` gave her name another row), who takes her
kernel's id over. Refusals change nothing.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from ..errors import DataError, InvalidStateError, NotFoundError
from ..store.base import HUB
from .auth import check_name

DEFAULT_TIMEOUT_SECONDS = 90.0
FORGET_AFTER = 24 * 3600.0  # a gone session stays listed this long
MAX_SESSIONS_PER_USER = 200  # live or gone; past it her oldest gone ones are forgotten first
MAX_TASKS_PER_SESSION = 1000
_KERNEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_TEXT_LIMITS = {"hub_user": 255, "server_name": 255, "notebook_path": 4096}
BODY_FIELDS = ("kernel_id", "hub_user", "server_name", "notebook_path", "gateway", "tasks")


@dataclass
class Session:
    """One registered kernel. ``last_seen`` is ``time.time()`` of its last
    registration or heartbeat; ``streams`` the ids (``EventBus`` subscriber
    ids) of the event streams it heartbeats on now."""

    id: str
    user_id: int
    user: str
    kernel_id: str | None
    hub_user: str | None
    server_name: str | None
    notebook_path: str | None
    gateway: Any
    tasks: list[str]
    registered_at: float
    last_seen: float
    ended: bool = False  # the kernel said goodbye (DELETE)
    streams: set[int] = field(default_factory=set)
    # The registrant's hub name when she logged in through the hub (never
    # from the body): the same hub user under another account, after a link.
    hub_login: str | None = None

    def alive(self, now: float, timeout: float) -> bool:
        return not self.ended and now - self.last_seen <= timeout

    def to_json(self, now: float, timeout: float) -> dict[str, Any]:
        alive = self.alive(now, timeout)
        return {"id": self.id, "user": self.user, "kernel_id": self.kernel_id, "hub_user": self.hub_user,
                "server_name": self.server_name, "notebook_path": self.notebook_path, "gateway": self.gateway,
                "tasks": list(self.tasks), "registered_at": _iso(self.registered_at),
                "last_seen": _iso(self.last_seen), "seconds_since_seen": round(max(0.0, now - self.last_seen), 3),
                "alive": alive, "connected": bool(self.streams) and alive}


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat()


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    limit = _TEXT_LIMITS[name]
    if not isinstance(value, str) or len(value) > limit:
        raise DataError(name, repr(value)[:80], f"a string of at most {limit} characters, or null")
    return value


def _kernel_id(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _KERNEL_ID.match(value):
        raise DataError("kernel_id", repr(value)[:80], "a kernel id (1-64 of A-Z a-z 0-9 _ -, e.g. a UUID), or null")
    return value


def _gateway(value: Any) -> Any:
    """None, a string (the gateway's URL) or a flat object of strings."""
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= 1024:
        return value
    if (isinstance(value, dict) and len(value) <= 16
            and all(isinstance(k, str) and len(k) <= 64 for k in value)
            and all(v is None or (isinstance(v, str) and len(v) <= 1024) for v in value.values())):
        return dict(value)
    raise DataError("gateway", repr(value)[:80], "null, a URL, or an object of at most 16 string fields")


def check_tasks(value: Any, field_name: str = "tasks") -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_TASKS_PER_SESSION:
        raise DataError(field_name, repr(value)[:80], f"a list of at most {MAX_TASKS_PER_SESSION} task names")
    return [check_name(f"{field_name}[{i}]", name) for i, name in enumerate(value)]


def registration(body: Any) -> dict[str, Any]:
    """A registration body, checked: every field named, nothing else."""
    if not isinstance(body, dict):
        raise DataError("body", type(body).__name__, "a JSON object")
    unknown = sorted(set(body) - set(BODY_FIELDS))
    if unknown:
        raise DataError(unknown[0], repr(body[unknown[0]])[:80], f"only the fields {', '.join(BODY_FIELDS)}")
    return {"kernel_id": _kernel_id(body.get("kernel_id")), "hub_user": _text(body, "hub_user"),
            "server_name": _text(body, "server_name"), "notebook_path": _text(body, "notebook_path"),
            "gateway": _gateway(body.get("gateway")), "tasks": check_tasks(body.get("tasks"))}


class KernelIdTaken(PermissionError):
    """A registration names a kernel id that another user's session holds
    (403). It names the field and the value sent, nothing of the holder:
    not who, not whether her session is alive, not its notebook."""

    def __init__(self, kernel_id: str):
        super().__init__(f"kernel_id {kernel_id!r} is held by another user's notebook session; a session may "
                         "only name a kernel of the caller's own")
        self.field, self.found = "kernel_id", kernel_id
        self.expected = "the id of a kernel of your own (no other user's notebook session holds it)"


class NotebookRegistry:
    """Sessions by id, thread-safe (HTTP handlers run on threads, the event
    streams on the IOLoop). ``clock`` is ``time.time`` but for tests."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT_SECONDS, clock: Callable[[], float] = time.time):
        if not timeout > 0:
            raise ValueError(f"timeout: found {timeout}, expected > 0 seconds")
        self.timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    # -------------------------------------------------------------- writes
    def register(self, user_id: int, user: str, body: Any, *,
                 hub_login: str | None = None) -> tuple[Session, bool]:
        """(session, created). The same user's kernel id again (the kernel
        reconnected) updates her session, alive or gone, and keeps its id;
        a kernel id another user's remembered session holds is refused with
        ``KernelIdTaken`` (403), unless both registrations are the same hub
        login (``hub_login``: her hub name, for a hub login only), whose
        account a link replaced: hers then takes it, and the old session
        stays listed without it."""
        facts = registration(body)
        now = self._clock()
        with self._lock:
            self._forget_old(now)
            kernel_id, released = facts["kernel_id"], None
            if kernel_id is not None:
                held = next((s for s in self._sessions.values() if s.kernel_id == kernel_id), None)
                if held is not None and held.user_id != user_id:
                    if hub_login is None or held.hub_login != hub_login:
                        raise KernelIdTaken(kernel_id)
                    released, held = held, None  # her own kernel, under the account she has now
                if held is not None:
                    tasks = _merged(held.tasks, facts.pop("tasks"))
                    for name, value in facts.items():
                        setattr(held, name, value)
                    held.tasks, held.last_seen, held.ended = tasks, now, False
                    return held, False
            self._make_room(user_id, now)
            if released is not None:
                released.kernel_id = None
            session = Session(id=secrets.token_hex(8), user_id=user_id, user=user, registered_at=now, last_seen=now,
                              hub_login=hub_login, **facts)
            self._sessions[session.id] = session
            return session, True

    def heartbeat(self, user_id: int, session_id: Any, tasks: Any = None, stream: int | None = None) -> Session:
        """Refresh the caller's session (and add ``tasks``); NotFoundError
        for an id that is not hers, which changes nothing."""
        added = check_tasks(tasks)
        with self._lock:
            session = self._own(user_id, session_id)
            if len(_merged(session.tasks, added)) > MAX_TASKS_PER_SESSION:
                raise DataError("tasks", f"{len(session.tasks)} tasks and {len(added)} more",
                                f"at most {MAX_TASKS_PER_SESSION} tasks per session")
            session.tasks = _merged(session.tasks, added)
            session.last_seen, session.ended = self._clock(), False
            if stream is not None:
                session.streams.add(stream)
            return session

    def detach(self, stream: int) -> None:
        """An event stream closed: its sessions stay (a network blip) until their timeout."""
        with self._lock:
            for session in self._sessions.values():
                session.streams.discard(stream)

    def end(self, user_id: int, session_id: Any) -> Session:
        """The kernel is going (its own goodbye): gone now, listed as gone."""
        with self._lock:
            session = self._own(user_id, session_id)
            session.ended = True
            return session

    def forget_user(self, user_id: int) -> int:
        """Drop every session of a user whose account was deleted (alive or
        gone): no kernel id stays hers. How many went."""
        with self._lock:
            gone = [sid for sid, s in self._sessions.items() if s.user_id == user_id]
            for sid in gone:
                del self._sessions[sid]
            return len(gone)

    # --------------------------------------------------------------- reads
    def get(self, user_id: int, session_id: Any, *, admin: bool = False) -> Session:
        with self._lock:
            session = self._sessions.get(session_id) if isinstance(session_id, str) else None
            if session is None or (session.user_id != user_id and not admin):
                raise NotFoundError(f"no notebook session {str(session_id)[:40]!r}")
            return session

    def sessions_of(self, user_id: int | None, *, alive_only: bool = False) -> list[Session]:
        """A user's sessions (None: everyone's), oldest first."""
        now = self._clock()
        with self._lock:
            self._forget_old(now)
            out = [s for s in self._sessions.values() if user_id is None or s.user_id == user_id]
        if alive_only:
            out = [s for s in out if s.alive(now, self.timeout)]
        return sorted(out, key=lambda s: (s.registered_at, s.id))

    def to_json(self, session: Session) -> dict[str, Any]:
        return session.to_json(self._clock(), self.timeout)

    # ------------------------------------------------------------- helpers
    def _own(self, user_id: int, session_id: Any) -> Session:
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None or session.user_id != user_id:
            raise NotFoundError(f"no notebook session {str(session_id)[:40]!r} of yours")
        return session

    def _forget_old(self, now: float) -> None:
        for sid in [sid for sid, s in self._sessions.items()
                    if not s.alive(now, self.timeout) and now - s.last_seen > FORGET_AFTER]:
            del self._sessions[sid]

    def _make_room(self, user_id: int, now: float) -> None:
        own = sorted((s for s in self._sessions.values() if s.user_id == user_id), key=lambda s: s.last_seen)
        excess = len(own) - MAX_SESSIONS_PER_USER + 1
        gone = [s for s in own if not s.alive(now, self.timeout)]
        for session in gone[:max(0, excess)]:
            del self._sessions[session.id]
        if excess > len(gone):
            raise InvalidStateError(f"{len(own)} live notebook sessions already: at most {MAX_SESSIONS_PER_USER} "
                                    "per user; end some (DELETE /api/v1/notebooks/{id}) or wait for their timeout")


def _merged(tasks: list[str], added: list[str]) -> list[str]:
    return tasks + [name for name in dict.fromkeys(added) if name not in tasks]


# ----------------------------------------------------------------- the API
def api_list(service: Any, caller: Any) -> list[dict[str, Any]]:
    registry: NotebookRegistry = service.notebooks
    return [registry.to_json(s) for s in registry.sessions_of(None if caller.is_admin else caller.id)]


def api_register(service: Any, caller: Any, body: Any) -> tuple[dict[str, Any], bool]:
    """``POST /notebooks``; a kernel id of another user's session is a 403
    naming ``kernel_id`` (the API's error shape, ``handlers.ApiError``)."""
    from .handlers import ApiError  # (handlers imports this module)

    hub_login = caller.name if caller.origin == HUB else None
    if hub_login is not None and isinstance(body, dict):
        # a hub login's hub name is known: a registration never says she is someone else
        body = {**body, "hub_user": hub_login}
    try:
        session, created = service.notebooks.register(caller.id, caller.name, body, hub_login=hub_login)
    except KernelIdTaken as taken:
        raise ApiError(403, "forbidden", str(taken), field=taken.field, found=taken.found,
                       expected=taken.expected) from None
    return service.notebooks.to_json(session), created


def api_get(service: Any, caller: Any, session_id: str) -> dict[str, Any]:
    return service.notebooks.to_json(service.notebooks.get(caller.id, session_id, admin=caller.is_admin))


def api_heartbeat(service: Any, caller: Any, session_id: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or set(body) - {"tasks"}:
        raise DataError("body", repr(body)[:80], 'an object with at most "tasks" (a list of task names)')
    return service.notebooks.to_json(service.notebooks.heartbeat(caller.id, session_id, body.get("tasks")))


def api_end(service: Any, caller: Any, session_id: str) -> dict[str, Any]:
    return service.notebooks.to_json(service.notebooks.end(caller.id, session_id))


def openapi_paths() -> dict[str, Any]:
    """The routes' OpenAPI description (merged into ``openapi.spec``)."""
    from .openapi import NAME_SCHEMA, _obj, _op

    text = {"type": ["string", "null"]}
    gateway = {"type": ["string", "object", "null"], "maxLength": 1024, "maxProperties": 16,
               "propertyNames": {"maxLength": 64},
               "additionalProperties": {"type": ["string", "null"], "maxLength": 1024}}
    tasks = {"type": "array", "items": NAME_SCHEMA, "maxItems": MAX_TASKS_PER_SESSION}
    tasks_in = {**tasks, "type": ["array", "null"]}  # null: none
    session = _obj("id", "user", "kernel_id", "hub_user", "server_name", "notebook_path", "gateway", "tasks",
                   "registered_at", "last_seen", "seconds_since_seen", "alive", "connected",
                   id={"type": "string"}, user={"type": "string"}, kernel_id=text, hub_user=text, server_name=text,
                   notebook_path=text, gateway=gateway, tasks=tasks, registered_at={"type": "string"},
                   last_seen={"type": "string"}, seconds_since_seen={"type": "number"}, alive={"type": "boolean"},
                   connected={"type": "boolean"})
    body = {**_obj(kernel_id={"type": ["string", "null"], "pattern": _KERNEL_ID.pattern},
                   hub_user={"type": ["string", "null"], "maxLength": 255},
                   server_name={"type": ["string", "null"], "maxLength": 255},
                   notebook_path={"type": ["string", "null"], "maxLength": 4096}, gateway=gateway, tasks=tasks_in),
            "additionalProperties": False}
    sid = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"},
           "description": "a notebook session id (the service's, from POST /notebooks)"}
    return {
        "/notebooks": {
            "get": _op("The caller's notebook sessions, alive or gone (admins: everyone's, each with its user)",
                       response={"type": "array", "items": session}),
            "post": _op("Register a notebook session (201), or refresh the caller's session of the same kernel id "
                        "(200); a kernel id that another user's session holds, alive or gone, is 403 with field "
                        "kernel_id, and tells nothing of that session", ok=(200, 201), body=body,
                        body_required=False, response=session)},
        "/notebooks/{name}": {
            "get": _op("One session (the caller's; admins: anyone's)", params=[sid], response=session),
            "delete": _op("End the caller's session (the kernel is going): listed as gone", params=[sid],
                          response=session)},
        "/notebooks/{name}/heartbeat": {"post": _op(
            "Keep the caller's session alive and add the tasks it touched (the event stream's heartbeat message "
            "does the same); another user's session is 404", params=[sid], body_required=False,
            body={"type": "object", "properties": {"tasks": tasks_in}, "additionalProperties": False},
            response=session)},
    }
