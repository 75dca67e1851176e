"""Each pick is auto-provisioned (ACAI §4.2.4): the profiler's predicted
runtime of every configuration the service can give it, the least runtime
under the owner's cost budget, the least cost within her deadline, else the
least runtime within her fair share; the chosen configuration is stored with
the job and is what the selector's cost is predicted for."""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.errors import DataError
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.selection.provisioner import Pool, Prices, ResourceConfig
from ease_jupyter.service import budget as budgets
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.loop.costs import Costs
from ease_jupyter.service.loop.provision import PickProvisioner, Pools, config_of, service_pools
from ease_jupyter.service.profiling import TAG_RESOURCES, ProfileBook, Resources
from ease_jupyter.store import JobStatus, JobUpdate, open_store
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor

ARM = "logreg"
SPEEDUP_AT_2 = 1.5  # the known law: two threads run a job 1.5x as fast as one
PRICES = Prices(cpu=3.6, gb=0.0, gpu=0.0)  # 3.6 per CPU-hour: a CPU-second costs 0.001


def law(n: int, threads: int) -> float:
    return 0.004 * n / (SPEEDUP_AT_2 if threads == 2 else 1.0)


@pytest.fixture
def stores():
    store, blobs = open_store("memory://")
    yield store, blobs
    store.close()


def flat_task(stores, name: str, n: int, seed: int = 0, user: str = "ada"):
    store, blobs = stores
    rng = np.random.default_rng(seed)
    owner = next((u for u in store.list_users() if u.name == user), None) or store.create_user(user, user[0] * 64)
    task = store.create_task(owner.id, name, format_program(program_from_shapes([16], [4])))
    version = datasets.feed(store, blobs, task, rng.standard_normal((n, 16)), rng.integers(0, 4, n))
    return task, version


def learned_loop(stores) -> ControlLoop:
    """A loop whose profiler learned the law from logreg jobs at 1 and 2 threads."""
    store, blobs = stores
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: ManualExecutor(store)}, prices=PRICES,
                       pools=Pools(sklearn=Pool(cores=2, workers=1)))
    for i, n in enumerate((40, 80, 160, 320, 640)):
        task, version = flat_task(stores, f"past{i}", n, seed=i)
        spec = loop.costs.configs(task)[ARM]
        for threads in (1, 2):
            job = store.create_job(task.id, version.id, spec.model, spec.config())
            store.set_tag("job", job.id, TAG_RESOURCES, Resources(threads=threads).to_json())
            store.update_job(job.id, JobStatus.RUNNING)
            store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=law(n, threads)))
    loop.profile.refit()
    return loop


def provision(loop, stores, *, n=200, limits=budgets.Limits(), spent=budgets.Spent(money=0.0)):
    found = [t for t in stores[0].list_tasks() if t.name == f"new{n}"]
    task, version = (found[0], stores[0].latest_dataset_version(found[0].id)) if found else \
        flat_task(stores, f"new{n}", n, seed=99)
    spec = loop.costs.configs(task)[ARM]
    loop.provisioner.limits = lambda owner: (limits, spent)
    loop.provisioner.forget()  # as the loop does at each turn
    return loop.provisioner.provision(task, spec, version.n_examples), task, spec, version.n_examples


def test_without_constraints_a_pick_gets_the_least_runtime_within_its_share(stores):
    loop = learned_loop(stores)
    provisioned, task, spec, n = provision(loop, stores)
    assert provisioned.source == "profiler" and provisioned.choice.config.threads == 2
    assert provisioned.choice.seconds == pytest.approx(law(n, 2), rel=0.1)
    # The selector's cost of the arm is the prediction at that configuration.
    assert loop.costs.seconds(task, spec, n) == pytest.approx(provisioned.choice.seconds, rel=1e-6)
    # Two owners share the 2-core pool: each may hold at most its share, still 2 cores of one worker.
    loop.provisioner.owners = lambda: 2
    assert loop.provisioner.provision(task, spec, n).choice.config.threads == 2


