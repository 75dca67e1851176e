"""The embedded service: started on demand by ``Client()`` with no URL.

It runs as a background subprocess on 127.0.0.1 with a random free port and
writes ``<data_dir>/service.json`` (mode 0600) holding its URL and an admin
token. It stops by itself after 30 minutes (``$EASEML_IDLE_SHUTDOWN`` s) with
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
from pathlib import Path

TOKEN_ENV = "EASEML_EMBEDDED_TOKEN"
IDLE_ENV = "EASEML_IDLE_SHUTDOWN"  # seconds; 0 keeps the embedded service up for good
IDLE_SECONDS = 30 * 60.0


def read_service_file(data_dir: Path) -> dict | None:
    try:
        info = json.loads((Path(data_dir) / "service.json").read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and "url" in info and "token" in info else None


def is_alive(url: str, token: str, timeout: float = 2.0) -> bool:
    request = urllib.request.Request(url + "/api/v1/whoami", headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def ensure_embedded(data_dir: str | os.PathLike[str] | None = None, *, timeout: float = 60.0) -> tuple[str, str]:
    """(url, admin token) of the embedded service of ``data_dir``, started if needed."""
    from ..store import _ensure_private_dir, default_data_dir
    from .auth import new_token

    directory = _ensure_private_dir(Path(data_dir).expanduser() if data_dir is not None else default_data_dir())
    info = read_service_file(directory)
    if info and is_alive(info["url"], info["token"]):
        return info["url"], info["token"]
    with open(directory / "service.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter at a time; the others attach
        info = read_service_file(directory)
        if info and is_alive(info["url"], info["token"]):
            return info["url"], info["token"]
        token = info["token"] if info else new_token()
        old_pid = info.get("pid") if info else None
        log = open(directory / "service.log", "ab")
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
                return info["url"], token
            if process.poll() is not None:
                raise RuntimeError(f"the embedded service exited with {process.returncode}; see {directory / 'service.log'}")
            time.sleep(0.1)
        process.terminate()
        raise TimeoutError(f"the embedded service did not start within {timeout} s; see {directory / 'service.log'}")


def stop(data_dir: str | os.PathLike[str], timeout: float = 30.0) -> None:
    """Stop the embedded service recorded in ``data_dir/service.json`` (SIGTERM, then
    SIGKILL after ``timeout``), if it is still running."""
    import psutil

    info = read_service_file(Path(data_dir))
    try:
        process = psutil.Process(int(info["pid"])) if info and info.get("pid") else None
        if process is None or "ease_jupyter.service.embedded" not in " ".join(process.cmdline()):
            return  # none recorded, or the pid now belongs to another process
        process.terminate()
        deadline = time.monotonic() + timeout
        while process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
            if time.monotonic() > deadline:
                process.kill()
                return
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
    serve(ServiceConfig(db_url=args.db, data_dir=Path(args.data_dir), host="127.0.0.1", port=0,
                        idle_shutdown_seconds=args.idle_shutdown or None), admin_token=token)


if __name__ == "__main__":
    main()
