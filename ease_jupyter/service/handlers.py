"""HTTP handlers: small tornado classes over ``Service`` (STYLE.md §4).

Each route is a row of ``ROUTES``: a path and, per HTTP method, a function
``(service, user, handler, *path_args) -> result``. The function runs on a
thread pool so that training data decoding or a slow database never blocks
the IOLoop; its result becomes the JSON body, its exception a JSON error.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

import tornado.web
from tornado.ioloop import IOLoop

from ..errors import (AlreadyExistsError, DataError, InvalidStateError, NotFoundError, ProgramSyntaxError,
                      QuotaExceededError, StorageError, StorageFullError, StoreCorruptError, StoreUnavailableError)
from ..zoo import NoCandidatesError
from .auth import parse_authorization
from .core import Service
from .suspicion import NoModelError

log = logging.getLogger(__name__)
API = "/api/v1"
NAME = r"([^/]+)"


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, *, field: str | None = None,
                 found: Any = None, expected: Any = None):
        super().__init__(message)
        self.status, self.code, self.field, self.found, self.expected = status, code, field, found, expected


class Reply:
    """A result with a status other than 200."""

    def __init__(self, status: int, data: Any):
        self.status, self.data = status, data


_STORAGE_ERRORS = [(QuotaExceededError, 413, "quota_exceeded"), (StorageFullError, 507, "storage_full"),
                   (StoreUnavailableError, 503, "store_unavailable"), (StoreCorruptError, 500, "store_corrupt"),
                   (StorageError, 500, "storage_error")]


def error_of(exc: BaseException) -> ApiError:
    """Our exceptions -> (status, code, field, found, expected, message)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ProgramSyntaxError):
        return ApiError(400, "program_syntax", str(exc), field=f"program:{exc.line}:{exc.column}",
                        found=exc.found, expected=exc.expected)
    if isinstance(exc, DataError):
        return ApiError(400, "bad_data", str(exc), field=exc.field, found=exc.found, expected=exc.expected)
    if isinstance(exc, NoCandidatesError):
        return ApiError(400, "no_candidates", str(exc), field="program")
    if isinstance(exc, StorageError):
        status, code = next((s, c) for cls, s, c in _STORAGE_ERRORS if isinstance(exc, cls))
        return ApiError(status, code, str(exc), field=exc.field, found=exc.found, expected=exc.expected)
    if isinstance(exc, NotFoundError):
        return ApiError(404, "not_found", str(exc))
    if isinstance(exc, AlreadyExistsError):
        return ApiError(409, "already_exists", str(exc))
    if isinstance(exc, NoModelError):
        return ApiError(409, "no_model", str(exc))
    if isinstance(exc, InvalidStateError):
        return ApiError(409, "invalid_state", str(exc))
    if isinstance(exc, PermissionError):
        return ApiError(403, "forbidden", str(exc))
    if isinstance(exc, tornado.web.HTTPError):
        return ApiError(exc.status_code, "http_error", exc.log_message or tornado.httputil.responses.get(exc.status_code, "error"))
    return ApiError(500, "internal", f"{type(exc).__name__}: {exc}")


class BaseHandler(tornado.web.RequestHandler):
    """Auth, size limits and JSON errors for every API route."""

    limit_attr = "max_json_bytes"
    public = False
    ops: dict[str, Callable[..., Any]] = {}

    def initialize(self, service: Service) -> None:
        self.service = service
        self.user = None

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.set_header("Cache-Control", "no-store")

    async def prepare(self) -> None:
        self.service.touch()
        limit = getattr(self.service.config, self.limit_attr)
        length = int(self.request.headers.get("Content-Length") or len(self.request.body or b""))
        if length > limit:
            raise ApiError(413, "too_large", f"request body of {length} bytes is over the limit of {limit} bytes"
                           + ("; send large arrays through POST /api/v1/uploads" if self.limit_attr == "max_json_bytes" else ""),
                           field="body", found=f"{length} bytes", expected=f"at most {limit} bytes")
        if self.public:
            return
        authenticate = getattr(self.service.tokens, "authenticate", None)
        if authenticate is not None:  # JupyterHub mode (hub.py): the hub decides, a 403 is a PermissionError
            self.user = await authenticate(self)
        else:
            self.user = self.service.tokens.user(parse_authorization(self.request.headers.get("Authorization")))
        if self.user is None:
            raise ApiError(401, "unauthorized", "missing or invalid token: send 'Authorization: token <token>'"
                           + (" (an ease.ml token or a JupyterHub API token)" if authenticate is not None else ""),
                           field="Authorization", expected="token <token> or Bearer <token>")

    def json_body(self) -> dict[str, Any]:
        if not self.request.body:
            return {}
        try:
            body = json.loads(self.request.body)
        except (ValueError, UnicodeDecodeError) as error:
            raise DataError("body", f"invalid JSON ({error})", "a JSON object") from None
        if not isinstance(body, dict):
            raise DataError("body", type(body).__name__, "a JSON object")
        return body

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        err = error_of(exc) if exc is not None else ApiError(status_code, "http_error", self._reason)
        self.set_status(err.status)
        self.finish({"error": {"code": err.code, "field": err.field, "found": err.found,
                               "expected": err.expected, "message": str(err)}})

    def log_exception(self, typ, value, tb) -> None:  # noqa: ANN001 - tornado's signature
        if error_of(value).status >= 500:
            super().log_exception(typ, value, tb)

    async def _dispatch(self, method: str, *args: str) -> None:
        fn = self.ops.get(method)
        if fn is None:
            raise ApiError(405, "method_not_allowed", f"{method.upper()} is not allowed here")
        result = await IOLoop.current().run_in_executor(None, fn, self.service, self.user, self, *args)
        status, data = (result.status, result.data) if isinstance(result, Reply) else (200, result)
        self.set_status(status)
        self.finish(json.dumps(data))

    async def get(self, *args: str) -> None:
        await self._dispatch("get", *args)

    async def post(self, *args: str) -> None:
        await self._dispatch("post", *args)

    async def put(self, *args: str) -> None:
        await self._dispatch("put", *args)

    async def delete(self, *args: str) -> None:
        await self._dispatch("delete", *args)


