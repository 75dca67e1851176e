"""The notebook's handle on the scheduler service (DESIGN.md, Interfaces).

``Client(url=None, token=None)`` talks JSON over HTTP to the service, on one
kept connection per thread. With no URL (and no
``EASEML_URL``/``EASEML_TOKEN``) it starts or attaches to the embedded
service of the data dir. Service errors come back as the exceptions of
``ease_jupyter.errors``, with the field, what was found and what was expected.

.. code-block:: python

    from ease_jupyter import Client
    task = Client().task("iris", input=[4], output=[3])
    task.feed(X, y)
    task.wait(timeout=60)
    task.best(), task.infer(X[:5])
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import http.client
import ipaddress
import json
import os
import select
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from . import client_budget, tabular
from .errors import (AlreadyExistsError, DataError, EaseMLError, InvalidStateError, NotFoundError, ProgramSyntaxError,
                     QuotaExceededError, StorageFullError, StoreCorruptError, StoreUnavailableError,
                     UserModelCallError, UserModelCallTimeout)
from .schema import to_jsonable
from .schema._arrays import Where, to_array
from .schema._paths import Path as FieldPath
from .service import arrays as wire  # the one codec of arrays on the wire, the service's too

URL_ENV, TOKEN_ENV = "EASEML_URL", "EASEML_TOKEN"
KERNEL_ENV_PREFIX = "KERNEL_"  # what jupyter_server's GatewayClient and the gateways always pass to a kernel
INLINE_BYTES = 512 * 1024  # arrays above this go through a chunked upload
CHUNK_BYTES = 8 * 1024 * 1024
# The most bytes one upload carries for a request's arrays: the large arrays
# of a request (a wide table's columns) share uploads up to this size, so a
# request needs one upload per PACK_BYTES, not one per array (a user may
# have at most arrays.MAX_OPEN_UPLOADS, and one upload at most 4 GiB).
PACK_BYTES = 1024**3
WAIT_RECHECK_SECONDS = 10.0  # Task.wait re-checks this often even when no event came


class AuthError(EaseMLError, PermissionError):
    """A missing or bad token (401), or an admin-only call by a non-admin (403)."""


class ServiceError(EaseMLError):
    """Any other error answer of the service; ``status`` and ``code`` say which."""

    def __init__(self, status: int, code: str, message: str):
        self.status, self.code = status, code
        super().__init__(f"{status} {code}: {message}")


class NoModelError(InvalidStateError):
    """The task has no finished model yet (409 ``no_model``), e.g. for
    ``Task.suspicion`` right after the first feed; retry once a job finished."""


_STORAGE_ERRORS = {cls.code: cls for cls in (QuotaExceededError, StorageFullError, StoreUnavailableError,
                                             StoreCorruptError)}


def _raise_for(status: int, payload: dict[str, Any]) -> None:
    err = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(err, dict):
        raise ServiceError(status, "http_error", str(payload)[:200])
    code, message = err.get("code", "error"), err.get("message", "")
    field, found, expected = err.get("field"), err.get("found"), err.get("expected")
    if code == "program_syntax":
        _, line, column = (str(field).split(":") + ["0", "0"])[:3]
        line_number, column_number = int(line or 0), int(column or 0)
        raise ProgramSyntaxError(_bare_syntax_message(message, line_number, column_number, str(found), str(expected)),
                                 line=line_number, column=column_number, found=str(found), expected=str(expected))
    if code in (UserModelCallError.code, UserModelCallTimeout.code):  # her own model's failure, her traceback
        raise (UserModelCallTimeout if code == UserModelCallTimeout.code else UserModelCallError)(str(field), message)
    storage_error = _STORAGE_ERRORS.get(code)
    if storage_error is not None:  # the service's whole sentence: the limit, the usage, the object
        raise storage_error(message, field=field, found=found, expected=expected)
    if status in (400, 413) and field is not None:
        raise DataError(str(field), str(found), str(expected))
    if status in (401, 403):
        raise AuthError(message)
    if status == 404:
        raise NotFoundError(message)
    if code == "already_exists":
        raise AlreadyExistsError(message)
    if code == "no_model":
        raise NoModelError(message)
    if code == "invalid_state":
        raise InvalidStateError(message)
    raise ServiceError(status, code, message)


def _bare_syntax_message(message: str, line: int, column: int, found: str, expected: str) -> str:
    """The service's ``ProgramSyntaxError`` message without the location and
    the found/expected part that its ``str`` added: ProgramSyntaxError adds
    them again, and they must show once."""
    prefix, suffix = f"line {line}, column {column}: ", f" (found {found!r}, expected {expected})"
    if message.startswith(prefix):
        message = message[len(prefix):]
    if message.endswith(suffix):
        message = message[:-len(suffix)]
    return message


def _decode(value: dict[str, Any]) -> np.ndarray:
    """An array of an answer (``arrays.encode``: .npy, or strings as UTF-8 and offsets)."""
    return wire.decode("answer", value)


def _upload_ids(body: Any) -> Iterator[str]:
    """The upload ids named anywhere in a request body."""
    if isinstance(body, dict) and isinstance(body.get("upload"), str):
        yield body["upload"]
        return
    for part in body.values() if isinstance(body, dict) else body if isinstance(body, list) else ():
        yield from _upload_ids(part)


def _setting(name: str) -> str | None:
    """``$NAME``, else ``$KERNEL_NAME``: a kernel served by a Jupyter Kernel
    Gateway gets only the ``KERNEL_*`` variables of the Jupyter server that
    started it, unless both sides allow more (docs/gateway.md)."""
    return os.environ.get(name) or os.environ.get(KERNEL_ENV_PREFIX + name) or None


HUB_URL_SETTINGS = ("JUPYTERHUB_API_URL", "JUPYTERHUB_HOST", "JUPYTERHUB_PUBLIC_URL", "JUPYTERHUB_PUBLIC_HUB_URL")


def _loopback(host: str | None) -> bool:
    if host in (None, ""):
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hub_token_for(url: str) -> str | None:
    """Inside a JupyterHub single-user server: ``$JUPYTERHUB_API_TOKEN``
    when ``url`` is one of the hub's services: its path starts with
    ``$JUPYTERHUB_BASE_URL`` + ``services/`` and its host is this machine
    or one of the hub's own (``HUB_URL_SETTINGS``), so that the hub token
    goes to no other address. The ease.ml service run with ``--jupyterhub``
    takes it (docs/service.md)."""
    token = os.environ.get("JUPYTERHUB_API_TOKEN")
    if not token:
        return None
    base = "/" + (os.environ.get("JUPYTERHUB_BASE_URL") or "/").strip("/")
    services = base.rstrip("/") + "/services/"
    parts = urllib.parse.urlparse(url)
    if not (parts.path.rstrip("/") + "/").startswith(services):
        return None
    hub_hosts = {urllib.parse.urlparse(os.environ[name]).hostname for name in HUB_URL_SETTINGS
                 if os.environ.get(name)}
    return token if _loopback(parts.hostname) or parts.hostname in hub_hosts - {None} else None


_API_PATH = "/api/v1"


def service_url(url: str) -> str:
    """The service's base URL as ``Client`` keeps it, from the forms people
    copy: ``http://host:port``, ``http://host:port/api/v1`` (what
    ``easeml serve`` prints: the API's own path, which every request adds
    again) or ``host:port`` (no scheme: http). Another scheme than http(s),
    or no host, is a DataError on ``url``."""
    text = str(url).strip()
    if "://" not in text:
        text = "http://" + text  # "127.0.0.1:8000" would otherwise be a path, or "localhost:8000" a scheme
    parts = urllib.parse.urlsplit(text)
    expected = ("the service's URL: http(s)://HOST:PORT, optionally with its base path "
                "(e.g. http://127.0.0.1:8000 or http://127.0.0.1:8000/api/v1, as `easeml serve` prints it)")
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise DataError("url", repr(str(url)), expected)
    try:
        parts.port  # noqa: B018 - raises for a port that is no number
    except ValueError:
        raise DataError("url", f"{str(url)!r}, whose port is no number", expected) from None
    path = parts.path.rstrip("/")
    if path.endswith(_API_PATH):
        path = path[:-len(_API_PATH)]
    return urllib.parse.urlunsplit((parts.scheme.lower(), parts.netloc, path, parts.query, "")).rstrip("/")


# Methods a server may receive twice with the same effect (RFC 9110, 9.2.2):
# these alone are sent again when a reused connection broke after sending.
_REPEATABLE = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


class _Transport:
    """HTTP/1.1 to one service, on connections kept open between requests.

    Each thread has its own connection (a notebook's widgets and
    ``Task.wait`` call from other threads), so requests never interleave on
    one. A new TCP connection per request costs the service's IOLoop about
    as much as a small request does (accept, set-up, close), so reusing them
    is most of what a busy service gains from its clients.

    A kept connection that the server closed while it was idle (its idle
    timeout, a restart) reads as ready before it is used, and is replaced.
    Should it break anyway, on a reused connection, the request is sent again
    on a new one if it never got out, or if its method may be repeated
    (``_REPEATABLE``); a POST that may have reached the server is not sent
    twice (a feed must be stored once). Behind an HTTP proxy from the
    environment (``HTTP_PROXY``...), requests go through ``urllib`` as before,
    one connection each.
    """

    def __init__(self, url: str, timeout: float):
        self.url, self.timeout = url, timeout
        parts = urllib.parse.urlsplit(url)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "localhost", parts.port
        self._prefix = parts.path.rstrip("/")
        proxies = urllib.request.getproxies()
        # never this machine's own services: a proxy would see their tokens, and may not reach them at all
        proxied = (parts.scheme in proxies and not _loopback(parts.hostname)
                   and not urllib.request.proxy_bypass(parts.netloc))
        # (its own opener: urlopen's global one keeps the proxies of its first use)
        self._opener = urllib.request.build_opener() if proxied else None
        self._local = threading.local()
        self._open: "weakref.WeakSet[http.client.HTTPConnection]" = weakref.WeakSet()
        self._lock = threading.Lock()

    def send(self, method: str, target: str, data: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        """(status, body) of one request; ``target`` is the path under the service's URL."""
        if self._opener is not None:
            return _send_urllib(self._opener, self.url + target, method, data, headers, self.timeout)
        while True:
            connection, reused = self._connection()
            sent = False
            try:
                connection.request(method, self._prefix + target, body=data, headers=headers)
                sent = True
                response = connection.getresponse()
                return response.status, response.read()
            except ConnectionError:
                connection.close()
                if not reused or (sent and method not in _REPEATABLE):
                    raise
                # A reused connection the server had closed: try once more on a new one (not reused).
            except BaseException:
                connection.close()  # a timed-out or half-read answer must not meet the next request
                raise

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it is already open (reused)."""
        connection = getattr(self._local, "connection", None)
        if connection is None:
            factory = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            connection = factory(self._host, self._port, timeout=self.timeout)
            self._local.connection = connection
            with self._lock:
                self._open.add(connection)
        elif connection.sock is not None and _readable(connection.sock):
            connection.close()  # idle, yet readable: closed by the server (or it sent what nobody asked for)
        return connection, connection.sock is not None

    def close(self) -> None:
        with self._lock:
            connections = list(self._open)
        for connection in connections:
            connection.close()


def _readable(sock: Any) -> bool:
    """Whether the socket has something to read (or an end of file) right now."""
    try:
        if hasattr(select, "poll"):  # no limit on descriptor numbers, unlike select()
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):  # closed under us
        return True


def _send_urllib(opener: urllib.request.OpenerDirector, url: str, method: str, data: bytes | None,
                 headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@dataclasses.dataclass
class _Sent:
    """One request's arrays as they go: its uploads (``{"upload": id}``,
    each once), the bytes sent inline, and the bytes in its last upload, which
    its next large array joins while that stays within PACK_BYTES."""

    uploads: list[Any] = dataclasses.field(default_factory=list)
    inline_bytes: int = 0
    packed_bytes: int = 0


# Set by the magics at ``%load_ext ease_jupyter``: () -> (url, token) of the
# kernel's ``%easeml connect URL``, or None. A function rather than a value: it
# answers only inside the shell that connected, so it never outlives it.
kernel_default: Callable[[], tuple[str, str] | None] | None = None


class Client:
    """A connection to the scheduler service as one user.

    The URL is ``url``, else that of the kernel's ``%easeml connect URL``
    (with its token), else ``$EASEML_URL``, else the embedded service. The
    token is ``token``, else ``$EASEML_TOKEN``, else (in a JupyterHub
    single-user server, for a URL under the hub's ``/services/``)
    ``$JUPYTERHUB_API_TOKEN``; with no URL anywhere it is the embedded
    service's own.

    Made in a notebook kernel, it registers the kernel with the service
    (``notebook``: its session; ``register=False`` or ``EASEML_REGISTER=0``:
    not), docs/service.md "Notebook sessions"."""

    def __init__(self, url: str | None = None, token: str | None = None, *, data_dir: str | os.PathLike[str] | None = None,
                 timeout: float = 120.0, register: bool = True):
        if not url and kernel_default is not None and (connected := kernel_default()) is not None:
            url, token = connected[0], token or connected[1]
        url = url or _setting(URL_ENV)
        token = token or _setting(TOKEN_ENV)
        self._embedded: tuple[Any, bool] | None = None  # (data dir, token came from it) when embedded
        if url is None:
            from .service.embedded import ensure_embedded

            url, embedded_token = ensure_embedded(data_dir)
            self._embedded = (data_dir, token is None)
            token = token or embedded_token
        else:
            url = service_url(url)
        if token is None:
            token = _hub_token_for(url)
        if token is None:
            raise AuthError(f"no token for {url}: pass token=... or set {TOKEN_ENV} (in a JupyterHub server, "
                            f"$JUPYTERHUB_API_TOKEN serves for URLs under the hub's /services/)")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._connections: _Transport | None = None  # made at the first request (see _transport)
        # In a notebook kernel: register it with the service and heartbeat on a daemon thread
        # (notebook_session.py); not with the embedded service, which is one user's and stops when idle.
        self.notebook = None
        if register and self._embedded is None:
            from .notebook_session import attach

            self.notebook = attach(self.url, self.token)

    def __repr__(self) -> str:
        return f"Client(url={self.url!r})"

    # ------------------------------------------------------------ transport
    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                params: dict[str, Any] | None = None, binary: bool = False, start: bool = True) -> Any:
        """The answer's JSON (its bytes with ``binary``); errors as our exceptions.

        With the embedded service, a request that finds it stopped (idle
        shutdown, ``easeml stop``) starts it again and is sent once more;
        ``start=False`` never starts it (what runs on its own, like the
        notifications under each cell, must not keep bringing it back): it
        only follows a service of the data dir that runs already, else
        raises ``ConnectionRefusedError``."""
        try:
            return self._request(method, path, body, raw=raw, params=params, binary=binary)
        except (ConnectionRefusedError, socket.gaierror, urllib.error.URLError) as error:
            refused = isinstance(getattr(error, "reason", error), ConnectionRefusedError)
            if self._embedded is None or not refused or (not start and not self._follow_running_embedded()):
                unreachable = self._unreachable(error)
                if unreachable is error:
                    raise
                raise unreachable from error
        if start:  # The embedded service stopped: start it again and retry once.
            from .service.embedded import ensure_embedded

            self._use_embedded(*ensure_embedded(self._embedded[0]))
        return self._request(method, path, body, raw=raw, params=params, binary=binary)

    def _use_embedded(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        if self._embedded is not None and self._embedded[1]:  # the token came from the service file
            self.token = token

    def _follow_running_embedded(self) -> bool:
        """Point at the embedded service that runs now in the data dir (it may
        have been started again elsewhere, on another port); False when none
        answers. Starts nothing."""
        from .service.embedded import answering

        assert self._embedded is not None
        found = answering(self._embedded[0], other_than=self.url)
        if found is None:
            return False
        self._use_embedded(found.url, found.token)
        return True

    def _unreachable(self, error: BaseException) -> BaseException:
        """``error`` as one that names the URL it tried; others as they are."""
        reason = getattr(error, "reason", error)
        if isinstance(reason, ConnectionRefusedError):
            return ConnectionRefusedError(errno.ECONNREFUSED, f"Connection refused: nothing answers at {self.url}")
        if isinstance(reason, socket.gaierror):
            return ConnectionError(f"{self.url}: no such host ({reason.strerror or reason})")
        return error

    def _request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                 params: dict[str, Any] | None = None, binary: bool = False) -> Any:
        target = f"/api/v1{path}"
        if params:
            target += "?" + urllib.parse.urlencode(params)
        headers = {"Authorization": f"token {self.token}"}
        data = None
        if raw is not None:
            data, headers["Content-Type"] = raw, "application/octet-stream"
        elif body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        elif method in ("POST", "PUT"):
            data = b""
        status, text = self._transport().send(method, target, data, headers)
        if status >= 300:
            try:
                payload = json.loads(text)
            except ValueError:
                payload = {"error": {"code": "http_error", "message": text[:200].decode(errors="replace")}}
            _raise_for(status, payload)
        if binary:
            return text
        return json.loads(text) if text else None

    def _transport(self) -> _Transport:
        transport = self._connections
        # (A restarted embedded service has a new port; a caller may change the timeout.)
        if transport is None or (transport.url, transport.timeout) != (self.url, self.timeout):
            if transport is not None:
                transport.close()
            transport = self._connections = _Transport(self.url, self.timeout)
        return transport

    def close(self) -> None:
        """Close the connections this client keeps open between requests;
        a later request opens a new one."""
        if self._connections is not None:
            self._connections.close()

    def _array(self, array: Any, field: str = "X", inline_room: int | None = None) -> Any:
        """``array``'s wire form on its own: inline (at most ``inline_room``
        bytes, default INLINE_BYTES), in an upload of its own, or JSON for
        records and ragged lists (see ``_encoder``); an upload it made is
        dropped if it fails."""
        made = _Sent(inline_bytes=0 if inline_room is None else max(0, INLINE_BYTES - inline_room))
        try:
            return self._encoder(made, field)(array)
        except BaseException:
            self._discard_uploads(made.uploads)
            raise

    def _encoder(self, made: "_Sent", field: str = "X") -> Callable[[Any], Any]:
        """The wire form of each of one request's arrays: .npy (a 1-d array
        of strings as its UTF-8 bytes and offsets, ``arrays.encode``), or JSON
        for records and ragged lists. Together they send at most INLINE_BYTES
        inline (a table's many small columns would otherwise pass the
        service's JSON limit); the rest go into uploads, several arrays to an
        upload (``PACK_BYTES``), each upload added to ``made``. An object
        array of anything but numbers is a DataError naming ``field`` and the
        first element that is not one."""
        def encode(array: Any) -> Any:
            if isinstance(array, dict) and "table" in array:
                return array  # a table, already in its wire form (tabular.table_wire)
            if not isinstance(array, np.ndarray):
                try:
                    as_array = np.asarray(array)
                except ValueError:  # ragged: records or chains, sent as JSON
                    return to_jsonable(array)
                if as_array.dtype == object:
                    return to_jsonable(array)
                array = as_array
            if array.dtype == object:  # np.save refuses objects (no pickles)
                first = array.reshape(-1)[:1]
                if first.size and isinstance(first[0], (dict, list, tuple, np.ndarray)):
                    return to_jsonable(array.tolist())  # records or ragged rows: as a list of them goes
                array = to_array(array, Where(FieldPath(field), batched=True))
            if wire.is_strings(array):
                utf8, offsets = wire.string_parts(array, field)
                return {"strings": {"utf8": encode(utf8), "offsets": encode(offsets)}}
            data = wire.to_npy_bytes(array)
            if len(data) <= INLINE_BYTES - made.inline_bytes:
                made.inline_bytes += len(data)
                return {"npy_b64": base64.b64encode(data).decode("ascii")}
            return self._pack(made, data)

        return encode

    def _pack(self, made: "_Sent", data: bytes) -> dict[str, Any]:
        """Append ``data`` to the request's last upload (a new one when it
        would pass PACK_BYTES); the wire form of that part of it."""
        if not made.uploads or (made.packed_bytes and made.packed_bytes + len(data) > PACK_BYTES):
            made.uploads.append({"upload": self.request("POST", "/uploads")["id"]})
            made.packed_bytes = 0
        upload, start = made.uploads[-1]["upload"], made.packed_bytes
        for offset in range(start, start + len(data), CHUNK_BYTES):
            chunk = data[offset - start:offset - start + CHUNK_BYTES]
            try:
                self.request("PUT", f"/uploads/{upload}", raw=chunk, params={"offset": offset})
            except InvalidStateError:
                # A PUT is sent again when its connection broke after it went out; if the first one
                # arrived, the service holds this chunk already and refuses the copy: that is fine.
                if self.request("GET", f"/uploads/{upload}")["size"] != offset + len(chunk):
                    raise
        made.packed_bytes = start + len(data)
        return {"upload": upload, "offset": start, "size": len(data)}

    def _discard_uploads(self, body: Any) -> None:
        """Drop the uploads a request body names anywhere in it (a table's
        columns too), each once, after its request failed, as far as the
        service can be reached."""
        for upload in dict.fromkeys(_upload_ids(body)):
            try:
                self.request("DELETE", f"/uploads/{upload}")
            except (EaseMLError, OSError):  # gone already, or the service is down: it expires in a day
                pass

    # ------------------------------------------------------------ tasks
    def task(self, name: str, *, input: Sequence[int] | None = None, output: Sequence[int] | None = None,
             program: str | None = None, like: Any = None, target: str | None = None,
             kinds: dict[str, str] | None = None) -> "Task":
        """Create a task (shapes or an ease.ml program), or open one of yours
        by name; raises NotFoundError when you have no task by that name.

        ``input``, ``output``: each a list of positive integers ([64],
        (8, 8, 1)), one integer, or the text "8,8,1"; anything else is a
        DataError naming it, and nothing is created.

        ``like=df, target="species"``: a table task whose typed schema is
        inferred from the DataFrame (or CSV/Parquet path) ``like``; ``kinds``
        sets a column's kind by name (docs/data.md)."""
        if like is not None:
            if program is not None or input is not None or output is not None:
                raise ValueError("give either like= (a table) or a program or shapes, not both")
            schema = tabular.infer_schema(like, target, kinds)
            return self._touched(Task(self, self.request("POST", "/tasks", {"name": name, "table": schema.to_dict()})))
        if program is not None and (input is not None or output is not None):
            raise ValueError("give either program or input/output shapes, not both")
        if (input is None) != (output is None):
            raise ValueError("input and output shapes go together")
        if program is None and input is None:
            return self._touched(Task(self, self.request("GET", f"/tasks/{_quote(name)}")))
        body: dict[str, Any] = {"name": name}
        if program is not None:
            body["program"] = str(program)
        else:
            body["input"], body["output"] = _shape("input", input), _shape("output", output)
        return self._touched(Task(self, self.request("POST", "/tasks", body)))

    def _touched(self, task: "Task") -> "Task":
        """Record the task in this kernel's notebook session (if registered)."""
        if self.notebook is not None:
            self.notebook.touch(task.name)
        return task

    def notebooks(self) -> list[dict[str, Any]]:
        """Your notebook sessions, alive or gone (admins: everyone's); see docs/service.md."""
        return self.request("GET", "/notebooks")

    def tasks(self) -> list["Task"]:
        return [Task(self, t) for t in self.request("GET", "/tasks")]

    def leaderboard(self) -> list[dict[str, Any]]:
        return self.request("GET", "/leaderboard")

    def whoami(self, *, start: bool = True) -> dict[str, Any]:
        """Who the token is; ``start=False``: never start the embedded service (``request``)."""
        return self.request("GET", "/whoami", start=start)

    def add_user(self, name: str, *, admin: bool = False) -> dict[str, Any]:
        """Admins only: a new user; its ``token`` is shown only here."""
        return self.request("POST", "/users", {"name": name, "admin": admin})

    def allow_user_models(self, user: str, allow: bool = True, *, origin: str | None = None) -> dict[str, Any]:
        """Let ``user`` add models of her own, or forbid it (admins; ``PUT /users/{name}``).
        ``origin``: "local" or "hub", which account of that name, where a
        local account and a hub user share it (docs/service.md, "One name,
        two accounts"); without it, the service's default for the name."""
        return self.request("PUT", f"/users/{_quote(user)}", {"allow_user_models": bool(allow)},
                            params=client_budget.origin_query(origin))

    def set_admin(self, user: str, admin: bool = True, *, origin: str | None = None) -> dict[str, Any]:
        """Give local account ``user`` admin rights, or take them (admins;
        ``PUT /users/{name}``), from her next request on. A hub user's
        rights follow the hub (a ``DataError`` naming ``admin``); your own
        cannot be taken here. ``origin`` as for ``allow_user_models``."""
        return self.request("PUT", f"/users/{_quote(user)}", {"admin": bool(admin)},
                            params=client_budget.origin_query(origin))

    def users(self) -> list[dict[str, Any]]:
        return self.request("GET", "/users")

    def delete_user(self, name: str, *, origin: str | None = None) -> dict[str, Any]:
        """Admins only: delete the account ``name`` with all her tasks and
        data for good (``DELETE /users/{name}``; docs/service.md, "Deleting
        a user"); what went. ``origin`` as for ``allow_user_models``."""
        return self.request("DELETE", f"/users/{_quote(name)}", params=client_budget.origin_query(origin))

    def budget(self, user: str | None = None, *, origin: str | None = None) -> dict[str, Any]:
        """Your compute budget (docs/budget.md): ``limits``, an admin's
        ``cap``, ``spent`` and ``left`` seconds, and ``blocked``/``reason``
        when you get no new picks; ``user=`` (admins): that user's, and
        ``origin=`` ("local" or "hub") which account of that name (the
        answer's ``origin`` says which was read)."""
        return self.request("GET", client_budget.budget_path(user, origin),
                            params=client_budget.origin_query(origin))

    def set_budget(self, *, seconds: Any = client_budget.UNSET, gpu_seconds: Any = client_budget.UNSET,
                   deadline: Any = client_budget.UNSET, cost: Any = client_budget.UNSET,
                   user: str | None = None, origin: str | None = None) -> dict[str, Any]:
        """Bound what your tasks spend: ``seconds`` of worker time, ``gpu_seconds``
        of GPU time, a ``cost`` in the service's price units (runtime × the
        hourly price of the resources each job held; the auto-provisioner
        buys the most speed within it), and a ``deadline`` (datetime,
        timedelta from now or ISO string) after which you get no new picks
        (the provisioner picks the cheapest resources that meet it); None
        clears one, a field not given stays. ``user=`` (admins): set that
        user's cap instead; ``origin=`` ("local" or "hub"): which account of
        that name, where a local account and a hub user share it."""
        body = client_budget.budget_body(seconds, gpu_seconds, deadline, cost)
        return self.request("PUT", client_budget.budget_path(user, origin), body,
                            params=client_budget.origin_query(origin))

    def progress(self) -> dict[str, Any]:
        return self.request("GET", "/admin/progress")

    def scheduler(self) -> dict[str, Any]:
        """The scheduler view: ``policy``, ``mode``, ``last_decision`` (``user``,
        ``task``, ``model``, ``phase``, ``policy``, ``candidates`` [{user, task,
        gap}] or None, ``decision``, ``job_id``, ``time``) and ``users`` (``name``,
        ``you``, ``n_tasks``, ``tasks``, ``running``, ``best_accuracy``,
        ``accuracy_loss``, ``compute_seconds``, ``compute_share``). Other users
        appear as ``"user N"`` with no task names unless you are an admin."""
        return self.request("GET", "/scheduler")

    def events(self, timeout: float = 30.0, *, passive: bool = False) -> "EventStream":
        """Live events: the caller's job states, metrics, versions and task
        states, plus every ``decision`` of the scheduler (other users
        anonymised, as in ``scheduler()``); see EventStream. ``timeout``:
        the most seconds to wait for the stream to open; ``passive``: a
        stream that only listens, which keeps no idle service running.
        It never starts the embedded service; where that was started again
        on another port, it follows it there."""
        try:
            return EventStream(self, timeout, passive=passive)
        except ConnectionRefusedError:
            if self._embedded is None or not self._follow_running_embedded():
                raise
        return EventStream(self, timeout, passive=passive)


