"""Seneca-style grid evaluation and memory auto-sizing."""

from __future__ import annotations

import sys

import cloudpickle
import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin

from ease_jupyter.errors import EaseMLError
from ease_jupyter.execution.engine import MEMORY, LocalEngine
from ease_jupyter.execution.grid import cartesian, grid_search, split_80_20
from ease_jupyter.execution.memory import (
    MB,
    STEP,
    cost_report,
    gb_seconds,
    measure_peak,
    reservation,
    seneca_size,
)

# Dask workers unpickle the estimators below by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Threshold(BaseEstimator, ClassifierMixin):
    """Predicts ``x0 > t`` (inverted with ``flip``); fitting learns nothing,
    so the best config is known exactly."""

    def __init__(self, t=0.5, flip=False):
        self.t = t
        self.flip = flip

    def fit(self, X, y):
        self.classes_ = np.array([False, True])
        return self

    def predict(self, X):
        out = np.asarray(X)[:, 0] > self.t
        return ~out if self.flip else out


class Allocating(BaseEstimator, ClassifierMixin):
    """Allocates ``mb`` MiB while fitting (a known peak), or raises if ``mb < 0``."""

    def __init__(self, mb=0):
        self.mb = mb

    def fit(self, X, y):
        if self.mb < 0:
            raise ValueError("mb must be >= 0")
        block = np.ones(int(self.mb) * MB // 8)
        self.total_ = float(block.sum())
        self.majority_ = np.bincount(np.asarray(y)).argmax()
        return self

    def predict(self, X):
        return np.full(len(X), self.majority_)


@pytest.fixture(scope="module")
def threshold_data():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(400, 2))
    return X, X[:, 0] > 0.3


THRESHOLD_GRID = {"t": [0.1, 0.3, 0.5, 0.7], "flip": [False, True]}


@pytest.fixture(scope="module")
def dask_engine():
    from ease_jupyter.execution.engine.dask import DaskEngine

    engine = DaskEngine(n_workers=2)
    yield engine
    engine.close()


# -- the search space and the split ---------------------------------------------------


def test_cartesian_product_in_order():
    points = cartesian({"a": [1, 2], "b": ["x", "y", "z"]})
    assert points == [{"a": a, "b": b} for a in (1, 2) for b in "xyz"]
    assert cartesian({"a": np.array([1, 2])}) == [{"a": 1}, {"a": 2}]
    for bad in ({}, {"a": []}, {"a": "abc"}, {"a": 3}, None):
        with pytest.raises(EaseMLError, match="grid"):
            cartesian(bad)


def test_automatic_split_is_80_20_stratified_and_seeded(threshold_data):
    X, y = threshold_data
    X_tr, y_tr, X_te, y_te = split_80_20(X, y)
    assert (len(X_tr), len(X_te)) == (320, 80)
    assert abs(y_te.mean() - y.mean()) < 0.02  # stratified
    again = split_80_20(X, y)
    assert np.array_equal(again[0], X_tr)
    with pytest.raises(EaseMLError, match="y"):
        split_80_20(X, y[:-1])
    with pytest.raises(EaseMLError, match="test_size"):
        split_80_20(X, y, test_size=1.5)


# -- finding the best config ------------------------------------------------------------


def test_finds_the_known_best_config_locally(threshold_data):
    X, y = threshold_data
    res = grid_search(Threshold(), THRESHOLD_GRID, X, y)
    assert res.best_params == {"t": 0.3, "flip": False}
    assert res.best_score == 1.0
    assert len(res.points) == 8 and sorted(p.score for p in res.points)[-2] < 1.0  # unique best
    assert isinstance(res.best_model, Threshold) and res.best_model.t == 0.3
    assert (res.n_train, res.n_test) == (320, 80)


def test_finds_the_known_best_config_on_dask(threshold_data, dask_engine):
    X, y = threshold_data
    res = grid_search(Threshold(), THRESHOLD_GRID, X, y, engine=dask_engine)
    assert res.best_params == {"t": 0.3, "flip": False} and res.best_score == 1.0
    assert res.cost is not None and res.cost.tasks == 8
    assert all(p.reserved_bytes == res.cost.reserved_bytes for p in res.points if p.peak_bytes is None)


def test_zoo_candidate_with_its_own_grid():
    from sklearn.datasets import load_digits

    from ease_jupyter.schema import parse
    from ease_jupyter.zoo import candidates

    knn = next(c for c in candidates(parse("input: [64] output: [10]")) if c.name == "knn")
    d = load_digits()
    res = grid_search(knn, None, d.data[:600], d.target[:600])
    assert res.best_params["n_neighbors"] in (3, 7, 15) and len(res.points) == 3
    assert res.best_score > 0.9


def test_a_given_split_is_used(threshold_data):
    X, y = threshold_data
    res = grid_search(Threshold(), {"t": [0.3, 0.5]}, None, None, split=(X[:100], y[:100], X[100:], y[100:]))
    assert (res.n_train, res.n_test) == (100, 300) and res.best_params == {"t": 0.3}
    with pytest.raises(EaseMLError, match="split"):
        grid_search(Threshold(), {"t": [0.3]}, None, None, split=(X, y, X[:0], y[:0]))


def test_a_failing_config_does_not_stop_the_others(threshold_data):
    X, y = threshold_data
    res = grid_search(Allocating(), {"mb": [-1, 0]}, X, y.astype(int), memory=None)
    bad = next(p for p in res.points if p.params["mb"] == -1)
    assert np.isnan(bad.score) and "mb must be" in bad.error
    assert res.best_params == {"mb": 0}
    with pytest.raises(EaseMLError, match="every combination failed"):
        grid_search(Allocating(), {"mb": [-1]}, X, y.astype(int), memory=None)


