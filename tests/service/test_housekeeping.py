"""Housekeeping: the idle shutdown (of a service thread and of the embedded
service) and the sweep of chunked uploads that were never fed."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from ease_jupyter.service.arrays import Uploads
from ease_jupyter.service.config import ServiceConfig
from ease_jupyter.client import Client
from ease_jupyter.service.embedded import IDLE_ENV, ensure_embedded, is_alive, read_service_file

from .conftest import start, until


def test_idle_service_stops_itself_but_not_while_used(tmp_path):
    running = start(tmp_path, idle_shutdown_seconds=0.8, housekeeping_seconds=0.1)
    try:
        running.user("alice")
        client = running.client("alice")
        # Requests keep it up...
        for _ in range(12):
            client.whoami()
            time.sleep(0.15)
        assert running.thread.alive
        # ... and so does an open event stream with no requests at all.
        stream = client.events()
        time.sleep(2.0)
        assert running.thread.alive and stream.alive
        stream.close()
        assert until(lambda: not running.thread.alive, 20), "the idle service did not stop"
        assert running.service.loop._stop.is_set()  # the control loop stopped with it
        with pytest.raises(OSError):
            client.whoami()
    finally:
        running.thread.stop()


def _listening(url: str) -> bool:
    """A bare TCP connect: no request, so it does not count as use."""
    host, port = url.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
        return True
    except OSError:
        return False


def test_embedded_service_stops_after_idle_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv(IDLE_ENV, "2")
    data = tmp_path / "data"
    url, token = ensure_embedded(data, timeout=120)
    client = Client(data_dir=data)  # attaches to it
    assert client.url == url and is_alive(url, token)
    assert until(lambda: not _listening(url), 60, every=0.5), "the embedded service is still up"
    log = (data / "service.log").read_text()
    assert "no request, client or running job for 2 s: stopping" in log
    # The Client starts it again on its next request (the same token, a new port).
    monkeypatch.setenv(IDLE_ENV, "0")
    assert client.whoami()["admin"]
    assert client.url != url and client.token == token and _listening(client.url)
    pid = read_service_file(data)["pid"]
    os.kill(pid, signal.SIGTERM)  # started by this test (through the Client)
    assert until(lambda: not _listening(client.url), 60, every=0.2)


def test_uploads_not_fed_are_swept(tmp_path):
    uploads = Uploads(tmp_path / "uploads")
    old, fresh = uploads.create(1), uploads.create(2)
    uploads.append(1, old, 0, b"abc")
    path = Path(tmp_path / "uploads" / "1" / f"{old}.part")
    stamp = time.time() - 3600
    os.utime(path, (stamp, stamp))
    assert uploads.sweep(600) == 1
    assert not path.exists() and uploads.size(2, fresh) == 0


def test_the_service_sweeps_stale_uploads(tmp_path):
    running = start(tmp_path, upload_ttl_seconds=0.5, housekeeping_seconds=0.1)
    try:
        running.user("alice")
        upload = running.call("POST", "/uploads", "alice").body["id"]
        assert running.call("PUT", f"/uploads/{upload}?offset=0", "alice", raw=b"x" * 10).body["size"] == 10
        assert until(lambda: running.call("GET", f"/uploads/{upload}", "alice").status == 404, 20)
    finally:
        running.thread.stop()


def test_config_checks_the_new_settings():
    with pytest.raises(ValueError, match="idle_shutdown_seconds"):
        ServiceConfig(idle_shutdown_seconds=0)
    with pytest.raises(ValueError, match="worker_nice"):
        ServiceConfig(worker_nice=25)


def test_embedded_stop_ends_the_recorded_service(tmp_path):
    import psutil

    from ease_jupyter.service import embedded

    url, token = embedded.ensure_embedded(tmp_path)
    assert embedded.is_alive(url, token)
    pid = int(embedded.read_service_file(tmp_path)["pid"])
    embedded.stop(tmp_path)
    assert not embedded.is_alive(url, token)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
