"""``easeml simulate`` on quality/cost files as people write them: a file
without its header, names that differ between Q and C or repeat, and costs
in any unit (the oracle's solver works in units of the largest cost)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.selection.oracle import min_cost_selection


def _write(path, m, users=None, models=None, header=True):
    users = users or [f"u{i}" for i in range(m.shape[0])]
    models = models or [f"m{j}" for j in range(m.shape[1])]
    lines = (["user," + ",".join(models)] if header else []) + [
        u + "," + ",".join(repr(float(v)) for v in row) for u, row in zip(users, m)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _run(tmp_path, *args, policies="greedy"):
    return CliRunner().invoke(main, ["simulate", "--reps", "1", "--test-users", "3", "--quiet", "--policies", policies,
                                     "--json", str(tmp_path / "out.json"), *args])


@pytest.fixture
def q():
    return np.random.default_rng(0).uniform(0.3, 0.95, (8, 4))


def test_a_quality_file_without_its_header_is_refused_naming_line_1(tmp_path, q):
    path = _write(tmp_path / "q.csv", q, header=False)
    r = _run(tmp_path, "--quality", path)
    assert r.exit_code == 2, r.output
    assert f"{path}, line 1" in r.output and "user,<model>,... as the first line" in r.output
    assert not (tmp_path / "out.json").exists()


def test_numeric_model_names_under_a_user_header_are_models(tmp_path, q):
    path = _write(tmp_path / "q.csv", q, models=["1", "2", "3", "4"])
    r = _run(tmp_path, "--quality", path)
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "out.json").read_text())["models"] == 4


def test_models_or_users_in_only_one_file_are_named(tmp_path, q):
    qpath = _write(tmp_path / "q.csv", q)
    cpath = _write(tmp_path / "c.csv", q * 10, models=["m0", "m1", "M2", "m3"])
    r = _run(tmp_path, "--quality", qpath, "--cost", cpath)
    assert r.exit_code == 2
    assert f"models only in {cpath}: ['M2']; only in {qpath}: ['m2']" in " ".join(r.output.split())
    cpath = _write(tmp_path / "c2.csv", q * 10, users=[f"u{i}" for i in range(7)] + ["U7"])
    r = _run(tmp_path, "--quality", qpath, "--cost", cpath)
    assert r.exit_code == 2
    assert f"users only in {cpath}: ['U7']; only in {qpath}: ['u7']" in " ".join(r.output.split())


def test_a_repeated_user_or_model_is_named_with_its_lines_or_columns(tmp_path, q):
    path = _write(tmp_path / "q.csv", q, users=["a", "b", "c", "b", "d", "e", "f", "g"])
    r = _run(tmp_path, "--quality", path)
    assert r.exit_code == 2 and "user 'b' is on lines 3 and 5" in " ".join(r.output.split())
    path = _write(tmp_path / "q2.csv", q, models=["m0", "m1", "m0", "m3"])
    r = _run(tmp_path, "--quality", path)
    assert r.exit_code == 2 and "line 1: model 'm0' names columns 2 and 4" in " ".join(r.output.split())


@pytest.mark.parametrize("unit", [1e-12, 1.0, 1e20, 1e100])
def test_the_oracle_chooses_alike_in_any_cost_unit(q, unit):
    c = np.random.default_rng(1).uniform(1, 100, q.shape)
    base = min_cost_selection(q, c, level=0.05)
    scaled = min_cost_selection(q, c * unit, level=0.05)
    assert scaled.pairs == base.pairs and scaled.exact
    assert scaled.cost == pytest.approx(base.cost * unit, rel=1e-9)


def test_simulate_with_costs_in_a_tiny_unit_runs(tmp_path, q):
    c = np.random.default_rng(1).uniform(1, 100, q.shape) * 1e20
    r = _run(tmp_path, "--quality", _write(tmp_path / "q.csv", q), "--cost", _write(tmp_path / "c.csv", c),
             policies="greedy,oracle")
    assert r.exit_code == 0, r.output
    assert "oracle" in json.loads((tmp_path / "out.json").read_text())["policies"]


def test_costs_whose_sum_is_beyond_the_largest_float_are_refused(tmp_path, q):
    c = np.full(q.shape, 1e307)
    r = _run(tmp_path, "--quality", _write(tmp_path / "q.csv", q), "--cost", _write(tmp_path / "c.csv", c))
    assert r.exit_code == 2 and "beyond the largest float" in r.output
