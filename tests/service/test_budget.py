"""Budgets: per user (compute seconds, a deadline; no new picks past them,
running jobs finish and are recorded) and per task (the epochs its torch
picks train, by data size unless the task sets max_epochs)."""

from __future__ import annotations

import json
from concurrent.futures import Future
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.errors import DataError
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service import ServiceConfig
from ease_jupyter.service import budget as budgets
from ease_jupyter.service.core import Service
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.task_epochs import MAX_EPOCHS_TAG, set_max_epochs
from ease_jupyter.store import InMemoryStore, JobStatus, JobUpdate, MemoryBlobStore
from ease_jupyter.zoo import Engine
from ease_jupyter.zoo.templates import (
    LARGEST_EPOCHS,
    MAX_TORCH_EPOCHS,
    MIN_TORCH_EPOCHS,
    default_max_epochs,
)

from .conftest import until

JOB_SECONDS = 1.0  # what every job of these tests costs


class CostlyExecutor:
    """Jobs that start at once and finish when the test says so, each costing JOB_SECONDS."""

    def __init__(self, store, workers: int):
        self.store, self.workers, self.running = store, workers, []

    def submit(self, job_id: int) -> Future:
        future: Future = Future()
        self.store.update_job(job_id, JobStatus.RUNNING)
        self.running.append((job_id, future))
        return future

    def finish_all(self) -> None:
        running, self.running = self.running, []
        for job_id, future in running:
            future.set_result(self.store.update_job(job_id, JobStatus.SUCCEEDED,
                                                    JobUpdate(accuracy=0.7, cost_seconds=JOB_SECONDS)))

    def shutdown(self) -> None:
        pass


def two_users(program=((4,), (3,)), n=30):
    store, blobs = InMemoryStore(), MemoryBlobStore()
    rng = np.random.default_rng(0)
    tasks = {}
    for name in ("ada", "bob"):
        user = store.create_user(name, name[0] * 64)
        task = store.create_task(user.id, f"{name}_task", format_program(program_from_shapes(*program)))
        X = rng.normal(size=(n, *program[0])).astype("float32")
        datasets.feed(store, blobs, task, X, rng.integers(0, program[1][0], n))
        tasks[name] = task
    return store, blobs, tasks


def jobs_of(store, task):
    return store.list_jobs(task.id)


# -- the epochs rule ----------------------------------------------------------------------------
def test_default_epochs_follow_the_data_size_within_bounds():
    sizes = [10, 100, 1_000, 5_000, 20_000, 100_000, 10**7]
    epochs = [default_max_epochs(n) for n in sizes]
    assert epochs == sorted(epochs, reverse=True)  # more data, never more epochs
    assert epochs[0] == MAX_TORCH_EPOCHS and epochs[-1] == MIN_TORCH_EPOCHS
    assert len(set(epochs)) >= 3  # not a constant
    assert default_max_epochs(5_000) == 10  # ceil(50,000 examples / 5,000)
    for bad in (0, -3, 2.5, True, "100"):
        with pytest.raises(Exception, match="n_examples"):
            default_max_epochs(bad)


def test_a_task_may_set_the_epochs_the_mop_runner_allows():
    """One bound: the largest max_epochs a task may set is the MOP runner's default."""
    import inspect

    from ease_jupyter.execution.mop.runner import MOPRunner
    from ease_jupyter.service.task_epochs import check_max_epochs

    runner_bound = inspect.signature(MOPRunner).parameters["max_epochs"].default
    assert runner_bound == LARGEST_EPOCHS and check_max_epochs(runner_bound) == runner_bound
    with pytest.raises(DataError) as e:
        check_max_epochs(runner_bound + 1)
    assert e.value.field == "max_epochs" and str(runner_bound) in str(e.value)


