"""A trained model larger than the room its owner has left
(``quota.ModelOverQuotaError``) fails its arm for good on that dataset
version, as a model that fails on its own does: the selector is not asked
to pick it again, the task becomes idle, and a torch job stops after the
first unit of each config instead of training in full. A model refused
because she is at her quota already stays a storage failure, retried once
she has room."""

from __future__ import annotations

from ease_jupyter import datasets
from ease_jupyter.errors import QuotaExceededError
from ease_jupyter.service.failures import error_code, failure_code
from ease_jupyter.service.mop import PROGRESS_TAG
from ease_jupyter.service.quota import ModelOverQuotaError, Quota
from ease_jupyter.service.runner import grid_engine, run_sklearn_job
from ease_jupyter.store import JobStatus, open_store

from .conftest import start

MIB = 1024 * 1024


def _big(input_shape, output_shape):
    """Her net: a plain linear layer beside a 2 MiB lookup table (a buffer, so it is in the model)."""
    import torch
    from torch import nn

    class Big(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(input_shape[0], output_shape[0])
            self.register_buffer("table", torch.zeros(MIB // 2))  # float32: 2 MiB

        def forward(self, x):
            return self.linear(x)

    return Big()


def test_a_model_larger_than_the_room_left_fails_its_arm_once_and_stops_early(tmp_path, iris):
    X, y = iris
    running = start(tmp_path, torch=True, torch_epochs=2, allow_user_models=True, quota_bytes=MIB)
    running.user("ada")
    try:
        task = running.client("ada").task("iris", input=[4], output=[3])
        task.add_model(_big, grid={"lr": [0.1, 0.01]}, name="big", limit=600)
        task.feed(X, y)
        assert task.wait(timeout=240), "the task never became idle: the refused arm is picked again"
        big = [j for j in task.jobs() if j["model"] == "big"]
        assert len(big) == 1, big  # picked once: not held and picked again
        (job,) = big
        assert job["status"] == "failed" and job["error_code"] == "quota_exceeded", job
        assert "over your quota of 1.0 MiB" in job["error"] and "not trained again" in job["error"], job["error"]
        store = running.service.store
        stored = store.get_job(job["id"])
        assert failure_code(store, stored) is None  # a model's own failure, not the storage's
        # Stopped once each config had trained one unit: no epoch finished, so no metric.
        assert not store.list_metrics(job["id"])
    finally:
        running.thread.stop()


def _sklearn_job(quota_room: int, iris):
    store, blobs = open_store("memory://")
    user = store.create_user("alice", "h" * 64)
    task = store.create_task(user.id, "t", "input: [4] output: [3]")
    version = datasets.feed(store, blobs, task, *iris)
    job = store.create_job(task.id, version.id, "logreg", {"grid": {"C": [0.1]}})
    quota = Quota(Quota(None).usage(store, blobs, user.id).total + quota_room)
    engine = grid_engine("local")
    try:
        return store, run_sklearn_job(store, blobs, job.id, engine, quota)
    finally:
        engine.close()


def test_a_model_that_does_not_fit_the_room_left_is_the_models_failure(iris):
    store, done = _sklearn_job(10, iris)  # 10 bytes left: no model fits
    assert done.status is JobStatus.FAILED and done.artifact_blob is None
    assert failure_code(store, done) is None and error_code(store, done) == "quota_exceeded"
    assert "quota of" in done.error and "not trained again on this dataset version" in done.error


def test_at_her_quota_already_any_model_is_a_storage_failure_retried_later(iris):
    store, done = _sklearn_job(0, iris)  # no room at all: refused before training, whatever the model
    assert done.status is JobStatus.FAILED
    assert failure_code(store, done) == "quota_exceeded" and error_code(store, done) == "quota_exceeded"
    assert "not trained again" not in done.error


def test_the_refusal_is_a_quota_error_naming_the_limit():
    assert issubclass(ModelOverQuotaError, QuotaExceededError) and ModelOverQuotaError.code == "quota_exceeded"
