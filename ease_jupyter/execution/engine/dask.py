"""The Dask adapter: the only module of ease_jupyter that imports ``distributed``.

It attaches to any Dask cluster: a ``LocalCluster`` it starts, a scheduler
address (``tcp://``, ``tls://`` with a ``Security``), a ``Client``, or a
cluster object made by dask-gateway, dask-jobqueue or dask-kubernetes
(``engine.clusters`` makes those from an ``--engine`` value; docs/clusters.md).

All pinning lives here (STYLE §6, the coffea/cugraph lesson):

* a data partition is scattered to exactly the workers that should hold it
  (``client.scatter({key: data}, workers=[w], broadcast=False)``, one key per
  copy), never broadcast;
* a unit runs where its partition lives: ``client.submit(..., workers=[w],
  allow_other_workers=False)``, with the copy on ``w`` as its input;
* every pinned unit has a deadline. Dask cannot move a pinned task, and a task
  pinned to a worker that is gone while its input survives elsewhere sits in
  the scheduler's ``no-worker`` state forever (checked with distributed
  2026.8.0). So the adapter resolves each pinned unit itself: on the
  scheduler's ``remove-worker`` event (topic ``"all"``; measured here: ~10 ms
  after a SIGKILL of a worker process) it reports every unit pinned to that
  worker as lost and cancels its future; and when a unit's deadline passes
  (a hung worker that Dask has not noticed: its TCP connection stays open,
  and the scheduler's worker TTL is minutes), it cancels the unit, gives up
  on the worker and asks its nanny to restart it.

Workers run one thread each, at most one worker per core, with torch on one
thread (the nanny's ``OMP_NUM_THREADS=1``, a ``WorkerPlugin``, and every unit
calls ``torch.set_num_threads(1)``), and with Dask's
statistical profiler off (``distributed.worker.profile.enabled: False``; it
made MOP slower than sequential training when measured). The plugin also
stops the profiler's periodic callbacks on workers of an existing cluster
that were started with it on.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Sequence

import dask
from dask.utils import funcname
from distributed import Client, LocalCluster, WorkerPlugin
from distributed.security import Security

from ease_jupyter.execution.engine.base import (
    MEMORY,
    Engine,
    EngineError,
    Event,
    UnitDone,
    UnitFailed,
    UnitLost,
    WorkerAdded,
    WorkerLost,
    check_resources,
    check_timeout,
    check_workers,
    new_handle,
)
from ease_jupyter.execution.engine.clusters import close_cluster
from ease_jupyter.errors import ClusterUnavailableError, EaseMLError

__all__ = ["DaskEngine", "WorkerSetup", "DASK_CONFIG", "local_cluster", "ClusterLostError"]

#: Dask settings for our workers (key names checked in distributed 2026.8.0).
DASK_CONFIG: dict[str, Any] = {
    "distributed.worker.profile.enabled": False,
    # Belt and braces if a deployment re-enables it: sample rarely.
    "distributed.worker.profile.interval": "1s",
    "distributed.worker.profile.cycle": "60s",
    # Diagnostics only: the event-loop health check (default every 20 ms; it
    # warns after 3 s blocked) and the dashboard's CPU/memory/network samples
    # (default every 500 ms). At the defaults every server (scheduler,
    # nannies, workers) spends CPU on them all the time, which a worker that
    # trains on every core takes from its units. Like the rest of this dict,
    # it reaches the clusters this process starts (LocalCluster); a gateway's
    # or a tcp:// cluster's servers keep their own configuration.
    "distributed.admin.tick.interval": "500ms",
    "distributed.admin.system-monitor.interval": "2s",
}

_PROFILE_CALLBACKS = ("profile", "profile-cycle")


class WorkerSetup(WorkerPlugin):
    """Run on every worker, including ones that join or restart later: no
    statistical profiler, one torch thread."""

    idempotent = True
    name = "ease-jupyter-worker-setup"

    def setup(self, worker: Any) -> None:
        for name in _PROFILE_CALLBACKS:
            pc = worker.periodic_callbacks.pop(name, None)
            if pc is not None:
                pc.stop()
        # torch is not imported here: importing it takes seconds, and a worker
        # that restarts after a crash should rejoin at once. The nanny starts
        # workers with OMP_NUM_THREADS=1, and every unit calls
        # torch.set_num_threads(1) (``units._Seeded``); if torch is already
        # loaded (a preload), set it now.
        import sys

        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _pid() -> int:
    return os.getpid()


def _total_memory() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:  # pragma: no cover - psutil comes with distributed
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def local_cluster(n_workers: int, *, memory_per_worker: int | None = None,
                  resources: Mapping[str, float] | None = None) -> LocalCluster:
    """A ``LocalCluster`` of ``n_workers`` processes with one thread each,
    each declaring its memory as the ``MEMORY`` resource, no dashboard.
    Several engines (one per job slot of the service) can be clients of it
    through its ``scheduler_address``; close it with ``.close()``."""
    mem = int(memory_per_worker or _total_memory() // n_workers)
    with dask.config.set(DASK_CONFIG):
        return LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=mem,
            resources={MEMORY: mem, **dict(resources or {})},
            dashboard_address=None,
            # no dashboard; its bare HTTP routes on a free port, not 8787
            scheduler_kwargs={"dashboard_address": ":0"},
            silence_logs=logging.ERROR,
        )


#: Tries at starting a Client whose event-loop thread did not start in time.
CLIENT_STARTS = 3


def _client(target: Any, security: Any) -> Client:
    """``Client(target)``, tried again when its event-loop thread did not start:
    distributed waits 10 s for that thread and then fails a bare ``assert``
    (seen on a loaded two-core machine), before it has tried to connect; the
    thread of a failed try, if it starts later, is left idle."""
    tries = 1
    while True:
        try:
            return Client(target, security=security, set_as_default=False)
        except AssertionError as error:
            if tries == CLIENT_STARTS:
                raise EngineError(f"engine: the Dask client's event-loop thread did not start ({tries} tries); "
                                  "expected a machine with some CPU time to spare") from error
            logging.getLogger(__name__).warning("the Dask client's event-loop thread did not start; trying again")
            tries += 1


def _connect(cluster: Any, security: Any) -> tuple[Client, bool]:
    """A client of ``cluster`` (an address, a Client or a cluster object) and
    whether the engine made it (and so closes it)."""
    if isinstance(cluster, Client):
        if security is not None:
            raise EngineError("security: found one next to an existing Client, expected None (a Client has its own)")
        return cluster, False
    if isinstance(cluster, str):
        target: Any = cluster
        if cluster.startswith("gateway://"):
            _load_gateway_comm(cluster)
        if security is None:
            security = _security_from_config(cluster)
    elif isinstance(getattr(cluster, "scheduler_address", None), str):
        target = cluster  # the Client takes its address and its security from it
    elif callable(getattr(cluster, "get_client", None)):
        return cluster.get_client(), True
    else:
        raise EngineError(f"engine: found a {type(cluster).__name__}, expected None, a scheduler address, a "
                          "distributed.Client or a cluster object (with scheduler_address or get_client())")
    try:
        return _client(target, security), True
    except (OSError, TimeoutError) as error:
        where = cluster if isinstance(cluster, str) else cluster.scheduler_address
        raise EngineError(f"engine: could not connect to the Dask scheduler at {where!r} ({error}); expected a "
                          "running scheduler reachable from here") from error


def _security_from_config(address: str) -> Security | None:
    """The dask config's TLS settings (``distributed.comm.tls.*``) for a
    ``tls://`` address; None elsewhere (the Client's own default)."""
    if not address.startswith("tls://") or dask.config.get("distributed.client.security-loader", None):
        return None
    security = Security()
    if not (security.tls_ca_file and security.tls_client_cert):
        raise EngineError(f"security: found no TLS credentials for {address!r}, expected a "
                          "distributed.security.Security or the dask config keys distributed.comm.tls.ca-file, "
                          "distributed.comm.tls.client.cert and distributed.comm.tls.client.key")
    return security