def test_a_torch_pick_trains_the_epochs_of_its_task():
    """The epochs a launched torch pick carries: by data size, then the task's own max_epochs."""
    store, blobs, tasks = two_users(program=((8, 8, 1), (4,)), n=40)
    torch = CostlyExecutor(store, workers=2)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: CostlyExecutor(store, 1), Engine.TORCH: torch},
                       max_running_per_user=1)
    loop.recover()
    loop.step()
    first = [j for j in jobs_of(store, tasks["ada"]) if "epochs" in j.config]
    assert first and all(j.config["epochs"] == default_max_epochs(40) for j in first)
    set_max_epochs(store, tasks["ada"].id, 2)
    torch.finish_all()
    loop.step()
    later = [j for j in jobs_of(store, tasks["ada"]) if "epochs" in j.config and j.id not in {f.id for f in first}]
    assert later and all(j.config["epochs"] == 2 for j in later)
    assert all(j.config["epochs"] == default_max_epochs(40) for j in jobs_of(store, tasks["bob"])
               if "epochs" in j.config)  # another task keeps the rule
    loop.stop()


# -- per-user budget in the control loop ------------------------------------------------------------------
def test_a_user_over_budget_gets_no_new_picks_while_another_does():
    store, blobs, tasks = two_users()
    ada, bob = (store.get_user(tasks[n].owner_id) for n in ("ada", "bob"))
    executor = CostlyExecutor(store, workers=2)
    events: list[tuple[int, dict]] = []
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=1,
                       publish=lambda owner, event: events.append((owner, event)))
    loop.recover()
    budgets.write_limits(store, ada.id, budgets.OWN_PREFIX, {"seconds": 1.5})

    loop.step()  # both get a pick: ada spent nothing yet
    assert len(executor.running) == 2
    executor.finish_all()
    loop.step()  # ada spent 1 of 1.5 s: one more
    assert {store.get_job(j).task_id for j, _ in executor.running} == {tasks["ada"].id, tasks["bob"].id}
    running_ada = next(j for j, _ in executor.running if store.get_job(j).task_id == tasks["ada"].id)
    # ada lowers her budget while her job runs: it is not stopped
    budgets.write_limits(store, ada.id, budgets.OWN_PREFIX, {"seconds": 0.5})
    loop.budget_changed(ada.id)
    loop.step()
    assert store.get_job(running_ada).status is JobStatus.RUNNING and running_ada in loop.state.running
    executor.finish_all()
    n_ada = len(jobs_of(store, tasks["ada"]))
    for _ in range(3):
        loop.step()
        executor.finish_all()
    assert len(jobs_of(store, tasks["ada"])) == n_ada  # no new picks for ada
    assert store.get_job(running_ada).status is JobStatus.SUCCEEDED  # the running job finished and is recorded
    assert store.get_job(running_ada).cost_seconds == JOB_SECONDS
    assert len(jobs_of(store, tasks["bob"])) >= 4  # bob keeps getting picks
    status = loop.task_status(tasks["ada"], has_data=True)
    assert status["status"] == "over_budget" and status["idle"]
    assert "compute budget is spent" in status["reason"] and "2 of 0.5" in status["reason"]
    assert loop.task_status(tasks["bob"], has_data=True)["status"] != "over_budget"
    told = [e for owner, e in events if owner == ada.id and e["type"] in ("budget", "task")]
    assert {"type": "budget", "blocked": True, "reason": status["reason"]} in told
    assert any(e["type"] == "task" and e["status"] == "over_budget" for e in told)
    assert not any(e["type"] == "budget" for owner, e in events if owner == bob.id)
    # a larger budget: ada gets picks again
    budgets.write_limits(store, ada.id, budgets.OWN_PREFIX, {"seconds": None})
    loop.budget_changed(ada.id)
    loop.step()
    assert len(jobs_of(store, tasks["ada"])) == n_ada + 1
    assert loop.task_status(tasks["ada"], has_data=True)["status"] == "training"
    loop.stop()


def test_a_deadline_in_the_past_blocks_new_picks():
    store, blobs, tasks = two_users()
    ada = store.get_user(tasks["ada"].owner_id)
    # a deadline that has passed since it was set (an API call refuses one in the past)
    store.set_tag("user", ada.id, budgets.OWN_PREFIX + "deadline",
                  (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat())
    executor = CostlyExecutor(store, workers=2)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=2)
    loop.recover()
    for _ in range(2):
        loop.step()
        executor.finish_all()
    assert jobs_of(store, tasks["ada"]) == ()
    assert len(jobs_of(store, tasks["bob"])) >= 2
    status = loop.task_status(tasks["ada"], has_data=True)
    assert status["status"] == "over_budget" and "deadline" in status["reason"]
    loop.stop()


