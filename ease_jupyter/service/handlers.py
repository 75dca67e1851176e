"""HTTP handlers: small tornado classes over ``Service`` (STYLE.md §4).

Each route is a row of ``ROUTES``: a path and, per HTTP method, a function
``(service, user, handler, *path_args) -> result``. The function runs on a
thread pool so that training data decoding or a slow database never blocks
the IOLoop; its result becomes the JSON body, its exception a JSON error.
"""

from __future__ import annotations

import json
import logging
import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import tornado.httputil
import tornado.web
from tornado.ioloop import IOLoop

from ..errors import (AlreadyExistsError, DataError, InvalidStateError, NotFoundError, ProgramSyntaxError,
                      StorageError, UserModelCallError)
from ..zoo import NoCandidatesError
from .auth import parse_authorization, same_user
from .core import Service
from .feeding import json_object
from .suspicion import NoModelError
from . import budget_api, notebooks

log = logging.getLogger(__name__)
API = "/api/v1"
NAME = r"([^/]+)"
# What tornado itself still accepts past a route's body limit: one read of
# its stream, so that a chunked body crossing the limit meets our JSON 413.
STREAM_SLACK_BYTES = 64 * 1024
# A request's whole body must arrive within BODY_SECONDS (app.py gives tornado
# this default), or within the time its route's limit takes at
# MIN_BODY_BYTES_PER_SECOND when that is longer; else the connection is
# closed. A client cannot hold a request open with a body that never comes.
BODY_SECONDS = 60.0
MIN_BODY_BYTES_PER_SECOND = 256 * 1024
# GETs run on their own threads, so a read never queues behind the writes
# (feeds, uploads) that fill the IOLoop's default executor (app.REQUEST_THREADS).
READ_THREADS = 8
_READS = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="easeml-read")
# Routes that run a model (an export, suspicion scores, an infer) may wait up to
# core.MODEL_CALL_SECONDS on a user's own code: they get threads of their own, so
# neither reads nor feeds queue behind them, and each user holds at most a few.
MODEL_CALL_THREADS = 16
MODEL_CALLS_PER_USER = 2
_MODEL_CALLS = ThreadPoolExecutor(MODEL_CALL_THREADS, thread_name_prefix="easeml-model-call")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, *, field: str | None = None,
                 found: Any = None, expected: Any = None):
        super().__init__(message)
        self.status, self.code, self.field, self.found, self.expected = status, code, field, found, expected


class Reply:
    """A result with a status other than 200."""

    def __init__(self, status: int, data: Any):
        self.status, self.data = status, data


class Download:
    """A result that is a file: its bytes as the body, not JSON."""

    def __init__(self, data: bytes, media_type: str, filename: str):
        self.data, self.media_type, self.filename = data, media_type, filename


def error_of(exc: BaseException, error_id: str | None = None) -> ApiError:
    """Our exceptions -> (status, code, field, found, expected, message).

    Anything else is a 500 whose message says only that the service failed,
    with ``error_id``: the detail (SQL, paths, the exception) goes to the
    service log under that id, never to the client."""
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
        return ApiError(exc.http_status, exc.code, str(exc), field=exc.field, found=exc.found, expected=exc.expected)
    if isinstance(exc, UserModelCallError):  # her own model failed after training: her traceback, for her
        return ApiError(exc.http_status, exc.code, str(exc), field=exc.field)
    if isinstance(exc, NotFoundError):
        return ApiError(404, "not_found", str(exc))
    if isinstance(exc, AlreadyExistsError):
        return ApiError(409, "already_exists", str(exc))
    if isinstance(exc, NoModelError):
        return ApiError(409, "no_model", str(exc))
    if isinstance(exc, InvalidStateError):
        return ApiError(409, "invalid_state", str(exc))
    if isinstance(exc, PermissionError) and exc.errno is None:  # ours ("admin rights needed"), not the filesystem's
        return ApiError(403, "forbidden", str(exc))
    if isinstance(exc, tornado.web.HTTPError) and exc.status_code < 500:
        return _http_error(exc.status_code, exc)
    return ApiError(500, "internal", "the service failed on this request"
                    + (f"; the service log has the details under error id {error_id}" if error_id else ""))


