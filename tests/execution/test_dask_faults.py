"""Faults on a real Dask LocalCluster: a killed worker process mid-epoch, and a
hung worker that Dask does not notice, caught by the unit deadline.

Both runs replay the visit order of a run without faults and must end with
bit-identical weights (units are deterministic; a lost unit re-runs from the
checkpoint it started from).
"""

from __future__ import annotations

import io
import os
import signal
import time

import numpy as np
import pytest
import torch

from ease_jupyter.execution.automl import GridSearch
from ease_jupyter.execution.mop.runner import UnitRecord, run_mop
from ease_jupyter.zoo.templates import TorchBuilder

MODELS = {"lenet": TorchBuilder("lenet", "LeNet", ((8, 8), 10))}


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:1000].astype(np.float32) / 16.0, d.target[:1000]


@pytest.fixture
def dask_engine():
    """A fresh 2-worker cluster per test, so one test's fault (a nanny that
    closes instead of restarting under load) cannot leak into the next."""
    from ease_jupyter.execution.engine.dask import DaskEngine

    engine = DaskEngine(n_workers=2)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def reference(digits):
    """A run without faults on its own cluster; the others replay its visit order."""
    from ease_jupyter.execution.engine.dask import DaskEngine

    X, y = digits
    with_engine = DaskEngine(n_workers=2)
    try:
        ref = run_mop(with_engine, grid(), MODELS, X, y, hop="bytes")
    finally:
        with_engine.close()
    assert ref.faults == [] and completed_every_config(ref)
    return ref


def grid():
    return GridSearch("lenet", {"lr": [0.1, 0.03, 0.01]}, epochs=2)


def assert_same_weights(a, b):
    assert set(a.checkpoints) == set(b.checkpoints) == {"t0", "t1", "t2"}
    for t in a.checkpoints:
        wa = torch.load(io.BytesIO(a.checkpoints[t]), weights_only=True)["model"]
        wb = torch.load(io.BytesIO(b.checkpoints[t]), weights_only=True)["model"]
        assert all(torch.equal(wa[k], wb[k]) for k in wa), f"trial {t} differs"


def completed_every_config(res):
    return {(m.trial, m.epoch) for m in res.history} == {(t, e) for t in ("t0", "t1", "t2") for e in (1, 2)}


def test_killing_a_worker_process_mid_epoch_keeps_the_final_weights(dask_engine, digits, reference):
    X, y = digits
    ref = reference
    victims = []

    def kill_the_busy_one(rec: UnitRecord):
        # The first training unit is done on rec.worker; the other worker is
        # in the middle of one. SIGKILL its process.
        if not victims and rec.kind == "train":
            victim = next(w for w in dask_engine.workers() if w != rec.worker)
            victims.append((victim, dask_engine.worker_pids()[victim]))
            dask_engine.kill_worker(victim)

    res = run_mop(dask_engine, grid(), MODELS, X, y, hop="directory", visit_order=ref.visit_log,
                  on_unit=kill_the_busy_one)
    (victim, pid), = victims
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the process is really gone
    assert any("unit" in f and "lost on " + victim in f for f in res.faults), res.faults
    assert any(f"worker lost {victim}" in f for f in res.faults)
    assert res.requeued >= 1
    assert completed_every_config(res)
    assert res.visit_log == ref.visit_log
    assert_same_weights(ref, res)
    assert [m.score for m in res.history] == [m.score for m in ref.history]


@pytest.mark.slow  # ~20-30 s: a 6 s deadline, then a nanny restart of a stopped process
def test_a_hung_worker_is_caught_by_the_unit_deadline(dask_engine, digits, reference):
    """SIGSTOP keeps a worker's connections open, so Dask does not notice it
    for minutes, and a unit pinned to it would wait forever. The deadline
    re-queues the unit and the worker is restarted through its nanny."""
    X, y = digits
    ref = reference
    stopped = []

    def stop_a_warm_worker(rec: UnitRecord):
        # Stop a worker right after it finished a unit: the next unit the
        # scheduler pins to it hangs.
        if not stopped and rec.kind == "train":
            pid = dask_engine.worker_pids()[rec.worker]
            stopped.append((rec.worker, pid))
            os.kill(pid, signal.SIGSTOP)

    t0 = time.monotonic()
    try:
        res = run_mop(dask_engine, grid(), MODELS, X, y, visit_order=ref.visit_log, on_unit=stop_a_warm_worker,
                      unit_timeout=6.0, first_unit_timeout=60.0)
    finally:
        for _, pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    (worker, _), = stopped
    assert any("deadline" in f and worker in f for f in res.faults), res.faults
    assert res.requeued >= 1
    assert completed_every_config(res)
    assert_same_weights(ref, res)
    assert time.monotonic() - t0 < 120


def test_replicated_partitions_survive_a_kill_without_repair(dask_engine, digits, reference):
    """With r = 2 every partition survives one lost worker; the lost worker's
    unit re-runs on the survivor (Cerebro §5.5-5.6). The visit order of the
    r = 1 reference replays here too: weights depend on the order only."""
    X, y = digits
    ref = reference
    killed = []

    def kill(rec: UnitRecord):
        if not killed and rec.kind == "train":
            killed.append(next(w for w in dask_engine.workers() if w != rec.worker))
            dask_engine.kill_worker(killed[0])

    res = run_mop(dask_engine, grid(), MODELS, X, y, replication=2, visit_order=ref.visit_log, on_unit=kill)
    assert killed and not any("re-placed" in f for f in res.faults)
    assert completed_every_config(res)
    assert_same_weights(ref, res)
