"""A discrete-event simulator that drives :class:`MOPScheduler` (Cerebro §5.4).

A fake clock and a heap of finish events stand in for a cluster: a unit of
config ``c`` on worker ``w`` takes ``costs[c] / capacities[w]`` time units
(unit time is proportional to the config's compute cost and inversely
proportional to the worker's capacity, §5.4). Worker failures and joins
(§5.6) are injected at given times. No files, no threads; only
:func:`decision_latency` reads a clock, to measure the scheduler.

Public pieces:

* :func:`simulate` — one run; returns a :class:`SimResult` (makespan, lower
  bound, ratio, lost units, visit log).
* :func:`ring_availability` — partition ``j`` on worker ``j`` and on the next
  ``r - 1`` workers (no replication when ``r == 1``).
* :func:`lower_bound` — ``max(L_max, max per-config total)`` (see there).
* :func:`figure6_grid` — the Figure 6 settings; rows for ``benchmarks/mop.py``.
* :func:`decision_latency` — p50/p99 milliseconds per ``schedule()`` decision.
* ``CNN_MFLOPS``, ``GPU_TFLOPS`` — the §5.4 heterogeneous cost pools.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from .scheduler import MOPScheduler, Unit

__all__ = [
    "CNN_MFLOPS",
    "GPU_TFLOPS",
    "WorkerFailure",
    "WorkerJoin",
    "SimResult",
    "ring_availability",
    "lower_bound",
    "simulate",
    "figure6_workload",
    "figure6_grid",
    "decision_latency",
]

# §5.4 samples config costs from 35 popular CNNs (360-21000 MFLOPs, mean 5939,
# sd 5671); the list itself is only in the Cerebro tech report. These 35 values
# are SYNTHETIC stand-ins, x_i = 360 + 20640 * (0.74 u^4.55 + 0.26 u) with
# u = i/34, rounded: range 360-21000, mean 5940, sample sd 5671.
CNN_MFLOPS: tuple[int, ...] = tuple(
    round(360 + 20640 * (0.74 * (i / 34) ** 4.55 + 0.26 * (i / 34))) for i in range(35)
)

# §5.4 worker capacities: Titan Xp, K80, GTX 1080, P100 (TFLOPS).
GPU_TFLOPS: tuple[float, ...] = (12.1, 5.6, 11.3, 18.7)

SETTINGS = ("homogeneous", "heterogeneous")


@dataclass(frozen=True)
class WorkerFailure:
    """Worker ``worker`` dies at ``time``; its in-flight unit is lost (§5.6)."""

    time: float
    worker: str


@dataclass(frozen=True)
class WorkerJoin:
    """Worker ``worker`` joins (or rejoins) at ``time`` holding ``partitions`` (§5.6)."""

    time: float
    worker: str
    capacity: float
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class SimResult:
    """The outcome of one :func:`simulate` run.

    ``makespan`` is the time the last epoch finished (or the time the run got
    stuck, with ``completed`` False). ``worker_units`` counts the units each
    worker completed. ``lower_bound`` is the failure-free
    bound of :func:`lower_bound` times ``epochs``; ``ratio`` is their quotient.
    """

    makespan: float
    lower_bound: float
    completed: bool
    epochs: int
    units_run: int
    units_lost: int
    decisions: int
    visit_log: Mapping[tuple[str, int], tuple[int, ...]] = field(repr=False)
    worker_units: Mapping[str, int] = field(repr=False, default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.makespan / self.lower_bound if self.lower_bound > 0 else float("nan")


def _names(n: int) -> list[str]:
    width = len(str(max(n - 1, 0)))
    return [f"w{j:0{width}d}" for j in range(n)]


def ring_availability(workers: int, replication: int = 1) -> dict[str, tuple[int, ...]]:
    """p = ``workers`` partitions; worker ``j`` holds ``j, j+1, ... j+r-1 (mod p)``.

    With ``replication == 1`` this is Cerebro's default placement (§3.1); with
    ``r > 1`` each partition has ``r`` replicas (§5.5).
    """
    if workers < 1:
        raise ValueError(f"workers: found {workers}, expected >= 1")
    if not 1 <= replication <= workers:
        raise ValueError(f"replication: found {replication}, expected 1..{workers}")
    return {
        name: tuple(sorted((j + k) % workers for k in range(replication)))
        for j, name in enumerate(_names(workers))
    }


def lower_bound(
    costs: Sequence[float],
    capacities: Mapping[str, float],
    availability: Mapping[str, Iterable[int]],
) -> float:
    """A lower bound on one epoch's makespan: ``max(L_max, max per-config total)``.

    With no replication (every partition on exactly one worker) this is the
    issue's definition, from Cerebro Eq. 3:

    * per-config total = sum over partitions of the config's unit time on the
      worker holding the partition (model training isolation serialises them);
    * ``L_max`` = max over workers of the load that must run there: sum over
      configs of their unit times on that worker (exclusive access).

    With replication (§5.5) a unit may run on any holder, so the per-config
    total takes the fastest holder of each partition, and ``L_max`` becomes
    its fluid relaxation: the least T such that every partition's work can be
    split among its holders with each worker busy at most T (a small LP).
    With one holder per partition that LP gives exactly ``L_max``.
    """
    holders: dict[int, list[str]] = {}
    for worker, parts in availability.items():
        for p in parts:
            holders.setdefault(p, []).append(worker)
    if not holders or not costs:
        return 0.0
    fastest = {p: max(capacities[w] for w in ws) for p, ws in holders.items()}
    per_config = max(sum(cost / cap for cap in fastest.values()) for cost in costs)
    total_cost = float(sum(costs))  # one partition's work, summed over configs
    if all(len(ws) == 1 for ws in holders.values()):
        load: dict[str, int] = {}
        for ws in holders.values():
            load[ws[0]] = load.get(ws[0], 0) + 1
        l_max = max(n * total_cost / capacities[w] for w, n in load.items())
    else:
        l_max = _fluid_makespan(total_cost, capacities, holders)
    return max(per_config, l_max)


def _fluid_makespan(work: float, capacities: Mapping[str, float], holders: Mapping[int, list[str]]) -> float:
    """min T s.t. sum_w x[p,w] = 1 for each partition, and for each worker
    sum_p x[p,w] * work / cap[w] <= T, x >= 0 (units made divisible)."""
    from scipy.optimize import linprog  # only needed with replication

    pairs = [(p, w) for p, ws in holders.items() for w in ws]
    parts = {p: i for i, p in enumerate(holders)}
    workers = {w: i for i, w in enumerate(sorted({w for _, w in pairs}))}
    n = len(pairs) + 1  # the x[p,w], then T
    a_eq = np.zeros((len(parts), n))
    a_ub = np.zeros((len(workers), n))
    for k, (p, w) in enumerate(pairs):
        a_eq[parts[p], k] = 1.0
        a_ub[workers[w], k] = work / capacities[w]
    a_ub[:, -1] = -1.0
    objective = np.zeros(n)
    objective[-1] = 1.0
    result = linprog(
        objective, A_ub=a_ub, b_ub=np.zeros(len(workers)), A_eq=a_eq, b_eq=np.ones(len(parts)),
        bounds=(0, None), method="highs",
    )
    if not result.success:  # cannot happen: x = 1/|holders| is feasible
        raise RuntimeError(f"lower_bound: the fluid LP failed ({result.message})")
    return float(result.fun) * (1 - 1e-9)  # solver tolerance must not overstate a bound


def simulate(
    costs: Sequence[float],
    capacities: Sequence[float] | Mapping[str, float],
    *,
    replication: int = 1,
    availability: Mapping[str, Iterable[int]] | None = None,
    seed: int = 0,
    epochs: int = 1,
    failures: Iterable[WorkerFailure] = (),
    joins: Iterable[WorkerJoin] = (),
    visit_order: Mapping[tuple[str, int], list[int]] | None = None,
) -> SimResult:
    """Run the randomized scheduler (Alg. 1-2) on a fake clock.

    Args:
        costs: per config, the compute cost of one sub-epoch unit (e.g. MFLOPs;
            pass unit times with capacities of 1). Configs are named
            ``c000``, ``c001``, ...
        capacities: per worker, its compute speed (e.g. TFLOPS). A sequence
            names workers ``w0``, ``w1``, ...; a mapping names them itself.
        replication: replicas per partition for :func:`ring_availability`
            (p = number of workers). Ignored when ``availability`` is given.
        availability: an explicit availability map (§5.5) instead of the ring.
        seed: the scheduler's seed.
        epochs: epochs to run, the same configs each time.
        failures: workers that die; a unit in flight there is lost and requeued
            (§5.6). A failure of a worker that is not live is ignored.
        joins: workers that join (or rejoin after failing) between units.
        visit_order: replay a previous ``visit_log`` (§3.1).

    Returns:
        A :class:`SimResult`. ``completed`` is False if the scheduler got
        stuck (a needed partition is held by no live worker).

    Events at the same instant are applied in the order finish, failure,
    join, and the scheduler runs once after each instant.
    """
    if isinstance(capacities, Mapping):
        caps = {str(w): float(c) for w, c in capacities.items()}
    else:
        caps = dict(zip(_names(len(capacities)), map(float, capacities)))
    if not caps:
        raise ValueError("capacities: found none, expected at least one worker")
    if any(c <= 0 for c in caps.values()):
        raise ValueError(f"capacities: found {caps}, expected all > 0")
    if any(c < 0 for c in costs):
        raise ValueError("costs: found a negative cost, expected all >= 0")
    if availability is None:
        names = list(caps)
        ring = ring_availability(len(names), replication)
        availability = {names[j]: parts for j, parts in enumerate(ring.values())}
    missing = sorted(set(availability) - set(caps))
    if missing:
        raise ValueError(f"availability: workers {missing} have no capacity")

    width = len(str(max(len(costs) - 1, 0)))
    config_cost = {f"c{i:0{width}d}": float(c) for i, c in enumerate(costs)}
    sched = MOPScheduler(config_cost, availability, seed=seed, visit_order=visit_order)
    bound = epochs * lower_bound(list(config_cost.values()), caps, availability)

    # Heap entries: (time, kind, seq, payload); kind orders same-instant events.
    FINISH, FAIL, JOIN = 0, 1, 2
    heap: list[tuple[float, int, int, object]] = []
    seq = 0
    for ev in failures:
        heap.append((float(ev.time), FAIL, seq, ev))
        seq += 1
    for ev in joins:
        heap.append((float(ev.time), JOIN, seq, ev))
        seq += 1
    heapq.heapify(heap)

    running: dict[str, tuple[Unit, int]] = {}  # worker -> (unit, token of its finish event)
    per_worker: dict[str, int] = {}
    clock = 0.0
    units_run = units_lost = decisions = 0
    epoch = 0
    while True:
        for unit, worker in sched.schedule():
            decisions += 1
            seq += 1
            running[worker] = (unit, seq)
            finish = clock + config_cost[unit.config] / caps[worker]
            heapq.heappush(heap, (finish, FINISH, seq, (unit, worker)))
        if sched.epoch_done():
            epoch += 1
            if epoch == epochs:
                break
            sched.next_epoch()
            continue
        if not running and sched.stuck() and not any(k == JOIN for _, k, _, _ in heap):
            return SimResult(clock, bound, False, epoch, units_run, units_lost, decisions, sched.visit_log, per_worker)
        if not heap:  # cannot happen unless the scheduler is inconsistent
            raise RuntimeError("simulate: no events left but the epoch is not done")
        clock = heap[0][0]
        while heap and heap[0][0] == clock:
            _, kind, token, payload = heapq.heappop(heap)
            if kind == FINISH:
                unit, worker = payload
                if running.get(worker, (None, None))[1] != token:
                    continue  # the worker died meanwhile: a stale event
                del running[worker]
                sched.complete(unit, worker)
                units_run += 1
                per_worker[worker] = per_worker.get(worker, 0) + 1
            elif kind == FAIL:
                if payload.worker in sched.workers:
                    units_lost += len(sched.remove_worker(payload.worker))
                    running.pop(payload.worker, None)
            else:
                caps[payload.worker] = float(payload.capacity)
                sched.add_worker(payload.worker, payload.partitions)
    return SimResult(clock, bound, True, epochs, units_run, units_lost, decisions, sched.visit_log, per_worker)


def figure6_workload(
    configs: int, workers: int, setting: str, seed: int
) -> tuple[list[float], list[float]]:
    """Config costs (MFLOPs) and worker capacities (TFLOPS) for one §5.4 cell.

    Homogeneous: every config costs the CNN mean (5939 MFLOPs) and every
    worker is a Titan Xp. Heterogeneous: costs are drawn with replacement
    from :data:`CNN_MFLOPS` and capacities from :data:`GPU_TFLOPS`, by
    ``numpy.random.default_rng(seed)``.
    """
    if setting == "homogeneous":
        return [5939.0] * configs, [GPU_TFLOPS[0]] * workers
    if setting == "heterogeneous":
        rng = np.random.default_rng(seed)
        costs = rng.choice(np.array(CNN_MFLOPS, dtype=float), size=configs, replace=True)
        caps = rng.choice(np.array(GPU_TFLOPS), size=workers, replace=True)
        return costs.tolist(), caps.tolist()
    raise ValueError(f"setting: found {setting!r}, expected one of {SETTINGS}")


def figure6_grid(
    *,
    config_counts: Sequence[int] = (16, 256),
    worker_counts: Sequence[int] = (8, 16),
    settings: Sequence[str] = SETTINGS,
    seeds: Iterable[int] = range(5),
    replication: int = 1,
) -> list[dict]:
    """Cerebro Figure 6's grid: 16 or 256 configs x 8 or 16 workers x
    homogeneous / heterogeneous, several seeds (the paper uses 5).

    The seed draws the heterogeneous workload and seeds the scheduler. The
    randomized scheduler is compared with :func:`lower_bound` rather than
    with the paper's MILP/approximate schedulers.

    Returns:
        One dict per run: ``configs, workers, setting, seed, makespan,
        lower_bound, ratio``.
    """
    rows = []
    seeds = list(seeds)
    for setting in settings:
        for n_configs in config_counts:
            for n_workers in worker_counts:
                for seed in seeds:
                    costs, caps = figure6_workload(n_configs, n_workers, setting, seed)
                    result = simulate(costs, caps, replication=replication, seed=seed)
                    rows.append(
                        {
                            "configs": n_configs,
                            "workers": n_workers,
                            "setting": setting,
                            "seed": seed,
                            "makespan": result.makespan,
                            "lower_bound": result.lower_bound,
                            "ratio": result.ratio,
                        }
                    )
    return rows


def decision_latency(
    configs: int = 256,
    workers: int = 64,
    *,
    replication: int = 1,
    seed: int = 0,
    setting: str = "heterogeneous",
    max_decisions: int | None = None,
) -> dict:
    """Wall-clock cost of one scheduling decision (§5.4 reports scheduler runtimes).

    Replays an epoch like :func:`simulate` and times every ``schedule()`` call
    that follows a single completion and assigns exactly one unit (the
    steady state of Alg. 1); the initial fill-up call is excluded.

    Returns:
        ``{"p50_ms", "p99_ms", "mean_ms", "max_ms", "decisions", "configs",
        "workers", "replication"}``.
    """
    costs, caps = figure6_workload(configs, workers, setting, seed)
    names = _names(workers)
    ring = ring_availability(workers, replication)
    cost_of = {f"c{i}": cost for i, cost in enumerate(costs)}
    sched = MOPScheduler(cost_of, ring, seed=seed)
    speed = dict(zip(names, caps))
    heap: list[tuple[float, int, Unit, str]] = []
    seq = 0
    samples: list[float] = []
    clock = 0.0
    batch = sched.schedule()  # fill-up: not a steady-state decision
    while True:
        for unit, worker in batch:
            seq += 1
            heapq.heappush(heap, (clock + cost_of[unit.config] / speed[worker], seq, unit, worker))
        if not heap or (max_decisions is not None and len(samples) >= max_decisions):
            break
        clock, _, unit, worker = heapq.heappop(heap)
        sched.complete(unit, worker)
        start = time.perf_counter()
        batch = sched.schedule()
        elapsed = time.perf_counter() - start
        if len(batch) == 1:
            samples.append(elapsed * 1e3)
    ms = np.array(samples) if samples else np.array([float("nan")])
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "max_ms": float(ms.max()),
        "decisions": len(samples),
        "configs": configs,
        "workers": workers,
        "replication": replication,
    }
