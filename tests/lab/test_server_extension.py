"""The ``/easeml/`` routes of the jupyter_server extension, over real HTTP:
a Jupyter server subprocess (token auth) in front of a real ease.ml service."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from sklearn.datasets import load_iris

from ease_jupyter.client import Client

from .conftest import ANSI

pytestmark = pytest.mark.timeout(600)


def test_server_extension_is_enabled():
    out = subprocess.run([sys.executable, "-m", "jupyter", "server", "extension", "list"],
                         capture_output=True, text=True, timeout=120)
    text = ANSI.sub("", out.stdout + out.stderr)
    assert re.search(r"^\s*ease_jupyter\.lab\s+enabled\s*$", text, re.M), text
    assert re.search(r"^\s*ease_jupyter\.lab\s+OK\s*$", text, re.M), text


def test_routes_need_the_jupyter_token(setup):
    for path in ("/easeml/tasks", "/easeml/tasks/iris", "/easeml/whoami", "/easeml/notebooks", "/easeml/notifications"):
        for token in (None, "wrong-token"):
            answer = setup.lab.get(path, token, redirect=False)
            assert answer.status == 403, (path, token, answer.status, answer.body)
            # The service was not asked: nothing about tasks leaks.
            assert "iris" not in str(answer.body)


def test_tasks_lists_the_callers_tasks_with_state_and_best_accuracy(setup):
    alice = Client(setup.service.url, setup.tokens["alice"])
    bob = Client(setup.service.url, setup.tokens["bob"])
    iris = alice.task("iris", input=[4], output=[3])
    alice.task("empty", program="input: [8] output: [2]")
    bob.task("bobs_secret", input=[2], output=[2])
    X, y = load_iris(return_X_y=True)
    iris.feed(X, y)

    answer = setup.lab.get("/easeml/tasks")
    assert answer.status == 200, answer.body
    rows = {row["name"]: row for row in answer.body}
    assert set(rows) == {"iris", "empty"}  # bob's task is not alice's
    assert rows["empty"]["state"] == "no data"
    assert rows["empty"]["accuracy"] is None and rows["empty"]["dataset_version"] is None
    assert rows["iris"]["dataset_version"] == 1 and rows["iris"]["n_examples"] == 150
    assert rows["iris"]["program"] == iris.program

    assert iris.wait(timeout=300), "the service did not finish training iris in 300 s"
    best = iris.best()
    rows = {row["name"]: row for row in setup.lab.get("/easeml/tasks").body}
    assert rows["iris"]["state"] == "idle"
    assert rows["iris"]["accuracy"] == pytest.approx(best["accuracy"])
    assert rows["iris"]["model"] == best["model"]
    assert rows["iris"]["accuracy"] > 0.8
    assert rows["iris"]["jobs"].get("succeeded", 0) >= 1

    one = setup.lab.get("/easeml/tasks/iris")
    assert one.status == 200
    assert one.body["name"] == "iris" and one.body["best"]["accuracy"] == pytest.approx(best["accuracy"])
    assert one.body["state"] == "idle"


def test_cancelled_task_shows_as_cancelled(setup):
    alice = Client(setup.service.url, setup.tokens["alice"])
    alice.task("to_cancel", input=[3], output=[2]).cancel()
    rows = {row["name"]: row for row in setup.lab.get("/easeml/tasks").body}
    assert rows["to_cancel"]["state"] == "cancelled"


def test_whoami_names_the_service_and_user(setup):
    answer = setup.lab.get("/easeml/whoami")
    assert answer.status == 200
    assert answer.body["url"] == setup.service.url and answer.body["user"]["name"] == "alice"


def test_unknown_task_is_a_json_404(setup):
    answer = setup.lab.get("/easeml/tasks/no_such_task")
    assert answer.status == 404
    assert answer.body["error"]["code"] == "not_found"
    assert "no_such_task" in answer.body["error"]["message"]


def test_another_users_task_is_not_found(setup):
    answer = setup.lab.get("/easeml/tasks/bobs_secret")
    if answer.status == 200:  # only when bob's task was not created yet by the listing test
        pytest.fail(f"alice sees bob's task: {answer.body}")
    assert answer.status == 404 and answer.body["error"]["code"] == "not_found"


def test_a_token_the_service_refuses_is_a_clear_json_error(setup):
    answer = setup.bad_token.get("/easeml/tasks")
    assert answer.status == 502
    assert answer.body["error"]["code"] == "service_auth"
    assert "token" in answer.body["error"]["message"]


def test_an_unreachable_service_is_a_clear_json_error(setup):
    started = time.monotonic()
    answer = setup.unreachable.get("/easeml/tasks")
    assert answer.status == 503
    assert answer.body["error"]["code"] == "service_unavailable"
    assert "cannot reach" in answer.body["error"]["message"] and "127.0.0.1" in answer.body["error"]["message"]
    assert time.monotonic() - started < 60
    # The Jupyter server itself keeps serving.
    assert setup.unreachable.get("/api/status").status == 200


def test_binder_config_starts_the_embedded_service_with_the_server_and_opens_the_quickstart(tmp_path):
    """binder/jupyter_server_config.json (what binder/postBuild merges into the user's config):
    the embedded service is up before any sidebar request, and / opens the quickstart."""
    import json
    import os
    import shutil
    import signal
    from pathlib import Path

    from ease_jupyter.service.embedded import is_alive, read_service_file

    from .conftest import JupyterServer, isolated_env

    env = isolated_env(tmp_path)
    shutil.copy(Path(__file__).resolve().parents[2] / "binder" / "jupyter_server_config.json",
                Path(env["JUPYTER_CONFIG_DIR"]) / "jupyter_server_config.json")
    data = Path(env["EASEML_DATA_DIR"])
    server = JupyterServer(tmp_path, env)
    info = None
    try:
        server.wait()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            info = read_service_file(data)
            if info and is_alive(info["url"], info["token"]):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"no embedded service in {data} after 180 s:\n{server.log()}")
        who = server.get("/easeml/whoami")
        assert who.status == 200 and who.body["url"] == info["url"], who.body
        home = server.get("/", redirect=False)
        assert home.headers["Location"].split("?")[0].endswith("/lab/tree/notebooks/quickstart.ipynb")
        assert json.loads((data / "service.json").read_text())["pid"] == info["pid"]
    finally:
        server.stop()
        if info:
            try:
                os.kill(info["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass
