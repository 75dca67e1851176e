"""Our engines (local and Dask) pass the ``Engine`` contract
(ease_jupyter.testing.engine_contract); below it, what is specific to one adapter.
"""

from __future__ import annotations

import os
import sys

import cloudpickle
import pytest

from ease_jupyter.execution.engine import EngineError, LocalEngine, make_engine
from ease_jupyter.testing.engine_contract import *  # noqa: F401,F403 - the suite's tests
from ease_jupyter.testing.engine_contract import add

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
def fresh_engine(request):
    """A fresh engine for fault tests (they kill workers)."""
    e = new_engine(request.param)
    e.kind = request.param
    yield e
    e.close()


# -- the adapters ----------------------------------------------------------------------------


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
        # milliseconds between the server's diagnostics callbacks
        "tick_ms": dask_worker.periodic_callbacks["tick"].callback_time,
        "monitor_ms": dask_worker.periodic_callbacks["monitor"].callback_time,
    }


@pytest.mark.parametrize("engine", ["dask"], indirect=True)  # worker process settings exist on Dask only
def test_dask_workers_are_set_up_for_mop(engine):
    from dask.utils import parse_timedelta

    from ease_jupyter.execution.engine.dask import DASK_CONFIG

    settings = engine.client.run(worker_settings)
    assert len(settings) <= (os.cpu_count() or 1)  # at most one worker per core
    # the diagnostics run rarely, not at Dask's defaults (20 ms, 500 ms), on the cores the units need
    tick_ms = parse_timedelta(DASK_CONFIG["distributed.admin.tick.interval"]) * 1000
    monitor_ms = parse_timedelta(DASK_CONFIG["distributed.admin.system-monitor.interval"]) * 1000
    assert tick_ms > 20 and monitor_ms > 500
    for s in settings.values():
        assert s == {"profile_enabled": False, "profile_callbacks": [], "threads": 1, "omp": "1",
                     "tick_ms": tick_ms, "monitor_ms": monitor_ms}


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
        if path.parent == root / "testing":
            continue  # test code: the engine contract asks Dask which worker runs a unit
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