def test_deleting_a_task_gives_back_none_of_what_it_spent(tmp_path):
    """An over-budget user deletes the task that spent her budget: she stays over it."""
    service = Service(ServiceConfig(db_url="memory://", data_dir=tmp_path, torch=False))
    store, blobs = service.store, service.blobs
    executor = CostlyExecutor(store, workers=2)
    service.loop = loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=1)
    loop.recover()
    alice = store.create_user("alice", None)
    rng = np.random.default_rng(0)

    def new_task(name):
        service.create_task(alice, {"name": name, "input": [4], "output": [3]})
        service.feed(alice, name, {"X": rng.normal(size=(30, 4)).tolist(), "y": rng.integers(0, 3, 30).tolist()})
        return store.task_by_name(alice.id, name)

    spent_task = new_task("spent")
    budgets.write_limits(store, alice.id, budgets.OWN_PREFIX, {"seconds": 1.5})
    for _ in range(4):
        loop.step()
        executor.finish_all()
    assert len(jobs_of(store, spent_task)) == 2  # 2 s spent of 1.5: no third pick
    before = service.budget(alice)
    assert before["blocked"] and before["spent"]["seconds"] == 2 * JOB_SECONDS

    kept = new_task("kept")
    service.delete_task(alice, "spent")
    after = service.budget(alice)
    assert after["spent"] == before["spent"] and after["blocked"]
    for _ in range(3):
        loop.step()
        executor.finish_all()
    assert jobs_of(store, kept) == ()  # no new picks for her other task
    assert loop.task_status(kept, has_data=True)["status"] == "over_budget"
    loop.stop()
    store.close()


def test_the_reason_says_who_can_lift_the_limit():
    """Her own limit: raise it with set_budget; an admin's cap that binds: ask an admin."""
    now = datetime.now(timezone.utc)
    used = budgets.Spent(cpu=5.0, gpu=5.0)
    passed = now - timedelta(seconds=1)
    for own, cap, field in [(budgets.Limits(seconds=4), budgets.Limits(seconds=100), "seconds"),
                            (budgets.Limits(gpu_seconds=4), budgets.Limits(), "gpu_seconds"),
                            (budgets.Limits(deadline=passed), budgets.Limits(deadline=now), "deadline")]:
        reason = budgets.blocked_reason(own.within(cap), used, cap=cap, gpu_pool=True, now=now)
        assert f"client.set_budget({field}=...)" in reason and "admin" not in reason, reason
    for own, cap in [(budgets.Limits(seconds=10), budgets.Limits(seconds=4)),
                     (budgets.Limits(), budgets.Limits(gpu_seconds=4)),
                     (budgets.Limits(deadline=now), budgets.Limits(deadline=passed))]:
        reason = budgets.blocked_reason(own.within(cap), used, cap=cap, gpu_pool=True, now=now)
        assert "ask an admin" in reason and "client.set_budget" not in reason, reason


def test_the_loop_tells_a_user_blocked_by_the_cap_to_ask_an_admin():
    store, blobs, tasks = two_users()
    ada = store.get_user(tasks["ada"].owner_id)
    budgets.write_limits(store, ada.id, budgets.CAP_PREFIX, {"seconds": 0.5})
    executor = CostlyExecutor(store, workers=2)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=1)
    loop.recover()
    for _ in range(2):
        loop.step()
        executor.finish_all()
    status = loop.task_status(tasks["ada"], has_data=True)
    assert status["status"] == "over_budget" and "ask an admin" in status["reason"]
    assert budgets.status(store, ada.id, gpu_pool=False).blocked == status["reason"]
    loop.stop()


