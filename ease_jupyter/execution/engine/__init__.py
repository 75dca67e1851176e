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


def make_engine(spec: Any = "local", **kwargs: Any) -> Engine:
    """The engine an ``--engine`` value names.

    * ``"local"`` (default): a ``LocalEngine``; ``"dask"``: a Dask
      ``LocalCluster`` (``kwargs`` go to the engine);
    * a scheduler address (``"tcp://host:8786"``, ``"tls://host:8786"`` with
      TLS from the dask config's ``distributed.comm.tls.*`` or
      ``security=``);
    * ``"gateway"``: a new dask-gateway cluster configured by dask-gateway's
      own config (``gateway.*``), scaled to ``n_workers`` (default one; with
      ``adaptive=True``, adaptively up to it) and shut down when the engine
      closes;
    * ``"module:callable"``: a factory returning a ``distributed.Client`` or
      a cluster object (dask-jobqueue, dask-kubernetes), closed with the engine;
    * a ``clusters.Connection`` (a cluster opened once by a service), a
      ``distributed.Client`` or a cluster object (left open at close);
    * an Engine is returned as is.

    Raises:
        EngineError: any other value, naming it and the accepted forms; a
            factory that does not import (naming the module or attribute).
    """
    if isinstance(spec, Engine):
        return spec
    if spec is None or spec == "local":
        return LocalEngine(**kwargs)
    from ease_jupyter.execution.engine import clusters

    if isinstance(spec, str) and clusters.engine_spec_form(spec) is None:
        raise EngineError(f"engine: found {spec!r}, expected {clusters.ENGINE_FORMS}")
    if not isinstance(spec, (str, clusters.Connection)) and not (clusters.is_client(spec) or clusters.is_cluster(spec)):
        raise EngineError(f"engine: found a {type(spec).__name__}, expected {clusters.ENGINE_FORMS}, an Engine, "
                          "a distributed.Client or a cluster object")
    from ease_jupyter.execution.engine.dask import DaskEngine

    if spec == "dask":
        return DaskEngine(**kwargs)
    if isinstance(spec, clusters.Connection):
        return DaskEngine(spec.address, security=spec.security, **kwargs)
    if not isinstance(spec, str):
        return DaskEngine(spec, **kwargs)
    if spec == "gateway":
        cluster = clusters.gateway_cluster(kwargs.pop("n_workers", None), adaptive=kwargs.pop("adaptive", False))
    elif clusters.engine_spec_form(spec) == "factory":
        cluster = clusters.call_factory(spec)
    else:
        return DaskEngine(spec, **kwargs)
    try:
        return DaskEngine(cluster, owns_cluster=True, **kwargs)
    except BaseException:
        clusters.close_cluster(cluster)
        raise
