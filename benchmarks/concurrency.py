"""Benchmark of MOP across tasks: several deep-net workloads on one pool of workers.

    python benchmarks/concurrency.py            # simulation: W = 2, 8, 32, 128 x 2-64 tasks, 8 seeds
    python benchmarks/concurrency.py --quick    # W = 2, 8, 32 x 2-8 tasks, 8 seeds (seconds)
    python benchmarks/concurrency.py --live     # the live Dask part: NOT IMPLEMENTED YET

Writes benchmarks/results/concurrency_sim.json (``--quick``:
concurrency_sim_quick.json, which git ignores).

Parts
-----
(a) Simulation (implemented). ``pool_simulation.compare_admission`` runs the
    same tasks on W equal workers under two admission policies that share
    one scheduler (``SharedPoolScheduler``): MOP across tasks (every task
    joins the pool at once) and one task at a time (the next task joins when
    the pool is empty, as a service training one deep-net job at a time).
    Tasks (``concurrency_tasks``): image tasks of different users, submitted
    together; each a learning-rate grid of 2-4 configs over 1-3 epochs on one
    network whose unit cost is drawn from Cerebro §5.4's CNN pool; data cut
    in W partitions, one per worker (§3.1). Grid: W = 2, 8, 32, 128 x 2-64
    tasks, several seeds; figures are pooled over seeds (mean and a 95%
    t-interval):
    * makespan ratio (one at a time / across tasks) and both utilizations;
    * each task's wait from submission to its first finished unit, in mean
      unit times of the cell (mean and max over tasks), under both policies;
    * whether some task waited for another task's whole workload before its
      first unit ran (across tasks);
    * units per workload, and fairness: when the first task finished, the
      largest gap between a task's share of the units completed and its
      share of the pool (equal weights).
(b) Live measurement (NOT implemented yet): two and four image tasks of
    different users on a Dask LocalCluster of W = 2 workers, MOP across tasks
    vs one torch job at a time, same configs and epochs; makespan ratio, time
    to first finished model, units per workload, per-unit overhead. It needs
    the service's torch executor to run several workloads on one engine; see
    :func:`measure_live`, the place where it goes.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ease_jupyter.execution.mop.pool_simulation import compare_admission, concurrency_tasks  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
WORKERS = (2, 8, 32, 128)
TASKS = (2, 4, 8, 16, 32, 64)
QUICK_WORKERS = (2, 8, 32)
QUICK_TASKS = (2, 4, 8)
LIVE_NOT_IMPLEMENTED = (
    "live Dask measurement (two and four image tasks on a LocalCluster, W = 2) is not implemented yet: "
    "it needs the service's torch executor to run several workloads on one engine"
)


# -- statistics ------------------------------------------------------------------
def interval(values: list[float], level: float = 0.95) -> dict:
    """Mean with a two-sided t-interval over seeds (the seeds are the replicates)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return {"mean": mean, "lo": float("nan"), "hi": float("nan"), "n": n}
    from scipy.stats import t

    half = t.ppf(0.5 + level / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "n": n}


def mean_unit_time(tasks: list) -> float:
    """The mean duration of a unit over every config of every task (capacity 1)."""
    costs = [c for t in tasks for c in t.costs]
    return sum(costs) / len(costs)


def row_for(workers: int, n_tasks: int, seed: int) -> dict:
    """One simulated cell and seed, with waits in mean unit times."""
    tasks = concurrency_tasks(n_tasks, seed)
    out = compare_admission(tasks, workers, seed)
    unit = mean_unit_time(tasks)
    shared = [w / unit for w in out["wait_to_first_unit_across_tasks"].values()]
    serial = [w / unit for w in out["wait_to_first_unit_one_at_a_time"].values()]
    share_gap = max(
        abs(out["share_of_units_at_first_finish"][n] - out["weight_share_at_first_finish"][n])
        for n in out["weight_share_at_first_finish"]
    )
    row = {
        "workers": workers, "tasks": n_tasks, "seed": seed, "units": out["units"],
        "makespan_ratio": out["makespan_ratio"],
        "utilization_across_tasks": out["utilization_across_tasks"],
        "utilization_one_at_a_time": out["utilization_one_at_a_time"],
        "wait_to_first_unit_across_tasks": {"mean": statistics.fmean(shared), "max": max(shared)},
        "wait_to_first_unit_one_at_a_time": {"mean": statistics.fmean(serial), "max": max(serial)},
        "no_task_waits_for_a_whole_workload": out["no_task_waits_for_a_whole_workload"],
        "units_per_task": {"min": min(out["units_per_task"].values()), "max": max(out["units_per_task"].values())},
        "max_share_gap_at_first_finish": share_gap,
    }
    if n_tasks <= 4:  # the cells of the live targets: every task's figures
        row["per_task"] = {
            name: {
                "units": out["units_per_task"][name],
                "wait_to_first_unit_across_tasks": out["wait_to_first_unit_across_tasks"][name] / unit,
                "wait_to_first_unit_one_at_a_time": out["wait_to_first_unit_one_at_a_time"][name] / unit,
                "units_at_first_finish": out["units_at_first_finish"][name],
                "weight_share_at_first_finish": out["weight_share_at_first_finish"][name],
            }
            for name in out["units_per_task"]
        }
    return row


