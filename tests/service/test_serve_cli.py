"""`easeml serve` flags reach the running service."""

from __future__ import annotations

import time

import pytest

from ease_jupyter.client import Client
from ease_jupyter.service.testing import ServeProcess, add_user


def test_idle_shutdown_flag_stops_a_served_service(tmp_path):
    token = add_user(tmp_path, "admin", admin=True)
    server = ServeProcess(tmp_path, "--idle-shutdown", "2", "--worker-nice", "3", "--upload-ttl", "60")
    try:
        assert Client(server.url, token).whoami()["name"] == "admin"
        deadline = time.monotonic() + 60
        while server.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.proc.poll() is not None, "the service kept running past --idle-shutdown"
    finally:
        server.stop()


@pytest.mark.parametrize("flag, value", [("--idle-shutdown", "0"), ("--worker-nice", "25"), ("--upload-ttl", "-1"),
                                         ("--feed-processes", "-1"), ("--express-slots", "-1"), ("--express-slots", "65")])
def test_serve_rejects_bad_flag_values(tmp_path, flag, value):
    from click.testing import CliRunner

    from ease_jupyter.cli import main

    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), flag, value])
    assert result.exit_code == 2 and flag in result.output


def test_a_memory_store_serves_feeds_in_the_service_and_refuses_feed_processes(tmp_path):
    """No other process can open ``memory://``: serve drops its default feed
    process there, and refuses one asked for, naming the option."""
    import json
    import urllib.request

    from click.testing import CliRunner

    from ease_jupyter.cli import main

    refused = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), "--db", "memory://",
                                        "--feed-processes", "1"])
    assert refused.exit_code == 2 and "--feed-processes" in refused.output and "memory://" in refused.output
    server = ServeProcess(tmp_path, db_url="memory://")
    try:
        with urllib.request.urlopen(server.url + "/api/v1/health", timeout=30) as reply:
            assert json.loads(reply.read())["status"] == "ok"
    finally:
        server.stop()