class _OpenTimedOut(Exception):
    """An event stream's connection timed out before it opened (tornado's timer)."""


class EventStream:
    """Events from ``GET /api/v1/events``, read on a background thread (so it
    works inside a running notebook event loop too).

    .. code-block:: python

        with client.events() as stream:
            for event in stream.iter(timeout=30):   # stops after 30 s of silence
                print(event["type"], event.get("status"))
    """

    def __init__(self, client: Client, timeout: float = 30.0, *, passive: bool = False):
        """Open the stream, waiting at most ``timeout`` seconds for the
        service to answer (``TimeoutError`` after that)."""
        import queue
        import threading

        self._queue: "queue.Queue[dict | None]" = queue.Queue()
        self._closed = threading.Event()
        self._ready = threading.Event()
        self._ended = threading.Event()
        self._error: BaseException | None = None
        self._ws: Any = None
        self._loop: Any = None
        self._url = (client.url.replace("http://", "ws://").replace("https://", "wss://") + "/api/v1/events"
                     + ("?passive=1" if passive else ""))
        self._token = client.token
        self._timeout = max(float(timeout), 0.1)
        self._thread = threading.Thread(target=self._main, name="easeml-events", daemon=True)
        self._thread.start()
        if not self._ready.wait(self._timeout):
            self._closed.set()  # its thread ends on its own once the connection answers or fails
            raise self._timed_out(client.url)
        if isinstance(self._error, _OpenTimedOut):  # the connection's own timer, at the same moment as ours
            raise self._timed_out(client.url)
        if self._error is not None:
            raise self._error

    def _timed_out(self, url: str) -> TimeoutError:
        return TimeoutError(f"the event stream of {url} did not open within {self._timeout:g} s")

    def _main(self) -> None:
        import asyncio

        try:
            asyncio.run(self._read())
        finally:
            self._ended.set()
            self._queue.put(None)
            self._ready.set()

    async def _read(self) -> None:
        import asyncio

        import tornado.httpclient
        import tornado.websocket

        try:
            request = tornado.httpclient.HTTPRequest(self._url, headers={"Authorization": f"token {self._token}"},
                                                     connect_timeout=self._timeout, request_timeout=self._timeout)
            # Pings notice a service that vanished without closing the connection.
            ws = await tornado.websocket.websocket_connect(request, ping_interval=10)
        except tornado.httpclient.HTTPClientError as error:
            if error.code == 599 and "Timeout" in str(error):  # tornado's own timers, set to ours
                self._error = _OpenTimedOut()
            else:
                self._error = AuthError(str(error)) if error.code == 401 else ServiceError(error.code, "http_error",
                                                                                           str(error))
            return
        except OSError as error:
            self._error = error
            return
        self._ws, self._loop = ws, asyncio.get_running_loop()
        hello = await ws.read_message()
        self._ready.set()
        if hello is None:
            return
        while not self._closed.is_set():
            message = await ws.read_message()  # None once closed (by close(), the server or the network)
            if message is None:
                break
            self._queue.put(json.loads(message))
        ws.close()

    @property
    def alive(self) -> bool:
        """False once the stream ended (closed by either side, or dropped)."""
        return not self._ended.is_set()

    def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next event, or None when the stream ended or ``timeout`` passed."""
        import queue

        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def iter(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        while (event := self.get(timeout)) is not None:
            yield event

    def close(self) -> None:
        self._closed.set()
        if self._loop is not None and self._ws is not None:
            try:
                self._loop.call_soon_threadsafe(self._ws.close)
            except RuntimeError:  # the reader's loop has ended already
                pass
        self._thread.join(5)

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _whole(field: str, value: Any) -> int:
    """``value`` as the int it is (a Python or numpy integer, not a bool), or
    a DataError naming ``field``: int("3") or int(2.5) would pass on another
    value than the one meant."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise DataError(field, f"{type(value).__name__} {value!r}"[:80], "an integer")


