"""A family's first scikit-learn job is profiled on subsamples of its task's
data before its full grid (ACAI §4.2.2), the profiling runs' seconds are
counted in its cost and become profiler records, and a job's grid runs at
the threads its resources say."""

from __future__ import annotations

import os

import dataclasses
import json
from typing import ClassVar

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from threadpoolctl import threadpool_info

from ease_jupyter import datasets
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.selection.profile_plan import ProfileRun, plan_from_json
from ease_jupyter.service import profile_runs, runner
from ease_jupyter.service.candidates import arm_specs, task_candidates
from ease_jupyter.service.profiling import (
    TAG_FULL_SECONDS,
    TAG_PLAN,
    TAG_RESOURCES,
    TAG_RUNS,
    ProfileBook,
    Resources,
)
from ease_jupyter.service.runner import evaluate_grid, run_sklearn_job
from ease_jupyter.store import JobStatus, JobUpdate, open_store

N = 400


@pytest.fixture
def task_store():
    store, blobs = open_store("memory://")
    user = store.create_user("ada", "a" * 64)
    task = store.create_task(user.id, "t", format_program(program_from_shapes([8], [3])))
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, 8))
    version = datasets.feed(store, blobs, task, X, (X[:, 0] > 0).astype(int) + (X[:, 1] > 1))
    specs = arm_specs(task, torch_epochs=None)
    yield store, blobs, task, version, specs
    store.close()


def _launch(store, task, version, spec, threads=1):
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    store.set_tag("job", job.id, TAG_RESOURCES, Resources(threads=threads).to_json())
    return job


def test_a_planned_job_records_its_runs_and_pays_for_them(task_store):
    store, blobs, task, version, specs = task_store
    book = ProfileBook(store)
    job = _launch(store, task, version, specs["logreg"], threads=2)
    assert book.plan_profiling(job, task, specs["logreg"], version.n_examples, Resources(threads=2))
    planned = plan_from_json(store.tags("job", job.id)[TAG_PLAN])
    assert planned == (ProfileRun(50, 1), ProfileRun(50, 2), ProfileRun(100, 1), ProfileRun(100, 2))
    with LocalEngine(1, torch_threads=None) as engine:
        done = run_sklearn_job(store, blobs, job.id, engine)
    assert done.status is JobStatus.SUCCEEDED
    tags = store.tags("job", job.id)
    runs = json.loads(tags[TAG_RUNS])
    assert [(r["n"], r["threads"]) for r in runs] == [(r.n, r.threads) for r in planned]
    assert all(r["seconds"] > 0 for r in runs)
    full = float(tags[TAG_FULL_SECONDS])
    assert done.cost_seconds == pytest.approx(full + sum(r["seconds"] for r in runs))
    # the profiler learns from the full job at its own seconds and from each run
    records = book.records()
    assert [s for _, s in records] == pytest.approx([full] + [r["seconds"] for r in runs])
    assert [(f.n, f.points, f.threads) for f, _ in records] == [(N, 3, 2)] + [(r.n, 1, r.threads) for r in planned]
    assert {f.family for f, _ in records} == {"logreg"}


def test_a_profiling_run_of_a_subsample_fits_its_share_of_each_side():
    class Data:
        X = np.arange(200.0)[:, None]
        y = np.arange(200) % 2
        split_keys = np.arange(200, dtype=np.uint64)

    X_tr, _, X_te, _ = profile_runs.subsample(Data, 50)
    assert len(X_tr) + len(X_te) == pytest.approx(50, abs=1) and len(X_te) >= 1
    held = runner.validation_mask(Data.split_keys)
    assert not set(X_tr[:, 0]) & set(Data.X[held, 0])  # training rows only are fitted


def test_only_a_familys_first_job_is_planned(task_store):
    store, _, task, version, specs = task_store
    book = ProfileBook(store)
    spec = specs["knn"]
    first = _launch(store, task, version, spec)
    assert book.plan_profiling(first, task, spec, version.n_examples)
    second = _launch(store, task, version, spec)
    assert not book.plan_profiling(second, task, spec, version.n_examples)
    assert TAG_PLAN not in store.tags("job", second.id)
    assert ProfileBook(store).plan_profiling(second, task, spec, version.n_examples) is False  # a restart: the store says
    store.update_job(first.id, JobStatus.RUNNING)
    store.update_job(first.id, JobStatus.FAILED)
    assert book.plan_profiling(second, task, spec, version.n_examples)  # the profiled job failed: profile again
    # a family the profiler has records of is not profiled
    done = _launch(store, task, version, specs["logreg"])
    store.update_job(done.id, JobStatus.RUNNING)
    store.update_job(done.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=1.0))
    book.refit()
    assert not book.plan_profiling(_launch(store, task, version, specs["logreg"]), task, specs["logreg"], N)


