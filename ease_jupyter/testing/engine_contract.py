"""The ``Engine`` contract (``ease_jupyter/execution/engine/base.py``) as a
reusable pytest suite.

Every engine must pass the ``test_*`` functions below: workers and their
resources, partition placement (Cerebro §4.3: each partition on ``r``
workers, never broadcast), pinned units with deadlines, unpinned tasks,
cancellation, unpinned tasks kept to named workers (``submit(...,
workers=...)``), and the events a lost unit or worker produces. To run the
suite against an engine, import it into a test module and provide two
fixtures, each an engine with two workers (declaring no ``GPU``) and a
``kind`` attribute::

    import pytest
    from ease_jupyter.testing.engine_contract import *  # noqa: F401,F403

    @pytest.fixture(scope="module")
    def engine():          # shared: the tests leave it as they found it
        e = MyEngine(n_workers=2)
        e.kind = "mine"
        yield e
        e.close()

    @pytest.fixture
    def fresh_engine():    # one per test: the fault tests kill its workers
        ...

Differences between the engines are explicit ``if engine.kind == ...``
checks: Dask's own bookkeeping of where each copy lives, and the reason of
a killed worker's ``WorkerLost`` (``"killed"`` on the local engine,
``"removed"`` on the others). The unit functions run on the workers; ``where``
names the worker running it, and knows the local engine's threads and Dask's
workers: a new engine adds its own case there.
"""

from __future__ import annotations

import sys
import threading
import time

import cloudpickle
import pytest

from ..execution.engine import (
    MEMORY,
    EngineError,
    UnitDone,
    UnitFailed,
    UnitLost,
    WorkerAdded,
    WorkerLost,
)
from ..execution.engine.base import partition_key

# Workers unpickle the unit functions below by value, so they need neither
# this module nor pytest.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# -- unit functions shipped to workers ------------------------------------------------


def where() -> str:
    """The engine's name for the worker running this (thread or Dask worker)."""
    name = threading.current_thread().name
    if name.startswith("ease-local-"):
        return name[len("ease-"):]
    from distributed import get_worker

    return get_worker().address


def echo(data, extra):
    return (data, extra, where())


def boom(data):
    raise ValueError("unit failed on purpose")


def nap(data, seconds):
    time.sleep(seconds)
    return data


def add(a, b):
    return a + b


def where_task(_):
    return where()


def collect(engine, handles, timeout=60.0):
    return engine.wait_all(handles, timeout=timeout)


def events_until(engine, predicate, timeout=60.0):
    """All events until ``predicate(events so far)`` holds."""
    seen = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        seen.extend(engine.events(0.2))
        if predicate(seen):
            return seen
    raise AssertionError(f"timed out; saw {seen}")


# -- the contract ------------------------------------------------------------------------


def test_workers_are_named_and_sorted(engine):
    ws = engine.workers()
    assert len(ws) == 2 and ws == sorted(ws) and all(isinstance(w, str) for w in ws)
    res = engine.worker_resources()
    assert set(res) == set(ws) and all(r[MEMORY] > 0 for r in res.values())
    assert engine.shared_filesystem


@pytest.mark.parametrize("replication", [1, 2])
def test_partitions_are_placed_on_r_workers_never_broadcast(engine, replication):
    parts = {i: list(range(i, i + 3)) for i in range(4)}
    av = engine.place_partitions(parts, replication=replication, prefix="layout")
    try:
        assert set(av) == set(engine.workers())
        for pid in parts:
            holders = engine.holders(partition_key("layout", pid))
            assert len(holders) == replication
            assert holders == {w for w, ps in av.items() if pid in ps}
        if engine.kind == "dask":
            # Dask itself holds each copy only where we put it.
            who = engine.client.who_has()
            copies = [k for k in who if str(k).startswith("data-layout-")]
            assert len(copies) == 4 * replication and all(len(who[k]) == 1 for k in copies)
    finally:
        for pid in parts:
            engine.drop(partition_key("layout", pid))
    assert all(not engine.holders(partition_key("layout", p)) for p in parts)


def test_bad_replication_is_refused(engine):
    for r in (0, 3, 1.5, True):
        with pytest.raises(EngineError, match="replication"):
            engine.place_partitions({0: [1]}, replication=r, prefix="bad")


