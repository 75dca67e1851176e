"""GPU placement rules, on a LocalEngine whose workers declare a fake ``GPU``
resource (no GPU needed): torch MOP units and their partitions stay on the
GPU workers while there are any, a GPU worker that joins later takes over,
the CPU workers take over when the last GPU worker is gone, and the
scikit-learn grid keeps off the GPU workers (pool_driver's module docstring)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ease_jupyter.execution.automl import GridSearch
from ease_jupyter.execution.engine import GPU, EngineError, LocalEngine, UnitDone, WorkerAdded
from ease_jupyter.execution.engine.base import cpu_workers, gpu_workers
from ease_jupyter.execution.grid import grid_search
from ease_jupyter.execution.mop.runner import MOPRunner, UnitRecord
from ease_jupyter.zoo.templates import TorchBuilder

MODELS = {"lenet": TorchBuilder("lenet", "LeNet", ((8, 8), 10))}


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:300].astype(np.float32) / 16.0, d.target[:300]


class Recording(LocalEngine):
    """Records where units are pinned, where data is placed, where unpinned
    tasks ran, and how many pinned units had been submitted when each
    ``WorkerAdded`` reached the caller."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.pinned: list[str] = []
        self.placed: set[str] = set()
        self.ran: list[str] = []  # workers of unpinned tasks' UnitDone
        self.added_at: dict[str, int] = {}

    def submit_pinned(self, fn, key, *args, worker, timeout):
        h = super().submit_pinned(fn, key, *args, worker=worker, timeout=timeout)
        with self.lock:
            self.pinned.append(worker)
        return h

    def place(self, key, data, workers):
        super().place(key, data, workers)
        with self.lock:
            self.placed.update(workers)

    def events(self, timeout=0.1):
        evs = super().events(timeout)
        with self.lock:
            for ev in evs:
                if isinstance(ev, WorkerAdded):
                    self.added_at[ev.worker] = len(self.pinned)
                if isinstance(ev, UnitDone) and ev.handle.startswith("task-"):
                    self.ran.append(ev.worker)
        return evs


def run(engine, digits, *, on_unit=None, **kwargs):
    X, y = digits
    runner = MOPRunner(engine, GridSearch("lenet", {"lr": [0.1, 0.05]}, epochs=2), MODELS, X, y,
                       on_unit=on_unit, seed=3, **kwargs)
    return runner, runner.run()


# -- the engine side ------------------------------------------------------------------


def test_local_workers_declare_their_own_resources():
    with LocalEngine(3, worker_resources=[{}, {GPU: 1}, {GPU: 0}]) as e:
        a, b, c = e.workers()
        assert e.gpu_workers() == [b] and e.cpu_workers() == [a, c]
        assert e.worker_resources()[b][GPU] == 1.0
        e.kill_worker(b)
        assert len(e.gpu_workers()) == 1 and b not in e.gpu_workers()  # the replacement has a GPU too
        new = e.add_worker({GPU: 1})
        assert new in e.gpu_workers() and len(e.workers()) == 4
    with pytest.raises(EngineError, match="worker_resources"):
        LocalEngine(2, worker_resources=[{GPU: 1}], torch_threads=None)


def test_gpu_and_cpu_workers_split_declared_resources():
    res = {"w2": {GPU: 2.0}, "w1": {"MEMORY": 1.0}, "w0": {GPU: 0.0}, "w3": {GPU: 1.0}}
    assert gpu_workers(res) == ["w2", "w3"]
    assert cpu_workers(res) == ["w0", "w1"]


# -- MOP units on GPU workers ----------------------------------------------------------------


def test_units_and_partitions_stay_on_the_gpu_workers(digits):
    with Recording(3, worker_resources=[{}, {GPU: 1}, {GPU: 1}]) as e:
        cpu = e.cpu_workers()[0]
        runner, result = run(e, digits)
        assert runner.partitions == 2  # one per GPU worker
        assert e.pinned and cpu not in e.pinned
        assert e.placed == set(e.gpu_workers())
    assert len(result.history) == 4  # both trials, both epochs