def test_a_failing_profiling_run_does_not_fail_the_job(task_store, monkeypatch):
    store, blobs, task, version, specs = task_store
    book = ProfileBook(store)
    job = _launch(store, task, version, specs["logreg"])
    assert book.plan_profiling(job, task, specs["logreg"], version.n_examples)
    planned = plan_from_json(store.tags("job", job.id)[TAG_PLAN])
    real = profile_runs.subsample

    def broken(data, n, seed=0):
        if n == planned[0].n:
            raise MemoryError("the subsample does not fit")
        return real(data, n, seed)

    monkeypatch.setattr(profile_runs, "subsample", broken)
    with LocalEngine(1, torch_threads=None) as engine:
        done = run_sklearn_job(store, blobs, job.id, engine)
    assert done.status is JobStatus.SUCCEEDED
    runs = json.loads(store.tags("job", job.id)[TAG_RUNS])
    assert [r["n"] for r in runs] == [r.n for r in planned[1:]]
    assert done.cost_seconds == pytest.approx(float(store.tags("job", job.id)[TAG_FULL_SECONDS])
                                              + sum(r["seconds"] for r in runs))


class _ThreadsSeen(ClassifierMixin, BaseEstimator):
    """Records the BLAS threads threadpoolctl reports while it fits."""

    seen: ClassVar[list[int]] = []

    def __init__(self, tag=0):
        self.tag = tag

    openmp: ClassVar[list[int]] = []

    def fit(self, X, y):
        blas = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
        type(self).seen.append(max(blas))
        type(self).openmp.extend(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "openmp")
        self.classes_ = np.unique(y)
        return self

    def predict(self, X):
        return np.full(len(X), self.classes_[0])


def test_the_grid_runs_at_the_jobs_threads(task_store):
    store, blobs, _, version, _ = task_store
    data = datasets.load(store, blobs, version)
    outside = os.cpu_count() or 1  # a limit above the cores gives the cores
    with LocalEngine(1, torch_threads=None) as engine:
        for threads in (1, 2):
            _ThreadsSeen.seen = []
            evaluate_grid(_ThreadsSeen(), {"tag": [0]}, data, True, engine, threads)
            assert _ThreadsSeen.seen == [min(threads, outside)]


def _build_seen(config):
    return _ThreadsSeen()


def test_a_zoo_candidates_fits_run_at_the_jobs_openmp_threads_on_the_engines_worker(task_store):
    # OpenMP's limit is per thread: it must be set on the worker thread that fits
    store, blobs, task, version, _ = task_store
    data = datasets.load(store, blobs, version)
    candidate = dataclasses.replace(task_candidates(task)["logreg"], build=_build_seen)
    outside = os.cpu_count() or 1  # a limit above the cores gives the cores
    with LocalEngine(1, torch_threads=None) as engine:
        for threads in (1, 2, 1):
            _ThreadsSeen.openmp = []
            evaluate_grid(candidate, {"tag": [0]}, data, True, engine, threads)
            assert _ThreadsSeen.openmp and set(_ThreadsSeen.openmp) == {min(threads, outside)}


def test_the_runner_reads_the_threads_from_the_jobs_resources(task_store, monkeypatch):
    store, blobs, task, version, specs = task_store
    asked = []
    real = runner.blas_threads
    monkeypatch.setattr(runner, "blas_threads", lambda threads: asked.append(threads) or real(threads))
    with LocalEngine(1, torch_threads=None) as engine:
        two = _launch(store, task, version, specs["knn"], threads=2)
        assert run_sklearn_job(store, blobs, two.id, engine).status is JobStatus.SUCCEEDED
        plain = store.create_job(task.id, version.id, "knn", specs["knn"].config())  # no resources: one thread
        assert run_sklearn_job(store, blobs, plain.id, engine).status is JobStatus.SUCCEEDED
    assert asked == [2, 1]


def test_each_profiling_run_fits_at_its_threads(task_store):
    store, blobs, _, version, _ = task_store
    data = datasets.load(store, blobs, version)
    outside = os.cpu_count() or 1  # a limit above the cores gives the cores
    _ThreadsSeen.seen = []
    with LocalEngine(1, torch_threads=None) as engine:
        runs = profile_runs.profile_sklearn(_ThreadsSeen(), {"tag": 0}, data, True, engine,
                                            (ProfileRun(50, 2), ProfileRun(50, 1)))
    assert _ThreadsSeen.seen == [min(2, outside), 1]
    assert [(r["n"], r["threads"]) for r in runs] == [(50, 2), (50, 1)]