def test_pinned_unit_runs_on_its_worker_with_its_copy(engine):
    ws = engine.workers()
    for w in ws:
        engine.place("mine", f"copy-on-{w}", [w])
    try:
        handles = {engine.submit_pinned(echo, "mine", 42, worker=w, timeout=60): w for w in ws}
        done = collect(engine, handles)
        for h, w in handles.items():
            ev = done[h]
            assert isinstance(ev, UnitDone) and ev.worker == w
            assert ev.result == (f"copy-on-{w}", 42, w)
    finally:
        engine.drop("mine")


def test_pinned_submission_errors_name_the_field(engine):
    w = engine.workers()[0]
    engine.place("held", 1, [w])
    try:
        with pytest.raises(EngineError, match="worker"):
            engine.submit_pinned(echo, "held", 0, worker="no-such-worker", timeout=5)
        with pytest.raises(EngineError, match="key"):
            engine.submit_pinned(echo, "not-held", 0, worker=w, timeout=5)
        for t in (0, -1, float("inf"), None):
            with pytest.raises(EngineError, match="timeout"):
                engine.submit_pinned(echo, "held", 0, worker=w, timeout=t)
    finally:
        engine.drop("held")


def test_a_raising_unit_is_reported_failed(engine):
    w = engine.workers()[0]
    engine.place("f", 0, [w])
    try:
        h = engine.submit_pinned(boom, "f", worker=w, timeout=60)
        ev = collect(engine, [h])[h]
        assert isinstance(ev, UnitFailed) and isinstance(ev.error, ValueError)
    finally:
        engine.drop("f")


def test_unpinned_tasks_resources_and_shared_values(engine):
    ref = engine.share(40)
    h = engine.submit(add, ref, 2, resources={MEMORY: 2**20})
    ev = collect(engine, [h])[h]
    assert isinstance(ev, UnitDone) and ev.result == 42
    too_much = max(r[MEMORY] for r in engine.worker_resources().values()) * 2
    with pytest.raises(EngineError, match="resources"):
        engine.submit(add, 1, 2, resources={MEMORY: too_much})
    with pytest.raises(EngineError, match="resources"):
        engine.submit(add, 1, 2, resources={"GPU": 1})


def test_results_are_collected_by_name_and_a_failed_task_is_named(engine):
    assert engine.results({"x": engine.submit(add, 1, 2), "y": engine.submit(add, 3, 4)}, "sum", 60) == {"x": 3, "y": 7}
    with pytest.raises(EngineError, match="probe 'bad': found UnitFailed"):
        engine.results({"ok": engine.submit(add, 1, 1), "bad": engine.submit(boom, 0)}, "probe", 60)


def test_unpinned_tasks_run_only_on_the_named_workers(engine):
    """``submit(..., workers=...)`` keeps a task on those workers (a
    scikit-learn grid off the GPU workers); names not live are ignored."""
    ws = engine.workers()
    for w in ws:
        handles = [engine.submit(where_task, i, workers=[w]) for i in range(3)]
        handles.append(engine.submit(where_task, 3, workers=[w, "no-such-worker"]))
        done = collect(engine, handles)
        assert [done[h].result for h in handles] == [w] * 4


def test_a_workers_restriction_must_name_a_live_worker(engine):
    for bad in (["no-such-worker"], [], "not-a-list"):
        with pytest.raises(EngineError, match="workers"):
            engine.submit(add, 1, 2, workers=bad)
    too_much = max(r[MEMORY] for r in engine.worker_resources().values()) * 2
    with pytest.raises(EngineError, match="resources"):
        engine.submit(add, 1, 2, resources={MEMORY: too_much}, workers=engine.workers()[:1])


def test_no_declared_gpu_means_every_worker_is_a_cpu_worker(engine):
    assert engine.gpu_workers() == []
    assert engine.cpu_workers() == engine.workers()


def test_cancelled_handles_never_report(engine):
    w = engine.workers()[0]
    engine.place("c", 0, [w])
    try:
        h = engine.submit_pinned(nap, "c", 0.5, worker=w, timeout=60)
        engine.cancel(h)
        engine.cancel(h)  # idempotent
        engine.cancel("unknown-handle")
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            assert all(getattr(ev, "handle", None) != h for ev in engine.events(0.2))
        assert engine.pending() == 0
    finally:
        engine.drop("c")


