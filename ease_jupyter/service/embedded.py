"""The embedded service: started on demand by ``Client()`` with no URL.

It runs as a background subprocess on 127.0.0.1 with a random free port and
writes ``<data_dir>/service.json`` (mode 0600) holding its URL, an admin
token and its pid. It stops by itself after 30 minutes (``$EASEML_IDLE_SHUTDOWN`` s) with
no request, no WebSocket client and no running job; the next ``Client()``
starts it again. Another ``Client()`` attaches when that file points at a live service;
a stale file (service gone) is replaced, keeping its token so that the admin
user it named stays valid.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOKEN_ENV = "EASEML_EMBEDDED_TOKEN"
LOCK_FILE = "service.lock"  # held by the one service of a data dir for its whole life (DataDirLock)
START_LOCK_FILE = "service.start.lock"  # held by a Client() while it starts the embedded service
IDLE_ENV = "EASEML_IDLE_SHUTDOWN"  # seconds; 0 keeps the embedded service up for good
IDLE_SECONDS = 30 * 60.0


def read_service_file(data_dir: Path) -> dict | None:
    try:
        info = json.loads((Path(data_dir) / "service.json").read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and "url" in info and "token" in info else None


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def is_alive(url: str, token: str, timeout: float = 2.0) -> bool:
    request = urllib.request.Request(url + "/api/v1/whoami", headers={"Authorization": f"token {token}"})
    try:
        with _DIRECT.open(request, timeout=timeout) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


@dataclass(frozen=True)
class Embedded:
    """A running embedded service: where it listens, its admin token, its
    process id, and whether this call started it (False: it attached)."""

    url: str
    token: str
    pid: int | None
    started: bool


def data_dir_of(data_dir: str | os.PathLike[str] | None) -> Path:
    """The data dir an embedded service of ``data_dir`` uses (default: $EASEML_DATA_DIR or ~/.easeml)."""
    from ..store import default_data_dir

    return Path(data_dir).expanduser() if data_dir is not None else default_data_dir()


def ensure_embedded(data_dir: str | os.PathLike[str] | None = None, *, timeout: float = 60.0) -> tuple[str, str]:
    """(url, admin token) of the embedded service of ``data_dir``, started if needed."""
    service = start_embedded(data_dir, timeout=timeout)
    return service.url, service.token


def _attached(info: dict | None) -> Embedded | None:
    if info and is_alive(info["url"], info["token"]):
        return Embedded(info["url"], info["token"], info.get("pid"), started=False)
    return None


def answering(data_dir: str | os.PathLike[str] | None = None, *, other_than: str | None = None) -> Embedded | None:
    """The embedded service of ``data_dir`` if one answers now, else None; starts
    nothing. ``other_than``: a URL known not to answer; a service recorded at
    it is None without being probed again."""
    info = read_service_file(data_dir_of(data_dir))
    if info and other_than is not None and info["url"].rstrip("/") == other_than.rstrip("/"):
        return None
    return _attached(info)


def start_embedded(data_dir: str | os.PathLike[str] | None = None, *, timeout: float = 60.0) -> Embedded:
    """The embedded service of ``data_dir``: the running one, else one started
    now (``started`` says which; ``easeml lab`` stops only one it started)."""
    from ..store import ensure_private_dir
    from .auth import new_token

    directory = ensure_private_dir(data_dir_of(data_dir))
    attached = _attached(read_service_file(directory))
    if attached is not None:
        return attached
    with os.fdopen(os.open(directory / START_LOCK_FILE, os.O_WRONLY | os.O_CREAT, 0o600), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter at a time; the others attach
        info = read_service_file(directory)
        attached = _attached(info)
        if attached is not None:
            return attached
        if _process(info) is not None:  # running but slow to answer: never a second service on one data dir
            attached = _answering(info, directory, timeout)
            if attached is not None:
                return attached  # else it ended (stopping): start a new one
        other = holder(directory)
        if other is not None:  # an `easeml serve` (no service.json of ours): it would refuse a second
            raise DataDirInUse(directory, other)
        token = info["token"] if info else new_token()
        old_pid = info.get("pid") if info else None
        log = open_log(directory)
        env = {**os.environ, TOKEN_ENV: token}
        process = subprocess.Popen(
            [sys.executable, "-m", "ease_jupyter.service.embedded", "--data-dir", str(directory)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = read_service_file(directory)
            if info and info.get("pid") == process.pid and info.get("pid") != old_pid and is_alive(info["url"], token):
                return Embedded(info["url"], token, process.pid, started=True)
            if process.poll() is not None:
                raise RuntimeError(f"the embedded service exited with {process.returncode}; see {directory / 'service.log'}")
            time.sleep(0.1)
        process.terminate()
        raise TimeoutError(f"the embedded service did not start within {timeout} s; see {directory / 'service.log'}")


def open_log(directory: Path) -> Any:
    """``<directory>/service.log`` for appending, created with mode 0600 (not
    the umask's 0644: it logs task names and errors). An existing log keeps
    its mode. Where the data dir itself is open to group or others, the log
    says so first (``easeml serve`` says it on stderr)."""
    from ..store import exposed_dir_warning

    fd = os.open(directory / "service.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    log = os.fdopen(fd, "ab")
    warning = exposed_dir_warning(directory)
    if warning is not None:
        log.write(f"{warning}\n".encode())
        log.flush()
    return log


class DataDirInUse(RuntimeError):
    """Another service holds the data dir (its ``service.lock``)."""

    def __init__(self, directory: Path, other: dict):
        self.directory, self.pid, self.url = Path(directory), other.get("pid"), other.get("url")
        super().__init__(f"a service (pid {self.pid or '?'}, {self.url or 'still starting'}) already uses "
                         f"{directory}; stop it first (easeml stop --data-dir {directory}, or its own process)")


PROBE_WAIT = 5.0  # seconds a starting service waits out probes (``holder``) that hold the lock for a moment


class DataDirLock:
    """``<data_dir>/service.lock``, held (flock) by the one service of the
    data dir until ``release()`` or its process ends, a kill included. It
    holds the holder's pid and, once known, its URL, for the message of a
    second service (``DataDirInUse``).

    A service holds the lock exclusive; a probe (``holder``) takes it shared
    for an instant. So when the exclusive lock is refused, a shared one
    tells the two apart: granted, only probes were in the way (no service
    holds an exclusive lock then), and the lock is tried again; refused, a
    service holds it. A probe thus never makes a starting service refuse
    itself, and two services that start at once still settle on one."""

    def __init__(self, data_dir: str | os.PathLike[str]):
        from ..store import ensure_private_dir

        self.directory = ensure_private_dir(Path(data_dir).expanduser())  # made (mode 0700) if need be
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _lock_through_probes(fd, self.directory)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        self.announce(None)

    def announce(self, url: str | None) -> None:
        """Record this process and the URL it listens on."""
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps({"pid": os.getpid(), "url": url}).encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # the only descriptor of the lock: closing it unlocks
            self._fd = None


def _lock_through_probes(fd: int, directory: Path) -> None:
    """Take the exclusive lock on ``fd``, waiting out probes that hold it
    shared (``DataDirLock``); ``DataDirInUse`` where a service holds it."""
    deadline = time.monotonic() + PROBE_WAIT
    tries = 0
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # an exclusive holder: another service
            raise DataDirInUse(directory, _lock_info(directory)) from None
        fcntl.flock(fd, fcntl.LOCK_UN)  # only probes (shared) were in the way
        if time.monotonic() > deadline:  # probes without end: refuse rather than wait for good
            raise DataDirInUse(directory, _lock_info(directory))
        tries += 1
        _wait_for_probes(tries)


def _wait_for_probes(tries: int) -> None:
    """The pause before the ``tries``-th new try (a probe holds the lock for
    microseconds; the pause grows so that a busy prober cannot starve us)."""
    time.sleep(min(0.001 * tries, 0.05))


def _lock_info(directory: Path) -> dict:
    try:
        info = json.loads((directory / LOCK_FILE).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def holder(data_dir: str | os.PathLike[str] | None = None) -> dict | None:
    """{"pid", "url"} of the service that holds the data dir (``url`` None
    while it starts), or None where none runs. A probe: it takes the lock
    shared for an instant, which a starting service waits out (``DataDirLock``)."""
    directory = data_dir_of(data_dir)
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None  # (released at close, below)
    except BlockingIOError:
        return _lock_info(directory)
    finally:
        os.close(fd)


def _answering(info: dict, directory: Path, timeout: float) -> Embedded | None:
    """The running embedded service ``info`` names, once it answers within
    ``timeout``; None if its process ends first (it was stopping)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        attached = _attached(info)
        if attached is not None:
            return attached
        if _process(info) is None:
            return None
        time.sleep(0.5)
    raise TimeoutError(f"the embedded service (pid {info.get('pid')}) runs but did not answer within {timeout} s; "
                       f"see {directory / 'service.log'}, or stop it with `easeml stop`")


def _process(info: dict | None) -> Any:
    """The live process ``service.json`` names, if it is an embedded service
    (a stale file's pid may belong to another process by now)."""
    import psutil

    try:
        process = psutil.Process(int(info["pid"])) if info and info.get("pid") else None
        if process is None or "ease_jupyter.service.embedded" not in " ".join(process.cmdline()):
            return None
        return None if process.status() == psutil.STATUS_ZOMBIE else process
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def running(data_dir: str | os.PathLike[str] | None = None) -> dict | None:
    """``service.json`` of the embedded service of ``data_dir`` while its process runs, else None."""
    info = read_service_file(data_dir_of(data_dir))
    return info if _process(info) is not None else None


def stop(data_dir: str | os.PathLike[str] | None = None, timeout: float = 30.0, *, pid: int | None = None) -> bool:
    """Stop the embedded service recorded in ``data_dir/service.json`` (SIGTERM, then
    SIGKILL after ``timeout``), if it is still running; with ``pid``, only if
    it is that process. True when one was running and is stopped now."""
    process = _process(read_service_file(data_dir_of(data_dir)))
    if process is None or (pid is not None and process.pid != pid):
        return False
    _terminate(process, timeout)
    return True


def stop_holder(data_dir: str | os.PathLike[str] | None = None, timeout: float = 30.0) -> dict | None:
    """Stop the service that holds the data dir (``holder``), an ``easeml
    serve`` included, as ``stop`` does. Its {"pid", "url"}, or None where none runs."""
    import psutil

    info = holder(data_dir)
    try:
        process = psutil.Process(int(info["pid"])) if info and info.get("pid") else None
        command = " ".join(process.cmdline()) if process is not None else ""
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None
    if "ease_jupyter" not in command and "easeml" not in command:  # never some other process of a reused pid
        return None
    _terminate(process, timeout)
    return info


def _terminate(process: Any, timeout: float) -> None:
    """SIGTERM (a clean stop), then SIGKILL after ``timeout`` s."""
    import psutil

    try:
        process.terminate()
        deadline = time.monotonic() + timeout
        while process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
            if time.monotonic() > deadline:
                process.kill()
                break
            time.sleep(0.1)
    except psutil.NoSuchProcess:
        pass


def main(argv: list[str] | None = None) -> None:
    import argparse
    import logging

    from .app import serve
    from .config import ServiceConfig

    parser = argparse.ArgumentParser(description="ease_jupyter embedded service (started by Client())")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--db", default=None)
    parser.add_argument("--idle-shutdown", type=float, default=float(os.environ.get(IDLE_ENV, IDLE_SECONDS)),
                        help=f"stop after this many seconds with no request, client or running job "
                             f"(default ${IDLE_ENV} or {IDLE_SECONDS:.0f}; 0: never)")
    args = parser.parse_args(argv)
    token = os.environ.pop(TOKEN_ENV, None)
    if not token:
        parser.error(f"{TOKEN_ENV} must hold the admin token")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = ServiceConfig(db_url=args.db, data_dir=Path(args.data_dir), host="127.0.0.1", port=0,
                           idle_shutdown_seconds=args.idle_shutdown or None,
                           allow_user_models=True)  # one user's own service: her own code is hers to run
    try:
        serve(config, admin_token=token)
    except DataDirInUse as error:  # an `easeml serve` came first
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