def test_spent_counts_finished_and_running_jobs_per_device_kind():
    store, _blobs, tasks = two_users()
    task = tasks["ada"]
    version = store.latest_dataset_version(task.id)
    now = datetime.now(timezone.utc)
    done = store.create_job(task.id, version.id, "logreg", {"grid": {"C": [1.0]}})
    store.update_job(done.id, JobStatus.RUNNING)
    store.update_job(done.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=3.0))
    torch = store.create_job(task.id, version.id, "lenet", {"lrs": [0.1], "epochs": 2})
    store.update_job(torch.id, JobStatus.RUNNING)
    store.update_job(torch.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=5.0))
    running = store.update_job(store.create_job(task.id, version.id, "logreg", {"grid": {"C": [2.0]}}).id,
                               JobStatus.RUNNING)
    later = running.started_at + timedelta(seconds=2)
    jobs = budgets.user_jobs(store, task.owner_id)
    on_cpu = budgets.spent(jobs, gpu_pool=False, now=later)
    assert on_cpu.seconds == pytest.approx(10.0) and on_cpu.gpu == 0
    on_gpu = budgets.spent(jobs, gpu_pool=True, now=later)
    assert on_gpu.gpu == pytest.approx(5.0) and on_gpu.cpu == pytest.approx(5.0)
    limits, no_cap = budgets.Limits(gpu_seconds=4.0), budgets.Limits()
    assert budgets.blocked_reason(limits, on_gpu, cap=no_cap, gpu_pool=True, now=now) is not None
    assert budgets.blocked_reason(limits, on_gpu, cap=no_cap, gpu_pool=False, now=now) is None  # no GPUs: no GPU limit


# -- the API -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body,field", [
    ({"seconds": -1}, "seconds"),
    ({"seconds": "lots"}, "seconds"),
    ({"seconds": True}, "seconds"),
    ({"gpu_seconds": float("inf")}, "gpu_seconds"),
    ({"deadline": "2001-01-01T00:00:00+00:00"}, "deadline"),
    ({"deadline": "next friday"}, "deadline"),
    ({"deadline": "2100-01-01T00:00:00"}, "deadline"),  # no UTC offset
    ({"deadline": 1893456000}, "deadline"),
    ({"hours": 3}, "hours"),
    ({}, "budget"),
])
def test_bad_budgets_name_the_field_and_store_nothing(svc, body, field):
    before = svc.call("GET", "/budget", "alice").body
    r = svc.call("PUT", "/budget", "alice", body=body)
    assert r.status == 400 and r.body["error"]["field"] == field, r.body
    assert svc.call("GET", "/budget", "alice").body == before
    r = svc.call("PUT", "/users/alice/budget", "admin", body=body)
    assert r.status == 400 and r.body["error"]["field"] == field
    assert svc.call("GET", "/budget", "alice").body == before


def test_the_user_sets_her_budget_under_an_admin_cap(svc):
    alice = svc.client("alice")
    assert svc.call("PUT", "/users/alice/budget", "bob", body={"seconds": 1}).status == 403
    capped = svc.client("admin").set_budget(seconds=100, user="alice")
    assert capped["cap"]["seconds"] == 100 and capped["limits"]["seconds"] == 100 and capped["user"] == "alice"
    with pytest.raises(DataError) as e:
        alice.set_budget(seconds=200)
    assert e.value.field == "seconds" and "100" in str(e.value)
    with pytest.raises(DataError):
        alice.set_budget(seconds=None)  # no limit is above the cap too
    deadline = datetime.now(timezone.utc) + timedelta(hours=2)
    mine = alice.set_budget(seconds=50, deadline=timedelta(hours=2))
    assert mine["own"]["seconds"] == 50 and mine["limits"]["seconds"] == 50
    assert abs(datetime.fromisoformat(mine["limits"]["deadline"]) - deadline) < timedelta(minutes=1)
    assert mine["spent"]["seconds"] == 0 and mine["left"]["seconds"] == 50 and not mine["blocked"]
    assert alice.budget() == mine
    assert svc.client("bob").budget()["limits"] == {"seconds": None, "gpu_seconds": None, "cost": None,
                                                 "deadline": None}
    with pytest.raises(DataError) as e:
        alice.set_budget(deadline=3.5)  # refused before it is sent
    assert e.value.field == "deadline"


