"""Model Hopper Parallelism across several workloads on one pool of workers.

Cerebro (§3.1, §5.3) schedules one model selection workload: a training unit
is (config, partition), a worker runs one unit at a time, and Alg. 1 draws a
random ready unit for each idle worker. Nothing in that requires the configs
to belong to one task. :class:`SharedPoolScheduler` runs the workloads of
several tasks (of one or several users) on the same workers at once: each
workload keeps its own :class:`MOPScheduler` (its configs, its partitions and
where they are placed, its epochs, its faults and restart recovery), and the
pool decides, for each free worker, which workload's ready unit it runs.

Per-user fairness (beyond the paper, which has one workload): stride
scheduling over units (Waldspurger and Weihl, 1995). Each owner has a weight
(1 by default); a workload's weight is its owner's weight split equally among
the owner's active workloads, so users, not tasks, share the pool. Each
workload carries a *pass*; running one of its units adds
``unit_cost / weight`` to it (``unit_cost`` is 1, so shares count units,
unless the caller gives an estimate of the workload's unit seconds, which
makes shares count unit-seconds). A free worker takes a unit of the workload
with the least pass among those with a unit ready on that worker (ties drawn
at random), and within that workload draws uniformly as Alg. 1 does. Hence:

* work conservation: a worker idles only when no active workload has a unit
  ready on it, so a workload that cannot use its share (few configs, data
  elsewhere) leaves it to the others;
* the bound: for ``k`` workloads that joined together with fixed weights,
  while every one has a unit ready at each decision, after ``n`` units a
  workload of share ``s`` (its weight over the total) has started between
  ``s*n - k*s`` and ``s*n + 1`` of them; with equal weights, within one unit
  of ``n/k``;
* no banking: a workload joins, and starts each new epoch, with its pass
  raised to the pool's virtual time (the largest pass a unit was dispatched
  at), so time spent waiting (for its turn to join, or between epochs) is not
  credit to crowd the others out later; and a workload that has just joined
  wins the next free worker on which it has a ready unit.

A unit lost to a fault stays charged: it held a worker. Pure Python: no
clock, no I/O; randomness comes only from a ``random.Random(seed)``.

Usage (the engine drives it as it drives one :class:`MOPScheduler`)::

    pool = SharedPoolScheduler(["w0", "w1"], seed=0)
    pool.add_workload("t1", ["a", "b"], {"w0": [0], "w1": [1]}, owner="alice")
    pool.add_workload("t2", ["c"], {"w0": [0], "w1": [1]}, owner="bob")
    for a in pool.schedule():                 # Alg. 1 over both workloads
        ...submit a.unit of a.workload to a.worker...
    pool.complete(a.workload, a.unit, a.worker)   # Alg. 2
    if pool.workload("t1").epoch_done(): pool.next_epoch("t1")
    pool.remove_workload("t2")                # it finished, or was cancelled
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from ease_jupyter.errors import AlreadyExistsError, InvalidStateError, NotFoundError

from .scheduler import MOPScheduler, Unit

__all__ = ["Assignment", "SharedPoolScheduler", "WorkloadView"]


@dataclass(frozen=True, order=True)
class Assignment:
    """``unit`` of workload ``workload`` runs on ``worker``."""

    workload: str
    unit: Unit
    worker: str


@dataclass
class _Workload:
    sched: MOPScheduler
    owner: str
    unit_cost: float
    pass_: float
    started: int = 0
    completed: int = 0


class WorkloadView:
    """Read-only views of one workload's :class:`MOPScheduler`.

    ``epoch``, ``configs``, ``partitions``, ``workers`` (its availability
    map), ``pending`` (Q), ``in_flight`` (Q'), ``completed``, ``visit_log``,
    ``epoch_done()``, ``stuck()``, ``unheld_partitions()`` and
    ``ready_count(worker)`` mean what they mean there. Its ``idle_workers`` is
    left out: a worker idle for one workload may run another's unit.
    """

    _READ = frozenset({
        "epoch", "configs", "partitions", "workers", "pending", "in_flight", "completed", "visit_log",
        "epoch_done", "stuck", "unheld_partitions", "ready_count",
    })

    def __init__(self, name: str, sched: MOPScheduler) -> None:
        self._name = name
        self._sched = sched

    def __getattr__(self, attr: str) -> Any:
        if attr in WorkloadView._READ:
            return getattr(self._sched, attr)
        raise AttributeError(f"workload {self._name!r}: no read-only view {attr!r} (views: {sorted(self._READ)})")


def _check_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{field}: found {value!r}, expected a non-empty str")
    return value


def _check_positive(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{field}: found {value!r}, expected a finite number > 0")
    return float(value)


class SharedPoolScheduler:
    """Assigns the training units of several MOP workloads to one pool of workers.

    Invariants: per workload, those of :class:`MOPScheduler` (Cerebro §3.1:
    completeness per epoch, one worker per config at a time, a unit only on a
    worker holding its partition, non-preemptive units); across workloads,
    a worker runs at most one unit. Workloads join and leave, and workers fail
    and join, between units (§5.6); see the module docstring for fairness.

    Args:
        workers: the live workers at the start (they hold nothing until a
            workload places partitions on them).
        seed: seeds the pool's ``random.Random`` (worker order, ties, and the
            seeds of workloads added without one).
        weights: owner -> weight; owners not named weigh 1.

    Raises:
        TypeError: a worker or owner name that is not a non-empty str.
        ValueError: duplicate workers, or a weight that is not > 0.
    """

    def __init__(self, workers: Iterable[str] = (), *, seed: int = 0, weights: Mapping[str, float] | None = None) -> None:
        self._rng = random.Random(seed)
        self._weights: dict[str, float] = {}
        for owner, weight in (weights or {}).items():
            self.set_weight(owner, weight)
        names = [_check_name(w, "workers") for w in workers]
        if len(set(names)) != len(names):
            raise ValueError(f"workers: found duplicates {sorted({w for w in names if names.count(w) > 1})}, expected unique names")
        self._workers: dict[str, None] = dict.fromkeys(sorted(names))  # sorted: independent of the caller's order
        self._idle: dict[str, None] = dict(self._workers)
        self._running: dict[str, Assignment] = {}  # worker -> what it runs
        self._where: dict[tuple[str, Unit], str] = {}  # (workload, unit) -> worker
        self._loads: dict[str, _Workload] = {}
        self._owned: dict[str, int] = {}  # owner -> its active workloads
        self._vtime = 0.0  # the largest pass a unit was dispatched at

    # -- workloads join and leave ----------------------------------------------
    def add_workload(
        self,
        name: str,
        configs: Iterable[str],
        availability: Mapping[str, Iterable[int]],
        *,
        owner: str,
        unit_cost: float = 1.0,
        partitions: Iterable[int] | None = None,
        seed: int | None = None,
        visit_order: Mapping[tuple[str, int], list[int]] | None = None,
        first_epoch: int = 0,
    ) -> None:
        """A workload joins (between units): its configs over its partitions.

        Args:
            name: the workload's name, unique among the active ones.
            configs, partitions, visit_order, first_epoch: as for
                :class:`MOPScheduler`; restart recovery goes on with
                :meth:`mark_completed`.
            availability: live worker -> the partitions of this workload it
                holds (§5.5). Live workers not named hold none of them.
            owner: the user it runs for; its weight is the owner's.
            unit_cost: what one unit costs against the owner's share (1 counts
                units; an estimate of its unit seconds counts unit-seconds).
            seed: the workload scheduler's seed; by default drawn from the pool's.

        Raises:
            AlreadyExistsError: ``name`` is already active.
            NotFoundError: ``availability`` names a worker that is not live.
            TypeError, ValueError: as :class:`MOPScheduler`, or a bad ``owner``
                or ``unit_cost``.
        """
        _check_name(name, "workload")
        _check_name(owner, "owner")
        if name in self._loads:
            raise AlreadyExistsError(f"workload {name!r}: already active, expected a new name")
        cost = _check_positive(unit_cost, f"unit_cost of {name!r}")
        unknown = sorted(w for w in availability if w not in self._workers)
        if unknown:
            raise NotFoundError(f"availability of {name!r}: workers {unknown} are not live (live: {list(self._workers)})")
        held = {w: availability.get(w, ()) for w in self._workers}
        sched = MOPScheduler(
            configs, held, seed=self._rng.randrange(2**32) if seed is None else seed,
            visit_order=visit_order, partitions=partitions, first_epoch=first_epoch,
        )
        self._loads[name] = _Workload(sched, owner, cost, pass_=self._vtime)
        self._owned[owner] = self._owned.get(owner, 0) + 1

    def remove_workload(self, name: str) -> list[Assignment]:
        """A workload leaves: it finished, or it was cancelled.

        Returns:
            Its units still in flight, now abandoned: their workers are idle,
            and the engine should cancel them; a late result raises in
            :meth:`complete` (drop it).

        Raises:
            NotFoundError: ``name`` is not active.
        """
        load = self._load(name)
        abandoned = sorted(a for a in self._running.values() if a.workload == name)
        for a in abandoned:
            del self._running[a.worker]
            del self._where[(name, a.unit)]
            self._idle[a.worker] = None
        del self._loads[name]
        self._owned[load.owner] -= 1
        if not self._owned[load.owner]:
            del self._owned[load.owner]
        return abandoned

    def set_weight(self, owner: str, weight: float) -> None:
        """Set an owner's weight (> 0); it counts from the next decision."""
        _check_name(owner, "owner")
        self._weights[owner] = _check_positive(weight, f"weight of {owner!r}")

    # -- the scheduling loop (Alg. 1-2 over every workload) ----------------------
    def schedule(self) -> list[Assignment]:
        """Give each idle worker, in a random order, a ready unit of the
        workload with the least pass among those with one ready there.

        Returns:
            The new assignments, possibly empty. Idle workers on which no
            workload has a ready unit stay idle.
        """
        # Workloads with no ready unit anywhere are left out at once: with few
        # configs per workload most are fully in flight on a large pool.
        ready = {name: load for name, load in self._loads.items() if load.sched.ready_count()}
        if not ready or not self._idle:
            return []
        idle = list(self._idle)
        self._rng.shuffle(idle)  # no worker is favoured
        assigned = []
        for worker in idle:
            least = math.inf
            tied: list[str] = []
            for name, load in ready.items():
                if load.pass_ > least or not load.sched.ready_count(worker):
                    continue
                if load.pass_ < least:
                    least, tied = load.pass_, [name]
                else:
                    tied.append(name)
            if not tied:
                continue
            name = tied[self._rng.randrange(len(tied))] if len(tied) > 1 else tied[0]
            load = self._loads[name]
            unit = load.sched.schedule_worker(worker)
            assert unit is not None  # ready_count said so
            self._vtime = max(self._vtime, load.pass_)
            load.pass_ += load.unit_cost / self._weight(load.owner)
            load.started += 1
            a = Assignment(name, unit, worker)
            self._running[worker] = a
            self._where[(name, unit)] = worker
            del self._idle[worker]
            assigned.append(a)
            if not load.sched.ready_count():
                del ready[name]
                if not ready:
                    break
        return assigned

    def complete(self, workload: str, unit: Unit, worker: str) -> None:
        """Alg. 2: the unit finished; its config and its worker become idle.

        Raises:
            NotFoundError: ``workload`` is not active (a late result of a
                workload that left) or ``worker`` is not live.
            InvalidStateError: the unit is not in flight on ``worker``.
        """
        load = self._load(workload)
        if worker not in self._workers:
            raise NotFoundError(f"worker {worker!r}: not a live worker (live: {list(self._workers)})")
        load.sched.complete(unit, worker)  # raises if not in flight there
        del self._running[worker]
        del self._where[(workload, unit)]
        self._idle[worker] = None
        load.completed += 1

    def requeue(self, workload: str, unit: Unit) -> None:
        """A unit timed out or its result was lost: Q' -> Q of its workload (§5.6).

        Raises:
            NotFoundError: ``workload`` is not active.
            InvalidStateError: ``unit`` is not in flight.
        """
        load = self._load(workload)
        load.sched.requeue(unit)  # raises if not in flight
        worker = self._where.pop((workload, unit))
        del self._running[worker]
        self._idle[worker] = None

    def mark_completed(self, workload: str, unit: Unit) -> None:
        """Restart recovery (§5.6): see :meth:`MOPScheduler.mark_completed`."""
        self._load(workload).sched.mark_completed(unit)

    def next_epoch(self, workload: str, configs: Iterable[str] | None = None) -> None:
        """Start the workload's next epoch (§4.2); see :meth:`MOPScheduler.next_epoch`.

        The workload's pass is raised to the pool's virtual time, so the time
        it spent between epochs is not banked as credit.
        """
        load = self._load(workload)
        load.sched.next_epoch(configs)
        load.pass_ = max(load.pass_, self._vtime)

    # -- faults, elasticity and placement (§5.5-5.6) -----------------------------
    def remove_worker(self, worker: str) -> list[Assignment]:
        """A worker failed or left: its unit in flight (if any) goes back to
        its workload's Q, and is returned; every workload forgets the worker.

        Raises:
            NotFoundError: ``worker`` is not live.
        """
        if worker not in self._workers:
            raise NotFoundError(f"worker {worker!r}: not a live worker (live: {list(self._workers)})")
        lost = self._running.pop(worker, None)
        if lost is not None:
            del self._where[(lost.workload, lost.unit)]
        for load in self._loads.values():
            load.sched.remove_worker(worker)  # requeues the lost unit in its own workload
        del self._workers[worker]
        self._idle.pop(worker, None)
        return [] if lost is None else [lost]

    def add_worker(self, worker: str, holdings: Mapping[str, Iterable[int]] | None = None) -> None:
        """A worker joins (or rejoins) between units.

        Args:
            holdings: workload -> the partitions of it the worker holds;
                workloads not named get none there.

        Raises:
            TypeError: a bad worker name or partition id.
            AlreadyExistsError: ``worker`` is already live.
            NotFoundError: ``holdings`` names a workload that is not active.
            ValueError: a partition outside its workload's partition set.
        """
        _check_name(worker, "worker")
        if worker in self._workers:
            raise AlreadyExistsError(f"worker {worker!r}: already live, expected a new name")
        holdings = {name: tuple(parts) for name, parts in (holdings or {}).items()}
        for name, parts in holdings.items():
            self._check_parts(name, worker, parts)  # all checked before any workload changes
        for name, load in self._loads.items():
            load.sched.add_worker(worker, holdings.get(name, ()))
        self._workers[worker] = None
        self._idle[worker] = None

    def place(self, worker: str, workload: str, partitions: Iterable[int]) -> None:
        """The partitions of ``workload`` that ``worker`` holds are now these
        (replica repair or rebalancing placed or dropped some, §5.5-5.6).

        Raises:
            NotFoundError: ``worker`` is not live or ``workload`` not active.
            InvalidStateError: ``worker`` runs a unit of ``workload`` now.
            TypeError, ValueError: a bad partition id.
        """
        if worker not in self._workers:
            raise NotFoundError(f"worker {worker!r}: not a live worker (live: {list(self._workers)})")
        parts = tuple(partitions)
        self._check_parts(workload, worker, parts)
        running = self._running.get(worker)
        if running is not None and running.workload == workload:
            raise InvalidStateError(f"worker {worker!r}: runs {running.unit} of {workload!r}, expected it not to")
        sched = self._loads[workload].sched
        sched.remove_worker(worker)  # nothing of this workload in flight there: no unit moves
        sched.add_worker(worker, parts)

    def _check_parts(self, workload: str, worker: str, parts: tuple[object, ...]) -> None:
        universe = self._load(workload).sched.partitions
        for p in parts:
            if isinstance(p, bool) or not isinstance(p, int):
                raise TypeError(f"partitions of {workload!r} on {worker!r}: found {p!r}, expected an int partition id")
        unknown = sorted(set(parts).difference(universe))
        if unknown:
            raise ValueError(f"partitions of {workload!r} on {worker!r}: found {unknown}, expected a subset of {list(universe)}")

    # -- read-only views -------------------------------------------------------
    def _load(self, name: str) -> _Workload:
        load = self._loads.get(name)
        if load is None:
            raise NotFoundError(f"workload {name!r}: not active (active: {list(self._loads)})")
        return load

    def _weight(self, owner: str) -> float:
        return self._weights.get(owner, 1.0) / self._owned[owner]

    def workload(self, name: str) -> WorkloadView:
        """Read-only views of one active workload (its epoch, Q, Q', visit log...)."""
        return WorkloadView(name, self._load(name).sched)

    @property
    def workloads(self) -> tuple[str, ...]:
        """The active workloads, in the order they joined."""
        return tuple(self._loads)

    def owner(self, name: str) -> str:
        """The user a workload runs for."""
        return self._load(name).owner

    def shares(self) -> dict[str, float]:
        """Workload -> its share of the pool: its weight over the total weight
        of the active workloads (the owner's weight split among its workloads)."""
        weights = {name: self._weight(load.owner) for name, load in self._loads.items()}
        total = sum(weights.values())
        return {name: w / total for name, w in weights.items()}

    @property
    def units_started(self) -> Mapping[str, int]:
        """Workload -> units dispatched since it joined (lost ones included)."""
        return MappingProxyType({name: load.started for name, load in self._loads.items()})

    @property
    def units_completed(self) -> Mapping[str, int]:
        """Workload -> units completed since it joined (Alg. 2 ran for them)."""
        return MappingProxyType({name: load.completed for name, load in self._loads.items()})

    @property
    def workers(self) -> tuple[str, ...]:
        """The live workers."""
        return tuple(self._workers)

    @property
    def idle_workers(self) -> tuple[str, ...]:
        """Live workers that run no unit of any workload."""
        return tuple(self._idle)

    @property
    def running(self) -> Mapping[str, Assignment]:
        """Worker -> the assignment it runs (one unit per worker, across workloads)."""
        return MappingProxyType(dict(self._running))

    def stuck_workloads(self) -> tuple[str, ...]:
        """Active workloads whose remaining units no live worker can run
        (:meth:`MOPScheduler.stuck`); a worker holding their partitions must join."""
        return tuple(name for name, load in self._loads.items() if load.sched.stuck())