def _wholes(field: str, values: Iterable[Any]) -> list[int]:
    """``_whole`` of each value, the first one that is not named by its position."""
    if isinstance(values, (str, bytes)):
        raise DataError(field, f"the string {values!r}"[:80], "a list of integers, e.g. [0, 1, 2]")
    return [_whole(f"{field}[{i}]", v) for i, v in enumerate(values)]


def _shape(field: str, shape: Any) -> list[int]:
    """A task's input or output shape for the wire: a list of positive
    integers ([64], (8, 8, 1)), a single one (64), or the command line's
    text ("64,64,3"); anything else is a DataError naming ``field``."""
    expected = "a list of positive integers, e.g. [64] or [8, 8, 1] (or the text '8,8,1')"
    if isinstance(shape, str):
        parts = [part.strip() for part in shape.split(",")]
        if not all(part.isdigit() for part in parts):
            raise DataError(field, repr(shape)[:80], expected)
        dims = [int(part) for part in parts]
    elif isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        dims = [int(shape)]
    elif isinstance(shape, (list, tuple)) and shape and all(
            isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) for d in shape):
        dims = [int(d) for d in shape]
    else:
        raise DataError(field, repr(shape)[:80], expected)
    if not all(d > 0 for d in dims):
        raise DataError(field, repr(shape)[:80], expected)
    return dims


