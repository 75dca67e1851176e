"""An in-process engine with the same contract as the Dask one, for tests
and for a notebook with no cluster.

Each worker is a thread that runs one unit at a time, like a Dask worker
with one thread. "Placing" data on a worker stores a reference under
(key, worker); "killing" a worker discards its data and its queue and
abandons its thread (whatever the thread computes afterwards is thrown
away), and a fresh worker with a new name takes its place, as a Dask nanny
restarts a killed worker process. A pinned unit past its deadline is
treated the same way.

Workers may declare resources of their own (``worker_resources``), e.g. one
``GPU=1`` worker beside CPU workers, so that the placement rules for GPU
pools can be tested on a machine without a GPU; :meth:`LocalEngine.add_worker`
lets a worker join later, as a cluster that scales up.

Because the workers share one interpreter, torch runs on one thread here
(``torch.set_num_threads(1)`` while the engine is open) and units must not
rely on torch's global random state when more than one runs at once; the
training units in ``ease_jupyter.execution.units`` seed it per unit and the
zoo nets draw no random numbers after initialisation.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Sequence

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

__all__ = ["LocalEngine"]

#: Default declared memory of a local worker (bytes); only a scheduling bound.
DEFAULT_LOCAL_MEMORY = 4 * 2**30


@dataclass
class _Task:
    handle: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    worker: str | None  # pinned worker, None when unpinned
    key: Hashable | None
    deadline: float | None
    submitted: float
    resources: dict[str, float] = field(default_factory=dict)
    allowed: frozenset[str] | None = None  # an unpinned task's ``workers`` restriction


@dataclass
class _Worker:
    name: str
    resources: dict[str, float]
    queue: collections.deque = field(default_factory=collections.deque)
    alive: bool = True
    running: _Task | None = None
    thread: threading.Thread | None = None


class _Ref:
    """What :meth:`LocalEngine.share` returns."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class LocalEngine(Engine):
    """In-process engine: ``n_workers`` threads, one unit each at a time.

    Args:
        n_workers: number of worker threads.
        resources: each worker's declared resources; ``MEMORY`` defaults to
            4 GiB.
        worker_resources: one mapping per worker, declared on top of
            ``resources`` (e.g. ``[{}, {"GPU": 1}]``); a replacement worker
            declares what the worker it replaces did.
        respawn: replace a lost worker with a fresh one (like a Dask nanny).
        torch_threads: torch intra-op threads while the engine is open
            (restored by :meth:`close`); None leaves torch alone.
    """

    def __init__(
        self,
        n_workers: int = 2,
        *,
        resources: Mapping[str, float] | None = None,
        worker_resources: Sequence[Mapping[str, float]] | None = None,
        respawn: bool = True,
        torch_threads: int | None = 1,
    ):
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise EngineError(f"n_workers: found {n_workers!r}, expected a positive integer")
        own = [{}] * n_workers if worker_resources is None else list(worker_resources)
        if len(own) != n_workers or not all(isinstance(r, Mapping) for r in own):
            raise EngineError(f"worker_resources: found {worker_resources!r}, expected one mapping per worker ({n_workers})")
        self._resources = {MEMORY: float(DEFAULT_LOCAL_MEMORY), **{k: float(v) for k, v in (resources or {}).items()}}
        self._respawn = respawn
        self._cv = threading.Condition()
        self._workers: dict[str, _Worker] = {}
        self._data: dict[tuple[Hashable, str], Any] = {}
        self._shared: collections.deque[_Task] = collections.deque()
        self._inflight: dict[str, _Task] = {}
        self._events: list[Event] = []
        self._serial = 0
        self._closed = False
        self._old_threads: int | None = None
        if torch_threads is not None:
            import torch

            self._old_threads = torch.get_num_threads()
            torch.set_num_threads(int(torch_threads))
        with self._cv:
            for res in own:
                self._spawn_locked(res)
            self._events.clear()  # the first workers are not "added" events

    # -- workers ---------------------------------------------------------------
    def workers(self) -> list[str]:
        with self._cv:
            return sorted(w.name for w in self._workers.values() if w.alive)

    @property
    def shared_filesystem(self) -> bool:
        return True

    def worker_resources(self) -> dict[str, dict[str, float]]:
        with self._cv:
            return {w.name: dict(w.resources) for w in self._workers.values() if w.alive}

    def add_worker(self, resources: Mapping[str, float] | None = None) -> str:
        """A new worker joins (``WorkerAdded``), declaring ``resources`` on top
        of the engine's; returns its name."""
        with self._cv:
            if self._closed:
                raise EngineError("engine: found it closed, expected an open engine")
            return self._spawn_locked(resources or {})

    def _spawn_locked(self, own: Mapping[str, float]) -> str:
        name = f"local-{self._serial}"
        self._serial += 1
        w = _Worker(name, {**self._resources, **{k: float(v) for k, v in own.items()}})
        w.thread = threading.Thread(target=self._run_worker, args=(w,), name=f"ease-{name}", daemon=True)
        self._workers[name] = w
        w.thread.start()
        self._events.append(WorkerAdded(name))
        return name

    def _live_locked(self, worker: str) -> _Worker:
        if self._closed:
            raise EngineError("engine: found it closed, expected an open engine")
        w = self._workers.get(worker)
        if w is None or not w.alive:
            raise EngineError(f"worker: found {worker!r}, expected one of the live workers {sorted(self.workers_locked())}")
        return w

    def workers_locked(self) -> list[str]:
        return [w.name for w in self._workers.values() if w.alive]

    # -- data ------------------------------------------------------------------
    def place(self, key: Hashable, data: Any, workers: Sequence[str]) -> None:
        with self._cv:
            targets = [self._live_locked(w).name for w in workers]
            for w in targets:
                self._data[(key, w)] = data

    def holders(self, key: Hashable) -> set[str]:
        with self._cv:
            return {w for (k, w) in self._data if k == key and self._workers[w].alive}

    def drop(self, key: Hashable, workers: Sequence[str] | None = None) -> None:
        with self._cv:
            for k in [k for k in self._data if k[0] == key and (workers is None or k[1] in workers)]:
                del self._data[k]

    def share(self, value: Any) -> Any:
        return _Ref(value)

    # -- submission --------------------------------------------------------------
    def submit_pinned(self, fn: Callable[..., Any], key: Hashable, *args: Any, worker: str, timeout: float) -> str:
        timeout = check_timeout(timeout)
        with self._cv:
            w = self._live_locked(worker)
            if (key, worker) not in self._data:
                raise EngineError(f"key: found {key!r} not placed on {worker!r}, expected a key the worker holds")
            now = time.monotonic()
            task = _Task(new_handle("unit"), fn, args, worker, key, now + timeout, now)
            self._inflight[task.handle] = task
            w.queue.append(task)
            self._cv.notify_all()
            return task.handle

    def submit(self, fn: Callable[..., Any], *args: Any, resources: Mapping[str, float] | None = None,
               workers: Sequence[str] | None = None) -> str:
        with self._cv:
            if self._closed:
                raise EngineError("engine: found it closed, expected an open engine")
            allowed = check_workers(workers, self.workers_locked())
            live = {w.name: w.resources for w in self._workers.values() if w.alive and (allowed is None or w.name in allowed)}
            req = check_resources(resources, live)
            task = _Task(new_handle("task"), fn, args, None, None, None, time.monotonic(), req,
                         None if allowed is None else frozenset(allowed))
            self._inflight[task.handle] = task
            self._shared.append(task)
            self._cv.notify_all()
            return task.handle

    def cancel(self, handle: str) -> None:
        with self._cv:
            task = self._inflight.pop(handle, None)
            if task is None:
                return
            for queue in [self._shared, *(w.queue for w in self._workers.values())]:
                try:
                    queue.remove(task)
                except ValueError:
                    pass

    def pending(self) -> int:
        with self._cv:
            return len(self._inflight)

    # -- the worker threads --------------------------------------------------------
    def _next_task_locked(self, w: _Worker) -> _Task | None:
        if w.queue:
            return w.queue.popleft()
        for task in self._shared:
            if (task.allowed is None or w.name in task.allowed) and all(
                    w.resources.get(k, 0) >= v for k, v in task.resources.items()):
                self._shared.remove(task)
                return task
        return None

    def _run_worker(self, w: _Worker) -> None:
        while True:
            with self._cv:
                task = None
                while w.alive and not self._closed:
                    task = self._next_task_locked(w)
                    if task is not None:
                        break
                    self._cv.wait(0.5)
                if task is None:
                    return
                w.running = task
                if task.worker is not None:
                    data = self._data.get((task.key, w.name))
                    args = (data, *task.args)
                else:
                    args = tuple(a.value if isinstance(a, _Ref) else a for a in task.args)
            error: BaseException | None = None
            result: Any = None
            try:
                result = task.fn(*args)
            except BaseException as exc:  # noqa: BLE001 - reported as UnitFailed
                error = exc
            with self._cv:
                if not w.alive:  # killed or given up on meanwhile: discard
                    return
                w.running = None
                if self._inflight.pop(task.handle, None) is not None:
                    if error is None:
                        self._events.append(UnitDone(task.handle, w.name, result, time.monotonic() - task.submitted))
                    else:
                        self._events.append(UnitFailed(task.handle, w.name, error))
                self._cv.notify_all()

    # -- faults ----------------------------------------------------------------------
    def _lose_worker_locked(self, name: str, reason: str) -> None:
        w = self._workers.get(name)
        if w is None or not w.alive:
            return
        w.alive = False
        for k in [k for k in self._data if k[1] == name]:
            del self._data[k]
        lost = list(w.queue)
        w.queue.clear()
        if w.running is not None:
            if w.running.worker is None and w.running.handle in self._inflight:
                self._shared.appendleft(w.running)  # unpinned work runs again elsewhere
            else:
                lost.append(w.running)
        w.running = None
        for task in list(self._shared):  # restricted to workers that are all gone now
            if task.allowed is not None and not any(self._workers[n].alive for n in task.allowed):
                self._shared.remove(task)
                lost.append(task)
        for task in lost:
            if self._inflight.pop(task.handle, None) is not None:
                self._events.append(UnitLost(task.handle, name, "worker-lost"))
        self._events.append(WorkerLost(name, reason))
        if self._respawn and not self._closed:
            self._spawn_locked(w.resources)  # a nanny restarts the same kind of worker
        self._cv.notify_all()

    def kill_worker(self, worker: str) -> None:
        with self._cv:
            self._live_locked(worker)
            self._lose_worker_locked(worker, "killed")

    def _check_deadlines_locked(self, now: float) -> float | None:
        """Give up on pinned units past their deadline; return the next deadline."""
        nearest = None
        for task in list(self._inflight.values()):
            if task.deadline is None:
                continue
            if task.deadline <= now:
                if self._inflight.pop(task.handle, None) is not None:
                    self._events.append(UnitLost(task.handle, task.worker, "deadline"))
                    self._lose_worker_locked(task.worker, "deadline")
            elif nearest is None or task.deadline < nearest:
                nearest = task.deadline
        return nearest

    def events(self, timeout: float = 0.1) -> list[Event]:
        end = time.monotonic() + max(0.0, float(timeout))
        with self._cv:
            while True:
                now = time.monotonic()
                nearest = self._check_deadlines_locked(now)
                if self._events or now >= end:
                    out, self._events = self._events, []
                    return out
                wait = end - now if nearest is None else min(end, nearest) - now
                self._cv.wait(max(0.001, wait))

    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            for w in self._workers.values():
                w.alive = False
            self._inflight.clear()
            self._shared.clear()
            self._data.clear()
            self._cv.notify_all()
        if self._old_threads is not None:
            import torch

            torch.set_num_threads(self._old_threads)
            self._old_threads = None