def summarize(rows: list[dict]) -> dict:
    """Per (workers, tasks) cell: the figures pooled over seeds."""
    cells: dict[str, list[dict]] = {}
    for r in rows:
        cells.setdefault(f"W={r['workers']}/tasks={r['tasks']}", []).append(r)
    out = {}
    for key, rs in cells.items():
        out[key] = {
            "workers": rs[0]["workers"],
            "tasks": rs[0]["tasks"],
            "seeds": [r["seed"] for r in rs],
            "makespan_ratio": interval([r["makespan_ratio"] for r in rs]),
            "utilization_across_tasks": interval([r["utilization_across_tasks"] for r in rs]),
            "utilization_one_at_a_time": interval([r["utilization_one_at_a_time"] for r in rs]),
            "mean_wait_to_first_unit_across_tasks": interval([r["wait_to_first_unit_across_tasks"]["mean"] for r in rs]),
            "mean_wait_to_first_unit_one_at_a_time": interval([r["wait_to_first_unit_one_at_a_time"]["mean"] for r in rs]),
            "max_wait_to_first_unit_across_tasks": max(r["wait_to_first_unit_across_tasks"]["max"] for r in rs),
            "max_wait_to_first_unit_one_at_a_time": max(r["wait_to_first_unit_one_at_a_time"]["max"] for r in rs),
            "no_task_waits_for_a_whole_workload": all(r["no_task_waits_for_a_whole_workload"] for r in rs),
            "max_share_gap_at_first_finish": max(r["max_share_gap_at_first_finish"] for r in rs),
        }
    return out


# -- (a) simulation --------------------------------------------------------------
def run_simulation(workers: tuple[int, ...], tasks: tuple[int, ...], seeds: list[int]) -> list[dict]:
    rows = []
    for w in workers:
        for n in tasks:
            start = time.perf_counter()
            cell = [row_for(w, n, seed) for seed in seeds]
            rows += cell
            ratio = interval([r["makespan_ratio"] for r in cell])
            print(
                f"W={w:>3} tasks={n:>2}: makespan ratio {ratio['mean']:.2f} [{ratio['lo']:.2f}, {ratio['hi']:.2f}]"
                f"  ({time.perf_counter() - start:.1f} s)",
                flush=True,
            )
    return rows


# -- (b) live measurement: to be added --------------------------------------------
def measure_live(args: argparse.Namespace) -> dict:
    """Two and four image tasks of different users on a Dask LocalCluster of
    W = 2 workers, MOP across tasks vs one torch job at a time.

    Not implemented yet: it needs ``easeml serve --engine dask --workers 2``
    whose torch executor runs several workloads on one engine through
    ``SharedPoolScheduler``. Nothing here fakes a figure.
    """
    raise NotImplementedError(LIVE_NOT_IMPLEMENTED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="W = 2, 8, 32 with 2-8 tasks; writes concurrency_sim_quick.json")
    parser.add_argument("--seeds", type=int, default=8, help="seeds per cell (default: 8)")
    parser.add_argument("--live", action="store_true", help="the live Dask measurement (not implemented yet)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the JSON")
    args = parser.parse_args(argv)
    if args.live:
        try:
            measure_live(args)
        except NotImplementedError as error:
            print(f"live: {error}", file=sys.stderr)
            return 2
    seeds = list(range(args.seeds))
    workers, tasks = (QUICK_WORKERS, QUICK_TASKS) if args.quick else (WORKERS, TASKS)
    print("simulation: MOP across tasks vs one task at a time (same scheduler, tasks, configs, epochs, partitions)")
    start = time.perf_counter()
    rows = run_simulation(workers, tasks, seeds)
    result = {
        "what": "simulated makespan of MOP across tasks vs one task at a time (pool_simulation.compare_admission)",
        "mode": "quick" if args.quick else "full",
        "seeds": seeds,
        "wait_unit": "mean unit time of the cell's tasks",
        "cells": summarize(rows),
        "rows": rows,
        "live": {"implemented": False, "note": LIVE_NOT_IMPLEMENTED},
        "python": platform.python_version(),
        "seconds": time.perf_counter() - start,
    }
    out = args.out or RESULTS / ("concurrency_sim_quick.json" if args.quick else "concurrency_sim.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"live: {LIVE_NOT_IMPLEMENTED}")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
