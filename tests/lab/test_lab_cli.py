"""``easeml lab``: help, where it opens, and a real start (embedded service
plus JupyterLab answering over HTTP)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.cli import lab as lab_cli

from .conftest import JUPYTER_TOKEN, JupyterServer, free_port, isolated_env

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_the_options():
    result = CliRunner().invoke(main, ["lab", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--port", "--ip", "--no-browser", "--notebook", "--data-dir"):
        assert option in result.output
    assert "127.0.0.1" in result.output


def test_in_a_checkout_it_opens_the_repository_quickstart(tmp_path):
    root, notebook = lab_cli.locate(None, tmp_path)
    assert root == REPO and notebook == REPO / "notebooks" / "quickstart.ipynb"
    assert not (tmp_path / lab_cli.COPY_DIR).exists()


def test_from_a_wheel_it_copies_the_packaged_notebooks_and_keeps_edits(tmp_path, monkeypatch):
    packaged = tmp_path / "packaged"
    packaged.mkdir()
    (packaged / "quickstart.ipynb").write_text('{"packaged": 1}')
    (packaged / "other.ipynb").write_text('{"packaged": 2}')
    monkeypatch.setattr(lab_cli, "repo_notebooks", lambda: None)
    monkeypatch.setattr(lab_cli, "packaged_notebooks", lambda: sorted(packaged.glob("*.ipynb")))
    work = tmp_path / "work"
    work.mkdir()
    (work / lab_cli.COPY_DIR).mkdir()
    (work / lab_cli.COPY_DIR / "quickstart.ipynb").write_text('{"edited": true}')
    root, notebook = lab_cli.locate(None, work)
    assert root == work and notebook == work / lab_cli.COPY_DIR / "quickstart.ipynb"
    assert json.loads(notebook.read_text()) == {"edited": True}  # not overwritten
    assert json.loads((work / lab_cli.COPY_DIR / "other.ipynb").read_text()) == {"packaged": 2}


def test_an_explicit_notebook_is_opened(tmp_path):
    nb = tmp_path / "sub" / "mine.ipynb"
    nb.parent.mkdir()
    nb.write_text("{}")
    assert lab_cli.locate(nb, tmp_path) == (tmp_path, nb)


@pytest.mark.timeout(600)
def test_easeml_lab_starts_the_service_and_a_jupyterlab_that_answers(tmp_path):
    data = tmp_path / "data"
    port = free_port()
    command = [sys.executable, "-m", "ease_jupyter", "lab", "--no-browser", "--port", str(port),
               "--data-dir", str(data), "--", f"--IdentityProvider.token={JUPYTER_TOKEN}",
               "--ServerApp.port_retries=0"]  # no --allow-root: `easeml lab` adds it when run as root
    env = isolated_env(tmp_path)
    env.pop("EASEML_DATA_DIR")  # --data-dir says where
    server = JupyterServer(tmp_path, env, command=command, port=port)
    service_pid = None
    try:
        server.wait(timeout=240)
        info = json.loads((data / "service.json").read_text())  # the embedded service `easeml lab` started
        service_pid = info["pid"]

        status = server.get("/api/status")
        assert status.status == 200 and "started" in status.body
        assert server.get("/api/status", token=None, redirect=False).status == 403

        who = server.get("/easeml/whoami")
        assert who.status == 200, who.body
        assert who.body["url"] == info["url"]  # the sidebar's routes reach the same service
        assert server.get("/easeml/tasks").body == []

        # JupyterLab opens the quickstart of this checkout.
        home = server.get("/", redirect=False)
        assert home.status in (301, 302), home.status
        assert home.headers["Location"].split("?")[0].endswith("/lab/tree/notebooks/quickstart.ipynb")
        assert server.get("/api/contents/notebooks/quickstart.ipynb?content=0").status == 200

        # The news popup is off (overrides.d shipped with the package).
        settings = server.get("/lab/api/settings/@jupyterlab/apputils-extension:notification")
        assert settings.status == 200
        # Overrides change the schema's defaults; the user's own choice still wins.
        assert settings.body["schema"]["properties"]["fetchNews"]["default"] == "false"
        assert "fetchNews" not in settings.body["settings"]
    finally:
        server.stop()  # SIGTERM to `easeml lab`: it passes it on to JupyterLab, then stops its service
        left_running = service_pid is not None and until_gone(service_pid, 30)
        if left_running:
            os.kill(service_pid, signal.SIGTERM)
    assert server.process.returncode is not None
    assert not left_running, "easeml lab left the embedded service it started running"


def until_gone(pid: int, timeout: float) -> bool:
    """True if process ``pid`` still runs after ``timeout`` seconds."""
    import psutil

    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        return False
    except psutil.TimeoutExpired:
        return True
    return False