def _http_error(status: int, exc: tornado.web.HTTPError | None = None) -> ApiError:
    """Tornado's own refusals (unsupported method, malformed request) as our JSON errors."""
    if status == 405:
        return ApiError(405, "method_not_allowed",
                        "this method is not allowed here; the Allow header lists those that are", field="method")
    if status == 400:  # e.g. a path or query argument that is not UTF-8; tornado's words describe the input only
        detail = (exc.log_message % exc.args) if exc is not None and exc.log_message else "malformed request"
        return ApiError(400, "bad_request", detail, field="request")
    return ApiError(status, "http_error", tornado.httputil.responses.get(status, "error"))


def _declared_length(headers: tornado.httputil.HTTPHeaders) -> int | None:
    """The Content-Length header as a number (None: absent, e.g. a chunked body)."""
    raw = headers.get("Content-Length")
    if raw is None:
        return None
    if not raw.strip().isdigit():
        raise ApiError(400, "bad_request", "Content-Length must be a number of bytes", field="Content-Length",
                       found=raw[:40], expected="a non-negative integer")
    return int(raw)


def _too_large(length: int, limit: int, json_route: bool) -> ApiError:
    hint = "; send large arrays through POST /api/v1/uploads" if json_route else ""
    return ApiError(413, "too_large", f"request body of {length} bytes is over the limit of {limit} bytes{hint}",
                    field="body", found=f"{length} bytes", expected=f"at most {limit} bytes")


