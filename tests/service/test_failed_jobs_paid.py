"""A failed job is paid for: it records the seconds its attempt ran as its
cost, and its owner's budget counts them, so a capped user whose models
fail is blocked like one whose models succeed. A failure of the service's
own (storage, cluster) is not paid for. The selector hears nothing new: a
model's failure is still quality 0, a storage failure nothing."""

from __future__ import annotations

import time
from concurrent.futures import Future
from datetime import datetime, timedelta, timezone

import cloudpickle
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from ease_jupyter import datasets
from ease_jupyter.errors import ClusterUnavailableError, StorageFullError
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service import budget as budgets
from ease_jupyter.service import user_models
from ease_jupyter.service.failures import failure_code
from ease_jupyter.service.quota import ModelOverQuotaError
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.loop.costs import Costs
from ease_jupyter.service.runner import run_sklearn_job
from ease_jupyter.service.user_models import UserModel, UserModels
from ease_jupyter.store import JobStatus, open_store
from ease_jupyter.zoo import Engine

BURN = 0.4  # what each failing fit takes before it raises


class BurnsThenRaises(LogisticRegression):
    """A user's model whose every fit takes BURN seconds, then raises."""

    def fit(self, X, y):
        time.sleep(BURN)
        raise ValueError("her model gave up")


@pytest.fixture
def stores():
    store, blobs = open_store("memory://")
    yield store, blobs
    store.close()


def a_task(stores, name: str = "ada", n: int = 60):
    store, blobs = stores
    owner = store.create_user(name, name[0] * 64)
    task = store.create_task(owner.id, f"{name}_task", format_program(program_from_shapes([4], [3])))
    rng = np.random.default_rng(0)
    version = datasets.feed(store, blobs, task, rng.normal(size=(n, 4)), rng.integers(0, 3, n))
    return task, version


def add_own(stores, task, estimator, name: str = "burner"):
    store, blobs = stores
    code = cloudpickle.dumps(estimator)
    model = UserModel(name, "estimator", {"C": [1.0]}, blobs.put_bytes(code), 60.0, len(code),
                      type(estimator).__name__, time.time())
    UserModels(store).put(task.id, model)
    return model


def test_her_failing_model_records_the_seconds_it_ran_and_her_budget_counts_them(stores):
    store, blobs = stores
    task, version = a_task(stores)
    add_own(stores, task, BurnsThenRaises())
    spec = Costs(store, torch_epochs=None).configs(task)["burner"]
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    with LocalEngine(1, torch_threads=None) as engine:
        failed = run_sklearn_job(store, blobs, job.id, engine)
    assert failed.status is JobStatus.FAILED, failed
    ran = (failed.finished_at - failed.started_at).total_seconds()
    assert failed.cost_seconds is not None and BURN <= failed.cost_seconds <= ran + 0.01
    spent = budgets.spent(budgets.user_jobs(store, task.owner_id), gpu_pool=False, now=datetime.now(timezone.utc))
    assert spent.seconds == pytest.approx(failed.cost_seconds)
    cap = budgets.Limits(seconds=BURN / 2)
    capped = budgets.blocked_reason(cap, spent, cap=cap, gpu_pool=False, now=datetime.now(timezone.utc))
    assert capped is not None and "budget is spent" in capped


def test_a_zoo_job_that_fails_is_paid_for_too(stores):
    store, blobs = stores
    task, version = a_task(stores)
    job = store.create_job(task.id, version.id, "lenet", {"lrs": [0.1], "epochs": 1})  # not a grid: it fails
    failed = run_sklearn_job(store, blobs, job.id, engine=None)
    assert failed.status is JobStatus.FAILED and "not a scikit-learn grid" in failed.error
    assert failed.cost_seconds is not None
    assert failed.cost_seconds == pytest.approx((failed.finished_at - failed.started_at).total_seconds(), abs=0.01)