def _quote(name: str) -> str:
    return urllib.parse.quote(str(name), safe="")


class Task:
    """One of your tasks on the service. ``info`` is its last fetched record."""

    def __init__(self, client: Client, info: dict[str, Any]):
        self.client, self.info = client, info
        self.name: str = info["name"]

    def __repr__(self) -> str:
        return f"Task({self.name!r}, program={self.info.get('program')!r})"

    @property
    def program(self) -> str:
        return self.info["program"]

    def _path(self, suffix: str = "") -> str:
        return f"/tasks/{_quote(self.name)}{suffix}"

    def refresh(self) -> dict[str, Any]:
        self.info = self.client.request("GET", self._path())
        return self.info

    def feed(self, X: Any, y: Any = None, *, mode: str | None = None) -> dict[str, Any]:
        """Add examples; returns the dataset version (``number``, ``n_examples``...)
        with ``new`` and ``duplicates``: how many fed rows (input and label)
        the latest version did not / did hold already. ``mode``: "dedupe"
        (the default: only new rows are added, and a feed of rows all there
        stores no version, ``created`` False), "append" (every row is added,
        copies too) or "replace" (a version of exactly these rows).

        ``X`` may also be a DataFrame or a CSV/Parquet path (a table task:
        ``y`` may be left out when ``X`` has the target column), or an image
        folder with one subfolder per class (no ``y``); labels may be class
        names (strings, ...). See docs/data.md."""
        made = _Sent()  # every upload this feed creates, a table's columns too
        try:
            info = self._schema_info()
            origin = tabular.feed_origin(X, info)  # rows read from image files: the card says how
            X, y = tabular.feed_parts(X, y, info, self.client._encoder(made))
            if y is None:  # the service would refuse it too, in terms of its wire format
                raise DataError("y", "nothing", f"labels, one per example of X: task.feed(X, y) (in a notebook: "
                                f"%easeml feed {self.name} X y); only a table task takes them from X, as its "
                                f"target column, and an image folder from its subfolders")
            body = {"X": self.client._encoder(made)(X), "y": self.client._encoder(made, "y")(y)}
            if mode is not None:
                body["mode"] = mode
            if origin is not None:
                body["origin"] = origin
            return self.client.request("POST", self._path("/feed"), body)
        except BaseException:  # uploads of a feed that was never sent, or refused: nothing will feed them now
            self.client._discard_uploads(made.uploads)
            raise

    def refine(self, *, keep: Iterable[int] | None = None, drop: Iterable[int] | None = None) -> dict[str, Any]:
        body = {}
        if keep is not None:
            body["keep"] = _wholes("keep", keep)
        if drop is not None:
            body["drop"] = _wholes("drop", drop)
        return self.client.request("POST", self._path("/refine"), body)

    def versions(self) -> list[dict[str, Any]]:
        return self.client.request("GET", self._path("/versions"))

    def data(self, version: int | None = None) -> tuple[np.ndarray, Any, np.ndarray]:
        """(example ids, X, y) of a version (default latest): X is an array,
        a DataFrame for a table task, or None for other non-tensor inputs.
        The service answers in pages; they are fetched in turn, all of the
        version the first page named."""
        pages, offset = [], 0
        while offset is not None:
            params = {"offset": offset} if version is None else {"version": version, "offset": offset}
            out = self.client.request("GET", self._path("/examples"), params=params)
            pages.append(out)
            version, offset = out["version"]["number"], out.get("next_offset")
        ids = np.concatenate([_decode(p["example_ids"]) for p in pages])
        y = np.concatenate([_decode(p["y"]) for p in pages])
        if "table" in pages[0]:
            from .tabular import frame_of_wire

            # the pages' columns joined before the frame is made, so its dtypes are one page's
            joined = [{**column, **{part: np.concatenate([_decode(p["table"][i][part]) for p in pages])
                                    for part in ("values", "missing") if part in column}}
                      for i, column in enumerate(pages[0]["table"])]
            X = frame_of_wire(joined, lambda array: array)
        else:
            X = np.concatenate([_decode(p["X"]) for p in pages]) if "X" in pages[0] else None
        return ids, X, y

    def wait(self, timeout: float | None = None, poll: float = 0.25) -> bool:
        """Block until nothing is queued, running or left to try for the latest
        version; False if ``timeout`` seconds pass first. A cancelled task
        (from any notebook) has nothing left to try: it returns once its
        running jobs end (``refresh()["status"]`` is then ``cancelled``).

        Waits on the event stream: the task's state is fetched once the stream
        is open and again after each of its job, version or task events, so it
        returns as soon as the last job's result is in (plus a re-check every
        ``WAIT_RECHECK_SECONDS`` in case an event was missed). If the stream
        cannot be opened or drops, it falls back to polling every ``poll`` s.
        """
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else deadline - time.monotonic()

        try:  # no longer than the caller's time to open it (TimeoutError is an OSError)
            stream: EventStream | None = self.client.events(30.0 if deadline is None else min(30.0, left()))
        except (OSError, EaseMLError):
            stream = None
        try:
            if stream is not None:
                task_id = self.info.get("id")
                if self.refresh().get("idle"):
                    return True
                recheck = time.monotonic() + WAIT_RECHECK_SECONDS
                while True:
                    remaining = left()
                    if remaining is not None and remaining <= 0:
                        return False
                    until_recheck = max(0.0, recheck - time.monotonic())
                    event = stream.get(until_recheck if remaining is None else min(remaining, until_recheck))
                    if event is None and not stream.alive:
                        break  # the stream dropped: poll below
                    relevant = event is not None and event.get("task_id") == task_id and event.get("type") in (
                        "job", "version", "task") and event.get("status") not in ("running", "queued")
                    if relevant or time.monotonic() >= recheck:
                        if self.refresh().get("idle"):
                            return True
                        recheck = time.monotonic() + WAIT_RECHECK_SECONDS
        finally:
            if stream is not None:
                stream.close()
        while True:
            if self.refresh().get("idle"):
                return True
            remaining = left()
            if remaining is not None and remaining <= 0:
                return False
            time.sleep(poll if remaining is None else max(0.0, min(poll, remaining)))

    def best(self) -> dict[str, Any]:
        return self.client.request("GET", self._path("/best"))

    def suspicion(self, version: int | None = None, *, k: int = 5) -> dict[str, Any]:
        """How suspicious each example of a version (default latest) looks to
        the finished models, computed in the service (for the refine panel).

        Returns a dict with numpy arrays, one entry per active example in
        example-id order: ``index`` (the example ids of ``data()``), ``loss``
        (the best model's per-example loss), ``disagreement`` (fraction of the
        top-``k`` models that get the label wrong; for regression the spread
        of their predictions over the labels' standard deviation) and
        ``validation`` (True where the models did not fit the example); plus
        ``loss_kind`` ("cross_entropy", "zero_one" when the best model has no
        probabilities, or "squared_error"), ``model`` (``job_id``, ``name``,
        ``config``, ``accuracy``, ``dataset_version``), ``models`` (the top-k
        used), ``k`` and ``version``.

        Raises:
            NoModelError: no model has finished yet.
        """
        params: dict[str, Any] = {"k": _whole("k", k)}
        if version is not None:
            params["version"] = _whole("version", version)
        out = self.client.request("GET", self._path("/suspicion"), params=params)
        for field in ("index", "loss", "disagreement", "validation"):
            out[field] = _decode(out[field])
        return out

    def infer(self, X: Any) -> np.ndarray:
        """Predictions of the best model so far: class names where the task
        has them, else class indices (classification) or values. ``X`` as
        for ``feed`` (a DataFrame for a table task, an image folder...)."""
        made = _Sent()
        try:
            X = tabular.inputs_for(X, self._schema_info(), self.client._encoder(made))
            out = self.client.request("POST", self._path("/infer"), {"X": self.client._encoder(made)(X)})
        except BaseException:  # the service drops an infer's uploads itself, unless the request never reached it
            self.client._discard_uploads(made.uploads)
            raise
        return tabular.named(_decode(out["predictions"]), out.get("class_names"))

    def _schema_info(self) -> dict[str, Any]:
        """``info`` with the task's table schema and class names (fetched
        once where it came from a list of tasks)."""
        if "table" not in self.info:
            self.refresh()
        return self.info

    def jobs(self) -> list[dict[str, Any]]:
        return self.client.request("GET", self._path("/jobs"))

    def history(self) -> list[dict[str, Any]]:
        return self.client.request("GET", self._path("/history"))

    def profile(self) -> dict[str, Any]:
        """The profiler's predictions and the chosen configurations
        (docs/profiler.md): ``candidates``, one per candidate model, cheapest
        predicted first, each with ``predicted_seconds``, its ``source``
        (``family``, ``pooled``, or ``flops``: the FLOPs proxy before any
        data), the ``resources`` the provisioner chose and their money
        ``cost``; and ``examples``, ``prices`` and the ``profiler``'s records."""
        return self.client.request("GET", self._path("/profile"))

    def provenance(self, direction: str = "backward") -> dict[str, Any]:
        return self.client.request("GET", self._path("/provenance"), params={"direction": direction})

    def cancel(self) -> dict[str, Any]:
        self.info = self.client.request("POST", self._path("/cancel"))
        return self.info

    def resume(self) -> dict[str, Any]:
        self.info = self.client.request("POST", self._path("/resume"))
        return self.info

    def delete(self) -> dict[str, Any]:
        """Delete the task for good: its versions, jobs, metrics, tags and
        the stored data and models no other task uses. It is cancelled first
        and its running jobs are waited for (``InvalidStateError`` after a
        minute; it then stays cancelled: delete again later). Returns what
        went: ``versions``, ``jobs``, ``blobs_deleted``, ``bytes_freed``.

        Deleting is idempotent here: when the answer to a delete is lost (the
        connection broke after the request went out), the request is sent
        again, by the transport or by her calling ``delete()`` once more, and
        the service, whose task is gone by then, answers 404. This task was
        one the service had shown her (it has its ``id``), so a 404 means it
        is gone, and that is success: ``already_deleted`` True, with zero
        counts (what went was in the lost answer). The request names the
        task's ``id`` and ``created_at`` (a service whose database predates
        schema 0004 may give a new task the id of a deleted one), so a
        delete sent again after the task was deleted and another one
        declared under its name (by another notebook of hers) leaves that one
        alone: the service answers 404 as for a task
        that is gone. The service's 404 stays plain, the same for a name
        that never existed and another user's task, so it tells nobody whose
        tasks existed. A Task made by hand, without an ``id``, deletes
        whatever task of hers has the name, and raises ``NotFoundError``
        when none has."""
        which = {key: self.info[key] for key in ("id", "created_at") if self.info.get(key) is not None}
        try:
            return self.client.request("DELETE", self._path(), params=which or None)
        except NotFoundError:
            if self.info.get("id") is None:
                raise
        return {"id": self.info["id"], "name": self.name, "deleted": True, "already_deleted": True,
                "versions": 0, "jobs": 0, "blobs_deleted": 0, "bytes_freed": 0}

    def export(self, path: str | os.PathLike[str], format: str | None = None) -> dict[str, Any]:
        """Write the best model to ``path`` and its model card (JSON) to
        ``<path>.card.json``; returns the card. Formats: ``joblib`` or
        ``onnx`` for a scikit-learn model, ``torchscript``, ``onnx`` or
        ``state_dict`` for a torch model; by default the one ``path``'s
        suffix names (``.onnx``, ``.joblib``), else joblib or torchscript.
        A ``format`` that contradicts that suffix is refused; another suffix
        (``.pt``, ``.bin``) takes any format. Each loads without ease_jupyter
        (docs/export.md).

        Raises:
            DataError: a format that does not exist, does not fit the
                model's engine or contradicts the path's suffix (on
                ``format``), or a path with no file name or whose directory
                does not exist (on ``path``).
            NoModelError: no model has finished yet.
        """
        from .service import export_bundle

        # both before the request: a bad path or format costs no conversion
        export_bundle.check_target(path)
        fmt = export_bundle.chosen_format(path, format)
        data = self.client.request("GET", self._path("/model"), params=None if fmt is None else {"format": fmt},
                                   binary=True)
        return export_bundle.write(data, path)

    def add_model(self, model: Any, grid: Mapping[str, Sequence[Any]] | None = None, *, name: str | None = None,
                  limit: float | None = None) -> dict[str, Any]:
        """Add a model of your own as an arm of this task (docs/models.md): a
        scikit-learn estimator or pipeline, with ``grid`` over its options
        (``{"svc__C": [0.1, 1]}``), or a function ``factory(input_shape,
        output_shape, **options)`` returning a torch ``nn.Module``, with
        ``grid`` over its options and ``lr``. It trains on the service's
        workers beside the zoo's models; ``limit`` caps its job's seconds
        (at most the service's). Returns the stored record.

        Raises:
            DataError: a model that is neither, a grid that is not a dict of
                lists (naming the key), a bad or zoo ``name``.
            AuthError: the service does not take your models (403).
        """
        from .own_models import request_body

        return self.client.request("POST", self._path("/models"), request_body(model, grid, name, limit))

    def models(self) -> list[dict[str, Any]]:
        """Your own models of this task (``add_model``)."""
        return self.client.request("GET", self._path("/models"))

    def tags(self) -> dict[str, str]:
        return self.client.request("GET", self._path("/tags"))

    def set_tags(self, **tags: str) -> dict[str, str]:
        return self.client.request("PUT", self._path("/tags"), {k: str(v) for k, v in tags.items()})

    def budget(self) -> dict[str, Any]:
        """``max_epochs`` (yours, or None), the ``epochs`` its torch picks train now and their ``source``."""
        return self.client.request("GET", self._path("/budget"))

    def set_budget(self, *, max_epochs: int | None) -> dict[str, Any]:
        """The most epochs a pick's configs train (poor ones stop early,
        docs/budget.md); None: back to the default by data size."""
        return self.client.request("PUT", self._path("/budget"), {"max_epochs": max_epochs})