@tornado.web.stream_request_body
class BaseHandler(tornado.web.RequestHandler):
    """Auth, size limits and JSON errors for every API route.

    The body is streamed (``stream_request_body``): ``prepare`` runs once the
    headers are in, before any of the body is read, so an unknown method
    (405), a caller without a valid token (401) and a declared length over
    the route's limit (413) are answered from the headers alone and the
    connection is closed without reading the body. A body that arrives
    without a length (chunked) is counted as it streams and refused the
    moment it passes the limit; at most the limit is ever buffered. Once
    the body is in, the token is looked up again (``_check_caller_again``)
    before the route runs."""

    limit_attr = "max_json_bytes"
    public = False
    inline = False  # answered on the IOLoop's thread (only routes that read nothing but memory)
    runs_models = False  # on the model-call threads, at most MODEL_CALLS_PER_USER per user at once
    ops: dict[str, Callable[..., Any]] = {}

    def initialize(self, service: Service) -> None:
        self.service = service
        self.user = None
        self._body = bytearray()
        self._limit = 0
        self._error_id: str | None = None

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.set_header("Cache-Control", "no-store")

    def compute_etag(self) -> None:
        """No ETag: every answer is ``no-store`` and no client sends
        ``If-None-Match``, so tornado's hash of each GET's body is wasted."""
        return None

    async def prepare(self) -> None:
        self.service.touch()
        self._limit = getattr(self.service.config, self.limit_attr)
        length = _declared_length(self.request.headers)
        self._expect_body(length)
        if self.request.method.lower() not in self.ops:
            raise _http_error(405)
        await self._authenticate()
        if length is not None and length > self._limit:
            raise _too_large(length, self._limit, self.limit_attr == "max_json_bytes")

    def _expect_body(self, length: int | None) -> None:
        """Tell tornado how much body this request may bring: the route's
        limit (plus a read of slack, see ``data_received``), or the declared
        length when that is more. A request refused here is answered and its
        connection closed before tornado reads more than a few reads of it;
        the higher bound only keeps tornado from answering such a request
        with its own bare 400 on top of ours."""
        if self.request.connection is not None:
            self.request.connection.set_max_body_size(max(length or 0, self._limit) + STREAM_SLACK_BYTES)
            self.request.connection.set_body_timeout(max(BODY_SECONDS, self._limit / MIN_BODY_BYTES_PER_SECOND))

    async def _authenticate(self) -> None:
        """Sets ``self.user``; 401 without a valid token, except on public routes,
        where a valid token only adds detail (an admin's ``/health``)."""
        try:
            self.user = await self._caller()
        except PermissionError:
            if not self.public:
                raise
        if self.user is None and not self.public:
            raise self._unauthorized()

    async def _caller(self) -> Any:
        """Who the request's token (or, in JupyterHub mode, its OAuth cookie)
        is now: None for nobody; PermissionError (403) for a hub caller the
        hub does not let in."""
        authenticate = getattr(self.service.tokens, "authenticate", None)
        if authenticate is not None:  # JupyterHub mode (hub.py): the hub decides, a 403 is a PermissionError
            return await authenticate(self)
        return self.service.tokens.user(parse_authorization(self.request.headers.get("Authorization")))

    def _unauthorized(self) -> ApiError:
        hub = getattr(self.service.tokens, "authenticate", None) is not None
        return ApiError(401, "unauthorized", "missing or invalid token: send 'Authorization: token <token>'"
                        + (" (an ease.ml token or a JupyterHub API token)" if hub else ""),
                        field="Authorization", expected="token <token> or Bearer <token>")

    async def _check_caller_again(self) -> None:
        """Look the caller up again once the body is in: a token revoked, or an
        account deleted (whose id SQLite may have given to a new account),
        while the body streamed is 401 like any revoked token, and its route
        does not run."""
        if self.user is None:
            return
        try:
            now = await self._caller()
        except PermissionError:
            if not self.public:
                raise
            now = None
        if not same_user(now, self.user):
            if not self.public:
                raise self._unauthorized()
            self.user = None  # a public route answers as to nobody

    def data_received(self, chunk: bytes) -> None:
        if self._finished:  # refused already: the rest is dropped until the connection closes
            return
        if len(self._body) + len(chunk) > self._limit:
            error = _too_large(len(self._body) + len(chunk), self._limit, self.limit_attr == "max_json_bytes")
            self._body = bytearray()
            self.send_error(413, exc_info=(ApiError, error, None))
            return
        self._body += chunk

    def json_body(self) -> dict[str, Any]:
        return json_object(self.request.body)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        err = error_of(exc, self._error_ref()) if exc is not None else _http_error(status_code)
        self.set_status(err.status)
        if err.status == 405:
            self.set_header("Allow", ", ".join(method.upper() for method in self.ops))
        self.finish({"error": {"code": err.code, "field": err.field, "found": err.found,
                               "expected": err.expected, "message": str(err)}})

    def _error_ref(self) -> str:
        """The id under which this request's 500 is logged (and named to the client)."""
        if self._error_id is None:
            self._error_id = secrets.token_hex(6)
        return self._error_id

    def log_exception(self, typ, value, tb) -> None:  # noqa: ANN001 - tornado's signature
        if value is not None and error_of(value).status >= 500:
            log.error("error id %s: %s %s failed", self._error_ref(), self.request.method, self.request.path,
                      exc_info=(typ, value, tb))

    async def _dispatch(self, method: str, *args: str) -> None:
        if self._finished:  # refused while the body streamed in
            return
        fn = self.ops[method]  # prepare() answered 405 for any other method
        await self._check_caller_again()
        # A bytearray, not bytes: json.loads and file writes take it, and an upload chunk is not copied.
        self.request.body = self._body
        if self.inline:  # in-memory answers: no thread, so a pool full of slow reads never holds them back
            result = fn(self.service, self.user, self, *args)
        elif self.runs_models:
            result = await self._model_call(fn, *args)
        else:
            executor = _READS if method == "get" else None
            result = await IOLoop.current().run_in_executor(executor, fn, self.service, self.user, self, *args)
        if isinstance(result, Download):
            self.set_header("Content-Type", result.media_type)
            self.set_header("Content-Disposition", f'attachment; filename="{result.filename}"')
            self.finish(bytes(result.data))
            return
        status, data = (result.status, result.data) if isinstance(result, Reply) else (200, result)
        self.set_status(status)
        self.finish(json.dumps(data))

    async def _model_call(self, fn: Callable[..., Any], *args: str) -> Any:
        """``fn`` on a model-call thread; 429 ``too_many_model_calls`` while the
        caller has MODEL_CALLS_PER_USER of them running or queued (counted on
        the IOLoop's thread, so no lock)."""
        calls, user_id = self.service.model_calls, self.user.id
        if calls[user_id] >= MODEL_CALLS_PER_USER:
            raise ApiError(429, "too_many_model_calls",
                           f"{self.user.name} has {MODEL_CALLS_PER_USER} requests that run a model (export, "
                           "suspicion, infer) under way already; wait for one to answer", field="requests",
                           found=calls[user_id], expected=f"at most {MODEL_CALLS_PER_USER} at once")
        calls[user_id] += 1
        try:
            return await IOLoop.current().run_in_executor(_MODEL_CALLS, fn, self.service, self.user, self, *args)
        finally:
            calls[user_id] -= 1
            if not calls[user_id]:
                del calls[user_id]

    async def get(self, *args: str) -> None:
        await self._dispatch("get", *args)

    async def post(self, *args: str) -> None:
        await self._dispatch("post", *args)

    async def put(self, *args: str) -> None:
        await self._dispatch("put", *args)

    async def delete(self, *args: str) -> None:
        await self._dispatch("delete", *args)