def test_bad_arguments_name_the_field(threshold_data):
    X, y = threshold_data
    with pytest.raises(EaseMLError, match="model"):
        grid_search(object(), {"a": [1]}, X, y)
    with pytest.raises(EaseMLError, match="memory"):
        grid_search(Threshold(), {"t": [0.3]}, X, y, memory="lots")


# -- memory auto-sizing (Seneca Alg. 1) --------------------------------------------------


def allocate(mb):
    block = np.ones(mb * MB // 8)
    return float(block.sum())


def test_probe_measures_a_known_allocation():
    p = measure_peak(allocate, 48)
    assert p.result == 48 * MB // 8
    assert 47 * MB <= p.peak_bytes < 200 * MB
    assert p.traced_bytes >= 47 * MB and p.seconds > 0


def test_reservation_rounds_up_to_64_mb_steps():
    assert reservation(0) == STEP
    assert reservation(100 * MB) == 192 * MB  # 150 MB -> 3 steps
    assert reservation(100 * MB, safety=1.0) == 128 * MB
    with pytest.raises(ValueError, match="safety"):
        reservation(1, safety=0.5)


def test_seneca_algorithm_1_stops_where_the_charge_starts_rising():
    # Lambda-like: CPU grows with memory until 1600 MB, then the duration plateaus.
    def charge(m):
        return m * max(1.0, 1600 * MB / m)

    chosen, probed = seneca_size(128 * MB, charge, cap=3008 * MB)
    assert chosen == 1600 * MB
    assert probed[-1][0] == 1600 * MB + 4 * STEP  # a full window of N = 5 rising charges
    # On Dask the reservation does not change the duration: stop at the start.
    assert seneca_size(192 * MB, None, seconds=2.0)[0] == 192 * MB
    # No exit within the cap: the cheapest allocation in the deque.
    assert seneca_size(128 * MB, lambda m: 1e12 / m, cap=512 * MB)[0] == 512 * MB


def test_cost_report_prices_gb_seconds():
    assert gb_seconds([(2e9, 3.0), (1e9, 1.0)]) == pytest.approx(7.0)
    r = cost_report(128 * MB, 4096 * MB, 50 * MB, 1.0, [1.0, 1.0, 1.0], [8192 * MB])
    assert r.tasks == 4
    assert r.fixed_gb_seconds == pytest.approx(4 * 4096 * MB / 1e9)
    assert r.ratio == pytest.approx((4096 + 3 * 128) / (4 * 4096))
    assert (r.fit_at_once, r.fixed_fit_at_once) == (64, 2)


@pytest.mark.parametrize("where", ["local", "dask"])
def test_auto_sizing_reserves_what_the_probe_needs(threshold_data, where, request):
    X, y = threshold_data
    engine = LocalEngine(2, torch_threads=None) if where == "local" else request.getfixturevalue("dask_engine")
    fixed = min(r[MEMORY] for r in engine.worker_resources().values())
    try:
        res = grid_search(Allocating(), {"mb": [40, 40, 40, 40, 40]}, X, y.astype(int), engine=engine)
    finally:
        if where == "local":
            engine.close()
    probe = next(p for p in res.points if p.peak_bytes is not None)
    assert probe.peak_bytes >= 39 * MB
    cost = res.cost
    assert cost.reserved_bytes == reservation(probe.peak_bytes) and cost.reserved_bytes >= 64 * MB
    assert cost.fixed_bytes == fixed and probe.reserved_bytes == fixed
    assert all(p.reserved_bytes == cost.reserved_bytes for p in res.points if p is not probe)
    assert cost.ratio < 1.0 and cost.fit_at_once > cost.fixed_fit_at_once


def test_fixed_and_explicit_reservations(threshold_data):
    X, y = threshold_data
    fixed = grid_search(Threshold(), {"t": [0.3, 0.5]}, X, y, memory="fixed", fixed_bytes=256 * MB)
    assert fixed.cost is None and all(p.reserved_bytes == 256 * MB for p in fixed.points)
    explicit = grid_search(Threshold(), {"t": [0.3, 0.5]}, X, y, memory=128 * MB)
    assert all(p.reserved_bytes == 128 * MB for p in explicit.points)
    with pytest.raises(EaseMLError, match="resources"):
        grid_search(Threshold(), {"t": [0.3]}, X, y, memory=10**15)


class Recording(Threshold):
    """A Threshold whose fit writes the fitting process's pid into ``folder`` (and takes a while)."""

    def __init__(self, t=0.5, flip=False, folder=""):
        super().__init__(t, flip)
        self.folder = folder

    def fit(self, X, y):
        import os
        import pathlib
        import time

        time.sleep(0.2)  # long enough that an idle worker takes the next task
        pathlib.Path(self.folder, f"{os.getpid()}-{self.t}-{self.flip}").touch()
        return super().fit(X, y)


def test_fan_out_keeps_a_grid_to_that_many_workers(threshold_data, dask_engine, tmp_path):
    X, y = threshold_data
    pids = {}
    for fan_out in (1, None):
        folder = tmp_path / str(fan_out)
        folder.mkdir()
        res = grid_search(Recording(folder=str(folder)), THRESHOLD_GRID, X, y, engine=dask_engine, memory=None,
                          fan_out=fan_out)
        assert res.best_params == {"t": 0.3, "flip": False}
        pids[fan_out] = {p.name.split("-")[0] for p in folder.iterdir()}
    assert len(pids[1]) == 1  # every task on the one worker
    assert len(pids[None]) == 2  # spread over both
    with pytest.raises(EaseMLError, match="fan_out"):
        grid_search(Threshold(), THRESHOLD_GRID, X, y, engine=dask_engine, fan_out=0)
