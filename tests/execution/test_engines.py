"""One contract test suite, run against both engines (local and Dask).

Differences between the engines are explicit ``if kind == ...`` checks.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import cloudpickle
import pytest

from ease_jupyter.execution.engine import (
    MEMORY,
    EngineError,
    LocalEngine,
    UnitDone,
    UnitFailed,
    UnitLost,
    WorkerAdded,
    WorkerLost,
    make_engine,
)
from ease_jupyter.execution.engine.base import partition_key

# Dask workers unpickle these test functions by value, not by module path.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ENGINES = ["local", "dask"]


def new_engine(kind: str):
    if kind == "local":
        return LocalEngine(2)
    from ease_jupyter.execution.engine.dask import DaskEngine

    return DaskEngine(n_workers=2)


@pytest.fixture(scope="module", params=ENGINES)
def engine(request):
    """A shared engine for tests that leave it as they found it."""
    e = new_engine(request.param)
    e.kind = request.param
    yield e
    e.close()


@pytest.fixture(params=ENGINES)
def fresh(request):
    """A fresh engine for fault tests (they kill workers)."""
    e = new_engine(request.param)
    e.kind = request.param
    yield e
    e.close()


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


def test_deadline_gives_up_on_the_unit_and_its_worker(fresh):
    """A pinned unit past its deadline is reported lost (to be re-queued), its
    worker is given up on, and a replacement joins with no data."""
    ws = fresh.workers()
    av = fresh.place_partitions({0: "p0", 1: "p1"}, replication=1, prefix="d")
    w = next(w for w, ps in av.items() if 0 in ps)
    h = fresh.submit_pinned(nap, "d-0", 3.0, worker=w, timeout=0.5)
    t0 = time.monotonic()
    seen = events_until(fresh, lambda evs: any(isinstance(e, WorkerAdded) for e in evs), timeout=60)
    lost = [e for e in seen if isinstance(e, UnitLost)]
    assert lost and lost[0].handle == h and lost[0].reason == "deadline"
    assert WorkerLost(w, "deadline") in seen
    assert seen.index(lost[0]) < seen.index(WorkerLost(w, "deadline"))
    assert time.monotonic() - t0 < 60
    new = [e.worker for e in seen if isinstance(e, WorkerAdded)][0]
    assert new not in ws and w not in fresh.workers() and new in fresh.workers()
    assert fresh.holders("d-0") == set() and fresh.holders("d-1") == {x for x in ws if x != w}
    assert not [e for e in seen if isinstance(e, UnitDone) and e.handle == h]  # never reported late
    with pytest.raises(EngineError, match="worker"):
        fresh.submit_pinned(nap, "d-0", 0, worker=w, timeout=5)


def test_killed_worker_loses_its_pinned_units_even_if_inputs_survive(fresh):
    """With r = 2 the input of a unit pinned to the killed worker still exists
    elsewhere; Dask would keep such a task waiting for its worker forever.
    The engine must report it lost instead."""
    av = fresh.place_partitions({0: "shared"}, replication=2, prefix="k")
    w0, w1 = sorted(av)
    h0 = fresh.submit_pinned(nap, "k-0", 5.0, worker=w0, timeout=120)
    time.sleep(0.5)
    t0 = time.monotonic()
    fresh.kill_worker(w0)
    seen = events_until(fresh, lambda evs: any(isinstance(e, UnitLost) and e.handle == h0 for e in evs)
                        and any(isinstance(e, WorkerLost) for e in evs), timeout=30)
    assert time.monotonic() - t0 < 10, "noticed through the cluster, well before the unit's deadline"
    assert WorkerLost(w0, "killed" if fresh.kind == "local" else "removed") in seen
    assert fresh.holders("k-0") == {w1}
    # the survivor still runs units on its copy
    h1 = fresh.submit_pinned(echo, "k-0", 1, worker=w1, timeout=60)
    ev = collect(fresh, [h1])[h1]
    assert isinstance(ev, UnitDone) and ev.result[0] == "shared"


def test_unpinned_tasks_survive_a_killed_worker(fresh):
    handles = [fresh.submit(nap, None, 0.3) for _ in range(4)]
    time.sleep(0.1)
    fresh.kill_worker(fresh.workers()[0])
    done = collect(fresh, handles, timeout=60)
    assert all(isinstance(ev, UnitDone) for ev in done.values())


def test_closed_engine_refuses_work():
    e = LocalEngine(1)
    e.close()
    e.close()
    with pytest.raises(EngineError, match="closed"):
        e.submit(add, 1, 2)


def test_make_engine_specs():
    assert isinstance(make_engine("local", n_workers=1), LocalEngine)
    with pytest.raises(EngineError, match="engine"):
        make_engine("spark")


# -- Dask specifics ------------------------------------------------------------------------


def worker_settings(dask_worker):
    import dask

    return {
        "profile_enabled": dask.config.get("distributed.worker.profile.enabled"),
        "profile_callbacks": sorted(k for k in dask_worker.periodic_callbacks if k.startswith("profile")),
        "threads": dask_worker.state.nthreads,
        "omp": os.environ.get("OMP_NUM_THREADS"),
    }


@pytest.mark.parametrize("engine", ["dask"], indirect=True)  # worker process settings exist on Dask only
def test_dask_workers_are_set_up_for_mop(engine):
    settings = engine.client.run(worker_settings)
    assert len(settings) <= (os.cpu_count() or 1)  # at most one worker per core
    for s in settings.values():
        assert s == {"profile_enabled": False, "profile_callbacks": [], "threads": 1, "omp": "1"}


def test_dask_refuses_more_workers_than_cores():
    from ease_jupyter.execution.engine.dask import DaskEngine

    with pytest.raises(EngineError, match="n_workers"):
        DaskEngine(n_workers=(os.cpu_count() or 1) + 1)


def test_only_the_dask_adapter_imports_distributed():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "ease_jupyter"
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            if any(n.split(".")[0] in ("distributed", "dask") for n in names):
                offenders.append(str(path.relative_to(root)))
    assert sorted(set(offenders)) == ["execution/engine/dask.py"]


def test_importing_the_engines_loads_neither_dask_nor_torch():
    import subprocess

    code = (
        "import sys\n"
        "import ease_jupyter.execution.engine, ease_jupyter.execution.mop.runner, ease_jupyter.execution.units\n"
        "print(sorted(m for m in ('distributed', 'dask', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
