"""simulate_pool / compare_admission: several MOP workloads on a fake clock,
and the pure helpers of benchmarks/concurrency.py."""

from __future__ import annotations

import json
import math

import pytest

from ease_jupyter.execution.automl import pick_schedule
from ease_jupyter.execution.mop import PoolTask, WorkerFailure, simulate_pool
from ease_jupyter.execution.mop.pool_simulation import compare_admission, concurrency_tasks

from benchmark_scripts import load_benchmark


def units_needed(task: PoolTask, workers: int) -> int:
    return len(task.costs) * workers * task.epochs


TASKS = [
    PoolTask("big", "ann", (3.0, 3.0, 3.0), epochs=2),
    PoolTask("small", "bob", (1.0, 1.0)),
    PoolTask("mid", "cy", (2.0, 2.0), epochs=2),
]


def test_every_task_runs_every_unit_and_the_clock_respects_the_workers():
    workers = 4
    result = simulate_pool(TASKS, [1.0] * workers, seed=0)
    assert result.completed and result.units_lost == 0
    assert result.units_run == sum(units_needed(t, workers) for t in TASKS)
    for t in TASKS:
        assert result.tasks[t.name].units == units_needed(t, workers)
    work = sum(sum(t.costs) * workers * t.epochs for t in TASKS)
    # One unit per worker: no faster than the total work spread over all workers;
    # one worker per config: no task faster than its configs' chain of units.
    assert result.makespan >= work / workers - 1e-9
    for t in TASKS:
        assert result.tasks[t.name].finish >= max(t.costs) * workers * t.epochs - 1e-9
    assert result.utilization == pytest.approx(work / (workers * result.makespan))
    assert 0 < result.utilization <= 1


def test_one_at_a_time_admits_in_arrival_order_and_never_overlaps():
    result = simulate_pool(TASKS, [1.0] * 4, seed=1, one_at_a_time=True)
    outcomes = [result.tasks[t.name] for t in TASKS]
    for before, after in zip(outcomes, outcomes[1:]):
        assert after.joined == before.finish
        assert after.first_start >= before.finish
    assert result.makespan == outcomes[-1].finish
    shared = simulate_pool(TASKS, [1.0] * 4, seed=1)
    assert all(shared.tasks[t.name].joined == 0.0 for t in TASKS)
    assert max(o.first_start for o in shared.tasks.values()) < min(o.finish for o in shared.tasks.values())


def test_sharing_the_pool_overlaps_tasks_that_cannot_fill_it():
    # 4 tasks of 2 configs on 8 workers: alone each keeps at most 2 workers busy.
    tasks = [PoolTask(f"t{i}", f"u{i}", (1.0, 1.0)) for i in range(4)]
    out = compare_admission(tasks, 8, seed=0)
    assert out["makespan_one_at_a_time"] >= 4 * 8  # each task: 8 partitions in a row per config
    assert out["makespan_across_tasks"] >= 2 * 4 * 8 / 8
    assert out["makespan_ratio"] == pytest.approx(out["makespan_one_at_a_time"] / out["makespan_across_tasks"])
    assert out["makespan_ratio"] > 2
    assert out["no_task_waits_for_a_whole_workload"]
    assert out["utilization_across_tasks"] > out["utilization_one_at_a_time"]
    waits = out["wait_to_first_unit_one_at_a_time"]
    assert sorted(waits.values())[-1] > 3 * 8  # the last task waited for three whole workloads


def test_equal_tasks_share_the_units_fairly_until_the_first_finishes():
    workers = 3
    tasks = [PoolTask(f"t{i}", f"u{i}", (1.0,) * 6, epochs=2) for i in range(4)]
    result = simulate_pool(tasks, [1.0] * workers, seed=2)
    units = result.units_at_first_finish
    assert set(units) == {t.name for t in tasks}
    assert max(units.values()) - min(units.values()) <= workers + 1  # started within 1; in flight at most W
    assert result.shares_at_first_finish == {t.name: 0.25 for t in tasks}


