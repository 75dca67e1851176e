"""The tornado application, and ways to run it: in the foreground
(``easeml serve``) or on a background thread (tests, embedding)."""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import logging
import os
import re
import signal
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import tornado.httpserver
import tornado.netutil
import tornado.web
from tornado.ioloop import IOLoop

from .config import ServiceConfig
from .core import Service
from .embedded import DataDirLock
from ..execution.mop.checkpoints import sweep_runs
from .gc import collect_garbage, describe
from . import handlers as _handlers
from .handlers import NotFoundHandler, handlers

log = logging.getLogger(__name__)

# Threads for the handlers' work. asyncio's default, min(32, CPUs + 4), is 6
# on 2 cores: a few feeds waiting their turn for the database's write lock
# would hold all of them, and every read would queue behind those feeds.
REQUEST_THREADS = 32
# A run folder under --blob-url with nothing written for this long belongs to a
# killed run: a live one writes a checkpoint after every unit.
RUN_FOLDER_TTL_SECONDS = 24 * 3600.0
NO_BODY_BYTES = 4 * 1024  # the body a route that takes none may bring (see _server)
WEBSOCKET_MESSAGE_BYTES = 64 * 1024  # the largest message a client may send on the event stream


_TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^&]*")
access_log = logging.getLogger("tornado.access")


def redact(uri: str) -> str:
    """The request URI with any ``token=`` query value hidden (WebSocket logins)."""
    return _TOKEN_IN_QUERY.sub(r"\1***", uri) if "token=" in uri else uri  # (the regex costs more than the test)


def _log_request(handler: tornado.web.RequestHandler) -> None:
    status = handler.get_status()
    level = access_log.info if status < 400 else access_log.warning if status < 500 else access_log.error
    request = handler.request
    level("%d %s %s (%s) %.2fms", status, request.method, redact(request.uri or ""), request.remote_ip,
          1000.0 * request.request_time())


def make_app(service: Service) -> tornado.web.Application:
    """The routes under ``config.base_url``. In JupyterHub mode
    (``config.jupyterhub``) this also puts ``hub.HubTokens`` in place of
    ``service.tokens`` and adds the browser's OAuth login routes."""
    config = service.config
    base = re.escape(config.base_url.rstrip("/"))
    routes = [(base + path, cls, kwargs) for path, cls, kwargs in handlers(service)]
    settings: dict[str, Any] = {}
    if config.jupyterhub:
        from .hub import HubTokens, cookie_secret, hub_routes, make_hub_auth

        if not isinstance(service.tokens, HubTokens):
            service.tokens = HubTokens(service.store, service.tokens, make_hub_auth())
        routes = hub_routes(config.base_url, service.tokens.hub_auth) + routes
        settings["cookie_secret"] = cookie_secret()
    return tornado.web.Application(
        routes,
        default_handler_class=NotFoundHandler,
        default_handler_args={"service": service},
        websocket_ping_interval=20,
        websocket_max_message_size=WEBSOCKET_MESSAGE_BYTES,  # heartbeats and pings, never data
        log_function=_log_request,
        **settings,
    )


class AddressInUse(OSError):
    """The service's ``host``:``port`` is taken (by another service, most likely)."""

    def __init__(self, host: str, port: int):
        super().__init__(f"{host}:{port} is already in use")
        self.host, self.port = host, port


class AddressUnusable(OSError):
    """The service cannot listen on ``host``:``port`` for another reason than
    a port in use: a host that does not resolve to an IPv4 address, an
    address of no interface of this machine, a port this user may not take.
    ``option`` is the setting at fault ("host" or "port"), ``reason`` says why."""

    def __init__(self, host: str, port: int, option: str, reason: str):
        super().__init__(f"cannot listen on {host}:{port}: {reason}")
        self.host, self.port, self.option, self.reason = host, port, option, reason