def _load_gateway_comm(address: str) -> None:
    """``gateway://`` addresses (a dask-gateway cluster's scheduler behind the
    gateway's proxy) need dask-gateway's comm backend, which it registers
    with distributed on import."""
    try:
        import dask_gateway  # noqa: F401 - registers the "gateway" comm
    except ImportError as error:
        raise EngineError(f"engine: found {address!r}, but the package dask-gateway is not installed; expected "
                          "`pip install ease_jupyter[gateway]`") from error


#: ``bytes`` arguments of a pinned unit larger than this are scattered
#: straight to the unit's worker instead of riding in the task graph through
#: the scheduler (measured: 2.8 s -> see ``units.HOP_MEASUREMENTS``).
DIRECT_BYTES = 1 << 20


class ClusterLostError(EngineError, ClusterUnavailableError):
    """The cluster could not serve a request now: a worker left, the
    scheduler is gone, or no worker is there. An ``EngineError`` to the
    engine's callers (a MOP driver re-queues a unit whose worker went), a
    ``ClusterUnavailableError`` to the service (the job is retried later)."""


class TaskKillsWorkers(EaseMLError):
    """A task's ``UnitFailed`` error when Dask gave up on it because the
    workers running it kept dying (Dask's ``KilledWorker``): the task's own
    failure (its model crashes its worker or runs out of memory), not the
    cluster's, so a job that fails so is its model's failure."""