def test_a_cost_budget_buys_the_fastest_configuration_it_affords(stores):
    loop = learned_loop(stores)
    one, two = law(200, 1) * 0.001, law(200, 2) * 2 * 0.001  # 2 threads cost 2/1.5 as much
    between = (one + two) / 2
    provisioned, *_ = provision(loop, stores, limits=budgets.Limits(cost=10.0), spent=budgets.Spent(money=10 - between))
    assert provisioned.choice.config.threads == 1 and provisioned.choice.feasible
    provisioned, *_ = provision(loop, stores, limits=budgets.Limits(cost=10.0), spent=budgets.Spent(money=0.0))
    assert provisioned.choice.config.threads == 2 and provisioned.choice.goal == "runtime"


def test_a_deadline_gets_the_cheapest_configuration_that_meets_it(stores):
    loop = learned_loop(stores)
    now = datetime.now(timezone.utc)
    tight = budgets.Limits(deadline=now + timedelta(seconds=(law(200, 1) + law(200, 2)) / 2))
    provisioned, *_ = provision(loop, stores, limits=tight)
    assert provisioned.choice.goal == "cost" and provisioned.choice.config.threads == 2
    loose = budgets.Limits(deadline=now + timedelta(hours=1))
    provisioned, *_ = provision(loop, stores, limits=loose)
    assert provisioned.choice.goal == "cost" and provisioned.choice.config.threads == 1


def test_before_any_history_the_flops_proxy_prices_the_pick_and_the_cheapest_configuration_wins(stores):
    store, blobs = stores
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: ManualExecutor(store)}, prices=PRICES,
                       pools=Pools(sklearn=Pool(cores=2, workers=1)))
    provisioned, task, spec, n = provision(loop, stores)
    assert provisioned.source == "flops" and "FLOPs proxy" in provisioned.json()["note"]
    assert provisioned.choice.config.threads == 1  # the proxy cannot tell threads apart: the cheaper wins
    assert provisioned.choice.seconds == pytest.approx(loop.costs.flops_seconds(task, spec, n))


def test_a_launched_job_records_the_provisioned_configuration(stores):
    loop = learned_loop(stores)
    store = stores[0]
    executor = loop.executors[Engine.SKLEARN]
    task, version = flat_task(stores, "mine", 200, seed=5, user="bea")
    loop.recover()
    for _ in range(30):  # until the selector tried logreg on her task
        loop.step()
        if any(j.model == ARM for j in store.list_jobs(task.id)):
            break
        executor.finish_all()
    jobs = store.list_jobs(task.id)
    recorded = {j.model: Resources.from_json(store.tags("job", j.id)[TAG_RESOURCES], Resources()) for j in jobs}
    assert ARM in recorded, "the loop launched logreg on the new task"
    spec = loop.costs.configs(task)[ARM]  # launched in the last turn: no refit since
    assert config_of(recorded[ARM]) == loop.provisioner.provision(task, spec, version.n_examples).choice.config
    assert recorded[ARM].threads == 2  # the profiler knows two threads are faster


def test_the_profile_lists_every_candidate_with_its_configuration_and_cost(stores):
    loop = learned_loop(stores)
    task, version = flat_task(stores, "mine", 200, seed=5)
    out = loop.task_profile(task)
    assert out["examples"] == version.n_examples and out["prices"]["cpu"] == PRICES.cpu
    assert out["profiler"]["families"][ARM]["jobs"] == 10
    plans = {p["model"]: p for p in out["candidates"]}
    assert set(plans) == set(loop.costs.configs(task))
    logreg = plans[ARM]
    assert logreg["source"] in ("family", "pooled") and logreg["resources"]["threads"] == 2
    assert logreg["cost"] == pytest.approx(PRICES.cost(ResourceConfig(threads=2), logreg["predicted_seconds"]))
    seconds = [p["predicted_seconds"] for p in out["candidates"]]
    assert seconds == sorted(seconds)
    empty = stores[0].create_task(task.owner_id, "nodata", task.program)
    assert loop.task_profile(empty)["candidates"] == [] and loop.task_profile(empty)["examples"] == 0


