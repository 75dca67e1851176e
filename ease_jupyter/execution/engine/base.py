"""The engine contract: where MOP units and Seneca tasks run.

An engine owns a set of workers and offers exactly what MOP (Cerebro §3-5)
and Seneca-style grid evaluation need, nothing more:

* **Data placement.** ``place(key, data, workers)`` puts one copy of a data
  partition on each named worker and nowhere else; partitions are never
  broadcast. ``place_partitions`` spreads partitions with replication ``r``
  (§5.5) and returns the availability map the MOP scheduler takes.
* **Pinned units.** ``submit_pinned(fn, key, *args, worker=w, timeout=t)``
  runs ``fn(data, *args)`` on worker ``w``, where ``data`` is the copy of
  partition ``key`` that lives on ``w``. A pinned unit cannot move, so every
  one carries a deadline: when it passes, the engine gives up on the unit
  (``UnitLost(reason="deadline")``) and on its worker (``WorkerLost``), which
  it replaces when it can (a Dask nanny restart, a fresh local thread).
  A dead worker whose pinned units would otherwise wait forever is reported
  the same way, from the cluster's own membership events (no heartbeat of
  ours).
* **Unpinned tasks** ``submit(fn, *args, resources=..., workers=...)`` for
  Seneca grid evaluation: any worker with enough of each resource
  (``"MEMORY"`` in bytes), or only the named ``workers``, may run them.
  ``share(value)`` puts a value into the cluster once for many tasks.
* **Devices.** A worker with a GPU declares ``GPU=1`` (one worker process
  per GPU; Dask does not know what a GPU is). :meth:`Engine.gpu_workers`
  and :meth:`Engine.cpu_workers` split the live workers by that resource, so
  that torch units go to GPU workers and scikit-learn tasks keep off them.
* **One event stream.** ``events(timeout)`` returns what happened since the
  last call: ``UnitDone``, ``UnitFailed``, ``UnitLost``, ``WorkerLost``,
  ``WorkerAdded``. Each handle is resolved by exactly one of ``UnitDone``,
  ``UnitFailed`` or ``UnitLost`` (or by ``cancel``); callers own the policy
  (re-queue, retry, give up).

Guarantees shared by every engine (checked by one contract test suite,
``tests/execution/test_engines.py``): worker names are strings and are never
reused after a ``WorkerLost``; a replacement worker holds no data; results
of handles that were lost or cancelled are never reported; ``events`` is
called from one thread (the caller's loop) and never blocks longer than its
timeout plus the time to fetch results that are already computed.

Each worker runs one unit at a time on one torch thread (``torch
.set_num_threads(1)``), at most one worker per core.
"""

from __future__ import annotations

import abc
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

from ease_jupyter.errors import EaseMLError

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
    "gpu_workers",
    "cpu_workers",
]

#: The resource name (bytes) that Seneca-style memory sizing reserves per task.
MEMORY = "MEMORY"

#: The resource a worker with a GPU declares (``--resources GPU=1``, one
#: worker process per GPU); Dask itself does not know what a GPU is.
GPU = "GPU"


class EngineError(EaseMLError, RuntimeError):
    """A request the engine cannot serve (unknown worker, missing partition,
    resources no worker has, an engine that is closed)."""


# -- events --------------------------------------------------------------------


@dataclass(frozen=True)
class UnitDone:
    handle: str
    worker: str
    result: Any = field(repr=False)
    seconds: float  # wall time from submission to the result being known


@dataclass(frozen=True)
class UnitFailed:
    """The unit's function raised; ``error`` is the exception."""

    handle: str
    worker: str | None
    error: BaseException


@dataclass(frozen=True)
class UnitLost:
    """The unit will not report: ``reason`` is ``"deadline"`` (its deadline
    passed), ``"worker-lost"`` (its worker left) or ``"data-lost"`` (its
    input or result went away with a worker)."""

    handle: str
    worker: str | None
    reason: str


@dataclass(frozen=True)
class WorkerLost:
    """A worker left, failed or was given up on (``reason="deadline"``)."""

    worker: str
    reason: str


@dataclass(frozen=True)
class WorkerAdded:
    """A new worker joined (possibly the replacement of a lost one). It holds
    no data yet."""

    worker: str


Event = UnitDone | UnitFailed | UnitLost | WorkerLost | WorkerAdded


# -- the contract --------------------------------------------------------------


