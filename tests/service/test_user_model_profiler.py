"""A user's own model is a profiler family of its own (keyed by its code's
blob): its finished jobs teach the profiler as zoo jobs do, its arm then
costs the profiler's prediction (before that: the median of the task's
other arms, then its last measured seconds), each of her jobs keeps its
prediction and error, and her estimator's first job is profiled on
subsamples, in the job's sandboxed child, paid for by her."""

from __future__ import annotations

import json
import math
import os
import time

import cloudpickle
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from ease_jupyter import datasets
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.selection.profile_plan import plan_from_json
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.loop.costs import MEASURED_SOURCE, NEUTRAL_SOURCE, Costs
from ease_jupyter.service.profiling import (
    TAG_FULL_SECONDS,
    TAG_PLANNED_FAMILY,
    TAG_LOG_ERROR,
    TAG_LOG_SD,
    TAG_PLAN,
    TAG_PREDICTED,
    TAG_RESOURCES,
    TAG_RUNS,
    TAG_SOURCE,
    ProfileBook,
    Resources,
    family_of,
)
from ease_jupyter.service.runner import run_sklearn_job
from ease_jupyter.service.user_models import UserModel, UserModels
from ease_jupyter.store import JobStatus, JobUpdate, open_store
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor

SIZES = (40, 80, 160, 320)
SECONDS_PER_EXAMPLE = 0.003  # the known law of her model's jobs


def law(n: int) -> float:
    return SECONDS_PER_EXAMPLE * n


class NotesWhereItFits(LogisticRegression):
    """Writes the process of each of its fits into ``pid_file``."""

    def __init__(self, pid_file="", C=1.0, max_iter=200):
        super().__init__(C=C, max_iter=max_iter)
        self.pid_file = pid_file

    def fit(self, X, y):
        if self.pid_file:
            with open(self.pid_file, "a") as out:
                out.write(f"{os.getpid()}\n")
        return super().fit(X, y)


@pytest.fixture
def stores():
    store, blobs = open_store("memory://")
    yield store, blobs
    store.close()


def flat_task(stores, name: str, n: int, *, user: str = "ada", seed: int = 0, d: int = 16):
    store, blobs = stores
    owner = next((u for u in store.list_users() if u.name == user), None) or store.create_user(user, user[0] * 64)
    task = store.create_task(owner.id, name, format_program(program_from_shapes([d], [4])))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    version = datasets.feed(store, blobs, task, X, (X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0))
    return task, version


def add_own(stores, task, estimator, name: str = "mine", grid=None):
    """Store her model as the service does (blob, then record); nothing of it is unpickled here."""
    store, blobs = stores
    code = cloudpickle.dumps(estimator)
    model = UserModel(name, "estimator", grid or {"C": [0.5, 1.0]}, blobs.put_bytes(code), 60.0, len(code),
                      type(estimator).__name__, time.time())
    UserModels(store).put(task.id, model)
    return model


def finish(store, task, version, spec, seconds: float):
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    store.update_job(job.id, JobStatus.RUNNING)
    return store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=seconds))


def her_history(stores, costs: Costs, estimator) -> None:
    """Her model's jobs on tasks of every size in SIZES, each taking law(n) seconds (one code: one family)."""
    for i, n in enumerate(SIZES):
        task, version = flat_task(stores, f"past{i}", n, seed=i)
        add_own(stores, task, estimator)
        finish(stores[0], task, version, costs.configs(task)["mine"], law(n))