def test_deadline_gives_up_on_the_unit_and_its_worker(fresh_engine):
    """A pinned unit past its deadline is reported lost (to be re-queued), its
    worker is given up on, and a replacement joins with no data."""
    ws = fresh_engine.workers()
    av = fresh_engine.place_partitions({0: "p0", 1: "p1"}, replication=1, prefix="d")
    w = next(w for w, ps in av.items() if 0 in ps)
    h = fresh_engine.submit_pinned(nap, "d-0", 3.0, worker=w, timeout=0.5)
    t0 = time.monotonic()
    seen = events_until(fresh_engine, lambda evs: any(isinstance(e, WorkerAdded) for e in evs), timeout=60)
    lost = [e for e in seen if isinstance(e, UnitLost)]
    assert lost and lost[0].handle == h and lost[0].reason == "deadline"
    assert WorkerLost(w, "deadline") in seen
    assert seen.index(lost[0]) < seen.index(WorkerLost(w, "deadline"))
    assert time.monotonic() - t0 < 60
    new = [e.worker for e in seen if isinstance(e, WorkerAdded)][0]
    assert new not in ws and w not in fresh_engine.workers() and new in fresh_engine.workers()
    assert fresh_engine.holders("d-0") == set() and fresh_engine.holders("d-1") == {x for x in ws if x != w}
    assert not [e for e in seen if isinstance(e, UnitDone) and e.handle == h]  # never reported late
    with pytest.raises(EngineError, match="worker"):
        fresh_engine.submit_pinned(nap, "d-0", 0, worker=w, timeout=5)


def test_killed_worker_loses_its_pinned_units_even_if_inputs_survive(fresh_engine):
    """With r = 2 the input of a unit pinned to the killed worker still exists
    elsewhere; Dask would keep such a task waiting for its worker forever.
    The engine must report it lost instead."""
    av = fresh_engine.place_partitions({0: "shared"}, replication=2, prefix="k")
    w0, w1 = sorted(av)
    h0 = fresh_engine.submit_pinned(nap, "k-0", 5.0, worker=w0, timeout=120)
    time.sleep(0.5)
    t0 = time.monotonic()
    fresh_engine.kill_worker(w0)
    seen = events_until(fresh_engine, lambda evs: any(isinstance(e, UnitLost) and e.handle == h0 for e in evs)
                        and any(isinstance(e, WorkerLost) for e in evs), timeout=30)
    assert time.monotonic() - t0 < 10, "noticed through the cluster, well before the unit's deadline"
    assert WorkerLost(w0, "killed" if fresh_engine.kind == "local" else "removed") in seen
    assert fresh_engine.holders("k-0") == {w1}
    # the survivor still runs units on its copy
    h1 = fresh_engine.submit_pinned(echo, "k-0", 1, worker=w1, timeout=60)
    ev = collect(fresh_engine, [h1])[h1]
    assert isinstance(ev, UnitDone) and ev.result[0] == "shared"


def test_unpinned_tasks_survive_a_killed_worker(fresh_engine):
    handles = [fresh_engine.submit(nap, None, 0.3) for _ in range(4)]
    time.sleep(0.1)
    fresh_engine.kill_worker(fresh_engine.workers()[0])
    done = collect(fresh_engine, handles, timeout=60)
    assert all(isinstance(ev, UnitDone) for ev in done.values())


def test_a_task_whose_named_workers_are_all_lost_is_reported_lost(fresh_engine):
    """A restricted task never waits forever for workers that are gone, nor
    runs where it was not allowed: it is lost, and the caller decides."""
    w0, w1 = fresh_engine.workers()
    fresh_engine.place("busy", 0, [w0])
    pinned = fresh_engine.submit_pinned(nap, "busy", 3.0, worker=w0, timeout=120)
    time.sleep(0.3)
    queued = fresh_engine.submit(where_task, 0, workers=[w0])  # waits behind the pinned unit
    running = fresh_engine.submit(nap, None, 3.0, workers=[w1])
    time.sleep(0.3)
    fresh_engine.kill_worker(w0)
    done = collect(fresh_engine, [queued, pinned, running], timeout=60)
    assert isinstance(done[pinned], UnitLost)
    assert isinstance(done[queued], UnitLost) and done[queued].reason == "worker-lost"
    assert isinstance(done[running], UnitDone)  # its worker lives: untouched


# What ``import *`` brings into a test module: the tests (computed, so that a
# new test cannot be left out of the suite).
__all__ = [name for name in dict(globals()) if name.startswith("test_")]