class NotFoundHandler(BaseHandler):
    """Any path outside the route table: 404 for every method, from the headers."""

    public = True
    SUPPORTED_METHODS = tornado.web.RequestHandler.SUPPORTED_METHODS + ("TRACE", "CONNECT")

    async def prepare(self) -> None:
        self._expect_body(_declared_length(self.request.headers))
        raise ApiError(404, "not_found", "no such route", field="path", found=self.request.path[:200])


def _int_arg(h: BaseHandler, name: str, default: int | None = None) -> int | None:
    raw = h.get_query_argument(name, None)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise DataError(name, repr(raw), "an integer") from None


def _export_format(h: BaseHandler) -> str | None:
    """The model route's one query parameter, ``format``, given at most once:
    an unknown key (``?fmt=onnx``) or a repeated ``format`` is a DataError
    (400) naming it, not a download in a format she did not ask for."""
    query = h.request.query_arguments
    for key in sorted(query):
        if key != "format":
            raise DataError(key[:80] or "query", f"the query parameter {key[:80]!r}, which this route does not take",
                            "no query parameter but format (joblib, onnx, torchscript or state_dict)")
    values = query.get("format", [])
    if len(values) > 1:
        shown = ", ".join(repr(v.decode("utf-8", "replace")[:40]) for v in values[:4])
        raise DataError("format", f"{len(values)} values ({shown})", "one format")
    return h.get_query_argument("format", None)


def _created(pair: tuple[Any, bool]) -> Reply:
    data, created = pair
    return Reply(201 if created else 200, data)


def _fed(version: dict[str, Any]) -> Reply:
    """201 with the new version; 200 with the latest when the feed stored none (every row was there)."""
    return Reply(201 if version["created"] else 200, version)


def _openapi(service, user, h):  # noqa: ANN001
    from .openapi import spec

    return spec()