def test_her_model_is_a_family_of_its_own_keyed_by_its_code(stores):
    store = stores[0]
    book = ProfileBook(store)
    costs = Costs(store, torch_epochs=None, profile=book)
    mine = LogisticRegression(max_iter=200)
    her_history(stores, costs, mine)
    task, version = flat_task(stores, "new", 120, seed=9)
    add_own(stores, task, mine)
    # another user's model of the same name, other code: another family, with no history
    other_task, other_version = flat_task(stores, "theirs", 120, user="bob", seed=9)
    add_own(stores, other_task, LogisticRegression(max_iter=201))
    spec, other = costs.configs(task)["mine"], costs.configs(other_task)["mine"]
    assert family_of(task, spec) != family_of(other_task, other)
    # her owner id and the blob of her code, whichever of her tasks it trains on
    assert family_of(task, spec) == f"user:{task.owner_id}:{spec.code}"
    book.refit()
    n = version.n_examples
    assert book.profiler.counts[family_of(task, spec)] == len(SIZES)  # her jobs are its records
    assert family_of(other_task, other) not in book.profiler.counts
    prediction = costs.prediction(task, spec, n)
    assert prediction is not None and prediction.source == "family"
    assert costs.seconds(task, spec, n) == pytest.approx(prediction.seconds)
    assert prediction.seconds == pytest.approx(law(n), rel=0.15)  # her runtime law, recovered
    # the provisioner's configuration is the one predicted for
    assert prediction == book.predict_job(task, spec, n, costs.resources(task, spec, n))
    assert costs.prediction(other_task, other, other_version.n_examples) is None


def test_two_owners_of_identical_code_are_two_families(stores):
    """A plain estimator pickles by reference to the same bytes for everyone:
    bob is neither priced from ada's jobs nor kept from profiling by hers."""
    store = stores[0]
    book = ProfileBook(store)
    costs = Costs(store, torch_epochs=None, profile=book)
    her_history(stores, costs, LogisticRegression(max_iter=200))  # ada's
    ada_task, ada_version = flat_task(stores, "ada-new", 120, seed=9)
    add_own(stores, ada_task, LogisticRegression(max_iter=200))
    bob_task, bob_version = flat_task(stores, "bob-new", 120, user="bob", seed=9)
    add_own(stores, bob_task, LogisticRegression(max_iter=200))
    ada_spec, bob_spec = costs.configs(ada_task)["mine"], costs.configs(bob_task)["mine"]
    assert ada_spec.code == bob_spec.code  # one blob
    assert family_of(ada_task, ada_spec) != family_of(bob_task, bob_spec)
    book.refit()
    assert book.profiler.counts[family_of(ada_task, ada_spec)] == len(SIZES)
    assert family_of(bob_task, bob_spec) not in book.profiler.counts
    assert costs.prediction(bob_task, bob_spec, bob_version.n_examples) is None  # nothing learned from ada's
    assert book.predict_job(bob_task, bob_spec, 120).source != "family"
    # a planned job of a new owner's family pending does not keep another owner's first job from its plan
    carol_task, carol_version = flat_task(stores, "carol", 400, user="carol", d=8)
    dan_task, dan_version = flat_task(stores, "dan", 400, user="dan", d=8)
    for t in (carol_task, dan_task):
        add_own(stores, t, LogisticRegression(max_iter=300))
    carol_spec, dan_spec = costs.configs(carol_task)["mine"], costs.configs(dan_task)["mine"]
    carol_job = store.create_job(carol_task.id, carol_version.id, carol_spec.model, carol_spec.config())
    dan_job = store.create_job(dan_task.id, dan_version.id, dan_spec.model, dan_spec.config())
    assert book.plan_profiling(carol_job, carol_task, carol_spec, carol_version.n_examples)
    assert book.plan_profiling(dan_job, dan_task, dan_spec, dan_version.n_examples)