def test_a_failure_with_replicas_loses_a_unit_and_completes():
    tasks = [PoolTask("a", "u", (1.0, 1.0, 1.0), replication=2), PoolTask("b", "v", (1.5, 1.5), replication=2)]
    result = simulate_pool(tasks, [1.0] * 3, seed=0, failures=[WorkerFailure(0.5, "w0")])
    assert result.completed
    assert result.units_lost == 1  # w0 was busy at 0.5
    assert result.units_run == 3 * 3 + 2 * 3  # every unit once, the lost one rerun
    assert sum(o.units_lost for o in result.tasks.values()) == 1


def test_without_replicas_a_lost_holder_leaves_tasks_unfinished():
    tasks = [PoolTask("a", "u", (1.0, 1.0))]
    result = simulate_pool(tasks, [1.0] * 2, seed=0, failures=[WorkerFailure(0.5, "w1")])
    assert not result.completed and result.tasks["a"].finish is None


def test_a_late_task_joins_on_arrival_and_waits_from_there():
    tasks = [PoolTask("early", "u", (1.0,) * 4, epochs=3), PoolTask("late", "v", (1.0, 1.0), arrival=5.0)]
    result = simulate_pool(tasks, [1.0] * 2, seed=3)
    late = result.tasks["late"]
    assert late.joined == 5.0 and late.first_start >= 5.0
    assert late.wait_to_first_unit == late.first_finish - 5.0
    assert late.finish < result.tasks["early"].finish  # it did not wait for the early task's workload
    # A task submitted after another finished did wait for a whole workload, and the check says so.
    after = [PoolTask("first", "u", (1.0, 1.0)), PoolTask("second", "v", (1.0, 1.0), arrival=100.0)]
    assert not compare_admission(after, 2, seed=0)["no_task_waits_for_a_whole_workload"]


def test_halving_tasks_train_only_the_configs_each_epoch_keeps():
    workers = 2
    tasks = [PoolTask("a", "ann", (1.0,) * 3, epochs=3, configs_per_epoch=(3, 1, 1)),
             PoolTask("b", "bob", (1.0,) * 4, epochs=3, configs_per_epoch=(4, 2, 1))]
    result = simulate_pool(tasks, [1.0] * workers, seed=0)
    assert result.completed
    assert result.tasks["a"].units == (3 + 1 + 1) * workers
    assert result.tasks["b"].units == (4 + 2 + 1) * workers
    with pytest.raises(ValueError, match="configs_per_epoch of task 'x'"):
        PoolTask("x", "u", (1.0,) * 3, epochs=2, configs_per_epoch=(3, 4))
    with pytest.raises(ValueError, match="configs_per_epoch of task 'x'"):
        PoolTask("x", "u", (1.0,) * 3, epochs=3, configs_per_epoch=(3, 1))


def test_one_config_left_idles_a_worker_that_another_task_fills():
    """A halving pick of 3 configs keeps one config after its first epoch:
    alone on W = 2 it trains its partitions one after the other while the
    other worker waits; two such tasks across the pool fill both. The same
    tasks as a grid (3 configs every epoch) fill W = 2 alone."""
    kept = (3,) + (1,) * 6
    halving = [PoolTask(f"t{i}", f"u{i}", (1.0,) * 3, epochs=7, configs_per_epoch=kept) for i in range(2)]
    grid = [PoolTask(f"t{i}", f"u{i}", (1.0,) * 3, epochs=7) for i in range(2)]
    h = compare_admission(halving, 2, seed=0)
    g = compare_admission(grid, 2, seed=0)
    assert h["makespan_one_at_a_time"] >= 2 * (3 + 6 * 2)  # per task: 6 units on 2 workers, then 12 in a row
    assert h["makespan_ratio"] > 1.5
    assert g["makespan_ratio"] < 1.25
    drawn = concurrency_tasks(4, seed=2, configs=(3,), epochs=(7,), kept=lambda n, r: pick_schedule(n, r).configs_per_epoch)
    assert all(t.configs_per_epoch == kept for t in drawn)
    assert [t.costs for t in drawn] == [t.costs for t in concurrency_tasks(4, seed=2, configs=(3,), epochs=(7,))]