def test_an_explicit_partition_count_is_still_placed_on_gpu_workers_only(digits):
    with Recording(3, worker_resources=[{}, {GPU: 1}, {}]) as e:
        runner, _ = run(e, digits, n_partitions=3)
        assert runner.partitions == 3
        assert set(e.pinned) == set(e.placed) == set(e.gpu_workers())


def test_a_gpu_worker_that_joins_takes_over_from_the_cpu_workers(digits):
    with Recording(2) as e:
        records: list[UnitRecord] = []

        def on_unit(rec):
            records.append(rec)
            if len(records) == 1:
                e.add_worker({GPU: 1})

        _, result = run(e, digits, on_unit=on_unit)
        gpu = e.gpu_workers()[0]
        joined = e.added_at[gpu]
        assert set(e.pinned[:joined]) <= set(e.cpu_workers())
        assert e.pinned[joined:] and set(e.pinned[joined:]) == {gpu}, "no unit to a CPU worker once a GPU worker is in"
        assert records[-1].worker == gpu
        assert len(result.history) == 4  # both trials, both epochs


def test_the_cpu_workers_take_over_when_the_last_gpu_worker_is_lost(digits):
    with Recording(2, worker_resources=[{}, {GPU: 1}], respawn=False) as e:
        cpu, gpu = e.cpu_workers()[0], e.gpu_workers()[0]

        def on_unit(rec):
            if rec.worker == gpu and gpu in e.workers():
                e.kill_worker(gpu)

        _, result = run(e, digits, on_unit=on_unit, repair_grace=0.2)
        assert e.pinned[0] == gpu and cpu in e.pinned
        assert e.pinned.index(cpu) > 0  # only after the GPU worker was gone
        assert any("no GPU worker left" in f for f in result.faults)
        assert len(result.history) == 4


def test_a_replaced_gpu_worker_keeps_the_cpu_workers_out(digits):
    with Recording(2, worker_resources=[{}, {GPU: 1}]) as e:
        cpu = e.cpu_workers()[0]
        first = e.gpu_workers()[0]

        def on_unit(rec):
            if first in e.workers():
                e.kill_worker(first)  # a nanny restarts it as a new GPU worker

        _, result = run(e, digits, on_unit=on_unit, repair_grace=30.0)
        assert cpu not in e.pinned and cpu not in e.placed
        assert len(set(e.pinned)) == 2  # the first GPU worker, then its replacement
        assert len(result.history) == 4


# -- scikit-learn grids keep off the GPU workers ---------------------------------------------


def test_a_grid_never_takes_a_gpu_workers_slot_while_cpu_workers_exist():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int)
    with Recording(3, worker_resources=[{}, {GPU: 1}, {}], torch_threads=None) as e:
        result = grid_search(LogisticRegression(), {"C": [0.1, 1.0, 10.0, 100.0]}, X, y, engine=e)
        assert len(e.ran) == 4  # one task per point (the probe is one of them)
        assert set(e.ran) <= set(e.cpu_workers())
    assert result.best_score > 0.9
    with Recording(1, worker_resources=[{GPU: 1}], torch_threads=None) as e:  # GPU workers only: they run it
        grid_search(LogisticRegression(), {"C": [1.0]}, X, y, engine=e, memory=None)
        assert e.ran == e.gpu_workers()


class LosesItsCpuWorker(Recording):
    """Kills the CPU worker right after the grid's first task was submitted
    to it; the replacement is a new CPU worker."""

    def submit(self, fn, *args, **kwargs):
        h = super().submit(fn, *args, **kwargs)
        if not getattr(self, "killed", False):
            self.killed = True
            self.kill_worker(self.cpu_workers()[0])
        return h


def test_a_grid_task_whose_cpu_workers_were_all_lost_runs_again_on_the_new_ones():
    from sklearn.linear_model import LogisticRegression

    X = np.arange(40, dtype=float).reshape(20, 2)
    y = (X[:, 0] > 18).astype(int)
    with LosesItsCpuWorker(2, worker_resources=[{}, {GPU: 1}], torch_threads=None) as e:
        first_cpu = e.cpu_workers()[0]
        result = grid_search(LogisticRegression(), {"C": [1.0, 2.0]}, X, y, engine=e, memory=None)
        assert len(e.ran) == 2 and set(e.ran) == set(e.cpu_workers()) and first_cpu not in e.ran
    assert len(result.points) == 2