class Engine(abc.ABC):
    """Workers, data placement, pinned units with deadlines, unpinned tasks
    with resources, and one event stream. See the module docstring."""

    # Workers ------------------------------------------------------------------
    @abc.abstractmethod
    def workers(self) -> list[str]:
        """The live workers, sorted."""

    def worker_resources(self) -> dict[str, dict[str, float]]:
        """Each live worker's declared resources (e.g. ``{"MEMORY": bytes}``)."""
        return {w: {} for w in self.workers()}

    def gpu_workers(self) -> list[str]:
        """The live workers that declare a ``GPU`` resource above 0, sorted."""
        return gpu_workers(self.worker_resources())

    def cpu_workers(self) -> list[str]:
        """The live workers that declare no ``GPU`` resource (or 0), sorted."""
        return cpu_workers(self.worker_resources())

    @property
    def shared_filesystem(self) -> bool:
        """True when a path written by the driver is readable by every worker
        and vice versa (what the "directory" checkpoint hop needs)."""
        return False

    # Data placement -----------------------------------------------------------
    @abc.abstractmethod
    def place(self, key: Hashable, data: Any, workers: Sequence[str]) -> None:
        """Put one copy of ``data`` under ``key`` on each of ``workers`` (and on
        no other worker). Placing a key again on a worker replaces that copy.

        Raises:
            EngineError: an unknown or lost worker.
        """

    @abc.abstractmethod
    def holders(self, key: Hashable) -> set[str]:
        """The live workers that hold ``key``."""

    @abc.abstractmethod
    def drop(self, key: Hashable, workers: Sequence[str] | None = None) -> None:
        """Forget ``key`` on ``workers`` (default: on every worker)."""

    def place_partitions(
        self,
        partitions: Mapping[int, Any],
        *,
        replication: int = 1,
        prefix: str = "part",
        workers: Sequence[str] | None = None,
    ) -> dict[str, set[int]]:
        """Spread partitions over the workers, ``replication`` copies each.

        Partition ``i`` (in sorted order) goes to workers ``i, i+1, ...,
        i+r-1`` (mod the number of workers), so with p partitions on p
        workers and r = 1 each worker holds exactly one (Cerebro §3.1), and
        with r > 1 each partition has r distinct holders (§5.5).

        Returns:
            The availability map: worker -> partition ids it holds (every
            worker appears, possibly with an empty set).

        Raises:
            EngineError: no workers, or ``replication`` outside [1, workers].
        """
        names = sorted(workers) if workers is not None else self.workers()
        if not names:
            raise EngineError("workers: found none, expected at least one live worker to place partitions on")
        if isinstance(replication, bool) or not isinstance(replication, int) or not 1 <= replication <= len(names):
            raise EngineError(f"replication: found {replication!r}, expected an integer in [1, {len(names)}]")
        availability: dict[str, set[int]] = {w: set() for w in names}
        for i, pid in enumerate(sorted(partitions)):
            chosen = [names[(i + j) % len(names)] for j in range(replication)]
            self.place(partition_key(prefix, pid), partitions[pid], chosen)
            for w in chosen:
                availability[w].add(pid)
        return availability

    # Pinned units -------------------------------------------------------------
    @abc.abstractmethod
    def submit_pinned(
        self,
        fn: Callable[..., Any],
        key: Hashable,
        *args: Any,
        worker: str,
        timeout: float,
    ) -> str:
        """Run ``fn(data, *args)`` on ``worker``, with ``data`` its copy of ``key``.

        ``timeout`` (seconds from now) is mandatory: a pinned unit cannot
        move, so when it passes the engine reports ``UnitLost(reason=
        "deadline")`` and ``WorkerLost(worker, "deadline")``, and replaces
        the worker when it can.

        Returns:
            A handle, unique for the engine's lifetime.

        Raises:
            EngineError: an unknown/lost worker, a key the worker does not
                hold, or a timeout that is not a positive number.
        """

    # Unpinned tasks -----------------------------------------------------------
    @abc.abstractmethod
    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        resources: Mapping[str, float] | None = None,
        workers: Sequence[str] | None = None,
    ) -> str:
        """Run ``fn(*args)`` on any worker that has at least ``resources``.

        ``workers`` (names from :meth:`workers`) restricts the task to those
        workers, e.g. a scikit-learn grid to the CPU workers so that it never
        takes a GPU worker's slot. Names that are not live are ignored. It
        moves among them when one is lost; when all of them are lost before
        it finished, it is reported ``UnitLost(reason="worker-lost")`` (it
        cannot wait for names that are never reused) and the caller submits
        it again where it wants.

        Arguments that came from :meth:`share` are resolved to their values
        on the worker. Unpinned tasks move freely: a lost worker's tasks run
        again elsewhere, so they have no deadline.

        Raises:
            EngineError: no live worker (of ``workers``, when given) declares
                enough of some resource, or none of ``workers`` is live.
        """

    @abc.abstractmethod
    def share(self, value: Any) -> Any:
        """Put ``value`` into the cluster once, for many unpinned tasks; returns
        a reference to pass to :meth:`submit` in its place."""

    # Results and membership ---------------------------------------------------
    @abc.abstractmethod
    def events(self, timeout: float = 0.1) -> list[Event]:
        """Wait up to ``timeout`` seconds for something to happen and return
        everything that happened since the last call (possibly nothing)."""

    @abc.abstractmethod
    def cancel(self, handle: str) -> None:
        """Stop waiting for ``handle``; its result will never be reported.
        Unknown or already resolved handles are ignored."""

    @abc.abstractmethod
    def pending(self) -> int:
        """Handles submitted and not yet resolved."""

    # Faults -------------------------------------------------------------------
    @abc.abstractmethod
    def kill_worker(self, worker: str) -> None:
        """Fault injection (tests, chaos drills): end ``worker`` abruptly, as a
        crash would. The engine notices it the way it notices any failure."""

    # Life cycle ---------------------------------------------------------------
    @abc.abstractmethod
    def close(self) -> None:
        """Release the workers. Idempotent."""

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Helpers written once -----------------------------------------------------
    def wait_all(self, handles: Iterable[str], timeout: float | None = None) -> dict[str, Event]:
        """Collect the resolving event of each handle (blocking). Worker
        events seen meanwhile are dropped; use :meth:`events` to see them.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
        """
        wanted = set(handles)
        out: dict[str, Event] = {}
        end = None if timeout is None else time.monotonic() + timeout
        while wanted - set(out):
            if end is not None and time.monotonic() > end:
                raise TimeoutError(f"{len(wanted - set(out))} handle(s) unresolved after {timeout} s")
            for ev in self.events(0.2):
                h = getattr(ev, "handle", None)
                if h in wanted:
                    out[h] = ev
        return out

    def results(self, handles: Mapping[str, str], what: str, timeout: float | None = None) -> dict[str, Any]:
        """The results of ``handles`` (name -> handle), waited for together
        (:meth:`wait_all`: reading events for one handle would drop the
        others').

        Raises:
            EngineError: a task that did not finish (failed or lost), named
                ``what`` and its name.
            TimeoutError: ``timeout`` seconds passed first.
        """
        events = self.wait_all(handles.values(), timeout=timeout)
        out = {}
        for name, handle in handles.items():
            event = events[handle]
            if not isinstance(event, UnitDone):
                raise EngineError(f"{what} {name!r}: found {event!r}, expected the task to finish")
            out[name] = event.result
        return out


