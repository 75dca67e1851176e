"""Dask clusters from an ``--engine`` value: dask-gateway, or a factory.

We manage no cluster of our own. ``"gateway"`` asks a dask-gateway server for
a new cluster; everything about that server (its address, the proxy, how to
authenticate, the cluster options) comes from dask-gateway's own
configuration: the dask config keys ``gateway.*``, i.e. a YAML file in
``~/.config/dask/`` or environment variables such as
``DASK_GATEWAY__ADDRESS`` and ``DASK_GATEWAY__AUTH__TYPE=jupyterhub`` (then
``dask_gateway.JupyterHubAuth`` sends ``$JUPYTERHUB_API_TOKEN``, the token
JupyterHub gives the service). ``"module:callable"`` imports a factory that
returns a ``distributed.Client`` or a cluster object (anything with
``scheduler_address``: dask-jobqueue's ``SLURMCluster``, dask-kubernetes'
``KubeCluster``, ...), which is how Slurm, PBS and Kubernetes are reached.

This module imports neither Dask nor dask-gateway at import time (the
engine package loads no Dask; ``dask_gateway`` is imported only for
``"gateway"``), and it touches ``distributed`` objects only by duck typing:
``engine/dask.py`` stays the one module that imports ``distributed``.

:class:`Connection` is the picklable form of "where the scheduler is and how
to talk to it" that a service hands to its job-slot processes after opening
one cluster for all of them (:func:`open_cluster`).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable

from ease_jupyter.execution.engine.base import EngineError

__all__ = [
    "ENGINE_FORMS",
    "Connection",
    "OpenCluster",
    "check_engine_spec",
    "engine_spec_form",
    "load_factory",
    "call_factory",
    "gateway_cluster",
    "open_cluster",
    "is_client",
    "is_cluster",
]

#: The accepted ``--engine`` values, as every error about one names them.
ENGINE_FORMS = (
    "'local', 'dask', 'gateway', a scheduler address such as 'tcp://host:8786' or 'tls://host:8786', "
    "or 'module:callable' (an importable factory returning a distributed.Client or a cluster object)"
)

_MODES = ("local", "dask", "gateway")
_ADDRESS = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")
_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass(frozen=True)
class Connection:
    """A scheduler's address and the ``distributed.security.Security`` to
    reach it with (None: the dask config's ``distributed.comm.tls.*``).
    Picklable, so a service's job-slot processes can each connect to the
    cluster the service opened once."""

    address: str
    security: Any = None

    def __repr__(self) -> str:  # never print credentials
        return f"Connection({self.address!r}, security={type(self.security).__name__ if self.security else None})"


def is_url(value: str) -> bool:
    """Whether ``value`` has the form ``scheme://rest`` (a scheduler address,
    an fsspec URL)."""
    return bool(_ADDRESS.match(value))


def engine_spec_form(spec: Any) -> str | None:
    """``"mode"``, ``"address"`` or ``"factory"`` for an ``--engine`` string of
    that form, None for anything else."""
    if not isinstance(spec, str):
        return None
    if spec in _MODES:
        return "mode"
    if _ADDRESS.match(spec):
        return "address"
    if _FACTORY.match(spec):
        return "factory"
    return None


def check_engine_spec(spec: Any) -> str:
    """Check an ``--engine`` value before anything starts: its form, and for
    a factory that it imports and is callable (the factory is not called).

    Returns:
        Its form (see :func:`engine_spec_form`).

    Raises:
        EngineError: naming the value and the accepted forms, or the module
            or attribute that failed to import.
    """
    form = engine_spec_form(spec)
    if form is None:
        raise EngineError(f"engine: found {spec!r}, expected {ENGINE_FORMS}")
    if form == "factory":
        load_factory(spec)
    return form


def load_factory(spec: str) -> Callable[[], Any]:
    """Import ``module:callable`` (the callable may be dotted: ``mod:Class.make``).

    Raises:
        EngineError: the module does not import, lacks the attribute, or the
            attribute is not callable.
    """
    if engine_spec_form(spec) != "factory":
        raise EngineError(f"engine: found {spec!r}, expected {ENGINE_FORMS}")
    module_name, attr = spec.split(":", 1)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is the user's factory's
        raise EngineError(f"engine: found {spec!r}, but module {module_name!r} failed to import ({error!r}); "
                          f"expected {ENGINE_FORMS}") from error
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise EngineError(f"engine: found {spec!r}, but {module_name!r} has no attribute {attr!r} "
                              f"(missing: {part!r}); expected {ENGINE_FORMS}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise EngineError(f"engine: found {spec!r}, but {module_name}:{attr} is a {type(obj).__name__}, "
                          "expected a callable returning a distributed.Client or a cluster object")
    return obj


def is_client(obj: Any) -> bool:
    """A ``distributed.Client`` (by duck typing: this module imports no Dask)."""
    return callable(getattr(obj, "submit", None)) and callable(getattr(obj, "scheduler_info", None))


def is_cluster(obj: Any) -> bool:
    """A Dask cluster object: it knows its scheduler's address or makes clients."""
    return isinstance(getattr(obj, "scheduler_address", None), str) or callable(getattr(obj, "get_client", None))


def call_factory(spec: str) -> Any:
    """Import and call the factory ``spec``; its result is a Client or a cluster.

    Raises:
        EngineError: import failures (see :func:`load_factory`), an exception
            from the factory, or a result that is neither.
    """
    factory = load_factory(spec)
    try:
        made = factory()
    except Exception as error:  # noqa: BLE001 - reported with the factory's name
        raise EngineError(f"engine: the factory {spec!r} raised {error!r}") from error
    if not (is_client(made) or is_cluster(made)):
        close_cluster(made)
        raise EngineError(f"engine: the factory {spec!r} returned a {type(made).__name__}, expected a "
                          "distributed.Client or a cluster object (with scheduler_address or get_client())")
    return made