# path -> {method: fn(service, user, handler, *path args)}; the OpenAPI test checks every row is documented.
ROUTES: list[tuple[str, dict[str, Callable[..., Any]], dict[str, Any]]] = [
    ("/health", {"get": lambda s, u, h: s.health(u)}, {"public": True, "inline": True}),
    ("/openapi.json", {"get": _openapi}, {"public": True}),
    ("/whoami", {"get": lambda s, u, h: s.whoami(u)}, {}),
    ("/users", {"get": lambda s, u, h: s.list_users(u),
                "post": lambda s, u, h: Reply(201, s.add_user(u, h.json_body()))}, {}),
    ("/users/" + NAME + "/tokens", {"delete": lambda s, u, h, n: s.revoke_tokens(u, n)}, {}),
    # ?origin=local|hub: which of two accounts of one name (budget_api.user_named)
    ("/users/" + NAME, {"put": lambda s, u, h, n: s.set_user(u, n, h.json_body(), h.get_query_argument("origin", None)),
                        "delete": lambda s, u, h, n: s.delete_user(u, n, h.get_query_argument("origin", None))},
     {}),
    ("/users/" + NAME + "/budget",
     {"get": lambda s, u, h, n: budget_api.get_user_budget(s, u, n, h.get_query_argument("origin", None)),
      "put": lambda s, u, h, n: budget_api.set_user_cap(s, u, n, h.json_body(), h.get_query_argument("origin", None))},
     {}),
    ("/budget", {"get": lambda s, u, h: s.budget(u), "put": lambda s, u, h: s.set_budget(u, h.json_body())}, {}),
    ("/tasks", {"get": lambda s, u, h: s.list_tasks(u),
                "post": lambda s, u, h: _created(s.create_task(u, h.json_body()))}, {}),
    ("/tasks/" + NAME, {"get": lambda s, u, h, n: s.get_task(u, n),
                        "delete": lambda s, u, h, n: s.delete_task(u, n, _int_arg(h, "id"),
                                                                   h.get_query_argument("created_at", None))}, {}),
    ("/tasks/" + NAME + "/cancel", {"post": lambda s, u, h, n: s.cancel(u, n)}, {}),
    ("/tasks/" + NAME + "/resume", {"post": lambda s, u, h, n: s.resume(u, n)}, {}),
    ("/tasks/" + NAME + "/mute", {"put": lambda s, u, h, n: s.set_muted(u, n, h.json_body())}, {}),
    ("/tasks/" + NAME + "/feed", {"post": lambda s, u, h, n: _fed(s.feed(u, n, h.request.body))}, {}),
    ("/tasks/" + NAME + "/refine", {"post": lambda s, u, h, n: _created(s.refine(u, n, h.json_body()))}, {}),
    ("/tasks/" + NAME + "/versions", {"get": lambda s, u, h, n: s.versions(u, n)}, {}),
    ("/tasks/" + NAME + "/examples", {"get": lambda s, u, h, n: s.examples(u, n, _int_arg(h, "version"),
                                                                         _int_arg(h, "offset"),
                                                                         _int_arg(h, "limit"))}, {}),
    ("/tasks/" + NAME + "/models", {"get": lambda s, u, h, n: s.user_models(u, n),
                                    "post": lambda s, u, h, n: Reply(201, s.add_user_model(u, n, h.json_body()))},
     {"limit_attr": "max_chunk_bytes"}),  # a pickled model may be larger than a JSON request
    ("/tasks/" + NAME + "/jobs", {"get": lambda s, u, h, n: s.jobs(u, n)}, {}),
    ("/tasks/" + NAME + "/history", {"get": lambda s, u, h, n: s.history(u, n)}, {}),
    ("/tasks/" + NAME + "/best", {"get": lambda s, u, h, n: s.best(u, n)}, {}),
    ("/tasks/" + NAME + "/profile", {"get": lambda s, u, h, n: s.profile(u, n)}, {}),
    ("/tasks/" + NAME + "/model", {"get": lambda s, u, h, n: Download(
        *s.export_model(u, n, _export_format(h)))}, {"runs_models": True}),
    ("/tasks/" + NAME + "/suspicion",
     {"get": lambda s, u, h, n: s.suspicion(u, n, _int_arg(h, "version"), _int_arg(h, "k"))},
     {"runs_models": True}),
    ("/tasks/" + NAME + "/infer", {"post": lambda s, u, h, n: s.infer(u, n, h.json_body())}, {"runs_models": True}),
    ("/tasks/" + NAME + "/provenance",
     {"get": lambda s, u, h, n: s.provenance(u, n, h.get_query_argument("direction", "backward"))}, {}),
    ("/tasks/" + NAME + "/budget", {"get": lambda s, u, h, n: s.task_budget(u, n),
                                    "put": lambda s, u, h, n: s.set_task_budget(u, n, h.json_body())}, {}),
    ("/tasks/" + NAME + "/tags", {"get": lambda s, u, h, n: s.tags(u, n),
                                  "put": lambda s, u, h, n: s.set_tags(u, n, h.json_body())}, {}),
    ("/leaderboard", {"get": lambda s, u, h: s.leaderboard(u)}, {}),
    ("/uploads", {"post": lambda s, u, h: Reply(201, s.new_upload(u))}, {}),
    ("/uploads/" + NAME, {"get": lambda s, u, h, i: s.upload_size(u, i),
                          "put": lambda s, u, h, i: s.upload_chunk(u, i, _int_arg(h, "offset", 0), h.request.body),
                          "delete": lambda s, u, h, i: s.delete_upload(u, i)},
     {"limit_attr": "max_chunk_bytes"}),
    ("/scheduler", {"get": lambda s, u, h: s.scheduler(u)}, {}),
    ("/notebooks", {"get": lambda s, u, h: notebooks.api_list(s, u),
                    "post": lambda s, u, h: _created(notebooks.api_register(s, u, h.json_body()))}, {}),
    ("/notebooks/" + NAME, {"get": lambda s, u, h, i: notebooks.api_get(s, u, i),
                            "delete": lambda s, u, h, i: notebooks.api_end(s, u, i)}, {}),
    ("/notebooks/" + NAME + "/heartbeat",
     {"post": lambda s, u, h, i: notebooks.api_heartbeat(s, u, i, h.json_body())}, {}),
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
