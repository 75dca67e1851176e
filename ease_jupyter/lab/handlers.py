"""The ``/easeml/`` routes of the jupyter_server extension.

Every handler is ``@tornado.web.authenticated`` (the Jupyter token or login)
and answers JSON. Calls to the ease.ml service block (``urllib``), so they run
on a worker thread. A failure becomes ``{"error": {"code", "message"}}`` with
a status the sidebar can show:

- 502 ``service_error``/``service_auth``: the service answered with an error
  (``service_auth`` when it refused our token);
- 503 ``service_unavailable``: no service could be reached or started;
- 404 ``not_found``: the service does not know the task.

``GET /easeml/notifications?after=N`` relays the user's notifications
(``service/notify.py``) for the extension's toasts: a ``NotificationRelay``
reads them from the service's event stream on a background thread, so the
front end only polls its own server. The relay never starts the embedded
service; the other routes, which answer the user's sidebar, may.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import threading
import time
import urllib.error
from typing import Any, Callable

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin

from ..errors import EaseMLError, NotFoundError


class ServiceConnection:
    """One lazily created ``Client`` shared by the handlers.

    ``url``/``token``/``data_dir`` of ``None`` fall back to what ``Client()``
    does (``EASEML_URL``/``EASEML_TOKEN``, then the embedded service). When a
    call the user made cannot reach the service, the client is dropped and
    made once more, which restarts an embedded service that went away.
    ``start=False`` (what runs on its own, like the notification relay)
    never starts the embedded service: it only follows one that runs.
    """

    def __init__(self, url: str | None = None, token: str | None = None, data_dir: str | None = None):
        self.url, self.token, self.data_dir = url, token, data_dir
        self._client: Any = None
        self._lock = threading.Lock()
        self.last_url: str | None = url  # of the last client made, for error messages

    def where(self) -> str:
        return self.last_url or os.environ.get("EASEML_URL") or "the embedded ease.ml service"

    def client(self, *, start: bool = True) -> Any:
        with self._lock:
            if self._client is None:
                from ..client import Client

                if not start and not self._nothing_to_start():
                    raise ServiceUnavailable(f"{self.where()} does not run")
                self._client = Client(self.url, self.token, data_dir=self.data_dir, timeout=30.0)
                self.last_url = self._client.url
            return self._client

    def _nothing_to_start(self) -> bool:
        """Whether ``Client()`` would start nothing now: a URL is configured,
        or the embedded service of the data dir answers (``Client()`` then
        attaches to it)."""
        from ..client import URL_ENV, _setting
        from ..service.embedded import answering

        return bool(self.url or _setting(URL_ENV)) or answering(self.data_dir) is not None

    def call(self, fn: Callable[[Any], Any], *, start: bool = True) -> Any:
        """``fn(client)``. ``start=False``: ``fn`` must pass ``start=False`` on
        (or use ``events``) too; a failure then is not retried with a new
        ``Client()``, which would start the embedded service again."""
        if not start:
            try:
                return fn(self.client(start=False))
            except (urllib.error.URLError, ConnectionError) as error:
                if isinstance(error, urllib.error.HTTPError):
                    raise
                raise ServiceUnavailable(str(getattr(error, "reason", error))) from error
        try:
            return fn(self.client())
        except (urllib.error.URLError, ConnectionError) as error:
            if isinstance(error, urllib.error.HTTPError):
                raise
            with self._lock:
                self._client = None
            try:
                return fn(self.client())
            except (urllib.error.URLError, ConnectionError) as again:
                raise ServiceUnavailable(str(getattr(again, "reason", again))) from again


class ServiceUnavailable(Exception):
    pass


def task_rows(client: Any) -> list[dict[str, Any]]:
    """One row per task of the caller: name, state, best accuracy and model."""
    board = {row["task"]: row.get("best") for row in client.leaderboard()}
    rows = []
    for task in client.tasks():
        try:
            info = task.refresh()
        except NotFoundError:  # deleted between the two calls
            continue
        best = board.get(task.name) or {}
        latest = info.get("latest_version") or {}
        jobs = info.get("jobs") or {}
        rows.append({
            "name": task.name,
            "program": info.get("program"),
            "state": task_state(info),
            "accuracy": best.get("accuracy"),
            "model": best.get("model"),
            "config": best.get("config"),
            "dataset_version": latest.get("number"),
            "n_examples": latest.get("n_examples"),
            "jobs": jobs,
        })
    return rows


def task_state(info: dict[str, Any]) -> str:
    """A one-word state: cancelled, no data, running, queued, idle."""
    jobs = info.get("jobs") or {}
    if info.get("cancelled"):
        return "cancelled"
    if not info.get("latest_version"):
        return "no data"
    if jobs.get("running"):
        return "running"
    if jobs.get("queued") or not info.get("idle"):
        return "queued"
    return "idle"


class EaseMLHandler(ExtensionHandlerMixin, APIHandler):
    """Base: runs a service call off the event loop and maps its errors."""

    @property
    def service(self) -> ServiceConnection:
        return self.settings["easeml_service"]

    async def answer(self, fn: Callable[[Any], Any]) -> None:
        try:
            result = await asyncio.get_running_loop().run_in_executor(None, self.service.call, fn)
        except Exception as error:  # noqa: BLE001 - every failure becomes a JSON error for the sidebar
            status, code, message = describe(error, self.service)
            self.log.warning("easeml %s: %s %s: %s", self.request.path, status, code, message)
            self.set_status(status)
            self.finish(json.dumps({"error": {"code": code, "message": message}}))
            return
        self.finish(json.dumps(result))


def describe(error: BaseException, service: ServiceConnection) -> tuple[int, str, str]:
    from ..client import AuthError, ServiceError

    where = service.where()
    if isinstance(error, ServiceUnavailable):
        return 503, "service_unavailable", f"cannot reach {where}: {error}"
    if isinstance(error, (RuntimeError, TimeoutError, OSError)) and not isinstance(error, EaseMLError):
        return 503, "service_unavailable", f"cannot start or reach {where}: {error}"
    if isinstance(error, AuthError):
        return 502, "service_auth", f"the ease.ml service refused the token: {error}"
    if isinstance(error, NotFoundError):
        return 404, "not_found", str(error)
    if isinstance(error, ServiceError):
        return 502, "service_error", str(error)
    if isinstance(error, EaseMLError):
        return 502, "service_error", str(error)
    return 500, "internal_error", f"{type(error).__name__}: {error}"


class TasksHandler(EaseMLHandler):
    """``GET /easeml/tasks``: the caller's tasks (see ``task_rows``)."""

    @tornado.web.authenticated
    async def get(self) -> None:
        await self.answer(task_rows)


