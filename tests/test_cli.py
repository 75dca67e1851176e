"""The ``easeml`` console script and the headless demo."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import SUBCOMMANDS, main


def test_help_lists_every_subcommand():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name, (_, summary) in SUBCOMMANDS.items():
        assert name in result.output and summary in result.output


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_has_help(name):
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and "--help" in result.output


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_no_help_shows_a_range_bound_of_none(name):
    """A number option with no bound shows no range (click would print x<=None)."""
    result = CliRunner().invoke(main, [name, "--help"])
    assert "None]" not in result.output and "<=None" not in result.output, result.output


def test_serve_help_shows_prices_from_zero():
    words = " ".join(CliRunner().invoke(main, ["serve", "--help"]).output.split())  # as one line, unwrapped
    for default in ("0.0316", "0.0042", "0.35"):
        assert f"[default: {default}; x>=0]" in words, words


def test_unknown_subcommand_is_an_error():
    result = CliRunner().invoke(main, ["nonsense"])
    assert result.exit_code == 2 and "No such command" in result.output


def test_console_script_is_installed():
    exe = shutil.which("easeml")
    command = [exe] if exe else [sys.executable, "-m", "ease_jupyter"]
    out = subprocess.run([*command, "--help"], capture_output=True, text=True, check=True)
    assert "demo" in out.stdout


def test_demo_quick_writes_a_leaderboard_report(tmp_path):
    """The demo runs on the scheduler service: simulated users (scikit-learn
    tasks plus one image task trained by MOP) over HTTP, then a leaderboard,
    the average accuracy loss over time and an HTML report."""
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["demo", "--quick", "--data-dir", str(tmp_path / "d"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    users = {u["user"]: u for u in report["users"]}
    assert set(users) == {"alice", "bob", "erin"}
    for user in users.values():
        scores = [j["accuracy"] for j in user["jobs"] if j["accuracy"] is not None
                  and j["dataset_version"] == user["best"]["dataset_version"]]
        assert user["best"]["accuracy"] == max(scores)
        if user["kind"] == "sklearn":
            assert user["test_accuracy"] > 0.85
            # feed, then a refine that dropped 1% of the examples
            assert [v["kind"] for v in user["versions"]] == ["feed", "refine"]
    erin = users["erin"]
    assert erin["kind"] == "torch" and erin["test_accuracy"] > 0.5  # 10 classes: chance is 0.1
    torch_jobs = [j for j in erin["jobs"] if j["status"] == "succeeded"]
    assert {j["model"] for j in torch_jobs} == {"lenet", "resnet_small", "vgg_small", "mobilenet_small"}
    for job in torch_jobs:  # per-epoch metrics of each MOP workload
        assert [m["epoch"] for m in job["metrics"]] == [1, 2, 3]
    board = report["leaderboard"]
    assert {row["user"] for row in board} == set(users)
    for row in board:  # the winning config of the best pick's grid, named in the table too
        best = users[row["user"]]["best"]
        assert row["config"].startswith(f"{best['model']}[{best['best_config']}] (best of ")
        assert f"{best['model']}[{best['best_config']}]" in result.output
    sklearn_job = next(j for j in users["alice"]["jobs"] if j["status"] == "succeeded")
    grid = sklearn_job["config"]["grid"]  # a scikit-learn pick: the candidate's grid, every point scored
    assert len(sklearn_job["metrics"]) == 1 and sum(k.startswith("val_score[") for k in sklearn_job["metrics"][0]) == \
        len(next(iter(grid.values())))
    curve = report["loss_curve"]
    assert len(curve["seconds"]) == len(curve["average_loss"]) >= 2
    assert curve["seconds"] == sorted(curve["seconds"])
    assert curve["average_loss"][0] > 0.5 and curve["average_loss"][-1] == 0.0  # starts high, ends at zero
    assert all(a >= b for a, b in zip(curve["average_loss"], curve["average_loss"][1:]))  # never rises
    # again on the same data dir: the same users and tasks go on (the examples its refine dropped come back)
    again = CliRunner().invoke(main, ["demo", "--quick", "--data-dir", str(tmp_path / "d"), "--out", str(out)])
    assert again.exit_code == 0, again.output
    second = {u["user"]: u for u in json.loads((out / "report.json").read_text())["users"]}
    assert set(second) == set(users)
    for name, user in second.items():
        if user["kind"] == "sklearn":
            assert [v["kind"] for v in user["versions"]] == ["feed", "refine", "feed", "refine"], name
    html = (out / "report.html").read_text()
    assert "Leaderboard" in html and "alice" in html and "plotly" in html.lower()
    assert "Accuracy loss over time" in html