def _bind(config: ServiceConfig) -> list[socket.socket]:
    """The listening sockets, bound before anything else starts: a port that
    is taken, or a host that is no address of this machine, is found out in
    a moment, not after the workers started."""
    try:
        return tornado.netutil.bind_sockets(config.port, address=config.host, family=socket.AF_INET)
    except socket.gaierror as error:  # the name does not resolve, or not to an IPv4 address (::1)
        raise AddressUnusable(config.host, config.port, "host", f"it does not resolve to an IPv4 address "
                                                                f"({error.strerror or error})") from None
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise AddressInUse(config.host, config.port) from None
        if error.errno == errno.EADDRNOTAVAIL:
            raise AddressUnusable(config.host, config.port, "host", "no network interface of this machine has "
                                                                    "that address") from None
        if error.errno == errno.EACCES:
            raise AddressUnusable(config.host, config.port, "port", "this user may not listen on that port "
                                                                    "(below 1024 needs root)") from None
        if error.errno in (errno.ENODEV, errno.EAFNOSUPPORT, errno.EINVAL):  # other faults of the address
            raise AddressUnusable(config.host, config.port, "host", error.strerror or str(error)) from None
        raise  # not the address's fault (too many open files, no buffer space): as it is


def _server(app: tornado.web.Application, config: ServiceConfig,
            sockets: list[socket.socket] | None = None) -> tuple[tornado.httpserver.HTTPServer, int]:
    # The API handlers stream their bodies and set each request's limit from
    # the route, after authentication (handlers.BaseHandler.prepare); this
    # default holds only for handlers that do not stream (the WebSocket and
    # the hub's login pages, all GETs without a body), which tornado would
    # otherwise read whole before they look at the token. A body must arrive
    # within handlers.BODY_SECONDS (the API routes set their own, from their
    # limit); tornado's default waits for ever.
    server = tornado.httpserver.HTTPServer(app, max_body_size=NO_BODY_BYTES, body_timeout=_handlers.BODY_SECONDS,
                                           xheaders=False)
    # Handlers run their work on the IOLoop's default executor (see handlers._dispatch;
    # GETs have their own threads there).
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="easeml-request"))
    sockets = sockets if sockets is not None else _bind(config)
    server.add_sockets(sockets)
    return server, sockets[0].getsockname()[1]


async def housekeeping(service: Service, stop: asyncio.Event) -> None:
    """Every ``housekeeping_seconds``: delete stale uploads, and set ``stop``
    once the service has been idle (no request, no WebSocket client, no
    running job) for ``idle_shutdown_seconds``. At the first run and then
    every ``blob_gc_seconds``: collect blob garbage (``gc.py``), and under
    ``blob_url`` remove the run folders of runs killed before they removed
    their own (``checkpoints.sweep_runs``). The sweeps
    run on the default executor, so the IOLoop keeps serving; the blob
    collection takes no lock of the control loop, and a stop ends it early."""
    config = service.config
    every = config.housekeeping_seconds
    if config.idle_shutdown_seconds is not None:
        every = min(every, max(0.05, config.idle_shutdown_seconds / 4))
    next_sweep = 0.0
    next_gc = 0.0 if config.blob_gc_seconds else float("inf")
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), every)
            return
        except asyncio.TimeoutError:
            pass
        loop = asyncio.get_running_loop()
        if loop.time() >= next_sweep:
            next_sweep = loop.time() + config.housekeeping_seconds
            try:
                removed = await loop.run_in_executor(None, service.uploads.sweep, config.upload_ttl_seconds)
                if removed:
                    log.info("deleted %d upload(s) not fed for %.0f s", removed, config.upload_ttl_seconds)
            except Exception:  # noqa: BLE001 - housekeeping must not stop the service
                log.exception("sweeping uploads failed")
        if loop.time() >= next_gc:
            try:
                report = await loop.run_in_executor(
                    None, functools.partial(collect_garbage, service.store, service.blobs, should_stop=stop.is_set))
                log.info("%s", describe(report))
                if config.blob_url is not None:  # run folders left by killed runs (staged data, checkpoints)
                    swept = await loop.run_in_executor(None, sweep_runs, config.blob_url, RUN_FOLDER_TTL_SECONDS)
                    if swept:
                        log.info("removed %d run folder(s) under --blob-url with nothing written for %.0f s",
                                 len(swept), RUN_FOLDER_TTL_SECONDS)
            except Exception:  # noqa: BLE001 - housekeeping must not stop the service
                log.exception("collecting blob garbage failed")
            next_gc = loop.time() + float(config.blob_gc_seconds or 0)
        idle = config.idle_shutdown_seconds
        if idle is not None and service.idle_seconds() >= idle:
            log.info("no request, client or running job for %.0f s: stopping", idle)
            stop.set()
            return


