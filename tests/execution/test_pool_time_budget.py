"""A workload's time budget (``MOPRunner.time_budget``, a user model's limit)
charges the time its units run on workers, not the time they wait in the
pool's queue behind other owners' units. Units advance a fake clock (the
driver's ``clock``) by a fixed amount as they train, so no machine speed
decides the outcomes."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ease_jupyter.execution.automl import GridSearch
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.mop.pool_driver import PoolDriver
from ease_jupyter.execution.mop.runner import MOPRunner
from ease_jupyter.execution.units import Hooks, default_train_fn
from ease_jupyter.zoo.templates import TorchBuilder

MODELS = {"lenet": TorchBuilder("lenet", "LeNet", ((8, 8), 10))}


class FakeClock:
    """Seconds that pass only when a unit says it ran for them."""

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


CLOCK = FakeClock()


def _runs_for(seconds: float):
    """A train_fn that trains as usual and takes ``seconds`` of the fake clock."""
    def train_fn(net, opt, X, y, spec, generator, **kwargs):
        CLOCK.advance(seconds)
        return default_train_fn(net, opt, X, y, spec, generator, **kwargs)
    return train_fn


class HerLimit(Exception):
    pass


def _still_running():
    raise HerLimit("still running at her limit")


def _spent():
    raise HerLimit("ran past her limit")


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:120].astype(np.float32) / 16.0, d.target[:120]


def _runner(engine, digits, lrs, epochs, seconds, **kwargs):
    X, y = digits
    return MOPRunner(engine, GridSearch("lenet", {"lr": list(lrs)}, epochs=epochs), MODELS, X, y,
                     hooks=Hooks(train_fn=_runs_for(seconds)), max_unit_retries=0, sizing_fn=None, **kwargs)


def test_time_waiting_for_the_worker_is_not_charged(digits):
    """Bob's units wait behind Ada's (400 s of hers run first on the only
    worker) far longer than his 20 s budget, but run 2 s: his workload ends
    well, charged about his units' time only."""
    with LocalEngine(1) as engine:
        driver = PoolDriver(engine, clock=CLOCK)
        ada = _runner(engine, digits, (0.1, 0.05), 2, 100.0)
        bob = _runner(engine, digits, (0.1,), 2, 1.0, time_budget=20.0,
                      on_deadline=_still_running, on_budget_spent=_spent)
        f_ada = driver.submit(ada, owner="ada")
        f_bob = driver.submit(bob, owner="bob")
        f_ada.result(120)
        res = f_bob.result(120)
        assert CLOCK() - 0.0 >= 400.0  # (the clock is shared by the module's tests: only its growth matters)
        assert res.visit_log
        assert bob.time_used == pytest.approx(2.0)


def test_a_workload_whose_units_run_past_its_budget_fails(digits):
    """Each of her units runs 30 s of a 50 s budget: her second one ends past
    it, and she fails before her next unit with the "ran past" error, not the
    "still running" one (no unit of hers was running then)."""
    with LocalEngine(1) as engine:
        driver = PoolDriver(engine, clock=CLOCK)
        her = _runner(engine, digits, (0.1,), 3, 30.0, time_budget=50.0,
                      on_deadline=_still_running, on_budget_spent=_spent)
        with pytest.raises(HerLimit, match="ran past her limit"):
            driver.run(her, owner="ada")
        assert her.time_used == pytest.approx(60.0)


def test_a_unit_queued_past_her_budget_is_not_reported_as_running(digits):
    """Her first unit runs 30 s of her 20 s budget; her next ones wait in Q
    behind Ada's 300 s: she fails with the "ran past" error, and none of her
    queued units is taken for one still running."""
    with LocalEngine(1) as engine:
        driver = PoolDriver(engine, clock=CLOCK)
        ada = _runner(engine, digits, (0.1, 0.05), 1, 100.0)
        her = _runner(engine, digits, (0.1, 0.05), 1, 30.0, time_budget=20.0,
                      on_deadline=_still_running, on_budget_spent=_spent)
        f_ada = driver.submit(ada, owner="ada")
        f_her = driver.submit(her, owner="bob")
        with pytest.raises(HerLimit, match="ran past her limit"):
            f_her.result(120)
        f_ada.result(120)
        assert her.time_used == pytest.approx(30.0)