def test_a_cost_budget_is_spent_by_each_jobs_runtime_at_its_resources_price(stores):
    loop = learned_loop(stores)
    store = stores[0]
    owner = store.list_users()[0]
    price = loop.job_cost
    spent = budgets.user_spent(store, owner.id, gpu_pool=False, now=datetime.now(timezone.utc), price=price)
    expected = sum(law(n, t) * t * 0.001 for n in (40, 80, 160, 320, 640) for t in (1, 2))
    assert spent.money == pytest.approx(expected)
    reason = budgets.blocked_reason(budgets.Limits(cost=expected / 2), spent, cap=budgets.Limits(), gpu_pool=False,
                                    now=datetime.now(timezone.utc))
    assert reason is not None and "cost budget is spent" in reason


def test_a_cost_budget_below_one_profiling_run_is_refused(stores):
    store, blobs = stores
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: ManualExecutor(store)}, prices=PRICES)
    least = loop.provisioner.profiling_run_cost()
    assert least == pytest.approx(PRICES.cost(ResourceConfig(), 1.0))  # 1 s at one thread before any run
    with pytest.raises(DataError) as e:
        loop.check_cost_budget(least / 2)
    assert e.value.field == "cost" and "profiling run" in str(e.value)
    loop.check_cost_budget(least * 2)
    loop.check_cost_budget(None)
    task, version = flat_task(stores, "t", 40)
    job = store.create_job(task.id, version.id, ARM, {})
    store.set_tag("job", job.id, "easeml.profile.runs", json.dumps([{"n": 10, "threads": 1, "seconds": 0.25}]))
    assert loop.provisioner.profiling_run_cost() == pytest.approx(PRICES.cost(ResourceConfig(), 0.25))


@pytest.mark.parametrize("body", [{"cost": -1}, {"cost": "cheap"}, {"cost": True}, {"cost": float("inf")}])
def test_bad_cost_budgets_name_the_field(body):
    with pytest.raises(DataError) as e:
        budgets.parse_limits(body, now=datetime.now(timezone.utc))
    assert e.value.field == "cost"


def test_the_service_pool_gives_a_job_slot_its_share_of_the_cores():
    pools = service_pools(cpus=8, sklearn_slots=2, mop_workers=3)
    assert pools.sklearn.cores == 4 and pools.sklearn.workers == 1
    assert pools.torch.workers == 3 and pools.torch.partitions == ()  # one partition per worker it holds
    assert service_pools(cpus=1, sklearn_slots=4).sklearn.cores == 1
    fixed = service_pools(cpus=8, sklearn_slots=2, mop_workers=3, mop_partitions=5).torch
    assert fixed.workers == 1 and fixed.partitions == (5,)  # the admin's --mop-partitions: no choice
    cluster = service_pools(cpus=8, sklearn_slots=2, grid_workers=4).sklearn
    assert cluster.workers == 4 and cluster.cores == 1  # grids share the cluster's worker processes


def test_a_grid_fans_out_to_the_workers_the_profiler_finds_fastest_within_the_share(stores):
    store, blobs = stores
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: ManualExecutor(store)}, prices=PRICES,
                       pools=Pools(sklearn=Pool(cores=1, workers=4)))
    task, version = flat_task(stores, "wide", 200)
    spec = loop.costs.configs(task)[ARM]
    points = len(spec.points())
    # Before any history the proxy assumes the grid's points run side by side.
    chosen = loop.provisioner.provision(task, spec, 200).choice
    assert chosen.config.workers == min(4, points) and chosen.config.partitions == chosen.config.workers
    assert chosen.seconds == pytest.approx(loop.costs.flops_seconds(task, spec, 200) / min(4, points))
    # Two owners share the pool: each pick gets at most half of its workers.
    loop.provisioner.owners = lambda: 2
    loop.provisioner.forget()
    assert loop.provisioner.provision(task, spec, 200).choice.config.workers <= 2


