"""The selector's costs from the profiler (ACAI §3.3.2, §4.2.2): an arm costs
the profiler's predicted seconds once its family has history, the FLOPs
proxy before that or when a prediction fails; the control loop records each
launched job's prediction and, once it finished, its error."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.loop.costs import FLOPS_PER_SECOND, Costs, ProfileRefits, spec_flops
from ease_jupyter.service.profiling import TAG_LOG_ERROR, TAG_PREDICTED, TAG_SOURCE, ProfileBook, full_seconds
from ease_jupyter.store import JobStatus, JobUpdate, open_store
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor

SIZES = (40, 80, 160, 320)  # examples of the tasks whose jobs make the history
SECONDS_PER_EXAMPLE = 0.004  # the known law: a logreg job takes this many seconds per example
ARM = "logreg"


def law(n: int) -> float:
    return SECONDS_PER_EXAMPLE * n


@pytest.fixture
def stores():
    store, blobs = open_store("memory://")
    yield store, blobs
    store.close()


def flat_task(stores, name: str, n: int, seed: int = 0):
    store, blobs = stores
    rng = np.random.default_rng(seed)
    user = next((u for u in store.list_users() if u.name == "ada"), None) or store.create_user("ada", "h" * 64)
    task = store.create_task(user.id, name, format_program(program_from_shapes([16], [4])))
    version = datasets.feed(store, blobs, task, rng.standard_normal((n, 16)), rng.integers(0, 4, n))
    return task, version


def finish(store, task, version, spec, seconds: float):
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    store.update_job(job.id, JobStatus.RUNNING)
    return store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=seconds))


def history(stores, costs: Costs) -> None:
    """Finished logreg jobs on tasks of every size in SIZES, each taking law(n) seconds."""
    for i, n in enumerate(SIZES):
        task, version = flat_task(stores, f"past{i}", n, seed=i)
        finish(stores[0], task, version, costs.configs(task)[ARM], law(n))


def test_an_arm_with_history_costs_the_profilers_prediction_not_its_flops(stores):
    store = stores[0]
    book = ProfileBook(store)
    costs = Costs(store, torch_epochs=None, profile=book)
    history(stores, costs)
    book.refit()
    task, version = flat_task(stores, "new", 120, seed=9)
    spec = costs.configs(task)[ARM]
    n = version.n_examples
    prediction = book.predict_job(task, spec, n, costs.pick_resources(task, spec, n))
    assert prediction.source is not None
    assert costs.seconds(task, spec, n) == pytest.approx(prediction.seconds)
    assert costs.seconds(task, spec, n) == pytest.approx(law(n), rel=0.15)  # the law, recovered
    assert costs.flops_seconds(task, spec, n) < law(n) / 10  # which the FLOPs at 1 GFLOP/s are far from


def test_without_history_an_arm_costs_its_flops_estimate(stores):
    store = stores[0]
    book = ProfileBook(store)
    costs = Costs(store, torch_epochs=None, profile=book)
    book.refit()  # on an empty store
    task, version = flat_task(stores, "new", 120)
    n = version.n_examples
    for arm, spec in costs.configs(task).items():
        want = max(spec_flops(task, spec, n) / FLOPS_PER_SECOND, 1e-3)
        assert costs.prediction(task, spec, n) is None, arm
        assert costs.seconds(task, spec, n) == pytest.approx(want), arm


class BrokenBook(ProfileBook):
    def predict_job(self, *args, **kwargs):
        raise RuntimeError("a corrupt model")


def test_a_failing_prediction_falls_back_to_flops_and_the_job_says_so(stores):
    store = stores[0]
    book = BrokenBook(store)
    costs = Costs(store, torch_epochs=None, profile=book)
    history(stores, costs)
    book.refit()
    task, version = flat_task(stores, "new", 120)
    spec, n = costs.configs(task)[ARM], version.n_examples
    assert costs.seconds(task, spec, n) == pytest.approx(costs.flops_seconds(task, spec, n))
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    costs.record_launch(job, task, spec, n)
    tags = store.tags("job", job.id)
    assert tags[TAG_SOURCE] == "flops"
    assert float(tags[TAG_PREDICTED]) == pytest.approx(costs.flops_seconds(task, spec, n))


class CountingBook:
    def __init__(self):
        self.refits, self.outcomes = 0, []

    def refit(self):
        self.refits += 1

    def record_outcome(self, job):
        self.outcomes.append(job.id)


def test_refits_follow_finished_jobs_at_most_every_few_seconds(stores):
    store = stores[0]
    now = [0.0]
    book = CountingBook()
    refits = ProfileRefits(store, book, every_seconds=10.0, every_jobs=3, clock=lambda: now[0])
    costs = Costs(store, torch_epochs=None)
    task, version = flat_task(stores, "t", 40)
    spec = costs.configs(task)[ARM]
    assert refits.collect() and book.refits == 1  # the first turn fits on the history
    assert not refits.collect()  # nothing finished since
    jobs = [finish(store, task, version, spec, 1.0) for _ in range(4)]
    refits.finished(jobs[0].id)
    now[0] = 1.0
    assert not refits.collect() and book.outcomes == [jobs[0].id]  # recorded, refit not due yet
    now[0] = 10.5
    assert refits.collect() and book.refits == 2  # due by time
    for job in jobs[1:]:
        refits.finished(job.id)
    now[0] = 11.0
    assert refits.collect() and book.refits == 3  # due by count, before the time
    assert book.outcomes == [j.id for j in jobs]
    unfinished = store.create_job(task.id, version.id, spec.model, spec.config())
    refits.finished(unfinished.id)  # still queued (lost by its executor): no outcome
    now[0] = 30.0
    assert not refits.collect() and book.outcomes == [j.id for j in jobs]


def test_the_control_loop_records_each_jobs_prediction_and_its_error(svc, iris):
    task = svc.client("alice").task("iris", input=[4], output=[3])
    task.feed(*iris)
    assert task.wait(timeout=120)
    store = svc.service.store
    jobs = [store.get_job(j["id"]) for j in task.jobs()]
    assert jobs
    for job in jobs:
        tags = store.tags("job", job.id)
        predicted = float(tags[TAG_PREDICTED])
        assert predicted > 0 and tags[TAG_SOURCE] in ("flops", "family", "pooled"), tags
        assert job.status is JobStatus.SUCCEEDED and job.cost_seconds
        # against the job's own seconds: a profiled job's cost also holds its profiling runs
        own = full_seconds(job, tags)
        assert own <= job.cost_seconds
        assert float(tags[TAG_LOG_ERROR]) == pytest.approx(math.log(own / predicted), abs=1e-6)
    first = min(jobs, key=lambda j: j.id)
    assert store.tags("job", first.id)[TAG_SOURCE] == "flops"  # no history yet: the proxy priced it
    # the leaderboard shows the best job's predicted seconds next to its measured ones
    best = svc.client("alice").leaderboard()[0]["best"]
    assert best["predicted_seconds"] == pytest.approx(float(store.tags("job", best["job_id"])[TAG_PREDICTED]))
    assert best["cost_seconds"] == store.get_job(best["job_id"]).cost_seconds


def selector_cost(loop, tenant: str, arm: str) -> float:
    user = next(u for u in loop.selector.to_dict()["users"] if u and u["name"] == tenant)
    return user["cost"][user["models"].index(arm)]


def test_the_loop_reprices_an_arm_once_jobs_of_its_family_finished(stores):
    """A tenant registered before any history has its arm at the FLOPs
    proxy; once jobs of the arm's family finished and the profiler was
    refitted, the selector's c_k of the arm is the profiler's prediction."""
    task, version = flat_task(stores, "new", 120, seed=9)
    store, blobs = stores
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: ManualExecutor(store, workers=1)})
    loop.recover()
    loop.step()
    tenant = f"{task.id}/{version.id}"
    spec, n = loop.costs.configs(task)[ARM], version.n_examples
    assert selector_cost(loop, tenant, ARM) == pytest.approx(loop.costs.flops_seconds(task, spec, n))
    for i, size in enumerate(SIZES):  # other users' jobs of the family finish (here: written straight to the store)
        past, past_version = flat_task(stores, f"past{i}", size, seed=i)
        job = finish(store, past, past_version, loop.costs.configs(past)[ARM], law(size))
        loop.profile_refits.finished(job.id)
    loop.profile_refits.every_seconds = 0.0
    # an hour later: the first refit's pause (its duration over the share) has passed however slow it was
    loop.profile_refits.clock = lambda: time.monotonic() + 3600.0
    loop.step()
    loop.stop()
    prediction = loop.costs.prediction(task, spec, n)
    assert prediction is not None
    assert selector_cost(loop, tenant, ARM) == pytest.approx(prediction.seconds)
    assert selector_cost(loop, tenant, ARM) == pytest.approx(law(n), rel=0.15)


def test_a_slow_refit_waits_long_enough_to_take_a_small_share_of_the_loop(stores):
    store = stores[0]
    now = [0.0]

    class SlowBook(CountingBook):
        def refit(self):
            super().refit()
            now[0] += 2.0  # the refit itself takes 2 s

    book = SlowBook()
    refits = ProfileRefits(store, book, every_seconds=1.0, every_jobs=1, share=0.1, clock=lambda: now[0])
    costs = Costs(store, torch_epochs=None)
    task, version = flat_task(stores, "t", 40)
    spec = costs.configs(task)[ARM]
    assert refits.collect()  # 0 -> 2 s
    refits.finished(finish(store, task, version, spec, 1.0).id)
    now[0] = 15.0
    assert not refits.collect() and book.refits == 1  # due by count and time, but 2 s / 0.1 = 20 s have not passed
    now[0] = 20.5
    assert refits.collect() and book.refits == 2