def test_deterministic_under_a_seed_and_inputs_validated():
    tasks = concurrency_tasks(5, seed=4)
    assert tasks == concurrency_tasks(5, seed=4)
    assert all(2 <= len(t.costs) <= 4 and 1 <= t.epochs <= 3 for t in tasks)
    assert len({t.owner for t in tasks}) == 5
    assert simulate_pool(tasks, [1.0] * 4, seed=1) == simulate_pool(tasks, [1.0] * 4, seed=1)
    with pytest.raises(ValueError, match="costs of task 'x'"):
        PoolTask("x", "u", ())
    with pytest.raises(ValueError, match="epochs of task 'x'"):
        PoolTask("x", "u", (1.0,), epochs=0)
    with pytest.raises(ValueError, match="duplicate names"):
        simulate_pool([TASKS[0], TASKS[0]], [1.0])
    with pytest.raises(ValueError, match="capacities"):
        simulate_pool(TASKS, [])


# -- benchmarks/concurrency.py -------------------------------------------------------
@pytest.fixture(scope="module")
def bench():
    return load_benchmark("concurrency")


def test_interval_is_a_t_interval_over_seeds(bench):
    out = bench.interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t(0.975, 2 df) * sd / sqrt(n)
    assert out["mean"] == 2.0 and out["n"] == 3
    assert out["lo"] == pytest.approx(2.0 - half) and out["hi"] == pytest.approx(2.0 + half)
    assert math.isnan(bench.interval([5.0])["lo"])


def test_summary_pools_seeds_per_cell(bench):
    rows = [bench.row_for(4, 2, seed) for seed in (0, 1)] + [bench.row_for(8, 2, 0)]
    cells = bench.summarize(rows)
    assert set(cells) == {"W=4/tasks=2", "W=8/tasks=2"}
    cell = cells["W=4/tasks=2"]
    assert cell["seeds"] == [0, 1] and cell["makespan_ratio"]["n"] == 2
    assert cell["makespan_ratio"]["mean"] == pytest.approx((rows[0]["makespan_ratio"] + rows[1]["makespan_ratio"]) / 2)
    assert set(rows[0]["per_task"]) == {"t0", "t1"}


def test_cli_writes_the_simulation_and_points_to_the_live_results(bench, tmp_path, capsys):
    out = tmp_path / "sim.json"
    assert bench.main(["--quick", "--seeds", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["mode"] == "quick" and data["live"] == "concurrency_live.json (--live)"
    assert {c["workers"] for c in data["cells"].values()} == set(bench.QUICK_WORKERS)
    assert "simulation: MOP across tasks" in capsys.readouterr().out


def test_the_live_cells_ratio_in_unit_times_cancels_the_machines_drift():
    bench = load_benchmark("concurrency")

    def round_(makespan: float, unit: float) -> dict:
        return {"makespan_s": makespan, "unit_compute_s_mean_by_kind": {"train": unit}}

    # the same schedules (30 and 18 units) on a machine that ran twice as slow for one arm
    assert bench.unit_time_ratio(round_(18 * 0.4, 0.4), round_(30 * 0.8, 0.8)) == pytest.approx(30 / 18)
    assert bench.unit_time_ratio(round_(18 * 0.8, 0.8), round_(30 * 0.4, 0.4)) == pytest.approx(30 / 18)


def test_the_live_ceiling_grows_with_the_epochs_a_halving_pick_trains_alone():
    bench = load_benchmark("concurrency")
    seven, twelve = bench.live_ceiling(2, 7, "halving"), bench.live_ceiling(2, 12, "halving")
    # one at a time keeps at least one of the W = 2 workers busy, so no ceiling passes 2
    assert 1.6 < seven < twelve < 2
    assert bench.live_ceiling(2, 3, "grid") < 1.25  # a grid of 3 configs already fills W = 2