class ServiceThread:
    """The service on a daemon thread with its own IOLoop. ``url`` once started."""

    def __init__(self, config: ServiceConfig, **service_kwargs: Any):
        self.config = config
        self._kwargs = service_kwargs
        self.service: Service | None = None
        self.port: int | None = None
        self._ready = threading.Event()
        self._loop: IOLoop | None = None
        self._error: BaseException | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._main, name="easeml-service", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}{self.config.base_url.rstrip('/')}"

    def start(self) -> "ServiceThread":
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise self._error
        return self

    def _main(self) -> None:
        async def run() -> None:
            try:
                self.service = Service(self.config, **self._kwargs).start()
                self._server, self.port = _server(make_app(self.service), self.config)
                self._loop = IOLoop.current()
                self._stopped = asyncio.Event()
            except BaseException as error:  # noqa: BLE001 - re-raised in start()
                self._error = error
                self._ready.set()
                return
            self._ready.set()
            chores = asyncio.ensure_future(housekeeping(self.service, self._stopped))
            await self._stopped.wait()
            await chores
            self._server.stop()
            await self._server.close_all_connections()
            if not self._stopping:  # stopped by itself (idle): stop the loop too
                self.service.stop()

        asyncio.run(run())

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stopping = True
        if self._loop is not None:
            self._loop.add_callback(self._stopped.set)
        self._thread.join(30)
        if self.service is not None:
            self.service.stop()


def write_service_file(data_dir: Path, url: str, token: str) -> Path:
    """``<data_dir>/service.json`` (mode 0600): how a Client attaches."""
    path = Path(data_dir) / "service.json"
    tmp = path.with_suffix(".json.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"url": url, "token": token, "pid": os.getpid()}, handle)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def serve(config: ServiceConfig, *, admin_token: str | None = None, announce=print) -> None:
    """Run until SIGINT/SIGTERM. With ``admin_token`` (the embedded service),
    make sure a matching admin exists and write ``service.json``.

    Holds the data dir's lock (``embedded.DataDirLock``) throughout: raises
    ``embedded.DataDirInUse`` where another service holds it, and
    ``AddressInUse`` where ``config.port`` is taken and ``AddressUnusable`` where
    ``config.host``:``config.port`` cannot be listened on otherwise, all before the service starts."""
    lock = None
    if config.data_dir is not None:  # (None: a temporary directory of its own)
        lock = DataDirLock(config.data_dir)
    try:
        sockets = _bind(config)
        try:
            asyncio.run(_serve(config, sockets, lock, admin_token, announce))
        finally:
            for sock in sockets:
                sock.close()
    finally:
        if lock is not None:
            lock.release()


async def _serve(config: ServiceConfig, sockets: list[socket.socket], lock: DataDirLock | None,
                 admin_token: str | None, announce: Any) -> None:
    # First: the lock names this process from the start, so `easeml stop` may send SIGTERM while it still
    # starts; with the handlers in place that is a clean stop as soon as it has started, not a kill.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    port = sockets[0].getsockname()[1]
    url = f"http://{config.host}:{port}"
    if lock is not None:
        lock.announce(url)
    service = Service(config)
    if admin_token is not None:
        from .auth import hash_token

        from ..errors import NotFoundError

        try:
            service.store.user_by_token_hash(hash_token(admin_token))
        except NotFoundError:
            import secrets

            service.store.create_user(f"embedded-{secrets.token_hex(4)}", hash_token(admin_token), is_admin=True)
    service.start()
    server, _ = _server(make_app(service), config, sockets)
    if admin_token is not None:
        write_service_file(service.data_dir, url, admin_token)
    announce(f"easeml service listening on {url}{config.base_url}api/v1 (data dir {service.data_dir})"
             + (" as a JupyterHub service" if config.jupyterhub else ""))
    chores = asyncio.ensure_future(housekeeping(service, stop))
    await stop.wait()
    await chores
    server.stop()
    await server.close_all_connections()
    service.stop()
