"""The kernel's side of notebook registration (docs/service.md, "Notebook sessions").

A ``Client`` made in a notebook kernel (and so ``%easeml connect``) attaches
the kernel to its service: once per kernel and service, a daemon thread
registers the kernel (``POST /api/v1/notebooks`` with ``kernel_info``'s
facts and the tasks touched so far), then keeps an event stream open and
sends ``{"type": "heartbeat", "session": id}`` on it every
``heartbeat_seconds`` (and at once, with the new name, when a task is
touched). When the stream drops (a restarted service, the network) it
registers again and reopens it, waiting longer after each failure (up to
``MAX_RETRY_SECONDS``), so an unreachable service costs a connection
attempt now and then and nothing else; a new ``Client`` or a touched task
in the kernel cuts that wait short (she is using the service, so it is
likely back). The user's thread never waits on any of it.
``EASEML_REGISTER=0`` turns it off; outside a kernel it never runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from typing import Any, Callable

from . import kernel_info as kernel_facts

log = logging.getLogger(__name__)

REGISTER_ENV = "EASEML_REGISTER"
HEARTBEAT_ENV = "EASEML_HEARTBEAT_SECONDS"
DEFAULT_HEARTBEAT_SECONDS = 30.0  # a third of the service's default timeout (90 s)
MAX_RETRY_SECONDS = 300.0
_OFF = {"0", "false", "no", "off"}

_attached: dict[tuple[str, str], "NotebookSession"] = {}
_attached_lock = threading.Lock()


def registration_enabled(environ: Any = os.environ) -> bool:
    return str(environ.get(REGISTER_ENV, "1")).strip().lower() not in _OFF


def heartbeat_seconds(environ: Any = os.environ) -> float:
    raw = environ.get(HEARTBEAT_ENV)
    try:
        value = float(raw) if raw else DEFAULT_HEARTBEAT_SECONDS
    except ValueError:
        value = DEFAULT_HEARTBEAT_SECONDS
    return value if value > 0 else DEFAULT_HEARTBEAT_SECONDS


def attach(url: str, token: str, info: kernel_facts.KernelInfo | None = None) -> "NotebookSession | None":
    """This kernel's session with the service at ``url`` as ``token``'s user,
    started on first use; None outside a kernel or with ``EASEML_REGISTER=0``."""
    if not registration_enabled():
        return None
    info = info if info is not None else kernel_facts.current()
    if info.kernel_id is None:
        return None
    with _attached_lock:
        session = _attached.get((url, token))
        if session is None:
            session = _attached[(url, token)] = NotebookSession(url, token, info).start()
        else:
            session.nudge()
        return session


class NotebookSession:
    """One kernel's registration with one service, kept alive by a daemon thread.

    ``id`` is the service's session id (None until registered; a new one
    after the service restarted)."""

    def __init__(self, url: str, token: str, info: kernel_facts.KernelInfo, *, every: float | None = None):
        self.url, self.token, self.info = url.rstrip("/"), token, info
        self.every = every if every is not None else heartbeat_seconds()
        self.id: str | None = None
        self.registrations = 0  # how often it registered (again: after each reconnect)
        self.failures = 0  # attempts that did not reach the service
        self._tasks: list[str] = []
        self._pending: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._nudged = threading.Event()  # ends the wait before the next attempt
        self._wake: Callable[[], None] = lambda: None
        self._thread = threading.Thread(target=self._main, name="easeml-notebook-session", daemon=True)

    def start(self) -> "NotebookSession":
        self._thread.start()
        return self

    @property
    def tasks(self) -> list[str]:
        with self._lock:
            return list(self._tasks)

    def touch(self, task: str) -> None:
        """Record a task this kernel used; sent with the next heartbeat, now."""
        with self._lock:
            if task in self._tasks:
                return
            self._tasks.append(task)
            self._pending.append(task)
        self._wake()
        self._nudged.set()

    def nudge(self) -> None:
        """Attempt the next registration now rather than after the back-off;
        no effect while the stream is up."""
        self._nudged.set()

    def stop(self) -> None:
        self._stop.set()
        self._nudged.set()
        self._wake()

    # ------------------------------------------------------------ the thread
    def _main(self) -> None:
        from .client import Client

        client = Client(self.url, self.token, register=False, timeout=30.0)
        retry = self.every
        while not self._stop.is_set():
            try:
                self._register(client)
                asyncio.run(self._stream())
                retry = self.every  # it was up: try again soon
            except Exception as error:  # noqa: BLE001 - the kernel must never notice
                log.debug("notebook session with %s: %s", self.url, error)
                self.failures += 1
                retry = min(retry * 2, MAX_RETRY_SECONDS)
            self._nudged.clear()  # a nudge while the stream was up is spent
            if not self._stop.is_set():
                self._nudged.wait(retry)

    def _register(self, client: Any) -> None:
        with self._lock:
            body = {**self.info.to_dict(), "tasks": list(self._tasks)}
            self._pending.clear()
        self.id = client.request("POST", "/notebooks", body)["id"]
        self.registrations += 1

    async def _stream(self) -> None:
        """Heartbeats until the stream ends (closed, dropped, or the service
        no longer knows the session); ``touch`` and ``stop`` wake it meanwhile."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def wake_soon() -> None:  # from the kernel's threads
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the stream's loop has just closed: nothing left to wake
                pass

        self._wake = wake_soon
        try:
            await self._beat(wake)
        finally:
            self._wake = lambda: None

    async def _beat(self, wake: asyncio.Event) -> None:
        import tornado.httpclient
        import tornado.websocket

        ws_url = self.url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/api/v1/events"
        request = tornado.httpclient.HTTPRequest(ws_url, headers={"Authorization": f"token {self.token}"},
                                                 connect_timeout=30, request_timeout=30)
        ws = await tornado.websocket.websocket_connect(request, ping_interval=max(self.every, 5.0))
        lost = asyncio.Event()

        async def read() -> None:
            while True:
                message = await ws.read_message()
                if message is None:
                    break
                try:
                    event = json.loads(message)
                except ValueError:
                    continue
                if event.get("type") == "heartbeat" and event.get("ok") is False:
                    break  # the service does not know the session (restarted): register again
            lost.set()
            wake.set()

        reader = asyncio.ensure_future(read())
        try:
            while not (self._stop.is_set() or lost.is_set()):
                # Clear before taking the pending tasks: a touch() from now on is either in
                # this beat or sets wake again for the next one, never lost until the timeout.
                wake.clear()
                with self._lock:
                    added, self._pending = self._pending, []
                beat: dict[str, Any] = {"type": "heartbeat", "session": self.id}
                if added:
                    beat["tasks"] = added
                await ws.write_message(json.dumps(beat))
                try:
                    await asyncio.wait_for(wake.wait(), self.every)
                except asyncio.TimeoutError:
                    pass
        finally:
            ws.close()
            reader.cancel()
