"""``easeml models --task NAME``: a running service's predicted cost of each
candidate of the caller's task, as a table and as JSON."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.client import Client
from ease_jupyter.service.testing import ServeProcess


@pytest.fixture
def no_env(monkeypatch):
    for name in ("EASEML_URL", "EASEML_TOKEN", "KERNEL_EASEML_URL", "KERNEL_EASEML_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def test_models_task_shows_a_services_predicted_costs(tmp_path, iris, no_env):
    runner = CliRunner()
    ada, bob = (runner.invoke(main, ["users", "add", name, "--data-dir", str(tmp_path)]).output.strip()
                for name in ("ada", "bob"))
    server = ServeProcess(tmp_path, "--executor", "thread", "--workers", "1")
    try:
        task = Client(server.url, ada, register=False).task("iris", input=[4], output=[3])
        task.feed(*iris)
        assert task.wait(timeout=120)
        profile = task.profile()
        assert profile["candidates"]
        base = ["models", "--task", "iris", "--url", server.url]

        out = runner.invoke(main, [*base, "--token", ada, "--json"])
        assert out.exit_code == 0, out.output
        shown = json.loads(out.output)
        assert shown["task"] == "iris" and shown["examples"] == 150
        assert [(p["model"], p["source"], p["resources"]) for p in shown["candidates"]] == [
            (p["model"], p["source"], p["resources"]) for p in profile["candidates"]]

        table = runner.invoke(main, [*base, "--token", ada])
        assert table.exit_code == 0, table.output
        assert "chosen configuration" in table.output and "150 examples" in table.output
        body = table.output.split("chosen configuration", 1)[1]
        for plan in profile["candidates"]:
            assert plan["model"] in body and plan["source"] in body
        assert f"{profile['prices']['cpu']:g} per CPU" in table.output

        # the token from the environment, as the Client takes it
        env = runner.invoke(main, base + ["--json"], env={"EASEML_TOKEN": ada})
        assert env.exit_code == 0 and json.loads(env.output)["task"] == "iris", env.output

        # bob has no task iris: an error naming it, nothing printed as costs
        other = runner.invoke(main, [*base, "--token", bob])
        assert other.exit_code == 1 and "'iris'" in other.output and "chosen configuration" not in other.output
        assert other.output.count("'iris'") == 1, other.output  # named once, not prefixed to a message that names it
    finally:
        server.stop()


def test_models_task_usage_errors(tmp_path, no_env):
    runner = CliRunner()
    both = runner.invoke(main, ["models", "--task", "iris", "--input", "4", "--output", "3"])
    assert both.exit_code == 2 and "--task" in both.output
    stray = runner.invoke(main, ["models", "--input", "4", "--output", "3", "--url", "http://127.0.0.1:1"])
    assert stray.exit_code == 2 and "--task" in stray.output
    # no URL and no embedded service in the data dir: said, and none is started for a look at costs
    alone = runner.invoke(main, ["models", "--task", "iris", "--data-dir", str(tmp_path)])
    assert alone.exit_code == 1 and "no ease.ml service runs" in alone.output and "--url" in alone.output
    assert not (tmp_path / "service.json").exists()
    assert "--task NAME" in runner.invoke(main, ["models", "--help"]).output