def partition_key(prefix: str, pid: int) -> str:
    return f"{prefix}-{pid}"


_counter = itertools.count()


def new_handle(kind: str) -> str:
    """A process-unique handle such as ``unit-17``."""
    return f"{kind}-{next(_counter)}"


def check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise EngineError(f"timeout: found {timeout!r}, expected a positive number of seconds")
    return float(timeout)


def gpu_workers(resources: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The workers of ``resources`` (worker -> declared resources) that
    declare a ``GPU`` above 0, sorted."""
    return sorted(w for w, res in resources.items() if res.get(GPU, 0) > 0)


def cpu_workers(resources: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The workers of ``resources`` that declare no ``GPU`` (or 0), sorted."""
    return sorted(w for w, res in resources.items() if not res.get(GPU, 0) > 0)


def check_workers(workers: Sequence[str] | None, live: Iterable[str]) -> list[str] | None:
    """The live ones of a task's ``workers`` restriction (None: no restriction).

    Raises:
        EngineError: a restriction that is not a sequence of names, or that
            names no live worker (the task could never start).
    """
    if workers is None:
        return None
    if isinstance(workers, (str, bytes)) or not all(isinstance(w, str) for w in workers):
        raise EngineError(f"workers: found {workers!r}, expected a sequence of worker names")
    alive = set(live)
    chosen = sorted(w for w in set(workers) if w in alive)
    if not chosen:
        raise EngineError(f"workers: found {sorted(set(workers))}, expected at least one live worker of {sorted(alive)}")
    return chosen


def check_resources(resources: Mapping[str, float] | None, available: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Validate a task's resource request against the live workers' declared
    resources; a request no worker can serve would wait forever."""
    req = dict(resources or {})
    for name, amount in req.items():
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise EngineError(f"resources[{name!r}]: found {amount!r}, expected a non-negative number")
    if req and not any(all(res.get(k, 0) >= v for k, v in req.items()) for res in available.values()):
        have = {w: dict(r) for w, r in available.items()}
        raise EngineError(f"resources: found a request for {req}, expected at most what one worker declares ({have})")
    return req