def test_the_runner_keeps_a_grid_to_its_jobs_workers(tmp_path):
    from ease_jupyter.service import runner

    seen = {}

    def evaluate(candidate, grid, data, classification, engine, threads=1, fan_out=None):
        seen.update(threads=threads, fan_out=fan_out)
        raise RuntimeError("stop here")

    store, blobs = open_store("memory://")
    try:
        task, version = flat_task((store, blobs), "t", 60)
        spec = Costs(store, torch_epochs=None).configs(task)[ARM]
        for tagged, expected in ((None, None), (Resources(threads=1, workers=3), 3)):
            job = store.create_job(task.id, version.id, spec.model, spec.config())
            if tagged is not None:
                store.set_tag("job", job.id, TAG_RESOURCES, tagged.to_json())
            original, runner.evaluate_grid = runner.evaluate_grid, evaluate
            try:
                runner.run_sklearn_job(store, blobs, job.id, engine=None)
            finally:
                runner.evaluate_grid = original
            assert seen["fan_out"] == expected  # no tag: every worker, as before
    finally:
        store.close()


def test_a_torch_pick_on_a_gpu_pool_is_provisioned_on_the_gpu(stores):
    store, blobs = stores
    owner = store.create_user("ada", "a" * 64)
    task = store.create_task(owner.id, "images", format_program(program_from_shapes([8, 8, 1], [4])))
    rng = np.random.default_rng(0)
    version = datasets.feed(store, blobs, task, rng.standard_normal((32, 8, 8, 1)).astype("float32"),
                            rng.integers(0, 4, 32))
    costs = Costs(store, torch_epochs=1)
    spec = next(s for s in costs.configs(task).values() if s.engine is Engine.TORCH)
    gpu = [False]
    provisioner = PickProvisioner(store, ProfileBook(store), pools=service_pools(cpus=2, sklearn_slots=1,
                                                                                 mop_workers=2),
                                  flops=lambda task, spec, n, res: 1.0 / res.workers, gpu_pool=lambda: gpu[0])
    assert provisioner.provision(task, spec, version.n_examples).choice.config.device == "cpu"
    gpu[0] = True
    provisioner.forget()  # the loop forgets its choices when the devices are measured
    chosen = provisioner.provision(task, spec, version.n_examples).choice.config
    assert chosen.device == "gpu" and chosen.partitions == 2