class TaskHandler(EaseMLHandler):
    """``GET /easeml/tasks/NAME``: one task as the service describes it, plus its best model (or null)."""

    @tornado.web.authenticated
    async def get(self, name: str) -> None:
        def one(client: Any) -> dict[str, Any]:
            task = client.task(name)
            info = task.refresh()
            try:
                info["best"] = task.best()
            except NotFoundError:
                info["best"] = None
            info["state"] = task_state(info)
            return info

        await self.answer(one)


class WhoamiHandler(EaseMLHandler):
    """``GET /easeml/whoami``: the service URL and the user it knows us as."""

    @tornado.web.authenticated
    async def get(self) -> None:
        await self.answer(lambda client: {"url": client.url, "user": client.whoami()})


class NotebooksHandler(EaseMLHandler):
    """``GET /easeml/notebooks``: the user's notebook sessions as the service
    lists them (``GET /api/v1/notebooks``): path, server, alive or gone."""

    @tornado.web.authenticated
    async def get(self) -> None:
        await self.answer(lambda client: client.request("GET", "/notebooks"))


class NotificationRelay:
    """The user's notifications, read from the service's event stream on a
    daemon thread (opened on the first poll, opened again when it ends) and
    kept, numbered, for the front end to poll (``since``). Only her own
    (``owner_id`` is her id): an admin's stream carries everyone's.

    It runs on its own, so it never starts the embedded service (which
    stopped when idle, or by ``easeml stop``): it listens only while one
    runs, started by her own sidebar request or elsewhere, and its stream is
    passive, so listening keeps no idle service up."""

    KEEP = 200  # the latest notifications kept for polls
    RETRY_SECONDS = 5.0  # wait before reopening a stream that ended or could not open

    def __init__(self, service: ServiceConnection):
        self.service = service
        self._kept: collections.deque[dict[str, Any]] = collections.deque(maxlen=self.KEEP)
        self._next = 1
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.connected = threading.Event()  # a stream is open now

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="easeml-lab-notifications", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                # whose stream it is, asked each time: the client may have been made again
                user_id = self.service.call(lambda client: client.whoami(start=False), start=False)["id"]
                stream = self.service.call(lambda client: client.events(passive=True), start=False)
            except Exception:  # noqa: BLE001 - none runs now (or none answers): look again later
                self._stopped.wait(self.RETRY_SECONDS)
                continue
            self.connected.set()
            try:
                while not self._stopped.is_set() and stream.alive:
                    event = stream.get(timeout=1.0)
                    if (event is not None and event.get("type") == "notification"
                            and event.get("owner_id") == user_id):
                        self._keep(event)
            finally:
                self.connected.clear()
                stream.close()
            self._stopped.wait(1.0)

    def _keep(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._kept.append({**event, "id": self._next, "received": time.time()})
            self._next += 1

    def since(self, after: int | None) -> dict[str, Any]:
        """``{"notifications": [...], "last": id}``: those numbered above
        ``after``; none when ``after`` is None (a page just opened starts
        from now, not with old toasts)."""
        self.start()
        with self._lock:
            last = self._next - 1
            out = [] if after is None else [n for n in self._kept if n["id"] > after]
        return {"notifications": out, "last": last, "connected": self.connected.is_set()}


class NotificationsHandler(EaseMLHandler):
    """``GET /easeml/notifications?after=N`` (see ``NotificationRelay.since``)."""

    @tornado.web.authenticated
    async def get(self) -> None:
        raw = self.get_query_argument("after", None)
        try:
            after = None if raw in (None, "") else int(raw)
        except ValueError:
            self.set_status(400)
            self.finish(json.dumps({"error": {"code": "bad_data",
                                              "message": f"after: found {raw!r}, expected an integer"}}))
            return
        self.finish(json.dumps(self.settings["easeml_notifications"].since(after)))
