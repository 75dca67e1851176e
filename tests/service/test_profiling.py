"""The profiler's record in the store: finished jobs become its records, and
each job keeps its prediction and its error as tags."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.selection.profiler import Prediction
from ease_jupyter.service.candidates import arm_specs
from ease_jupyter.service.profiling import (
    FLOPS_SOURCE,
    TAG_PREDICTED,
    TAG_RESOURCES,
    TAG_SOURCE,
    ProfileBook,
    Resources,
)
from ease_jupyter.store import JobStatus, JobUpdate, open_store

SIZES = (40, 80, 160, 320)
SCALE = {0: 1e-3, 1: 4e-3}  # seconds per example·point of the first two arms


def law(arm_index: int, n: int, points: int, threads: int) -> float:
    return SCALE[arm_index] * n * points / threads**0.5


@pytest.fixture
def log():
    """Two users' flat tasks of four sizes, two arms each, finished at 1 and 2 threads."""
    store, blobs = open_store("memory://")
    rng = np.random.default_rng(0)
    program = format_program(program_from_shapes([16], [4]))
    tasks = []
    for i, n in enumerate(SIZES):
        user = store.user_by_name("ada") if i else store.create_user("ada", "a" * 64)
        if i % 2:
            user = store.create_user(f"bob{i}", f"{i}" * 64)
        task = store.create_task(user.id, f"t{i}", program)
        version = datasets.feed(store, blobs, task, rng.standard_normal((n, 16)), rng.integers(0, 4, n))
        tasks.append((task, version))
    arms = list(arm_specs(tasks[0][0], torch_epochs=None).items())[:2]
    book = ProfileBook(store)
    for task, version in tasks:
        for index, (_, spec) in enumerate(arms):
            for threads in (1, 2):
                job = store.create_job(task.id, version.id, spec.model, spec.config())
                book.record_prediction(job, None, fallback_seconds=1.0, resources=Resources(threads=threads))
                store.update_job(job.id, JobStatus.RUNNING)
                seconds = law(index, version.n_examples, len(spec.points()), threads)
                store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=seconds))
    yield store, book, tasks, arms
    store.close()


def test_finished_jobs_of_all_users_train_the_profiler(log):
    _, book, tasks, arms = log
    records = book.records()
    assert len(records) == len(SIZES) * 2 * 2
    assert {f.threads for f, _ in records} == {1, 2}  # the resources recorded with each job
    assert {f.n for f, _ in records} == set(SIZES) and {f.d for f, _ in records} == {16}
    assert {f.k for f, _ in records} == {4}
    book.refit()
    task, _ = tasks[2]
    for index, (_, spec) in enumerate(arms):
        pred = book.predict_job(task, spec, 240, Resources(threads=2))
        assert pred.source == "family"
        assert abs(math.log(pred.seconds / law(index, 240, len(spec.points()), 2))) < 0.15


def test_a_prediction_and_its_error_are_stored_with_the_job(log):
    store, book, tasks, arms = log
    book.refit()
    task, version = tasks[1]
    spec = arms[0][1]
    pred = book.predict_job(task, spec, version.n_examples)
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    book.record_prediction(job, pred)
    tags = store.tags("job", job.id)
    assert tags[TAG_SOURCE] == "family" and float(tags[TAG_PREDICTED]) == pytest.approx(pred.seconds)
    assert json.loads(tags[TAG_RESOURCES])["threads"] == 1
    assert book.record_outcome(job) is None  # not finished: nothing to compare
    store.update_job(job.id, JobStatus.RUNNING)
    done = store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=2 * pred.seconds))
    assert book.record_outcome(done) == pytest.approx(math.log(2))
    assert book.prediction_of(job.id)["log_error"] == pytest.approx(math.log(2))


def test_without_history_the_prediction_falls_back_to_the_proxy_and_says_so():
    store, blobs = open_store("memory://")
    user = store.create_user("ada", "a" * 64)
    task = store.create_task(user.id, "t", format_program(program_from_shapes([16], [4])))
    version = datasets.feed(store, blobs, task, np.zeros((20, 16)), np.arange(20) % 4)
    spec = next(iter(arm_specs(task, torch_epochs=None).values()))
    book = ProfileBook(store)
    book.refit()
    pred = book.predict_job(task, spec, version.n_examples)
    assert pred.source is None and pred == Prediction(pred.seconds, pred.log_sd, None)
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    book.record_prediction(job, pred, fallback_seconds=3.5)
    assert book.prediction_of(job.id) == {"predicted_seconds": 3.5, "log_sd": None, "source": FLOPS_SOURCE,
                                          "log_error": None, "note": None}
    store.close()


def test_bad_resources_are_refused():
    with pytest.raises(Exception, match="threads"):
        Resources(threads=0)
    with pytest.raises(Exception, match="device"):
        Resources(device="tpu")


def test_torch_features_carry_epochs_and_partitions():
    store, _ = open_store("memory://")
    user = store.create_user("ada", "a" * 64)
    image = store.create_task(user.id, "digits", format_program(program_from_shapes([8, 8, 3], [10])))
    specs = list(arm_specs(image, torch_epochs=5).values())
    torch_spec = next(s for s in specs if s.engine.value == "torch")
    book = ProfileBook(store, default=Resources(workers=3))
    f = book.features(image, torch_spec, 100, Resources(partitions=4, device="gpu"))
    assert (f.d, f.k, f.epochs, f.partitions, f.device) == (192, 10, torch_spec.epochs, 4, "gpu")
    assert f.points == len(torch_spec.points()) and f.engine == "torch"
    assert book.features(image, torch_spec, 100).workers == 3  # the book's defaults
    store.close()
