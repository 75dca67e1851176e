"""``easeml stop`` and ``easeml lab``'s clean-up, on real embedded service
processes (JupyterLab itself is replaced by a stand-in here; the real
``easeml lab`` run in test_lab_cli.py checks the same end to end)."""

from __future__ import annotations

import psutil
import pytest
from click.testing import CliRunner

from ease_jupyter.cli import lab as lab_cli
from ease_jupyter.cli import main
from ease_jupyter.service import embedded


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.delenv("EASEML_URL", raising=False)
    monkeypatch.delenv("EASEML_TOKEN", raising=False)
    monkeypatch.setenv("EASEML_DATA_DIR", str(tmp_path / "data"))  # lab sets it too; restored after the test
    yield tmp_path / "data"
    embedded.stop(tmp_path / "data", timeout=10)  # whatever a failed test left running


def test_stop_stops_a_running_embedded_service_and_says_when_none_runs(data, monkeypatch):
    runner = CliRunner()
    missing = runner.invoke(main, ["stop", "--data-dir", str(data)])  # no data dir at all: a usage error
    assert missing.exit_code == 2 and f"no data dir at {data}" in missing.output, missing.output
    data.mkdir(mode=0o700)
    none = runner.invoke(main, ["stop", "--data-dir", str(data)])
    assert none.exit_code == 0 and f"no ease.ml service runs for {data}" in none.output

    url, token = embedded.ensure_embedded(data, timeout=120)
    pid = embedded.read_service_file(data)["pid"]
    assert alive(pid) and embedded.is_alive(url, token)
    # `easeml lab` attaches to a service it did not start, and leaves it running
    monkeypatch.setattr(lab_cli, "run_jupyterlab", lambda argv, env: 0)
    result = CliRunner().invoke(main, ["lab", "--no-browser", "--data-dir", str(data)])
    assert result.exit_code == 0, result.output
    assert alive(pid) and "stopped" not in result.output

    done = runner.invoke(main, ["stop", "--data-dir", str(data)])
    assert done.exit_code == 0, done.output
    assert f"stopped the ease.ml service of {data} ({url}, pid {pid})" in done.output
    assert not alive(pid) and not embedded.is_alive(url, token)
    again = runner.invoke(main, ["stop", "--data-dir", str(data)])
    assert "no ease.ml service runs" in again.output

    help_text = runner.invoke(main, ["stop", "--help"]).output
    assert "--data-dir" in help_text and "embedded" in help_text
    assert "stop" in runner.invoke(main, ["--help"]).output


def test_lab_stops_the_service_it_started_when_jupyterlab_exits(data, monkeypatch):
    seen = {}

    def fake_jupyterlab(argv, env):
        info = embedded.read_service_file(data)
        seen.update(pid=info["pid"], alive=alive(info["pid"]), argv=argv)
        return 3  # JupyterLab's exit status is lab's

    monkeypatch.setattr(lab_cli, "run_jupyterlab", fake_jupyterlab)
    result = CliRunner().invoke(main, ["lab", "--no-browser", "--data-dir", str(data)])
    assert result.exit_code == 3, result.output
    assert seen["alive"] and "-m" in seen["argv"] and "jupyterlab" in seen["argv"]  # up while JupyterLab ran
    assert not alive(seen["pid"])  # and stopped after
    assert "started here" in result.output and "stopped the ease.ml service" in result.output


def test_lab_stops_its_service_when_jupyterlab_fails_to_start(data, monkeypatch):
    """The clean-up path on an error, with stand-ins for the service (no process needed)."""
    import ease_jupyter.client

    stopped = []
    monkeypatch.setattr(embedded, "start_embedded", lambda *a, **kw: embedded.Embedded("http://127.0.0.1:1", "t", 4321, True))
    monkeypatch.setattr(embedded, "stop", lambda *a, pid=None, **kw: stopped.append(pid) or True)
    monkeypatch.setattr(ease_jupyter.client.Client, "whoami", lambda self: {"name": "admin"})

    def broken(argv, env):
        raise OSError("no jupyterlab here")

    monkeypatch.setattr(lab_cli, "run_jupyterlab", broken)
    result = CliRunner().invoke(main, ["lab", "--no-browser", "--data-dir", str(data)])
    assert isinstance(result.exception, OSError)
    assert stopped == [4321]  # the service it started, by its pid
