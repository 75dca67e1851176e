"""Fixtures: a real ease.ml service on a thread, and real Jupyter servers
(subprocesses on 127.0.0.1 with a token) whose ``ease_jupyter.lab``
extension talks to it."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from ease_jupyter.service import ServiceConfig, ServiceThread
from ease_jupyter.service.auth import create_user

JUPYTER_TOKEN = "lab-test-token"
# Jupyter refuses to run as root without this (CI containers often are root).
ROOT_FLAGS = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Answer:
    status: int
    body: Any
    headers: Any


def get(url: str, token: str | None = None, *, timeout: float = 60, redirect: bool = True) -> Answer:
    """GET over real HTTP; ``token`` goes in the Authorization header."""
    headers = {"Authorization": f"token {token}"} if token else {}
    opener = urllib.request.build_opener() if redirect else urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            text, status, hdrs = response.read(), response.status, response.headers
    except urllib.error.HTTPError as error:
        text, status, hdrs = error.read(), error.code, error.headers
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = text.decode(errors="replace")
    return Answer(status, body, hdrs)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def isolated_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment for a Jupyter subprocess: own config/runtime/settings dirs, no stray ease.ml settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EASEML_", "JUPYTER"))}
    for name in ("config", "runtime", "settings", "workspaces", "data"):
        (tmp / name).mkdir(parents=True, exist_ok=True)
    env.update(JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               EASEML_DATA_DIR=str(tmp / "data"), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class JupyterServer:
    """``python -m jupyter_server`` (or any command) on a free loopback port, polled until it answers."""

    def __init__(self, tmp: Path, env: dict[str, str], command: list[str] | None = None, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "jupyter.log"
        root = tmp / "root"
        root.mkdir(parents=True, exist_ok=True)
        self.command = command or [
            sys.executable, "-m", "jupyter_server", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={JUPYTER_TOKEN}",
            "--ServerApp.open_browser=False", f"--ServerApp.root_dir={root}", *ROOT_FLAGS,
        ]
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=self._log,
                                        stderr=subprocess.STDOUT, env=env, cwd=str(tmp))

    def wait(self, timeout: float = 120) -> "JupyterServer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter exited with {self.process.returncode}:\n{self.log()}")
            try:
                if get(self.url + "/api/status", JUPYTER_TOKEN, timeout=5).status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"jupyter did not answer within {timeout} s:\n{self.log()}")

    def get(self, path: str, token: str | None = JUPYTER_TOKEN, **kw: Any) -> Answer:
        return get(self.url + path, token, **kw)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


@dataclass
class LabSetup:
    service: ServiceThread
    tokens: dict[str, str]
    lab: JupyterServer          # EASEML_URL/EASEML_TOKEN: alice on the real service
    bad_token: JupyterServer    # the real service, a token it does not know
    unreachable: JupyterServer  # EASEML_URL: a port nothing listens on


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[LabSetup]:
    tmp = tmp_path_factory.mktemp("lab")
    service = ServiceThread(ServiceConfig(data_dir=tmp / "service", tick_seconds=0.05, executor="thread")).start()
    tokens = {name: create_user(service.service.store, name)[1] for name in ("alice", "bob")}
    servers: list[JupyterServer] = []
    try:
        # Started together (each takes a few seconds), then waited for.
        lab = JupyterServer(tmp / "lab", isolated_env(tmp / "lab", EASEML_URL=service.url, EASEML_TOKEN=tokens["alice"]))
        servers.append(lab)
        bad = JupyterServer(tmp / "bad", isolated_env(tmp / "bad", EASEML_URL=service.url, EASEML_TOKEN="not-a-token"))
        servers.append(bad)
        gone = JupyterServer(tmp / "gone", isolated_env(tmp / "gone", EASEML_URL=f"http://127.0.0.1:{free_port()}",
                                                        EASEML_TOKEN="whatever"))
        servers.append(gone)
        for server in servers:
            server.wait()
        yield LabSetup(service, tokens, lab, bad, gone)
    finally:
        for server in servers:
            server.stop()
        service.stop()