def test_a_job_planned_under_the_old_family_key_still_counts_for_its_owner_only(stores):
    """Jobs planned before the owner was part of the key are tagged ``user:<digest>``."""
    store = stores[0]
    costs = Costs(store, torch_epochs=None)
    book = ProfileBook(store)
    tasks = {}
    for user in ("ada", "bob"):
        task, version = flat_task(stores, user, 400, user=user, d=8)
        add_own(stores, task, LogisticRegression(max_iter=300))
        tasks[user] = task, version, costs.configs(task)["mine"]
    task, version, spec = tasks["ada"]
    old = store.create_job(task.id, version.id, spec.model, spec.config())  # pending, planned by an older service
    store.set_tag("job", old.id, TAG_PLANNED_FAMILY, "user:" + spec.code)
    again = store.create_job(task.id, version.id, spec.model, spec.config())
    assert not book.plan_profiling(again, task, spec, version.n_examples)
    task, version, spec = tasks["bob"]
    first = store.create_job(task.id, version.id, spec.model, spec.config())
    assert book.plan_profiling(first, task, spec, version.n_examples)


def test_her_jobs_keep_their_prediction_and_error(stores):
    store = stores[0]
    book = ProfileBook(store)
    costs = Costs(store, torch_epochs=None, profile=book)
    mine = LogisticRegression(max_iter=200)
    task, version = flat_task(stores, "new", 120, seed=9)
    add_own(stores, task, mine)
    spec, n = costs.configs(task)["mine"], version.n_examples
    # before any history: the median of the task's other arms (a neutral prior), stored with the job
    zoo = sorted(costs.seconds(task, s, n) for s in costs.configs(task).values() if not s.is_user_model)
    neutral = zoo[len(zoo) // 2]
    assert costs.seconds(task, spec, n) == pytest.approx(neutral)
    first = store.create_job(task.id, version.id, spec.model, spec.config())
    costs.record_launch(first, task, spec, n)
    tags = store.tags("job", first.id)
    assert tags[TAG_SOURCE] == NEUTRAL_SOURCE and float(tags[TAG_PREDICTED]) == pytest.approx(neutral)
    assert json.loads(tags[TAG_RESOURCES])["threads"] >= 1
    store.update_job(first.id, JobStatus.RUNNING)
    first = store.update_job(first.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=0.7))
    assert book.record_outcome(first) == pytest.approx(math.log(0.7 / neutral))
    # measured on the task, no runtime model yet (no refit): its last measured seconds
    assert costs.own_fallback(task, spec, n) == (pytest.approx(0.7), MEASURED_SOURCE)
    # with history of her model's family: the profiler's prediction, as a zoo job's
    her_history(stores, costs, mine)
    book.refit()
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    costs.record_launch(job, task, spec, n)
    tags = store.tags("job", job.id)
    prediction = costs.prediction(task, spec, n)
    assert tags[TAG_SOURCE] == prediction.source == "family"
    assert float(tags[TAG_PREDICTED]) == pytest.approx(prediction.seconds)
    assert float(tags[TAG_LOG_SD]) == pytest.approx(prediction.log_sd)
    store.update_job(job.id, JobStatus.RUNNING)
    job = store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=law(n) * 2))
    book.record_outcome(job)
    assert float(store.tags("job", job.id)[TAG_LOG_ERROR]) == pytest.approx(
        math.log(law(n) * 2 / prediction.seconds))
    plan = costs.plan(task, spec, n)
    assert plan["source"] == "family" and plan["predicted_seconds"] == pytest.approx(prediction.seconds)
    assert plan["flops_seconds"] is None and plan["log_sd"] == pytest.approx(prediction.log_sd)


def selector_cost(loop, tenant: str, arm: str) -> float:
    user = next(u for u in loop.selector.to_dict()["users"] if u and u["name"] == tenant)
    return user["cost"][user["models"].index(arm)]