def test_a_failed_job_without_a_cost_counts_its_run_time(stores):
    store, _ = stores
    task, version = a_task(stores)
    job = store.create_job(task.id, version.id, "logreg", {"grid": {"C": [1.0]}})
    store.update_job(job.id, JobStatus.RUNNING)
    failed = store.update_job(job.id, JobStatus.FAILED)  # as the loop fails a job its executor lost too often
    assert failed.cost_seconds is None
    later = failed.finished_at + timedelta(hours=1)  # its run time, not the time since it started
    assert budgets.job_seconds(failed, later) == budgets.run_seconds(failed, later)
    assert budgets.run_seconds(failed, later) == (failed.finished_at - failed.started_at).total_seconds()
    queued = store.create_job(task.id, version.id, "logreg", {"grid": {"C": [2.0]}})
    assert budgets.job_seconds(queued, later) == 0.0


class FailingExecutor:
    """Jobs that start at once and fail when the test says so, through the
    runners' own failure path, after running ``seconds``."""

    def __init__(self, store, workers: int):
        self.store, self.workers, self.running = store, workers, []

    def submit(self, job_id: int) -> Future:
        future: Future = Future()
        self.running.append((job_id, future, self.store.update_job(job_id, JobStatus.RUNNING)))
        return future

    def fail_all(self, error: BaseException) -> None:
        running, self.running = self.running, []
        for job_id, future, job in running:
            future.set_result(user_models.fail_any_job(self.store, job, error))

    def shutdown(self) -> None:
        pass


def capped_loop(stores, cap: float):
    store, blobs = stores
    task, _ = a_task(stores)
    executor = FailingExecutor(store, workers=1)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=1)
    loop.recover()
    budgets.write_limits(store, task.owner_id, budgets.CAP_PREFIX, {"seconds": cap})
    loop.step()
    assert len(executor.running) == 1
    return store, task, executor, loop


def test_a_capped_user_whose_model_fails_gets_no_more_picks(stores):
    store, task, executor, loop = capped_loop(stores, 0.15)
    time.sleep(0.2)  # her job runs past her cap, then her model raises
    executor.fail_all(ValueError("bad fit"))
    loop.step()
    assert executor.running == [] and len(store.list_jobs(task.id)) == 1  # no new pick: the failure is paid for
    assert store.list_jobs(task.id)[0].cost_seconds >= 0.2
    status = loop.task_status(task, has_data=True)
    assert status["status"] == "over_budget" and "compute budget is spent" in status["reason"]
    assert loop.results.n_observed == 1  # as before: her model's failure is its arm's quality 0
    loop.stop()


@pytest.mark.parametrize("error, code", [
    (StorageFullError("disk full"), "storage_full"),
    (ClusterUnavailableError("no worker of the cluster is left"), "cluster_unavailable"),
])
def test_a_failure_of_the_service_is_not_paid_for_nor_reported_to_the_selector(stores, error, code):
    store, task, executor, loop = capped_loop(stores, 1000.0)
    time.sleep(0.2)
    executor.fail_all(error)
    loop.step()
    failed = store.list_jobs(task.id)[0]
    assert failed.status is JobStatus.FAILED and failure_code(store, failed) == code
    assert failed.cost_seconds == 0.0  # not None: its run time would count then
    spent = budgets.spent(budgets.user_jobs(store, task.owner_id), gpu_pool=False, now=datetime.now(timezone.utc))
    assert spent.seconds == 0.0
    assert loop.results.n_observed == 0
    loop.stop()


def test_a_model_over_its_owners_quota_is_paid_for(stores):
    """Its owner's own failure (it trained in full), though it has a code."""
    store, task, executor, loop = capped_loop(stores, 1000.0)
    time.sleep(0.2)
    executor.fail_all(ModelOverQuotaError("the model takes 9 MB, 1 MB left of her quota"))
    loop.step()
    failed = store.list_jobs(task.id)[0]
    assert failed.status is JobStatus.FAILED and failure_code(store, failed) is None
    assert failed.cost_seconds >= 0.2
    assert loop.results.n_observed == 1
    loop.stop()
