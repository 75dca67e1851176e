"""Several MOP workloads on one engine through one PoolDriver (MOP across tasks):
both finish with Cerebro's invariants per workload, one unit per worker at a
time across workloads, their units interleave, and a fault stays in its
workload. The pure scheduler's invariants are the state machine of
test_mop_shared_pool.py; these run real units on a LocalEngine or Dask."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import numpy as np
import pytest

from ease_jupyter.execution.automl import GridSearch
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.mop.pool_driver import PoolDriver
from ease_jupyter.execution.mop.runner import MOPRunner, RunnerError, UnitRecord
from ease_jupyter.execution.units import Hooks
from ease_jupyter.zoo.templates import TorchBuilder

MODELS = {"lenet": TorchBuilder("lenet", "LeNet", ((8, 8), 10))}


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:400].astype(np.float32) / 16.0, d.target[:400]


class OneUnitPerWorker(LocalEngine):
    """Records, per worker, whether a unit was pinned to it while another of
    its units was still unresolved (what the driver must never do)."""

    def __init__(self, n_workers: int):
        super().__init__(n_workers)
        self.lock = threading.Lock()
        self.open: dict[str, str] = {}  # handle -> worker
        self.overlaps: list[tuple[str, str]] = []
        self.pinned = 0

    def submit_pinned(self, fn, key, *args, worker, timeout):
        h = super().submit_pinned(fn, key, *args, worker=worker, timeout=timeout)
        with self.lock:
            if worker in self.open.values():
                self.overlaps.append((worker, h))
            self.open[h] = worker
            self.pinned += 1
        return h

    def events(self, timeout=0.1):
        evs = super().events(timeout)
        with self.lock:
            for ev in evs:
                self.open.pop(getattr(ev, "handle", None), None)
        return evs

    def cancel(self, handle):
        with self.lock:
            self.open.pop(handle, None)
        super().cancel(handle)


def always_fail(net, opt, X, y, spec, generator):
    raise RuntimeError("injected failure")


def grid(lrs, epochs=2):
    return GridSearch("lenet", {"lr": list(lrs)}, epochs=epochs)


def workload(engine, digits, lrs, records, *, epochs=2, **kwargs):
    X, y = digits

    def on_unit(rec: UnitRecord) -> None:
        records.append((time.monotonic(), rec))

    return MOPRunner(engine, grid(lrs, epochs), MODELS, X, y, on_unit=on_unit, **kwargs)


def train_units(records):
    return [(r.trial, r.mop_epoch, r.partition) for _, r in records if r.kind == "train"]


def assert_complete(res, records, trials, partitions, epochs):
    """Cerebro §3.1 per workload: every config visits every partition once per epoch."""
    assert {(m.trial, m.epoch) for m in res.history} == {(t, e) for t in trials for e in range(1, epochs + 1)}
    assert set(res.visit_log) == {(t, e) for t in trials for e in range(epochs)}
    assert all(sorted(v) == list(range(partitions)) for v in res.visit_log.values())
    units = train_units(records)
    assert len(units) == len(set(units)) == len(trials) * partitions * epochs  # nothing trained twice


def test_two_workloads_share_the_workers_and_both_finish(digits):
    with OneUnitPerWorker(2) as engine:
        driver = PoolDriver(engine, seed=1)
        rec_a, rec_b = [], []
        a = workload(engine, digits, (0.1, 0.03, 0.01), rec_a)
        b = workload(engine, digits, (0.05, 0.02), rec_b)
        fa = driver.submit(a, owner="alice")
        fb = driver.submit(b, owner="bob")
        res_a, res_b = fa.result(300), fb.result(300)
    assert_complete(res_a, rec_a, ("t0", "t1", "t2"), 2, 2)
    assert_complete(res_b, rec_b, ("t0", "t1"), 2, 2)
    assert res_a.best and res_b.best
    assert engine.overlaps == []  # one unit per worker at a time, across workloads
    # train + validation units of both went through the engine, and nothing else
    assert engine.pinned == 2 * 2 * (3 + 2) * 2
    # their units interleave in time: each workload finished a unit before the other's last one
    ends_a, ends_b = [t for t, _ in rec_a], [t for t, _ in rec_b]
    assert min(ends_a) < max(ends_b) and min(ends_b) < max(ends_a)
    first_half = sorted([(t, "a") for t in ends_a] + [(t, "b") for t in ends_b])[: (len(ends_a) + len(ends_b)) // 2]
    assert {w for _, w in first_half} == {"a", "b"}  # neither waited for the other's whole workload
    # every workload's partitions were dropped from the workers once it ended
    assert not any(engine.holders(f"{ns}/{kind}-{p}") for ns in ("w0", "w1") for kind in ("train", "val")
                   for p in range(2))


def test_a_failing_workload_fails_alone(digits):
    with LocalEngine(2) as engine:
        driver = PoolDriver(engine)
        rec_ok, rec_bad = [], []
        ok = workload(engine, digits, (0.1, 0.01), rec_ok)
        bad = workload(engine, digits, (0.1,), rec_bad, epochs=1, max_unit_retries=1,
                       hooks=Hooks(train_fn=always_fail))
        f_ok = driver.submit(ok, owner="alice")
        f_bad = driver.submit(bad, owner="bob")
        with pytest.raises(RunnerError, match="failed 2 times.*injected failure"):
            f_bad.result(300)
        res = f_ok.result(300)
    assert_complete(res, rec_ok, ("t0", "t1"), 2, 2)
    assert res.requeued == 0 and res.faults == []


def test_the_shared_driver_of_an_engine_runs_workloads_from_several_threads(digits):
    """What a service's job slots do: each thread joins the engine's one driver and waits."""
    with LocalEngine(2) as engine:
        assert PoolDriver.shared(engine) is PoolDriver.shared(engine)
        records = {name: [] for name in ("a", "b")}
        results = {}

        def job(name, lrs):
            results[name] = PoolDriver.shared(engine).run(workload(engine, digits, lrs, records[name], epochs=1),
                                                          owner=name)

        threads = [threading.Thread(target=job, args=("a", (0.1, 0.01))),
                   threading.Thread(target=job, args=("b", (0.05,)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert_complete(results["a"], records["a"], ("t0", "t1"), 2, 1)
    assert_complete(results["b"], records["b"], ("t0",), 2, 1)
    assert not PoolDriver.shared(engine).workloads


def test_a_killed_worker_while_two_workloads_run_completes_both(digits):
    """Cerebro §5.6 across workloads, on a real Dask cluster: a SIGKILLed
    worker's unit (of whichever workload) runs again; nothing else does."""
    from ease_jupyter.execution.engine.dask import DaskEngine

    engine = DaskEngine(n_workers=2)
    try:
        driver = PoolDriver(engine)
        victims = []
        rec_a, rec_b = [], []

        def kill_the_other(rec: UnitRecord) -> None:
            # The other worker is busy with a unit of one workload or the other: SIGKILL it.
            if not victims and rec.kind == "train":
                victim = next(w for w in engine.workers() if w != rec.worker)
                victims.append((victim, engine.worker_pids()[victim]))
                engine.kill_worker(victim)

        X, y = digits
        a = MOPRunner(engine, grid((0.1, 0.03)), MODELS, X, y, hop="bytes",
                      on_unit=lambda r: (rec_a.append((time.monotonic(), r)), kill_the_other(r)))
        b = MOPRunner(engine, grid((0.05, 0.01)), MODELS, X, y, hop="bytes",
                      on_unit=lambda r: rec_b.append((time.monotonic(), r)))
        fa, fb = driver.submit(a, owner="alice"), driver.submit(b, owner="bob")
        res_a, res_b = fa.result(300), fb.result(300)
    finally:
        engine.close()
    (victim, pid), = victims
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    faults = res_a.faults + res_b.faults
    assert any(f"worker lost {victim}" in f for f in res_a.faults)
    assert any(f"worker lost {victim}" in f for f in res_b.faults)  # both placements repaired
    assert_complete(res_a, rec_a, ("t0", "t1"), 2, 2)
    assert_complete(res_b, rec_b, ("t0", "t1"), 2, 2)
    lost = [f for f in faults if "lost on" in f]
    assert res_a.requeued + res_b.requeued <= 1 and len(lost) <= 1, faults  # at most the unit it was running
    done = Counter(r.kind for _, r in rec_a + rec_b)
    assert done["train"] == 2 * (2 * 2 * 2)