def test_in_the_service_a_new_familys_first_job_is_profiled_and_pays_for_it(svc):
    """From the loop's launch to the runner: the first job of each family is
    planned, runs its profiling runs on subsamples, and its cost holds them."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)  # 1797 examples: large enough to subsample
    task = svc.client("alice").task("digits", input=[64], output=[10])
    task.feed(X.astype("float32"), y)
    assert task.wait(timeout=240)
    store = svc.service.store
    profiled = 0
    for row in task.jobs():
        tags = store.tags("job", row["id"])
        if "easeml.profile.runs" not in tags:
            continue
        profiled += 1
        runs = json.loads(tags["easeml.profile.runs"])
        assert runs and all(r["n"] < X.shape[0] and r["seconds"] > 0 for r in runs)
        own = float(tags["easeml.profile.full_seconds"])
        assert row["cost_seconds"] == pytest.approx(own + sum(r["seconds"] for r in runs), rel=1e-6)
        assert row["profiling_seconds"] == pytest.approx(sum(r["seconds"] for r in runs))  # shown apart
        assert row["log_error"] is None or row["log_error"] == pytest.approx(
            math.log(own / row["predicted_seconds"]), abs=1e-6)  # the prediction is for the full grid alone
    assert profiled >= 1
    counts = svc.service.loop.profile.refit().counts
    assert sum(counts.values()) > len(task.jobs())  # the profiling runs are records too


def test_a_passed_deadline_or_spent_seconds_gives_a_nearest_miss_not_an_error(stores):
    loop = learned_loop(stores)
    past = budgets.Limits(deadline=datetime.now(timezone.utc) - timedelta(seconds=5))
    for limits, spent in ((past, budgets.Spent(money=0.0)), (budgets.Limits(seconds=1.0), budgets.Spent(cpu=2.0))):
        provisioned, *_ = provision(loop, stores, limits=limits, spent=spent)
        assert not provisioned.choice.feasible and "deadline has passed" in provisioned.choice.note
        assert provisioned.choice.config.threads == 2  # the fastest


def test_running_picks_hold_back_their_predicted_cost_from_the_budget(stores):
    loop = learned_loop(stores)
    store = stores[0]
    one, two = law(200, 1) * 0.001, law(200, 2) * 2 * 0.001
    provisioned, task, spec, n = provision(loop, stores, limits=budgets.Limits(cost=10.0),
                                           spent=budgets.Spent(money=10.0 - two * 1.01))
    assert provisioned.choice.config.threads == 2  # alone, she affords the fast configuration
    # A running job of hers predicted to cost what she has left bar one thread's pick:
    version = store.latest_dataset_version(task.id)
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    store.set_tag("job", job.id, TAG_RESOURCES, Resources(threads=1).to_json())
    store.set_tag("job", job.id, "easeml.profile.predicted_seconds", repr((two * 1.01 - one * 1.005) / 0.001))
    loop.provisioner.running = lambda owner: [job.id] if owner == task.owner_id else []
    loop.provisioner.forget()
    provisioned = loop.provisioner.provision(task, spec, n)
    assert provisioned.choice.config.threads == 1 and provisioned.choice.feasible


def test_a_finished_jobs_cost_keeps_the_prices_it_ran_under(stores):
    loop = learned_loop(stores)
    store = stores[0]
    job = store.list_jobs(status=JobStatus.SUCCEEDED)[-1]
    loop.provisioner.record_cost(job)
    before = loop.job_cost(job, job.cost_seconds)
    assert before == pytest.approx(PRICES.cost(config_of(Resources.from_json(
        store.tags("job", job.id)[TAG_RESOURCES], Resources())), job.cost_seconds))
    dearer = ControlLoop(store, stores[1], executors={Engine.SKLEARN: ManualExecutor(store)},
                         prices=Prices(cpu=36.0, gb=0.0, gpu=0.0))  # a restart with new prices
    assert dearer.job_cost(job, job.cost_seconds) == pytest.approx(before)
    unrecorded = store.list_jobs(status=JobStatus.SUCCEEDED)[0]
    assert dearer.job_cost(unrecorded, unrecorded.cost_seconds) == pytest.approx(
        10 * loop.job_cost(unrecorded, unrecorded.cost_seconds))


def test_a_failed_prediction_falls_back_to_the_proxy_and_the_job_says_so(stores):
    loop = learned_loop(stores)
    store = stores[0]
    task, version = flat_task(stores, "mine", 200, seed=5)
    spec = loop.costs.configs(task)[ARM]

    def broken(*args, **kwargs):
        raise ArithmeticError("a broken runtime model")

    loop.profile.predict_job = broken
    loop.provisioner.forget()
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    loop.costs.record_launch(job, task, spec, version.n_examples)
    tags = store.tags("job", job.id)
    assert tags["easeml.profile.source"] == "flops"
    assert "prediction failed" in tags["easeml.profile.note"] and "FLOPs proxy" in tags["easeml.profile.note"]
    assert float(tags["easeml.profile.predicted_seconds"]) == pytest.approx(
        loop.costs.flops_seconds(task, spec, version.n_examples))


def test_a_user_model_is_profiled_predicted_and_shown_as_a_zoo_model(tmp_path):
    """Her model's first job is profiled on subsamples (paid for by her), keeps
    its prediction (before history: the median of the other arms) and its
    error; its runs and full job teach the profiler, whose prediction her arm
    then costs, in task.profile(), the leaderboard and `easeml models --task`."""
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    from click.testing import CliRunner

    from ease_jupyter.cli import main as cli_main
    from ease_jupyter.widgets.leaderboard import Leaderboard

    from .conftest import start

    running = start(tmp_path, allow_user_models=True)
    try:
        running.user("ada")
        task = running.client("ada").task("iris", input=[4], output=[3])
        task.add_model(LogisticRegression(max_iter=200), name="mine")
        X, y = load_iris(return_X_y=True)
        task.feed(X.astype("float32"), y)
        before = {p["model"]: p for p in task.profile()["candidates"]}
        assert task.wait(timeout=180)
        (job,) = [j for j in task.jobs() if j["model"] == "mine"]
        assert job["status"] == "succeeded"
        # profiled on subsamples first, and she paid for it; predicted before it ran, with its error
        assert job["profiling_seconds"] > 0 and job["cost_seconds"] > job["profiling_seconds"]
        assert job["source"] == "neutral" and job["predicted_seconds"] > 0
        if "mine" in before:
            assert before["mine"]["source"] == "neutral"
        own = job["cost_seconds"] - job["profiling_seconds"]
        assert job["log_error"] == pytest.approx(math.log(own / job["predicted_seconds"]), abs=1e-6)
        # her runs and job taught the profiler: her arm costs its prediction once
        # the loop refits it (at most every few seconds after jobs finish)
        deadline = time.monotonic() + 30
        while True:
            plans = {p["model"]: p for p in task.profile()["candidates"]}
            mine = plans["mine"]
            if mine["source"] in ("family", "pooled") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert mine["source"] in ("family", "pooled") and mine["log_sd"] is not None
        assert mine["flops_seconds"] is None and mine["resources"]["threads"] >= 1
        assert mine["provisioned_by"] == "profiler" and mine["predicted_seconds"] > 0
        zoo = [p for p in plans.values() if p["model"] != "mine"]
        assert zoo and all(p["flops_seconds"] is not None for p in zoo)
        # the leaderboard's predicted vs actual, and the shell's table of candidate costs
        board = {r["job_id"]: r for r in Leaderboard(task, live=False).rows}
        assert board[job["id"]]["predicted"] == pytest.approx(job["predicted_seconds"])
        assert board[job["id"]]["source"] == "neutral" and board[job["id"]]["cost"] == job["cost_seconds"]
        for _ in range(5):  # a refit of the profiler between the two reads moves the prediction: read again
            shown = CliRunner().invoke(cli_main, ["models", "--task", "iris", "--url", running.url,
                                                  "--token", running.tokens["ada"], "--json"])
            assert shown.exit_code == 0, shown.output
            mine_shown = {c["model"]: c for c in json.loads(shown.output)["candidates"]}["mine"]
            after = {p["model"]: p for p in task.profile()["candidates"]}["mine"]
            if after["predicted_seconds"] == mine["predicted_seconds"]:
                break
            mine = after
        assert mine_shown["source"] == mine["source"]
        assert mine_shown["predicted_seconds"] == pytest.approx(mine["predicted_seconds"], rel=1e-6)
    finally:
        running.thread.stop()


def test_threads_per_fit_are_offered_only_where_each_job_slot_is_a_process():
    assert service_pools(cpus=8, sklearn_slots=2, own_processes=True).sklearn.cores == 4
    assert service_pools(cpus=8, sklearn_slots=2, own_processes=False).sklearn.cores == 1


def test_the_loop_searches_again_each_turn(stores):
    loop = learned_loop(stores)
    provisioned, task, spec, n = provision(loop, stores)
    assert loop.provisioner.provision(task, spec, n) is provisioned  # kept within a turn
    loop.recover()
    loop.step()
    assert loop.provisioner.provision(task, spec, n) is not provisioned


def test_the_memory_reservation_is_senecas_as_the_models_last_grid_recorded_it(stores):
    store, blobs = stores
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: ManualExecutor(store)},
                       prices=Prices(cpu=3.6, gb=36.0, gpu=0.0), pools=Pools(sklearn=Pool(cores=2, workers=1)))
    task, version = flat_task(stores, "sized", 200)
    spec = loop.costs.configs(task)[ARM]
    assert loop.provisioner.provision(task, spec, 200).choice.config.memory_bytes == 0  # nothing recorded yet
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    store.update_job(job.id, JobStatus.RUNNING)
    store.set_tag("job", job.id, "easeml.grid.memory", json.dumps({"reserved_bytes": 2**29, "fixed_bytes": 2**33,
                                                                  "gb_seconds": 1.0, "fixed_gb_seconds": 2.0}))
    job = store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=2.0))
    loop.provisioner.record_cost(job)  # as the loop does when the job finishes
    loop.provisioner.forget()
    choice = loop.provisioner.provision(task, spec, 200).choice
    assert choice.config.memory_bytes == 2**29
    assert choice.cost == pytest.approx(choice.seconds / 3600 * (choice.config.threads * 3.6 + 0.5 * 36.0))
    fresh = ControlLoop(store, blobs, executors={Engine.SKLEARN: ManualExecutor(store)})  # after a restart
    assert fresh.provisioner.memory(task, spec) == 2**29