def gateway_cluster(workers: int | None = None, *, adaptive: bool = False) -> Any:
    """A new dask-gateway cluster, configured by dask-gateway's own config
    (``gateway.address``, ``gateway.proxy-address``, ``gateway.auth.*``,
    ``gateway.cluster.options``), shut down when it is closed.

    Args:
        workers: scale to this many workers (``cluster.scale``; None: one);
            with ``adaptive``, the most workers the gateway may give it
            (None: the server's limit).
        adaptive: let the gateway scale the cluster between 1 and
            ``workers`` by load (``cluster.adapt``) instead of a fixed count.

    Raises:
        EngineError: dask-gateway is not installed, no gateway address is
            configured, or the server refused or failed the cluster.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise EngineError(f"workers: found {workers!r}, expected a positive integer or None")
    try:
        import dask_gateway
    except ImportError as error:
        raise EngineError("engine: found 'gateway', but the package dask-gateway is not installed; expected "
                          "`pip install ease_jupyter[gateway]`") from error
    cluster = _start_gateway_cluster(dask_gateway)
    try:
        if adaptive:
            cluster.adapt(minimum=1, maximum=workers)
        else:
            cluster.scale(1 if workers is None else workers)
    except Exception:
        close_cluster(cluster)
        raise
    return cluster


def _start_gateway_cluster(dask_gateway: Any) -> Any:
    """``GatewayCluster(shutdown_on_close=True)``, or the ``EngineError`` of
    a refused start with nothing of it left behind.

    dask-gateway registers a cluster object for its clean-up at exit
    (``GatewayCluster._instances``) before it makes the object's ``Gateway``
    client. When that raises (no address, JupyterHub auth without a token),
    the half-made object stays registered, and at exit the clean-up fails
    on it and prints a traceback after our one-line error. So a refused start
    takes its half-made object out of that registry. (A start the server
    refuses cleans up after itself: dask-gateway stops what it began.)
    """
    registry = getattr(dask_gateway.GatewayCluster, "_instances", None)
    before = set(registry) if registry is not None else set()
    try:
        return dask_gateway.GatewayCluster(shutdown_on_close=True)
    except Exception as error:  # noqa: BLE001 - reported below, as the option's error
        if registry is not None:
            for half_made in set(registry) - before:
                if not hasattr(half_made, "gateway"):  # its Gateway client was never made: nothing to close
                    registry.discard(half_made)
        if isinstance(error, ValueError):  # dask-gateway's checks of its own configuration (no address, ...)
            raise EngineError(f"engine: found 'gateway', but dask-gateway refused its configuration ({error}); "
                              "expected the dask config keys gateway.* (gateway.address, gateway.proxy-address, "
                              "gateway.auth.type and what that auth needs)") from error
        raise EngineError(f"engine: found 'gateway', but the dask-gateway server did not start a cluster "
                          f"({error!r})") from error


def close_cluster(obj: Any) -> None:
    """Shut down a cluster (``shutdown()`` where it exists, as a gateway
    cluster has; else ``close()``), or close a client and the cluster it made."""
    if is_client(obj):
        cluster = getattr(obj, "cluster", None)
        obj.close()
        if cluster is not None:
            close_cluster(cluster)
        return
    for method in ("shutdown", "close"):
        fn = getattr(obj, method, None)
        if callable(fn):
            fn()
            break
    gateway = getattr(obj, "gateway", None)
    if gateway is not None and type(gateway).__name__ == "Gateway":
        # dask-gateway's GatewayCluster closed its Gateway just now; the
        # Gateway's __del__ would close it again, which fails once its event
        # loop has stopped ("Accessing the loop property while the loop is
        # not running"), printing a traceback for nothing.
        gateway.close = lambda: None


def connection_of(obj: Any) -> Connection:
    """Where a Client or a cluster object's scheduler is, with its security."""
    if is_client(obj):
        return Connection(obj.scheduler.address, getattr(obj, "security", None))
    address = getattr(obj, "scheduler_address", None)
    if not isinstance(address, str):
        raise EngineError(f"engine: found a {type(obj).__name__} with no scheduler_address, expected a cluster "
                          "object whose scheduler a job slot can connect to")
    return Connection(address, getattr(obj, "security", None))


@dataclass
class OpenCluster:
    """A cluster opened once for a whole service: job slots (possibly in
    other processes) connect through :attr:`connection`; :meth:`close` shuts
    the cluster down (a gateway cluster is stopped on the gateway)."""

    spec: str
    cluster: Any
    connection: Connection

    def close(self) -> None:
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            close_cluster(cluster)


def open_cluster(spec: str, *, workers: int | None = None, adaptive: bool = False) -> OpenCluster:
    """Open the cluster an ``--engine`` value of the form ``"gateway"`` or
    ``"module:callable"`` names.

    Raises:
        EngineError: any other value, or the failures of
            :func:`gateway_cluster` and :func:`call_factory`.
    """
    if spec == "gateway":
        cluster = gateway_cluster(workers, adaptive=adaptive)
    elif engine_spec_form(spec) == "factory":
        cluster = call_factory(spec)
    else:
        raise EngineError(f"engine: found {spec!r}, expected 'gateway' or 'module:callable' to open a cluster")
    try:
        return OpenCluster(spec, cluster, connection_of(cluster))
    except Exception:
        close_cluster(cluster)
        raise