# distributed's errors when the cluster is away: CommClosedError is an OSError,
# a scheduler with no (valid) workers answers TimeoutError.
_CLUSTER_ERRORS = (OSError, TimeoutError)


@dataclass
class _Pending:
    handle: str
    future: Any
    address: str | None  # pinned worker's address
    deadline: float | None
    submitted: float
    inputs: tuple[Any, ...] = ()  # futures of scattered arguments, released with the unit
    allowed: frozenset[str] | None = None  # an unpinned task restricted to these workers' addresses


class DaskEngine(Engine):
    """Engine on a Dask cluster: a ``LocalCluster`` by default, the scheduler
    at an address, or a cluster someone else made (dask-gateway,
    dask-jobqueue, dask-kubernetes; see ``engine.clusters``).

    Args:
        cluster: None starts a ``LocalCluster`` with worker processes and one
            thread each; a scheduler address (``tcp://host:8786``,
            ``tls://host:8786``, a gateway's ``gateway://...``); an existing
            ``distributed.Client``; or a cluster object (anything with
            ``scheduler_address``, e.g. ``GatewayCluster``, ``SLURMCluster``,
            ``KubeCluster``).
        security: a ``distributed.security.Security`` for the connection.
            Default: the cluster object's own, else the dask config's
            ``distributed.comm.tls.*`` (a ``tls://`` address needs one).
        owns_cluster: close the given Client or cluster object (a cluster:
            ``shutdown()`` where it has one, so a gateway cluster stops) when
            the engine closes. A ``LocalCluster`` started here is always owned.
        n_workers: local workers; default and maximum: the number of cores.
        memory_per_worker: each local worker's memory limit and its declared
            ``MEMORY`` resource (bytes); default: total memory / workers.
        resources: more resources declared by local workers.
        restart_on_deadline: restart (through its nanny) a worker whose
            pinned unit missed its deadline.
        shared_filesystem: whether the workers of a cluster not started here
            see the driver's file system (always true for a LocalCluster).
        gather_timeout: seconds to fetch a finished unit's result before it
            counts as lost with its worker.

    A worker that declares no ``MEMORY`` resource (plain ``dask worker``, a
    gateway or jobqueue worker) counts its memory limit as ``MEMORY``: a
    request for it is checked against that limit and not passed to Dask,
    whose scheduler would hold a task asking for an undeclared resource
    forever.
    """

    def __init__(
        self,
        cluster: Any = None,
        *,
        security: Any = None,
        owns_cluster: bool = False,
        n_workers: int | None = None,
        memory_per_worker: int | None = None,
        resources: Mapping[str, float] | None = None,
        restart_on_deadline: bool = True,
        gather_timeout: float = 60.0,
        shared_filesystem: bool = False,
    ):
        self._cluster: Any = None  # closed with the engine
        self._own_client = True
        self._shared_fs = bool(shared_filesystem) or cluster is None
        self._restart = restart_on_deadline
        self._gather_timeout = float(gather_timeout)
        cores = os.cpu_count() or 1
        with dask.config.set(DASK_CONFIG):
            if cluster is None:
                n = cores if n_workers is None else n_workers
                if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= cores:
                    raise EngineError(f"n_workers: found {n_workers!r}, expected an integer in [1, {cores}] (one worker per core)")
                self._cluster = local_cluster(n, memory_per_worker=memory_per_worker, resources=resources)
                self._client = Client(self._cluster, set_as_default=False)
            else:
                self._client, self._own_client = _connect(cluster, security)
                if owns_cluster:
                    self._cluster = cluster
        try:
            self._client.register_plugin(WorkerSetup(), name=WorkerSetup.name)
        except Exception:
            self._close_connection()
            raise
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.RLock()
        self._pending: dict[str, _Pending] = {}
        self._placed: dict[tuple[Hashable, str], Any] = {}  # (key, name) -> future
        self._name_of: dict[str, str] = {}  # live address -> name
        self._address_of: dict[str, str] = {}  # name -> address (live or lost)
        self._lost: set[str] = set()
        self._dask_names: dict[str, str] = {}  # address -> the worker's own name (for messages)
        self._generation: dict[str, int] = {}
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._scheduler_gone = False
        # Handles are unique in this process only; several processes (the
        # service's job slots) may be clients of one cluster, whose task keys
        # must not collide.
        self._tag = uuid.uuid4().hex[:12]
        self._client.subscribe_topic("all", self._on_scheduler_event)
        info = self._client.scheduler_info(n_workers=-1)["workers"]
        self._note_names(info)
        for address_ in sorted(info):
            self._admit(address_)

    # -- names ---------------------------------------------------------------------
    def _admit(self, address: str) -> str | None:
        """Give a newly seen worker address a name that was never used before."""
        with self._lock:
            if address in self._name_of:
                return None
            gen = self._generation.get(address, 0)
            self._generation[address] = gen + 1
            name = address if gen == 0 else f"{address}#{gen}"
            self._name_of[address] = name
            self._address_of[name] = address
            return name

    def _note_names(self, info: Mapping[str, Any]) -> None:
        """Remember each worker's own name (``dask worker --name``) from the
        scheduler's ``workers`` info, for messages that must not show addresses."""
        with self._lock:
            for address, i in info.items():
                name = str(i.get("name", "")) if isinstance(i, Mapping) else ""
                host = address.split("://")[-1]
                if name and host not in name and "://" not in name:  # a worker started without --name is its address
                    self._dask_names[address] = name

    def _label(self, worker: str | None) -> str:
        """``worker`` as a message names it: by its own name, never its address."""
        name = self._dask_names.get(self._address_of.get(worker or "", ""))
        return f"worker {name!r}" if name else "a worker"

    def _live_address(self, worker: str) -> str:
        if self._closed:
            raise EngineError("engine: found it closed, expected an open engine")
        if worker in self._lost:
            raise ClusterLostError(f"the cluster lost {self._label(worker)}; the work is retried when the "
                                   "cluster has workers again")
        address = self._address_of.get(worker)
        if address is None or self._name_of.get(address) != worker:  # (a lost one: raised above)
            raise EngineError(f"worker: found {worker!r}, expected one of the live workers {self.workers()}")
        return address

    def _key(self, name: str, fn: Callable[..., Any] | None = None) -> str:
        """The Dask key of our ``name`` (a handle or a data key), unique to
        this engine. A task's key starts with its function's name, as Dask's
        own keys do, so the dashboard, the task stream and the workers' logs
        say what ran (``train_unit-unit-12-...``)."""
        return f"{name}-{self._tag}" if fn is None else f"{funcname(fn)}-{name}-{self._tag}"

    @property
    def client(self) -> Client:
        """The Dask client (for diagnostics; submit work through the engine)."""
        return self._client

    @property
    def shared_filesystem(self) -> bool:
        return self._shared_fs

    # -- workers ---------------------------------------------------------------------
    def workers(self) -> list[str]:
        with self._lock:
            return sorted(self._name_of.values())

    def worker_resources(self) -> dict[str, dict[str, float]]:
        return {name: implied for name, (implied, _declared) in self._resources().items()}

    def _resources(self) -> dict[str, tuple[dict[str, float], dict[str, float]]]:
        """Each live worker's resources as the engine reports them (with
        ``MEMORY`` implied by the memory limit where undeclared) and as
        declared to Dask."""
        try:
            info = self._client.scheduler_info(n_workers=-1)["workers"]
        except _CLUSTER_ERRORS as error:
            raise ClusterLostError("the cluster's scheduler cannot be reached; the work is retried when it is "
                                   "back") from error
        self._note_names(info)
        out = {}
        with self._lock:
            for address, i in info.items():
                if address not in self._name_of:
                    continue
                declared = {k: float(v) for k, v in (i.get("resources") or {}).items()}
                implied = dict(declared)
                if MEMORY not in implied and i.get("memory_limit"):
                    implied[MEMORY] = float(i["memory_limit"])
                out[self._name_of[address]] = (implied, declared)
        return out

    # -- data ----------------------------------------------------------------------------
    def place(self, key: Hashable, data: Any, workers: Sequence[str]) -> None:
        with self._lock:
            targets = [(w, self._live_address(w)) for w in workers]
        for name, address in targets:
            dask_key = self._key(f"data-{key}-{new_handle('copy')}")
            try:
                fut = self._client.scatter({dask_key: data}, workers=[address], broadcast=False, hash=False)[dask_key]
            except Exception as error:  # noqa: BLE001 - the scheduler dropped the worker (e.g. its nanny closed) meanwhile
                self._lose_worker(address, "left while data was placed", [])  # the caller learns by the error
                raise ClusterLostError(f"the cluster lost {self._label(name)} while data was placed on it; the "
                                       "work is retried when the cluster has workers again") from error
            with self._lock:
                self._placed[(key, name)] = fut

    def holders(self, key: Hashable) -> set[str]:
        with self._lock:
            return {w for (k, w) in self._placed if k == key and w not in self._lost}

    def drop(self, key: Hashable, workers: Sequence[str] | None = None) -> None:
        with self._lock:
            for k in [k for k in self._placed if k[0] == key and (workers is None or k[1] in workers)]:
                del self._placed[k]  # releasing the future frees the data

    def share(self, value: Any) -> Any:
        dask_key = self._key(f"shared-{new_handle('value')}")
        try:
            return self._client.scatter({dask_key: value}, hash=False)[dask_key]
        except _CLUSTER_ERRORS as error:  # no worker joined in time, or the scheduler went away
            raise ClusterLostError("the cluster has no worker to take the data now; the work is retried when "
                                   "it has workers again") from error

    # -- submission ----------------------------------------------------------------------
    def submit_pinned(self, fn: Callable[..., Any], key: Hashable, *args: Any, worker: str, timeout: float) -> str:
        timeout = check_timeout(timeout)
        with self._lock:
            address = self._live_address(worker)
            data = self._placed.get((key, worker))
            if data is None:
                raise EngineError(f"key: found {key!r} not placed on {worker!r}, expected a key the worker holds")
            handle = new_handle("unit")
        now = time.monotonic()
        args, inputs = self._direct(args, address, handle)
        with self._lock:
            fut = self._client.submit(
                _call, fn, data, *args,
                key=self._key(handle, fn), workers=[address], allow_other_workers=False, pure=False,
            )
            self._pending[handle] = _Pending(handle, fut, address, now + timeout, now, inputs)
        fut.add_done_callback(lambda _f, h=handle: self._queue.put(("done", h)))
        return handle

    def _direct(self, args: tuple[Any, ...], address: str, handle: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """Scatter large ``bytes`` arguments (model checkpoints) to the unit's
        worker directly, so they do not travel through the scheduler."""
        out, inputs = [], []
        for i, a in enumerate(args):
            if isinstance(a, (bytes, bytearray)) and len(a) > DIRECT_BYTES:
                key = self._key(f"{handle}-arg{i}")
                a = self._client.scatter({key: a}, workers=[address], broadcast=False, hash=False)[key]
                inputs.append(a)
            out.append(a)
        return tuple(out), tuple(inputs)

    def submit(self, fn: Callable[..., Any], *args: Any, resources: Mapping[str, float] | None = None,
               workers: Sequence[str] | None = None) -> str:
        """See :meth:`Engine.submit`. With ``workers`` (engine worker names),
        the task runs only on those of them that are live (Dask's
        ``workers=[addresses], allow_other_workers=False``); when all of them
        are lost before it finishes, it is reported ``UnitLost``."""
        if self._closed:
            raise EngineError("engine: found it closed, expected an open engine")
        resources_of = self._resources()
        allowed = None
        chosen = check_workers(workers, resources_of)
        if chosen is not None:
            resources_of = {w: resources_of[w] for w in chosen}
            with self._lock:
                allowed = frozenset(self._address_of[w] for w in chosen)
        req = check_resources(resources, {w: implied for w, (implied, _) in resources_of.items()})
        # Only resources some worker declares to Dask go to Dask (MEMORY may be implied).
        dask_req = {k: v for k, v in req.items() if any(k in declared for _, declared in resources_of.values())}
        handle = new_handle("task")
        placement = {} if allowed is None else {"workers": sorted(allowed), "allow_other_workers": False}
        fut = self._client.submit(_call, fn, *args, key=self._key(handle, fn), resources=dask_req or None, pure=False,
                                  **placement)
        with self._lock:
            self._pending[handle] = _Pending(handle, fut, None, None, time.monotonic(), allowed=allowed)
        fut.add_done_callback(lambda _f, h=handle: self._queue.put(("done", h)))
        return handle

    def cancel(self, handle: str) -> None:
        with self._lock:
            p = self._pending.pop(handle, None)
        if p is not None:
            p.future.cancel()

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    # -- events ----------------------------------------------------------------------------
    def _on_scheduler_event(self, event: tuple[float, dict]) -> None:
        # Runs on the client's event loop: only hand over.
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else event
        if isinstance(msg, dict) and msg.get("action") in ("add-worker", "remove-worker") and msg.get("worker"):
            self._queue.put((msg["action"], msg["worker"]))

    def _resolve(self, handle: str, out: list[Event]) -> None:
        with self._lock:
            p = self._pending.pop(handle, None)
        if p is None:
            return
        name = self._name_of.get(p.address) if p.address else None
        fut = p.future
        status = fut.status
        if status == "finished":
            try:
                result = fut.result(timeout=self._gather_timeout)
            except Exception:  # noqa: BLE001 - the result went away with its worker
                out.append(UnitLost(handle, name, "data-lost"))
            else:
                out.append(UnitDone(handle, name or "", result, time.monotonic() - p.submitted))
        elif status == "error":
            error = fut.exception()
            if type(error).__name__ == "KilledWorker":
                # Dask's own sign that the task kills its workers (allowed-failures of them died
                # running it): the task's failure, not a loss of the cluster, and said plainly
                died = dask.config.get("distributed.scheduler.allowed-failures", 3) + 1
                out.append(UnitFailed(handle, name, TaskKillsWorkers(
                    f"the workers that ran it died while it ran, {died} in all; "
                    "the model may crash its worker or run out of memory")))
            else:
                out.append(UnitFailed(handle, name, error))
        else:  # cancelled: its input was lost with a worker
            out.append(UnitLost(handle, name, "data-lost"))
        fut.release()
        for f in p.inputs:
            f.release()

    def _lose_worker(self, address: str, reason: str, out: list[Event]) -> None:
        with self._lock:
            name = self._name_of.pop(address, None)
            if name is None:
                return
            self._lost.add(name)
            for k in [k for k in self._placed if k[1] == name]:
                del self._placed[k]
            live = set(self._name_of)
            lost = [p for p in self._pending.values()
                    if p.address == address or (p.allowed is not None and address in p.allowed and not p.allowed & live)]
            for p in lost:
                del self._pending[p.handle]
        for p in lost:
            p.future.cancel()
            out.append(UnitLost(p.handle, name, "worker-lost"))
        out.append(WorkerLost(name, reason))

    def _check_deadlines(self, now: float, out: list[Event]) -> float | None:
        nearest = None
        with self._lock:
            expired = [p for p in self._pending.values() if p.deadline is not None and p.deadline <= now]
            for p in self._pending.values():
                if p.deadline is not None and p.deadline > now and (nearest is None or p.deadline < nearest):
                    nearest = p.deadline
        for p in expired:
            with self._lock:
                if self._pending.pop(p.handle, None) is None:
                    continue
                name = self._name_of.get(p.address)
            p.future.cancel()
            out.append(UnitLost(p.handle, name, "deadline"))
            if name is not None:
                self._lose_worker(p.address, "deadline", out)
                if self._restart:
                    t = threading.Thread(target=self._restart_worker, args=(p.address,), daemon=True)
                    t.start()
                    self._threads.append(t)
        return nearest

    def _check_scheduler(self, out: list[Event]) -> None:
        """A cluster that goes away (its scheduler stopped, a gateway cluster
        shut down) takes every worker and every result with it: its units
        are lost (their futures are cancelled by the client) and so is each
        of its workers, as if each had left. If the client reconnects (the
        scheduler is back at its address), its workers join again under new
        names, with no data."""
        status = self._client.status
        if status == "running" and self._scheduler_gone:
            self._scheduler_gone = False
            self._client.subscribe_topic("all", self._on_scheduler_event)
            info = self._client.scheduler_info(n_workers=-1)["workers"]
            self._note_names(info)
            for address in sorted(info):
                name = self._admit(address)
                if name is not None:
                    out.append(WorkerAdded(name))
        elif status in ("connecting", "closed", "failed") and not self._scheduler_gone:
            self._scheduler_gone = True
            with self._lock:
                addresses = sorted(self._name_of)
            for address in addresses:
                self._lose_worker(address, "scheduler-lost", out)

    def _restart_worker(self, address: str) -> None:
        try:
            self._client.restart_workers([address], timeout=60, raise_for_error=False)
        except Exception:  # noqa: BLE001 - no nanny, or the cluster is closing
            logging.getLogger(__name__).warning("could not restart worker %s", address, exc_info=True)

    def events(self, timeout: float = 0.1) -> list[Event]:
        out: list[Event] = []
        end = time.monotonic() + max(0.0, float(timeout))
        while True:
            now = time.monotonic()
            self._check_scheduler(out)
            nearest = self._check_deadlines(now, out)
            try:
                wait = end - now if nearest is None else min(end, nearest) - now
                item = self._queue.get(timeout=max(0.0, wait)) if not out and wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                if out or time.monotonic() >= end:
                    return out
                continue
            kind, value = item
            if kind == "done":
                self._resolve(value, out)
            elif kind == "remove-worker":
                self._lose_worker(value, "removed", out)
            elif kind == "add-worker":
                name = self._admit(value)
                if name is not None:
                    out.append(WorkerAdded(name))

    # -- faults ---------------------------------------------------------------------------------
    def worker_pids(self) -> dict[str, int]:
        """Process id of each live worker (for fault injection on one host)."""
        pids = self._client.run(_pid)
        with self._lock:
            return {self._name_of[a]: pid for a, pid in pids.items() if a in self._name_of}

    def kill_worker(self, worker: str) -> None:
        """SIGKILL the worker's process. Only for workers on this host."""
        with self._lock:
            address = self._live_address(worker)
        pid = self._client.run(_pid, workers=[address])[address]
        os.kill(pid, signal.SIGKILL)

    # -- life cycle -----------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._client.unsubscribe_topic("all")
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        with self._lock:
            futures = [p.future for p in self._pending.values()]
            self._pending.clear()
            self._placed.clear()
        for f in futures:
            f.cancel()
        for t in self._threads:
            t.join(timeout=10)
        self._close_connection()

    def _close_connection(self) -> None:
        """Close our client, then the cluster we own (a gateway cluster is
        shut down on the gateway)."""
        cluster, self._cluster = self._cluster, None
        try:
            if self._own_client or cluster is self._client:
                self._client.close()
        finally:
            if cluster is not None:
                close_cluster(cluster)
