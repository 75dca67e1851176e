"""``easeml serve`` / ``easeml users`` and the Client (embedded and remote)."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.client import AuthError, Client
from ease_jupyter.errors import AlreadyExistsError, DataError, NotFoundError, ProgramSyntaxError
from ease_jupyter.service.embedded import is_alive, read_service_file

from .conftest import http


def test_users_add_and_list(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["users", "add", "ada", "--admin", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    token = result.output.strip()
    assert len(token) >= 32
    assert runner.invoke(main, ["users", "add", "bob", "--data-dir", str(tmp_path)]).exit_code == 0
    dup = runner.invoke(main, ["users", "add", "bob", "--data-dir", str(tmp_path)])
    assert dup.exit_code != 0 and "already exists" in dup.output
    bad = runner.invoke(main, ["users", "add", "../x", "--data-dir", str(tmp_path)])
    assert bad.exit_code != 0 and "expected" in bad.output
    listed = runner.invoke(main, ["users", "list", "--data-dir", str(tmp_path)]).output
    assert re.search(r"^ada\tadmin\t", listed, re.M) and re.search(r"^bob\tuser\t", listed, re.M)
    assert token not in listed
    assert "serve" in runner.invoke(main, ["--help"]).output


def test_serve_subprocess_with_cli_users(tmp_path):
    token = CliRunner().invoke(main, ["users", "add", "ada", "--data-dir", str(tmp_path)]).output.strip()
    proc = subprocess.Popen([sys.executable, "-m", "ease_jupyter", "serve", "--data-dir", str(tmp_path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            m = re.search(r"listening on (http://[\d.:]+)/api/v1", line)
            url = m.group(1) if m else None
        assert url, "serve did not announce its URL"
        assert http(url, "GET", "/api/v1/whoami", token=token).body["name"] == "ada"
        assert http(url, "GET", "/api/v1/whoami", token="nope").status == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_client_maps_service_errors(svc):
    client = svc.client("alice")
    with pytest.raises(NotFoundError, match="nope"):
        client.task("nope")
    with pytest.raises(DataError) as info:
        client.task("a/b", input=[4], output=[3])
    assert info.value.field == "name"
    with pytest.raises(ProgramSyntaxError) as syntax:
        client.task("p", program="input: [4 output: [3]")
    assert syntax.value.line >= 1 and syntax.value.expected
    task = client.task("t", input=[4], output=[3])
    with pytest.raises(AlreadyExistsError):
        client.task("t", input=[5], output=[3])
    with pytest.raises(DataError) as shape:
        task.feed(np.zeros((3, 5), "float32"), np.zeros(3, "int64"))
    assert shape.value.field.startswith("X") and "5" in shape.value.found
    with pytest.raises(DataError) as nan:
        task.feed(np.full((2, 4), np.nan, "float32"), np.zeros(2, "int64"))
    assert nan.value.field.startswith("X")
    with pytest.raises(AuthError):
        Client(svc.url, "bad-token").tasks()
    with pytest.raises(AuthError):
        client.add_user("eve")
    assert [t.name for t in client.tasks()] == ["t"]
    assert svc.client("bob").tasks() == []
    with pytest.raises(NotFoundError):
        svc.client("bob").task("t")


def test_client_large_feed_uses_chunked_upload(svc, monkeypatch):
    import ease_jupyter.client as client_module

    monkeypatch.setattr(client_module, "CHUNK_BYTES", 100_000)
    task = svc.client("alice").task("big", input=[16], output=[4])
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20_000, 16)).astype("float32")  # 1.28 MB > INLINE_BYTES
    v = task.feed(X, rng.integers(0, 4, 20_000))
    assert v["n_examples"] == 20_000
    ids, X_back, _ = task.data()
    assert np.array_equal(X_back, X) and len(ids) == 20_000
    task.cancel()


@pytest.mark.slow
def test_embedded_service_start_and_attach(tmp_path, monkeypatch, iris):
    monkeypatch.delenv("EASEML_URL", raising=False)
    monkeypatch.delenv("EASEML_TOKEN", raising=False)
    first = Client(data_dir=tmp_path)
    info = read_service_file(tmp_path)
    try:
        assert stat.S_IMODE(os.stat(tmp_path / "service.json").st_mode) == 0o600
        assert first.url == info["url"] and first.url.startswith("http://127.0.0.1:")
        second = Client(data_dir=tmp_path)
        assert second.url == first.url  # attached, not a second service
        assert first.whoami()["admin"]
        X, y = iris
        task = first.task("iris", input=[4], output=[3])
        task.feed(X, y)
        assert task.wait(timeout=90)
        assert second.task("iris").best()["accuracy"] > 0.85
    finally:
        os.kill(info["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 20
    while is_alive(info["url"], info["token"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    third = Client(data_dir=tmp_path)  # stale file: a new service, same token, same data
    try:
        assert third.url != info["url"] or is_alive(third.url, third.token)
        assert third.task("iris").best()["accuracy"] > 0.85
    finally:
        os.kill(read_service_file(tmp_path)["pid"], signal.SIGTERM)


def test_a_running_embedded_service_that_is_slow_to_answer_gets_no_second_one_beside_it(tmp_path):
    import signal

    import psutil

    from ease_jupyter.service import embedded

    first = embedded.start_embedded(tmp_path, timeout=60)
    try:
        os.kill(first.pid, signal.SIGSTOP)  # alive, but it answers nothing
        try:
            with pytest.raises(TimeoutError, match=rf"pid {first.pid}\) runs but did not answer within 2"):
                embedded.start_embedded(tmp_path, timeout=2)
            services = [p for p in psutil.process_iter(["cmdline"])
                        if "ease_jupyter.service.embedded" in " ".join(p.info["cmdline"] or [])
                        and str(tmp_path) in " ".join(p.info["cmdline"] or [])]
            assert [p.pid for p in services] == [first.pid]  # no second service on the same data dir
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert embedded.start_embedded(tmp_path, timeout=30).pid == first.pid  # it answers again: attached
    finally:
        embedded.stop(tmp_path)
