"""Benchmark of MOP across tasks: several deep-net workloads on one pool of workers.

    python benchmarks/concurrency.py            # simulation: W = 2, 8, 32, 128 x 2-64 tasks, 8 seeds
    python benchmarks/concurrency.py --quick    # W = 2, 8, 32 x 2-8 tasks, 8 seeds (seconds)
    python benchmarks/concurrency.py --live     # also the live Dask part (W = 2; --quick: a few minutes)
    python benchmarks/concurrency.py --live-only --live-tasks 2 --repeats 2 --out x.json  # the live part alone

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
    together, on one network each whose unit cost is drawn from Cerebro
    §5.4's CNN pool; data cut in W partitions, one per worker (§3.1). Two
    kinds: ``grid`` (2-4 configs, every config every epoch, 1-3 epochs) and
    ``halving`` (what the service's torch picks train: 3 configs, successive
    halving from 1 to 3-12 epochs, so one config trains alone after the
    first epoch). W = 2, 8, 32, 128 x 2-64 tasks, several seeds; figures are
    pooled over seeds (mean and a 95% t-interval):
    * makespan ratio (one at a time / across tasks) and both utilizations;
    * each task's wait from submission to its first finished unit, in mean
      unit times of the cell (mean and max over tasks), under both policies;
    * whether some task waited for another task's whole workload before its
      first unit ran (across tasks);
    * units per workload, and fairness: when the first task finished, the
      largest gap between a task's share of the units completed and its
      share of the pool (equal weights).
(b) Live measurement (``--live``, :func:`measure_live`): two and four image
    tasks of different users (8x8 digits, each user's own draw of 7,188 by
    default) on a Dask LocalCluster of W = 2 workers, submitted at once;
    each task is the workload the service trains for one torch pick (a zoo
    net x three learning rates, ``--procedure halving``: successive halving
    to the zoo's epochs for the task's size; ``grid``: every config for 3
    epochs, what the service trained before). MOP across tasks (one
    ``PoolDriver`` interleaving every workload) vs one torch job at a time
    (the same driver, one workload after the other), same configs,
    procedure, epochs and data: makespan ratio, each task's time
    to its first unit and first finished model (a config's first validated
    epoch), units per workload, per-unit overhead (W x makespan minus
    the units' own compute, per unit), each kind of unit's own seconds, the
    CPU seconds per unit of the driver's process and of each worker, and
    the workers' torch/BLAS thread settings. Writes concurrency_live.json
    (``--quick``: concurrency_live_quick.json; ``grid``: concurrency_live_grid*.json).
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

from ease_jupyter.execution.automl import pick_schedule  # noqa: E402
from ease_jupyter.execution.mop.placement import AUTO_REPLICATION  # noqa: E402
from ease_jupyter.execution.mop.pool_simulation import PoolTask, compare_admission, concurrency_tasks  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
WORKERS = (2, 8, 32, 128)
TASKS = (2, 4, 8, 16, 32, 64)
QUICK_WORKERS = (2, 8, 32)
QUICK_TASKS = (2, 4, 8)


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


#: A halving task as the service's torch picks are: its three learning rates,
#: successive halving up to the epochs the zoo gives a task by its size.
HALVING_DRAW = {"configs": (3,), "epochs": tuple(range(3, 13)),
                "kept": lambda n, r: pick_schedule(n, r).configs_per_epoch}


def row_for(workers: int, n_tasks: int, seed: int, procedure: str = "grid") -> dict:
    """One simulated cell and seed, with waits in mean unit times."""
    tasks = concurrency_tasks(n_tasks, seed, **(HALVING_DRAW if procedure == "halving" else {}))
    out = compare_admission(tasks, workers, seed)
    unit = mean_unit_time(tasks)
    shared = [w / unit for w in out["wait_to_first_unit_across_tasks"].values()]
    serial = [w / unit for w in out["wait_to_first_unit_one_at_a_time"].values()]
    share_gap = max(
        abs(out["share_of_units_at_first_finish"][n] - out["weight_share_at_first_finish"][n])
        for n in out["weight_share_at_first_finish"]
    )
    row = {
        "procedure": procedure, "workers": workers, "tasks": n_tasks, "seed": seed, "units": out["units"],
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
        prefix = "" if r.get("procedure", "grid") == "grid" else f"{r['procedure']}/"
        cells.setdefault(f"{prefix}W={r['workers']}/tasks={r['tasks']}", []).append(r)
    out = {}
    for key, rs in cells.items():
        out[key] = {
            "procedure": rs[0].get("procedure", "grid"),
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
def run_simulation(workers: tuple[int, ...], tasks: tuple[int, ...], seeds: list[int],
                   procedures: tuple[str, ...] = ("grid", "halving")) -> list[dict]:
    rows = []
    for procedure in procedures:
        for w in workers:
            for n in tasks:
                start = time.perf_counter()
                cell = [row_for(w, n, seed, procedure) for seed in seeds]
                rows += cell
                ratio = interval([r["makespan_ratio"] for r in cell])
                print(
                    f"{procedure:>7} W={w:>3} tasks={n:>2}: makespan ratio {ratio['mean']:.2f} "
                    f"[{ratio['lo']:.2f}, {ratio['hi']:.2f}]"
                    f"  ({time.perf_counter() - start:.1f} s)",
                    flush=True,
                )
    return rows


# -- (b) live measurement ---------------------------------------------------------
LIVE_LRS = (0.1, 0.01, 0.001)  # the service's learning-rate grid of a torch pick (ease.ml pvldb §3.1)
LIVE_MODEL = ("resnet_small", "SmallResNet")  # a zoo candidate of an 8x8 image task; LeNet's units last ~20 ms


def _live_tasks(n_tasks: int, examples: int) -> list[tuple[str, object, object]]:
    """``n_tasks`` image tasks of different users: sklearn's 8x8 digits, each
    user's own draw (and order) of ``examples`` of them; beyond the 1,797
    digits, drawn again with a little pixel noise (so that a unit's compute,
    not the driver's dispatch, dominates its time on a 2-core machine)."""
    import numpy as np
    from sklearn.datasets import load_digits

    d = load_digits()
    X, y = (d.images / 16.0).astype("float32"), d.target.astype("int64")
    out = []
    for i in range(n_tasks):
        rng = np.random.default_rng(i)
        pick = np.concatenate([rng.permutation(len(X)) for _ in range(-(-examples // len(X)))])[:examples]
        Xi = X[pick]
        if examples > len(X):
            Xi = np.clip(Xi + rng.normal(0.0, 0.05, Xi.shape).astype("float32"), 0.0, 1.0)
        out.append((f"user{i}", Xi, y[pick]))
    return out


def _live_procedure(procedure: str, epochs: int):
    """One torch pick's procedure over the service's learning rates:
    ``"halving"``, what the service trains (``service/mop.py``:
    ``pick_procedure``, successive halving from 1 to ``epochs`` epochs), or
    ``"grid"``, every config for ``epochs`` epochs (what it trained before)."""
    from ease_jupyter.execution.automl import LearningRateGrid, pick_procedure

    name = LIVE_MODEL[0]
    if procedure == "grid":
        return LearningRateGrid(name, list(LIVE_LRS), epochs=epochs)
    return pick_procedure(name, [{"lr": lr} for lr in LIVE_LRS], max_epochs=epochs)


def _live_runner(engine, X, y, procedure: str, epochs: int, t0: list[float], log: dict, replication):
    """The service's torch pick as one MOP workload (:func:`_live_procedure`);
    ``log`` gets each unit's end time and seconds."""
    from ease_jupyter.execution.mop.runner import MOPRunner
    from ease_jupyter.zoo.templates import TorchBuilder

    def on_unit(rec) -> None:
        log.setdefault("units", []).append((time.monotonic() - t0[0], rec.kind, float(rec.metrics.get("seconds", 0.0))))

    def on_metrics(m) -> None:
        log.setdefault("models", []).append(time.monotonic() - t0[0])

    name, cls = LIVE_MODEL
    models = {name: TorchBuilder(name, cls, ((8, 8), 10))}
    return MOPRunner(engine, _live_procedure(procedure, epochs), models, X, y, replication=replication,
                     on_unit=on_unit, on_metrics=on_metrics)


def _cpu_seconds(processes: dict) -> dict[str, float]:
    """User + system CPU seconds so far of each named process."""
    out = {}
    for name, p in processes.items():
        t = p.cpu_times()
        out[name] = t.user + t.system
    return out


def _worker_threads() -> dict:
    """On a worker: the torch and BLAS thread settings its units run with."""
    import os

    import torch

    return {"torch_threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS")}


def _live_round(engine, tasks, procedure: str, epochs: int, across: bool, replication=AUTO_REPLICATION) -> dict:
    """All tasks submitted at once at t = 0: on one PoolDriver together
    (MOP across tasks), or one torch job after the other on the same driver.
    Also the CPU seconds per unit of this process (the driver, the Dask
    scheduler and the nannies of a LocalCluster) and of the workers."""
    import psutil

    from ease_jupyter.execution.mop.pool_driver import PoolDriver

    driver = PoolDriver(engine, seed=0)
    t0 = [0.0]
    logs = {user: {} for user, _, _ in tasks}
    runners = [(user, _live_runner(engine, X, y, procedure, epochs, t0, logs[user], replication)) for user, X, y in tasks]
    processes = {"driver": psutil.Process(), **{f"worker{i}": psutil.Process(pid)
                                                 for i, pid in enumerate(sorted(engine.worker_pids().values()))}}
    cpu0 = _cpu_seconds(processes)
    t0[0] = time.monotonic()
    if across:
        futures = [driver.submit(r, owner=user) for user, r in runners]
        for f in futures:
            f.result()
    else:
        for user, r in runners:
            driver.run(r, owner=user)
    makespan = time.monotonic() - t0[0]
    cpu1 = _cpu_seconds(processes)
    units = sum(len(log["units"]) for log in logs.values())
    compute = sum(sec for log in logs.values() for _, _, sec in log["units"])
    by_kind = {kind: [sec for log in logs.values() for _, k, sec in log["units"] if k == kind] for kind in ("train", "val")}
    workers = len(engine.workers())
    return {
        "makespan_s": makespan,
        "per_task": {
            user: {
                "units": len(log["units"]),
                "train_units": sum(kind == "train" for _, kind, _ in log["units"]),
                "first_unit_s": min(t for t, _, _ in log["units"]),
                "first_model_s": min(log["models"]),  # a config's first validated epoch
                "done_s": max(t for t, _, _ in log["units"]),
            }
            for user, log in logs.items()
        },
        "units": units,
        "unit_compute_s_mean": compute / units,
        # a unit's own seconds by kind: longer across tasks than one at a time would mean contention
        "unit_compute_s_mean_by_kind": {k: statistics.fmean(v) for k, v in by_kind.items() if v},
        "cpu_s_per_unit": {name: (cpu1[name] - cpu0[name]) / units for name in processes},
        # what a unit costs beyond its own compute: hops, dispatch, validation barriers, idle workers
        "overhead_per_unit_s": (workers * makespan - compute) / units,
    }


def unit_time_ratio(across: dict, one_at_a_time: dict) -> float:
    """One repeat's makespan ratio with each makespan counted in its own
    round's mean training unit, which removes the drift of the machine's
    speed between the two rounds (other users' load)."""
    def in_units(r: dict) -> float:
        return r["makespan_s"] / r["unit_compute_s_mean_by_kind"]["train"]
    return in_units(one_at_a_time) / in_units(across)


def live_ceiling(n_tasks: int, epochs: int, procedure: str, seeds: int = 8) -> float:
    """The live cell's makespan ratio with no overhead at all: ``n_tasks``
    equal tasks of the live schedule, equal unit costs, W = 2, in the
    compute-only simulation (no validation, dispatch or hops), averaged over
    the scheduler's random draws."""
    kept = pick_schedule(len(LIVE_LRS), epochs).configs_per_epoch if procedure == "halving" else ()
    tasks = [PoolTask(f"t{i}", f"u{i}", (1.0,) * len(LIVE_LRS), epochs=epochs, configs_per_epoch=tuple(kept))
             for i in range(n_tasks)]
    return statistics.fmean(compare_admission(tasks, 2, seed)["makespan_ratio"] for seed in range(seeds))


def _live_cell(n_tasks: int, epochs: int, procedure: str, rounds: dict[str, list[dict]]) -> dict:
    """One live cell: both arms' rounds and the makespan ratios pooled over repeats."""
    ratios = [b["makespan_s"] / a["makespan_s"] for a, b in zip(rounds["across"], rounds["one_at_a_time"])]
    in_units = [unit_time_ratio(a, b) for a, b in zip(rounds["across"], rounds["one_at_a_time"])]
    return {"makespan_ratio": statistics.fmean(ratios), "ratios": ratios,
            # each makespan in its own round's mean training unit: the machine's drift cancels
            "makespan_ratio_in_unit_times": interval(in_units), "ratios_in_unit_times": in_units,
            "ceiling": live_ceiling(n_tasks, epochs, procedure), **rounds}


def _print_cell(name: str, cell: dict) -> None:
    rounds = {m: cell[m] for m in ("across", "one_at_a_time")}
    first = {m: [max(r["per_task"][u]["first_model_s"] for u in r["per_task"]) for r in rounds[m]] for m in rounds}
    in_u = cell["makespan_ratio_in_unit_times"]
    print(f"live W=2 {name}: makespan ratio {cell['makespan_ratio']:.2f}, in unit times "
          f"{in_u['mean']:.2f} [{in_u['lo']:.2f}, {in_u['hi']:.2f}] (compute-only ceiling {cell['ceiling']:.2f}) "
          f"(across {statistics.fmean(r['makespan_s'] for r in rounds['across']):.1f} s, one at a time "
          f"{statistics.fmean(r['makespan_s'] for r in rounds['one_at_a_time']):.1f} s); latest first model "
          f"{statistics.fmean(first['across']):.1f} s vs {statistics.fmean(first['one_at_a_time']):.1f} s; "
          f"overhead/unit {statistics.fmean(r['overhead_per_unit_s'] for r in rounds['across']):.3f} s vs "
          f"{statistics.fmean(r['overhead_per_unit_s'] for r in rounds['one_at_a_time']):.3f} s "
          f"(unit compute {statistics.fmean(r['unit_compute_s_mean'] for r in rounds['across']):.3f} s)",
          flush=True)
    for mode in ("one_at_a_time", "across"):
        train = statistics.fmean(r["unit_compute_s_mean_by_kind"]["train"] for r in rounds[mode])
        cpu = {k: statistics.fmean(r["cpu_s_per_unit"][k] for r in rounds[mode]) for k in rounds[mode][0]["cpu_s_per_unit"]}
        spans = ", ".join(f"{r['makespan_s']:.2f}" for r in rounds[mode])
        print(f"  {mode}: makespans {spans} s; train unit "
              f"{train:.3f} s; CPU per unit " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in cpu.items()),
              flush=True)


def measure_live(args: argparse.Namespace) -> dict:
    """Two and four image tasks of different users on a Dask LocalCluster of
    W = 2 workers, all submitted at once: MOP across tasks (one
    :class:`PoolDriver` interleaving every workload) vs one torch job at a
    time (the same driver, one workload after the other), with the same
    configs (a zoo net x the service's three learning rates), procedure,
    epochs and data. With ``--procedure halving`` (the default) each
    workload is what the service trains for one torch pick: successive
    halving up to the zoo's epochs for the task's size."""
    import os

    from ease_jupyter.execution.engine.dask import DaskEngine
    from ease_jupyter.zoo.templates import default_max_epochs

    examples = args.examples
    if args.procedure == "halving":
        epochs = default_max_epochs(examples)
    else:
        epochs = 2 if args.quick else 3
    repeats = args.repeats or (1 if args.quick else 2)
    out: dict = {"workers": 2, "procedure": args.procedure, "epochs": epochs, "examples_per_task": examples,
                 "replication": args.replication,
                 "lrs": list(LIVE_LRS), "model": LIVE_MODEL[0], "repeats": repeats,
                 "load_before": os.getloadavg(), "cells": {}}
    if args.procedure == "halving":
        out["schedule"] = pick_schedule(len(LIVE_LRS), epochs).describe()
    engine = DaskEngine(n_workers=2)
    try:
        warm = _live_tasks(1, 200)
        _live_round(engine, warm, "grid", 1, across=False)  # the workers import torch once, before any timing
        out["worker_threads"] = engine.client.run(_worker_threads)
        for n in args.live_tasks:
            tasks = _live_tasks(n, examples)
            rounds = {r: {"across": [], "one_at_a_time": []} for r in args.replication}
            for _ in range(repeats):  # alternate the arms, so drift in the machine's load hits each
                for r in args.replication:
                    for mode in ("one_at_a_time", "across"):
                        rounds[r][mode].append(_live_round(engine, tasks, args.procedure, epochs,
                                                           across=mode == "across", replication=r))
            for r in args.replication:
                key = f"tasks={n}" + ("" if r == AUTO_REPLICATION else f",replication={r}")
                out["cells"][key] = _live_cell(n, epochs, args.procedure, rounds[r])
                _print_cell(f"tasks={n} replication={r}", out["cells"][key])
    finally:
        engine.close()
    out["load_after"] = os.getloadavg()
    return out


def replications(value: str) -> tuple:
    """``--replication``'s arms: "auto" or integers 1-2, comma-separated."""
    arms = tuple(v if v == AUTO_REPLICATION else int(v) for v in value.split(","))
    if any(a not in (AUTO_REPLICATION, 1, 2) for a in arms):
        raise argparse.ArgumentTypeError(f"found {value!r}, expected a comma-separated list of auto, 1 and 2")
    return arms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="W = 2, 8, 32 with 2-8 tasks; writes concurrency_sim_quick.json")
    parser.add_argument("--seeds", type=int, default=8, help="seeds per cell (default: 8)")
    parser.add_argument("--live", action="store_true",
                        help="also the live Dask measurement (W = 2, two and four tasks; writes concurrency_live*.json)")
    parser.add_argument("--procedure", choices=("halving", "grid"), default="halving",
                        help="live: each pick's procedure: halving (what the service trains, default) or grid "
                             "(every config every epoch; writes concurrency_live_grid*.json)")
    parser.add_argument("--examples", type=int, default=7188,
                        help="live: examples per task (default 7,188: the digits four times, with noise beyond the first)")
    parser.add_argument("--live-only", action="store_true", help="the live measurement only, no simulation")
    parser.add_argument("--live-tasks", type=lambda v: tuple(int(n) for n in v.split(",")), default=(2, 4),
                        help="live: the numbers of tasks, comma-separated (default: 2,4)")
    parser.add_argument("--replication", type=replications, default=(AUTO_REPLICATION,),
                        help="live: copies of each partition on the W = 2 workers (Cerebro 5.5), comma-separated "
                             "arms run alternated: 1, 2 or auto (what the service places: on every worker while "
                             "the data are small; default; its cells are tasks=N, the others tasks=N,replication=R)")
    parser.add_argument("--repeats", type=int, default=0, help="live: repeats per mode (default: 2; --quick: 1)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the JSON")
    args = parser.parse_args(argv)
    if args.live or args.live_only:
        live = measure_live(args)
        stem = "concurrency_live" + ("_grid" if args.procedure == "grid" else "")
        live_out = RESULTS / (f"{stem}_quick.json" if args.quick else f"{stem}.json")
        if args.live_only and args.out is not None:
            live_out = args.out
        live_out.parent.mkdir(parents=True, exist_ok=True)
        live_out.write_text(json.dumps({**live, "python": platform.python_version()}, indent=1) + "\n")
        print(f"wrote {live_out}")
        if args.live_only:
            return 0
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
        "live": "concurrency_live.json (--live)",
        "python": platform.python_version(),
        "seconds": time.perf_counter() - start,
    }
    out = args.out or RESULTS / ("concurrency_sim_quick.json" if args.quick else "concurrency_sim.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