def test_a_task_budget_sets_the_epochs_of_its_picks(svc):
    alice = svc.client("alice")
    task = alice.task("images", input=[8, 8, 1], output=[4])
    assert task.budget() == {"max_epochs": None, "epochs": None, "source": "data size", "examples": None}
    task.feed(np.random.default_rng(0).random((40, 8, 8, 1), dtype=np.float32), np.arange(40) % 4)
    assert task.budget()["epochs"] == default_max_epochs(40)
    assert task.set_budget(max_epochs=5) == {"max_epochs": 5, "epochs": 5, "source": "task", "examples": 40}
    for bad in (0, -1, 2.5, "3", True, 10**6):
        r = svc.call("PUT", "/tasks/images/budget", "alice", body={"max_epochs": bad})
        assert r.status == 400 and r.body["error"]["field"] == "max_epochs", (bad, r.body)
    assert svc.call("PUT", "/tasks/images/budget", "alice", body={"epochs": 3}).status == 400
    assert task.budget()["max_epochs"] == 5  # nothing stored by the bad calls
    r = svc.call("PUT", "/tasks/images/budget", "alice", body={"max_epochs": 6.0})
    assert r.status == 200 and task.budget()["max_epochs"] == 6  # JSON's 6.0 is the integer 6
    assert task.set_budget(max_epochs=None)["source"] == "data size"
    tags = svc.service.store.tags("task", task.info["id"])
    assert tags[MAX_EPOCHS_TAG] == ""
    r = svc.call("PUT", "/tasks/images/tags", "alice", body={MAX_EPOCHS_TAG: "7"})
    assert r.status == 400  # the tag is the service's own


def test_the_status_widget_shows_spent_and_left(svc, iris):
    from ease_jupyter.widgets.status import TaskStatus

    alice = svc.client("alice")
    task = alice.task("flowers", input=[4], output=[3])
    task.feed(*iris)
    assert task.wait(timeout=120)
    alice.set_budget(seconds=10_000)
    status = TaskStatus(task, live=False)
    try:
        spent = status.budget.budget["spent"]["seconds"]
        assert spent > 0
        assert f"of 10,000 s, {10_000 - spent:,.0f} s left" in repr(status)
        assert "easeml-budget" in status.budget.value
    finally:
        status.close()
    svc.client("admin").set_budget(seconds=spent / 2, user="alice")  # the cap is below what she spent
    task.feed(iris[0][:50] + 1, iris[1][:50])  # new data: the loop would train again
    assert until(lambda: task.refresh()["status"] == "over_budget", 30), task.refresh()
    status = TaskStatus(task, live=False)
    try:
        assert "no new picks: your compute budget is spent" in repr(status)
        assert task.refresh()["reason"] in repr(status)
    finally:
        status.close()
    assert task.wait(timeout=30)  # nothing more will train: wait returns


@pytest.mark.parametrize("examples,given", [(344, None), (60_000, None), (344, 5)])
def test_easeml_models_shows_the_epochs_the_service_trains(examples, given):
    from click.testing import CliRunner

    from ease_jupyter.cli import main
    from ease_jupyter.execution.automl import pick_schedule
    from ease_jupyter.service.task_epochs import pick_epochs

    args = ["models", "--input", "8,8,1", "--output", "10", "--examples", str(examples), "--json"]
    r = CliRunner().invoke(main, args + ([] if given is None else ["--epochs", str(given)]))
    assert r.exit_code == 0, r.output
    torch = [c for c in json.loads(r.stdout)["candidates"] if c["engine"] == "torch"]
    trained = pick_epochs(given, None, examples)  # what the loop gives a pick of a task of that size
    assert torch and {c["epochs"] for c in torch} == {trained}
    assert trained == (given or default_max_epochs(examples))
    plan = pick_schedule(3, trained)
    for c in torch:
        assert c["schedule"]["rungs"] == list(plan.rungs) and c["schedule"]["sizes"] == list(plan.sizes)
        assert c["pick_cost"] == pytest.approx(c["flops_per_example"] * examples * plan.config_epochs)
    table = CliRunner().invoke(main, args[:-1])
    assert f"at most {default_max_epochs(examples)} epochs, by the data size ({examples} examples)" in table.stdout
