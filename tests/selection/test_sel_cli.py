"""``easeml simulate``: the documented options, JSON and errors."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main


def write(path, users, models, m):
    lines = ["user," + ",".join(models)]
    for u, row in zip(users, m):
        lines.append(u + "," + ",".join("" if v is None else str(v) for v in row))
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def matrices(tmp_path):
    rng = np.random.default_rng(0)
    users = [f"user{i}" for i in range(6)]
    models = ["lr", "rf", "svm", "knn"]
    q = np.round(np.clip(rng.uniform(0.5, 0.9, (6, 1)) + 0.1 * rng.standard_normal((6, 4)), 0, 1), 3)
    c = np.round(rng.uniform(0.1, 2.0, (6, 4)), 3)
    write(tmp_path / "q.csv", users, models, q.tolist())
    write(tmp_path / "c.csv", users, models, c.tolist())
    return tmp_path


def run(args):
    return CliRunner().invoke(main, ["simulate", *args])


def test_simulate_writes_the_documented_json(matrices):
    out = matrices / "out.json"
    r = run(["--quality", str(matrices / "q.csv"), "--cost", str(matrices / "c.csv"), "--reps", "2",
             "--test-users", "3", "--policies", "hybrid,round_robin,oracle,most_cited", "--json", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert set(doc["policies"]) == {"hybrid", "round_robin", "oracle", "most_cited"}
    p = doc["policies"]["hybrid"]
    assert set(p["time_to_loss"]) == {"0.1", "0.05", "0.02", "0.01"}
    assert set(p["worst_time_to_loss"]) == {"0.1", "0.05", "0.02", "0.01"}
    assert set(p["time_from_0.1"]) == {"0.05", "0.02", "0.01"}
    assert len(p["per_rep"]["time_to_loss"]["0.02"]) == 2 == len(p["per_rep"]["budget"])
    assert isinstance(p["auc"], float)
    assert len(doc["grid"]) == len(doc["curves"]["hybrid"])


def test_default_and_the_oracles(matrices):
    from ease_jupyter.selection.simulator import default_policy

    out = matrices / "d.json"
    name = default_policy()
    r = run(["--quality", str(matrices / "q.csv"), "--cost", str(matrices / "c.csv"), "--reps", "2",
             "--test-users", "3", "--policies", f"default,{name},oracle,oracle_best", "--json", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["default_policy"] == name
    assert doc["curves"]["default"] == doc["curves"][name]
    P = doc["policies"]
    for lv in ("0.1", "0.05", "0.02", "0.01"):  # the bound is never later than any policy, per repetition
        for p in ("default", "oracle_best"):
            for t_or, t in zip(P["oracle"]["per_rep"]["time_to_loss"][lv], P[p]["per_rep"]["time_to_loss"][lv]):
                assert t is None or t >= t_or - 1e-9
    assert P["oracle"]["oracle_lower_bound"] is True and "0.02" in P["oracle"]["oracle_gap"]
    assert "lower bound" in r.output and "0.1 -> 0.02" in r.output


def test_cost_oblivious_and_no_cost(matrices):
    out = matrices / "o.json"
    r = run(["--quality", str(matrices / "q.csv"), "--reps", "1", "--test-users", "2", "--cost-oblivious",
             "--json", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["settings"]["time_unit"] == "runs"


def test_synthetic_option(tmp_path):
    out = tmp_path / "s.json"
    r = run(["--synthetic", "0.5,1.0", "--syn-models", "8", "--syn-users-per-group", "4", "--reps", "1",
             "--test-users", "3", "--policies", "hybrid", "--json", str(out), "--save-matrices",
             str(tmp_path / "m"), "--quiet"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "m" / "quality.csv").read_text().startswith("user,m0,")
    assert json.loads(out.read_text())["source"]["synthetic"]["sigma_m"] == 0.5


@pytest.mark.parametrize("cell,message", [("abc", "expected a number"), ("1.7", "in [0, 1]")])
def test_bad_quality_cells(tmp_path, cell, message):
    write(tmp_path / "q.csv", ["a", "b", "c"], ["m1", "m2"], [[0.5, cell], [0.4, 0.3], [0.2, 0.1]])
    r = run(["--quality", str(tmp_path / "q.csv"), "--test-users", "1", "--json", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and message in r.output and "--quality" in r.output


def test_shape_mismatch_between_quality_and_cost(matrices, tmp_path):
    write(tmp_path / "c2.csv", ["user0", "user1"], ["lr"], [[1.0], [2.0]])
    r = run(["--quality", str(matrices / "q.csv"), "--cost", str(tmp_path / "c2.csv"), "--test-users", "2",
             "--json", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "--cost" in r.output and "same user and model names" in r.output


def test_too_few_users_and_ragged_rows(matrices, tmp_path):
    r = run(["--quality", str(matrices / "q.csv"), "--test-users", "6", "--json", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "at least --test-users + 1 = 7" in r.output
    (tmp_path / "r.csv").write_text("user,m1,m2\na,0.5\n")
    r = run(["--quality", str(tmp_path / "r.csv"), "--test-users", "1", "--json", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "found 2 fields, expected 3" in r.output


def test_unknown_policy_and_missing_input(matrices, tmp_path):
    r = run(["--quality", str(matrices / "q.csv"), "--policies", "hybrid,bogus", "--json", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "bogus" in r.output and "oracle_best" in r.output
    r = run(["--json", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "--quality" in r.output


def test_help_documents_the_interface():
    r = run(["--help"])
    assert r.exit_code == 0
    for opt in ("--quality", "--cost", "--policies", "--reps", "--budget", "--test-users", "--seed",
                "--cost-aware / --cost-oblivious", "--json", "--synthetic"):
        assert opt in r.output