def test_the_loop_reprices_her_arm_once_her_family_has_history(stores):
    store, blobs = stores
    task, version = flat_task(stores, "new", 120, seed=9)
    mine = LogisticRegression(max_iter=200)
    add_own(stores, task, mine)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: ManualExecutor(store, workers=1)})
    loop.recover()
    loop.step()
    tenant = f"{task.id}/{version.id}"
    spec, n = loop.costs.configs(task)["mine"], version.n_examples
    assert selector_cost(loop, tenant, "mine") == pytest.approx(loop.costs.own_fallback(task, spec, n)[0])
    assert loop.costs.prediction(task, spec, n) is None
    for i, size in enumerate(SIZES):  # her jobs on her other tasks finish
        past, past_version = flat_task(stores, f"past{i}", size, seed=i)
        add_own(stores, past, mine)
        loop.profile_refits.finished(finish(store, past, past_version, loop.costs.configs(past)["mine"], law(size)).id)
    loop.profile_refits.every_seconds = 0.0
    loop.step()
    loop.stop()
    prediction = loop.costs.prediction(task, spec, n)
    assert prediction is not None
    assert selector_cost(loop, tenant, "mine") == pytest.approx(prediction.seconds)
    assert selector_cost(loop, tenant, "mine") == pytest.approx(law(n), rel=0.15)


def test_her_estimators_first_job_is_profiled_in_her_sandbox_and_paid_for(stores, notes):
    store, blobs = stores
    task, version = flat_task(stores, "t", 400, d=8)
    pid_file = notes / "pids"
    add_own(stores, task, NotesWhereItFits(str(pid_file)))
    costs = Costs(store, torch_epochs=None)
    spec = costs.configs(task)["mine"]
    book = ProfileBook(store)
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    store.set_tag("job", job.id, TAG_RESOURCES, Resources(threads=1).to_json())
    assert book.plan_profiling(job, task, spec, version.n_examples, Resources(threads=1))
    planned = plan_from_json(store.tags("job", job.id)[TAG_PLAN])
    assert planned and all(r.n < version.n_examples for r in planned)
    with LocalEngine(1, torch_threads=None) as engine:
        done = run_sklearn_job(store, blobs, job.id, engine)
    assert done.status is JobStatus.SUCCEEDED, done.error
    tags = store.tags("job", job.id)
    runs = json.loads(tags[TAG_RUNS])
    assert [(r["n"], r["threads"]) for r in runs] == [(r.n, r.threads) for r in planned]
    full = float(tags[TAG_FULL_SECONDS])
    assert done.cost_seconds == pytest.approx(full + sum(r["seconds"] for r in runs))  # she pays for them
    # every fit of hers, profiling runs and grid alike, ran in a child process, none in this one
    pids = [int(p) for p in pid_file.read_text().split()]
    assert len(pids) >= len(runs) + len(spec.points()) and os.getpid() not in pids
    # the runs are records of her family: it has history after one job
    records = book.records()
    assert {f.family for f, _ in records} == {family_of(task, spec)} and len(records) == 1 + len(runs)
    # a second job of hers is not profiled again
    second = store.create_job(task.id, version.id, spec.model, spec.config())
    assert not book.plan_profiling(second, task, spec, version.n_examples)


def test_a_user_torch_factory_is_planned_at_one_thread(stores):
    """Her factory's runs train as MOP units (tests/service/test_user_factory_profiling.py), at a unit's one thread."""
    store, blobs = stores
    task, version = flat_task(stores, "t", 400, d=8)
    code = cloudpickle.dumps(lambda input_shape, output_shape: None)
    UserModels(store).put(task.id, UserModel("net", "factory", {"lr": [0.1]}, blobs.put_bytes(code), 60.0,
                                             len(code), "f", time.time()))
    spec = Costs(store, torch_epochs=2).configs(task)["net"]
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    book = ProfileBook(store)
    assert book.plan_profiling(job, task, spec, version.n_examples, Resources(threads=2))
    planned = plan_from_json(store.tags("job", job.id)[TAG_PLAN])
    assert [r.threads for r in planned] == [1, 1] and all(r.n < version.n_examples for r in planned)
    second = store.create_job(task.id, version.id, spec.model, spec.config())
    assert not book.plan_profiling(second, task, spec, version.n_examples)  # one job of her family is planned