class NotFoundHandler(BaseHandler):
    public = True

    def prepare(self) -> None:
        raise ApiError(404, "not_found", f"no route {self.request.path}")


def _int_arg(h: BaseHandler, name: str, default: int | None = None) -> int | None:
    raw = h.get_query_argument(name, None)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise DataError(name, repr(raw), "an integer") from None


def _created(pair: tuple[Any, bool]) -> Reply:
    data, created = pair
    return Reply(201 if created else 200, data)


def _openapi(service, user, h):  # noqa: ANN001
    from .openapi import spec

    return spec()


# path -> {method: fn(service, user, handler, *path args)}; the OpenAPI test checks every row is documented.
ROUTES: list[tuple[str, dict[str, Callable[..., Any]], dict[str, Any]]] = [
    ("/health", {"get": lambda s, u, h: s.health()}, {"public": True}),
    ("/openapi.json", {"get": _openapi}, {"public": True}),
    ("/whoami", {"get": lambda s, u, h: s.whoami(u)}, {}),
    ("/users", {"get": lambda s, u, h: s.list_users(u),
                "post": lambda s, u, h: Reply(201, s.add_user(u, h.json_body()))}, {}),
    ("/tasks", {"get": lambda s, u, h: s.list_tasks(u),
                "post": lambda s, u, h: _created(s.create_task(u, h.json_body()))}, {}),
    ("/tasks/" + NAME, {"get": lambda s, u, h, n: s.get_task(u, n)}, {}),
    ("/tasks/" + NAME + "/cancel", {"post": lambda s, u, h, n: s.cancel(u, n)}, {}),
    ("/tasks/" + NAME + "/resume", {"post": lambda s, u, h, n: s.resume(u, n)}, {}),
    ("/tasks/" + NAME + "/feed", {"post": lambda s, u, h, n: Reply(201, s.feed(u, n, h.json_body()))}, {}),
    ("/tasks/" + NAME + "/refine", {"post": lambda s, u, h, n: Reply(201, s.refine(u, n, h.json_body()))}, {}),
    ("/tasks/" + NAME + "/versions", {"get": lambda s, u, h, n: s.versions(u, n)}, {}),
    ("/tasks/" + NAME + "/examples", {"get": lambda s, u, h, n: s.examples(u, n, _int_arg(h, "version"))}, {}),
    ("/tasks/" + NAME + "/jobs", {"get": lambda s, u, h, n: s.jobs(u, n)}, {}),
    ("/tasks/" + NAME + "/history", {"get": lambda s, u, h, n: s.history(u, n)}, {}),
    ("/tasks/" + NAME + "/best", {"get": lambda s, u, h, n: s.best(u, n)}, {}),
    ("/tasks/" + NAME + "/suspicion",
     {"get": lambda s, u, h, n: s.suspicion(u, n, _int_arg(h, "version"), _int_arg(h, "k"))}, {}),
    ("/tasks/" + NAME + "/infer", {"post": lambda s, u, h, n: s.infer(u, n, h.json_body())}, {}),
    ("/tasks/" + NAME + "/provenance",
     {"get": lambda s, u, h, n: s.provenance(u, n, h.get_query_argument("direction", "backward"))}, {}),
    ("/tasks/" + NAME + "/tags", {"get": lambda s, u, h, n: s.tags(u, n),
                                  "put": lambda s, u, h, n: s.set_tags(u, n, h.json_body())}, {}),
    ("/leaderboard", {"get": lambda s, u, h: s.leaderboard(u)}, {}),
    ("/uploads", {"post": lambda s, u, h: Reply(201, s.new_upload(u))}, {}),
    ("/uploads/" + NAME, {"get": lambda s, u, h, i: s.upload_size(u, i),
                          "put": lambda s, u, h, i: s.upload_chunk(u, i, _int_arg(h, "offset", 0), h.request.body)},
     {"limit_attr": "max_chunk_bytes"}),
    ("/scheduler", {"get": lambda s, u, h: s.scheduler(u)}, {}),
    ("/admin/progress", {"get": lambda s, u, h: s.progress(u)}, {}),
]


def handlers(service: Service) -> list[tuple[str, type, dict[str, Any]]]:
    from .websocket import EventsHandler

    out: list[tuple[str, type, dict[str, Any]]] = []
    for path, ops, attrs in ROUTES:
        cls = type("Handler_" + path.strip("/").replace("/", "_").replace(NAME, "x").replace(".", "_"),
                   (BaseHandler,), {"ops": ops, **attrs})
        out.append((API + path, cls, {"service": service}))
    out.append((API + "/events", EventsHandler, {"service": service}))
    return out
