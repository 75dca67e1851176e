"""A cluster that cannot run the work now (a worker lost with the data it
held, no worker at all) raises ``ClusterUnavailableError`` with a plain
message, or recovers where it can: on a real in-process Dask cluster
(``LocalCluster(processes=False)``), whose workers close at once and for good."""

from __future__ import annotations

import time

import dask
import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier

from ease_jupyter.errors import ClusterUnavailableError, EaseMLError
from ease_jupyter.execution import grid as grid_module
from ease_jupyter.execution.engine.base import EngineError
from ease_jupyter.execution.engine.dask import DaskEngine
from ease_jupyter.execution.grid import grid_search
from ease_jupyter.service.failures import storage_code

distributed = pytest.importorskip("distributed")


def _cluster(n_workers: int):
    return distributed.LocalCluster(n_workers=n_workers, processes=False, threads_per_worker=1,
                                    dashboard_address=None)


def _close_worker(engine: DaskEngine, address: str) -> None:
    cluster = engine._cluster
    worker = next(w for w in cluster.workers.values() if w.address == address)
    cluster.sync(worker.close)


class _LosesSharedData(DaskEngine):
    """Closes the worker holding each of the first ``times`` shared values
    right after sharing it, as a SIGKILL of that worker would."""

    times = 1

    def share(self, value):
        ref = super().share(value)
        if self.times > 0:
            self.times -= 1
            (holder,) = self.client.who_has([ref])[ref.key]
            _close_worker(self, holder)
        return ref


def _plain(message: str) -> None:
    assert "inproc://" not in message and "tcp://" not in message
    assert "UnitLost" not in message and "Error" not in message and "(" not in message.split(":")[-1]


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    return X, (X[:, 0] > 0).astype(int)


def test_a_grid_whose_shared_data_went_with_a_worker_shares_it_again():
    X, y = _data()
    engine = _LosesSharedData(_cluster(2), owns_cluster=True)
    try:
        result = grid_search(KNeighborsClassifier(), {"n_neighbors": [1, 3]}, X, y, engine=engine, memory=None)
    finally:
        engine.close()
    assert engine.times == 0  # the data was lost once
    assert [p.params for p in result.points] == [{"n_neighbors": 1}, {"n_neighbors": 3}]
    assert all(p.score == p.score for p in result.points)


def test_a_grid_that_keeps_losing_its_data_is_a_plain_cluster_error(monkeypatch):
    monkeypatch.setattr(grid_module, "MAX_LOST", 1)
    X, y = _data()
    engine = _LosesSharedData(_cluster(3), owns_cluster=True)
    engine.times = 2  # the first share and its one retry
    try:
        with pytest.raises(ClusterUnavailableError) as caught:
            grid_search(KNeighborsClassifier(), {"n_neighbors": [3]}, X, y, engine=engine, memory=None)
    finally:
        engine.close()
    assert caught.value.code == "cluster_unavailable"
    assert "a worker of the cluster was lost" in str(caught.value)
    _plain(str(caught.value))


def test_sharing_on_a_cluster_without_workers_is_a_cluster_error():
    """A scheduler back without its workers answers "No valid workers found"
    (a TimeoutError) to a scatter."""
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        engine = DaskEngine(_cluster(0), owns_cluster=True)
    try:
        with pytest.raises(ClusterUnavailableError) as caught:
            engine.share((1, 2, 3))
    finally:
        engine.close()
    assert isinstance(caught.value, EngineError)
    _plain(str(caught.value))


def test_a_worker_lost_while_data_is_placed_is_named_by_its_name():
    engine = DaskEngine(_cluster(2), owns_cluster=True)
    try:
        first, second = engine.workers()
        names = {engine._dask_names[a] for a in (first, second)}
        _close_worker(engine, first)  # the engine has not seen it go yet
        with pytest.raises(ClusterUnavailableError) as caught:
            engine.place("part-0", np.zeros(4), [first])
        assert isinstance(caught.value, EngineError)  # a MOP driver still re-queues on it
        message = str(caught.value)
        assert f"worker {engine._dask_names[first]!r}" in message and engine._dask_names[first] in names
        _plain(message)
        # once the engine knows it is gone, placing on it says the same, not "unknown worker"
        with pytest.raises(ClusterUnavailableError) as again:
            engine.place("part-1", np.zeros(4), [first])
        _plain(str(again.value))
        engine.place("part-0", np.zeros(4), [second])
        assert engine.holders("part-0") == {second}
    finally:
        engine.close()


class _KillsItsWorker(KNeighborsClassifier):
    """A model whose fit kills the worker running it (a crash, its memory)."""

    def fit(self, X, y):
        worker = distributed.get_worker()
        worker.loop.add_callback(worker.close, executor_wait=False)
        time.sleep(30)  # the worker goes while it runs
        return super().fit(X, y)


def test_a_task_that_kills_its_workers_is_the_models_failure(monkeypatch):
    """The workers it is kept to (``fan_out``) die each time while others
    live: after ``MAX_LOST`` resubmissions, the model fails the grid (scored
    0), not the cluster (held and retried for ever)."""
    monkeypatch.setattr(grid_module, "MAX_LOST", 1)
    X, y = _data()
    engine = DaskEngine(_cluster(3), owns_cluster=True)
    try:
        with pytest.raises(EaseMLError) as caught:
            grid_search(_KillsItsWorker(), {"n_neighbors": [3]}, X, y, engine=engine, memory=None, fan_out=1,
                        timeout=60)
        assert len(engine.workers()) == 1  # two were killed, one is left
    finally:
        engine.close()
    assert not isinstance(caught.value, ClusterUnavailableError) and storage_code(caught.value) is None
    assert "the worker running it died 2 times" in str(caught.value)
    _plain(str(caught.value))


def test_a_task_dask_gives_up_on_for_killing_workers_is_the_models_failure():
    """Dask's KilledWorker (allowed-failures workers died running it)."""
    X, y = _data()
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        engine = DaskEngine(_cluster(2), owns_cluster=True)
        try:
            with pytest.raises(EaseMLError) as caught:
                grid_search(_KillsItsWorker(), {"n_neighbors": [3]}, X, y, engine=engine, memory=None, timeout=60)
        finally:
            engine.close()
    assert not isinstance(caught.value, ClusterUnavailableError) and storage_code(caught.value) is None
    assert "the workers that ran it died while it ran, 1 in all" in str(caught.value)
    _plain(str(caught.value))



def test_a_task_lost_with_no_worker_left_is_a_cluster_error():
    """Its workers lost and none left (the scheduler gone): the cluster's
    failure, held and retried, not the model's. An engine that reports so."""
    from ease_jupyter.execution.engine.base import UnitLost
    from ease_jupyter.execution.engine.local import LocalEngine

    class _NoneLeft(LocalEngine):
        def submit(self, fn, *args, **kwargs):
            return "h"

        def wait_all(self, handles, timeout=None):
            return {h: UnitLost(h, "w0", "worker-lost") for h in handles}

        def workers(self):
            return []

    X, y = _data()
    engine = _NoneLeft(1, torch_threads=None)
    try:
        with pytest.raises(ClusterUnavailableError) as caught:
            grid_search(KNeighborsClassifier(), {"n_neighbors": [3]}, X, y, engine=engine, memory=None, timeout=30)
    finally:
        engine.close()
    assert "no worker of the cluster is left" in str(caught.value)
    _plain(str(caught.value))
