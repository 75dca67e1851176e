"""Engines: where MOP units and Seneca tasks run (one contract, two backends).

``LocalEngine`` runs in-process threads (tests, a notebook with no cluster);
``DaskEngine`` (in ``ease_jupyter.execution.engine.dask``, the only module that
imports ``distributed``) runs on a Dask cluster. Importing this package does
not import Dask.
"""

from __future__ import annotations

from typing import Any

from ease_jupyter.execution.engine.base import (
    GPU,
    MEMORY,
    Engine,
    EngineError,
    Event,
    UnitDone,
    UnitFailed,
    UnitLost,
    WorkerAdded,
    WorkerLost,
)
from ease_jupyter.execution.engine.local import LocalEngine

__all__ = [
    "Engine",
    "EngineError",
    "Event",
    "UnitDone",
    "UnitFailed",
    "UnitLost",
    "WorkerAdded",
    "WorkerLost",
    "MEMORY",
    "GPU",
    "LocalEngine",
    "DaskEngine",
    "make_engine",
]


def __getattr__(name: str) -> Any:
    if name == "DaskEngine":
        from ease_jupyter.execution.engine.dask import DaskEngine

        return DaskEngine
    raise AttributeError(f"module 'ease_jupyter.execution.engine' has no attribute {name!r}")


def make_engine(spec: str | Engine | None = "local", **kwargs: Any) -> Engine:
    """``"local"`` (default), ``"dask"`` (a LocalCluster) or a scheduler
    address such as ``"tcp://host:8786"``; an Engine is returned as is."""
    if isinstance(spec, Engine):
        return spec
    if spec is None or spec == "local":
        return LocalEngine(**kwargs)
    if spec == "dask":
        from ease_jupyter.execution.engine.dask import DaskEngine

        return DaskEngine(**kwargs)
    if isinstance(spec, str) and "://" in spec:
        from ease_jupyter.execution.engine.dask import DaskEngine

        return DaskEngine(spec, **kwargs)
    raise EngineError(f"engine: found {spec!r}, expected 'local', 'dask' or a scheduler address like 'tcp://host:8786'")
