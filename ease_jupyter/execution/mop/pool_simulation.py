"""A discrete-event simulator of several MOP workloads on one pool of workers.

It drives :class:`SharedPoolScheduler` as :func:`.simulation.simulate` drives
:class:`MOPScheduler` (Cerebro §5.4): a fake clock, a heap of events, and a
unit of config ``c`` of a task on worker ``w`` takes ``costs[c] /
capacities[w]``. Each task is one MOP workload: its configs train for its
epochs over its own partitions, one per worker by default (Cerebro's
placement, §3.1), and it leaves the pool when its last epoch ends.

Two admission policies share the scheduler, so they differ only in what they
admit:

* MOP across tasks (``one_at_a_time=False``): a task joins the pool when it
  arrives, and the pool shares the workers among all active tasks;
* one task at a time (``one_at_a_time=True``): tasks wait in arrival order and
  the next joins only when the pool is empty, as a service that trains one
  deep-net job at a time does.

:func:`concurrency_tasks` draws the tasks of one benchmark cell and
:func:`compare_admission` runs both policies on them. No files, no threads,
no clock.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from .shared_pool import Assignment, SharedPoolScheduler
from .simulation import CNN_MFLOPS, WorkerFailure, ring_availability

__all__ = ["PoolTask", "TaskOutcome", "PoolSimResult", "simulate_pool", "concurrency_tasks", "compare_admission"]


@dataclass(frozen=True)
class PoolTask:
    """One task's MOP workload.

    ``costs`` holds, per config, the cost of one unit (divided by a worker's
    capacity it is the unit's duration); configs are named ``c0``, ``c1``...
    ``partitions`` defaults to one per worker, each on ``replication``
    consecutive workers of the ring (§3.1, §5.5). ``unit_cost`` is what one
    unit counts against the owner's share (see :mod:`.shared_pool`).
    ``configs_per_epoch``, if given, says how many configs train each epoch
    (non-increasing, the first all of them): successive halving stops the
    others at a rung (Cerebro §4.2), and a task left with fewer configs than
    workers leaves the rest of the pool idle unless another task fills it.
    Empty: every config trains every epoch.
    """

    name: str
    owner: str
    costs: tuple[float, ...]
    epochs: int = 1
    arrival: float = 0.0
    replication: int = 1
    unit_cost: float = 1.0
    configs_per_epoch: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        kept = self.configs_per_epoch
        if kept and (len(kept) != self.epochs or kept[0] != len(self.costs) or kept[-1] < 1
                     or any(b > a for a, b in zip(kept, kept[1:]))):
            raise ValueError(f"configs_per_epoch of task {self.name!r}: found {kept}, expected {self.epochs} "
                             f"non-increasing counts from {len(self.costs)} down to at least 1")
        if not self.costs or any(c <= 0 for c in self.costs):
            raise ValueError(f"costs of task {self.name!r}: found {self.costs}, expected at least one cost, all > 0")
        if self.epochs < 1:
            raise ValueError(f"epochs of task {self.name!r}: found {self.epochs}, expected >= 1")
        if self.arrival < 0:
            raise ValueError(f"arrival of task {self.name!r}: found {self.arrival}, expected >= 0")


@dataclass(frozen=True)
class TaskOutcome:
    """When a task arrived, joined, first started and finished a unit, and left.

    ``finish`` is None if the run got stuck before the task's last epoch.
    """

    arrival: float
    joined: float | None
    first_start: float | None
    first_finish: float | None
    finish: float | None
    units: int
    units_lost: int

    @property
    def wait_to_first_unit(self) -> float | None:
        """Time from arrival to the end of its first unit (its first trained model state)."""
        return None if self.first_finish is None else self.first_finish - self.arrival


@dataclass(frozen=True)
class PoolSimResult:
    """The outcome of one :func:`simulate_pool` run.

    ``makespan`` is when the last task left (or when the run got stuck, with
    ``completed`` False). ``utilization`` is the busy worker time over
    ``workers * makespan``. ``units_at_first_finish`` holds the units each
    task had completed when the first task left, and ``shares_at_first_finish``
    its share of the pool then: with tasks that all arrive at once, the
    fairness of the sharing while all of them competed.
    """

    makespan: float
    completed: bool
    tasks: Mapping[str, TaskOutcome]
    units_run: int
    units_lost: int
    utilization: float
    units_at_first_finish: Mapping[str, int] = field(default_factory=dict)
    shares_at_first_finish: Mapping[str, float] = field(default_factory=dict)


def simulate_pool(
    tasks: Sequence[PoolTask],
    capacities: Sequence[float] | Mapping[str, float],
    *,
    seed: int = 0,
    one_at_a_time: bool = False,
    weights: Mapping[str, float] | None = None,
    failures: Iterable[WorkerFailure] = (),
) -> PoolSimResult:
    """Run tasks on a pool of workers with the shared-pool scheduler.

    Args:
        tasks: the tasks (unique names).
        capacities: per worker, its speed; a sequence names them ``w0``...
        seed: the pool's seed (it seeds each task's scheduler too).
        one_at_a_time: admit one task at a time (in arrival order, ties in
            the given order) instead of every task on arrival.
        weights: owner -> weight (1 by default).
        failures: workers that die (§5.6); their unit in flight is lost and
            requeued. Without replication a lost worker's partitions leave
            their tasks stuck.

    Events at the same instant apply in the order finish, failure, arrival;
    the scheduler runs after each instant.
    """
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"tasks: found duplicate names {sorted({n for n in names if names.count(n) > 1})}, expected unique")
    if isinstance(capacities, Mapping):
        caps = {str(w): float(c) for w, c in capacities.items()}
    else:
        ring = ring_availability(len(capacities)) if capacities else {}
        caps = dict(zip(ring, map(float, capacities)))
    if not caps or any(c <= 0 for c in caps.values()):
        raise ValueError(f"capacities: found {caps}, expected at least one worker, all > 0")
    workers = list(caps)
    by_name = {t.name: t for t in tasks}
    pool = SharedPoolScheduler(workers, seed=seed, weights=weights)

    FINISH, FAIL, ARRIVE = 0, 1, 2
    heap: list[tuple[float, int, int, object]] = []
    seq = 0
    for ev in failures:
        heap.append((float(ev.time), FAIL, seq, ev.worker))
        seq += 1
    for t in tasks:
        heap.append((float(t.arrival), ARRIVE, seq, t.name))
        seq += 1
    heapq.heapify(heap)

    waiting: list[str] = []  # arrived, not admitted (one at a time)
    joined: dict[str, float] = {}
    first_start: dict[str, float] = {}
    first_finish: dict[str, float] = {}
    finish: dict[str, float] = {}
    units = dict.fromkeys(names, 0)
    lost = dict.fromkeys(names, 0)
    epochs_left: dict[str, int] = {}
    token: dict[str, int] = {}  # worker -> the seq of its live finish event
    at_first_finish: dict[str, int] = {}
    touched: set[str] = set()  # workloads that completed a unit or joined at this instant
    shares_then: dict[str, float] = {}
    busy = 0.0
    clock = 0.0

    def admit(name: str) -> None:
        task = by_name[name]
        live = pool.workers
        ring = ring_availability(len(workers), task.replication)  # partitions fixed by the task's start pool
        availability = {workers[j]: parts for j, parts in enumerate(ring.values()) if workers[j] in live}
        pool.add_workload(
            name, [f"c{i}" for i in range(len(task.costs))], availability, owner=task.owner,
            unit_cost=task.unit_cost, partitions=range(len(workers)),
        )
        joined[name] = clock
        epochs_left[name] = task.epochs
        touched.add(name)

    def settle() -> None:
        """Dispatch, then start next epochs, retire finished tasks and admit
        waiting ones, until nothing changes at this instant."""
        nonlocal seq, busy
        while True:
            for a in pool.schedule():
                seq += 1
                token[a.worker] = seq
                duration = by_name[a.workload].costs[int(a.unit.config[1:])] / caps[a.worker]
                busy += duration
                first_start.setdefault(a.workload, clock)
                heapq.heappush(heap, (clock + duration, FINISH, seq, a))
            changed = False
            for name in sorted(touched):  # only a workload that completed a unit can end an epoch
                if not pool.workload(name).epoch_done():
                    continue
                changed = True
                epochs_left[name] -= 1
                if epochs_left[name]:
                    kept = by_name[name].configs_per_epoch
                    if kept:  # the first configs stand for those a rung keeps (equal costs in a pick)
                        pool.next_epoch(name, [f"c{i}" for i in range(kept[-epochs_left[name]])])
                    else:
                        pool.next_epoch(name)
                    continue
                if not finish:  # the first task to leave: how the pool was shared until now
                    at_first_finish.update(pool.units_completed)
                    shares_then.update(pool.shares())
                pool.remove_workload(name)
                finish[name] = clock
            touched.clear()
            if one_at_a_time and waiting and not pool.workloads:
                admit(waiting.pop(0))
                changed = True
            if not changed:
                return

    while True:
        settle()
        if len(finish) == len(names):
            break
        if not heap:  # nothing will run again: what is left is stuck
            break
        clock = heap[0][0]
        while heap and heap[0][0] == clock:
            _, kind, tok, payload = heapq.heappop(heap)
            if kind == FINISH:
                a: Assignment = payload  # type: ignore[assignment]
                if token.get(a.worker) != tok or a.workload not in pool.workloads:
                    continue  # the worker died meanwhile: a stale event
                del token[a.worker]
                pool.complete(a.workload, a.unit, a.worker)
                touched.add(a.workload)
                units[a.workload] += 1
                first_finish.setdefault(a.workload, clock)
            elif kind == FAIL:
                worker = payload
                if worker in pool.workers:
                    for a in pool.remove_worker(worker):
                        lost[a.workload] += 1
                    token.pop(worker, None)
            else:
                name = payload
                if one_at_a_time:
                    waiting.append(name)
                else:
                    admit(name)

    outcomes = {
        t.name: TaskOutcome(
            t.arrival, joined.get(t.name), first_start.get(t.name), first_finish.get(t.name),
            finish.get(t.name), units[t.name], lost[t.name],
        )
        for t in tasks
    }
    utilization = busy / (len(workers) * clock) if clock > 0 else 0.0
    return PoolSimResult(
        clock, len(finish) == len(names), outcomes, sum(units.values()), sum(lost.values()),
        utilization, at_first_finish, shares_then,
    )


def concurrency_tasks(
    n_tasks: int,
    seed: int,
    *,
    configs: Sequence[int] = (2, 3, 4),
    epochs: Sequence[int] = (1, 2, 3),
    kept: Callable[[int, int], Sequence[int]] | None = None,
) -> list[PoolTask]:
    """The tasks of one benchmark cell: ``n_tasks`` image tasks of as many
    users, all arriving at once.

    Each task is a learning-rate grid on one network: its number of configs
    and of epochs are drawn from ``configs`` and ``epochs``, and every config
    of it costs the network's MFLOPs, drawn from :data:`CNN_MFLOPS` (Cerebro
    §5.4's pool), by ``random.Random(seed)``. Without ``kept`` every config
    trains every epoch (a grid); ``kept(configs, epochs)`` gives a task's
    :attr:`PoolTask.configs_per_epoch` (the service's torch picks:
    ``lambda n, r: automl.pick_schedule(n, r).configs_per_epoch``).
    """
    if n_tasks < 1:
        raise ValueError(f"n_tasks: found {n_tasks}, expected >= 1")
    rng = random.Random(seed)
    width = len(str(n_tasks - 1))
    out = []
    for i in range(n_tasks):
        cost = float(rng.choice(CNN_MFLOPS))
        n, r = rng.choice(configs), rng.choice(epochs)
        per_epoch = tuple(kept(n, r)) if kept is not None else ()
        out.append(PoolTask(f"t{i:0{width}d}", f"u{i:0{width}d}", (cost,) * n, epochs=r, configs_per_epoch=per_epoch))
    return out


def compare_admission(tasks: Sequence[PoolTask], workers: int, seed: int) -> dict:
    """MOP across tasks against one task at a time, on ``workers`` equal workers.

    Returns:
        ``makespan_ratio`` (one at a time / across tasks, > 1 when sharing the
        pool is faster), both makespans and utilizations, per task the wait
        from arrival to its first finished unit and its finish under both
        policies, ``no_task_waits_for_a_whole_workload`` (under MOP across
        tasks every task's first unit started before any other task left),
        and, for fairness, the units each task had completed when the first
        task left against its share of the pool then.
    """
    caps = [1.0] * workers
    shared = simulate_pool(tasks, caps, seed=seed)
    serial = simulate_pool(tasks, caps, seed=seed, one_at_a_time=True)
    if not (shared.completed and serial.completed):
        raise RuntimeError("compare_admission: a run got stuck, which cannot happen without failures")
    first_leave = min(o.finish for o in shared.tasks.values())
    total_then = sum(shared.units_at_first_finish.values())
    return {
        "workers": workers,
        "tasks": len(tasks),
        "seed": seed,
        "units": shared.units_run,
        "makespan_across_tasks": shared.makespan,
        "makespan_one_at_a_time": serial.makespan,
        "makespan_ratio": serial.makespan / shared.makespan,
        "utilization_across_tasks": shared.utilization,
        "utilization_one_at_a_time": serial.utilization,
        "wait_to_first_unit_across_tasks": {n: o.wait_to_first_unit for n, o in shared.tasks.items()},
        "wait_to_first_unit_one_at_a_time": {n: o.wait_to_first_unit for n, o in serial.tasks.items()},
        "finish_across_tasks": {n: o.finish for n, o in shared.tasks.items()},
        "finish_one_at_a_time": {n: o.finish for n, o in serial.tasks.items()},
        "no_task_waits_for_a_whole_workload": all(o.first_start < first_leave for o in shared.tasks.values()),
        "units_per_task": {n: o.units for n, o in shared.tasks.items()},
        "units_at_first_finish": dict(shared.units_at_first_finish),
        "share_of_units_at_first_finish": {
            n: u / total_then for n, u in shared.units_at_first_finish.items()
        } if total_then else {},
        "weight_share_at_first_finish": dict(shared.shares_at_first_finish),
    }
