"""A blob that rows reference is missing: the service says which object
(``store_corrupt``, never a path), refuses to build on it, and a job that
fails for it is not scored as a bad model."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.service import models
from ease_jupyter.service.failures import fail_job, failure_code
from ease_jupyter.errors import StoreCorruptError
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.executors import ThreadExecutor
from ease_jupyter.service.runner import SklearnJobs
from ease_jupyter.store import JobStatus, open_store
from ease_jupyter.zoo import Engine

from .conftest import serving, start, until


def _no_internals(message: str, data_dir) -> None:
    assert str(data_dir) not in message and "/blobs" not in message
    assert "Error" not in message  # no exception class names


def _blob_files(data_dir) -> set[str]:
    # the digest (fan-out dir + rest); not a blob being written meanwhile (a temporary file, then renamed)
    return {p.parent.name + p.name for p in (data_dir / "blobs").glob("*/*") if not p.name.startswith(".tmp-")}


def _array_blob_files(data_dir) -> set[str]:
    """The blobs that hold arrays (examples, labels, members: .npy bytes), not
    the selector states that the control loop saves whenever it likes."""
    return {d for d in _blob_files(data_dir) if (data_dir / "blobs" / d[:2] / d[2:]).read_bytes()[:6] == b"\x93NUMPY"}


@pytest.fixture
def trained(tmp_path, iris):
    """A service whose alice has a fully explored iris task."""
    with serving(tmp_path, "alice", torch=False) as running:
        task = running.client("alice").task("iris", input=[4], output=[3])
        task.feed(*iris)
        assert task.wait(timeout=120)
        yield running


def test_infer_and_best_answer_store_corrupt_naming_the_job(trained, iris):
    best = trained.call("GET", "/tasks/iris/best", "alice")
    assert best.status == 200
    job = trained.service.store.get_job(best.body["job_id"])
    trained.service.blobs.path(job.artifact_blob).unlink()

    infer = trained.call("POST", "/tasks/iris/infer", "alice", body={"X": iris[0][:3].tolist()})
    again = trained.call("GET", "/tasks/iris/best", "alice")
    for reply in (infer, again):  # best and infer agree: both report the lost model
        assert reply.status == 500, reply.body
        error = reply.body["error"]
        assert error["code"] == "store_corrupt"
        assert "task 'iris'" in error["message"] and f"job {job.id}" in error["message"]
        _no_internals(error["message"], trained.service.data_dir)
    board = trained.call("GET", "/leaderboard", "alice")
    assert board.status == 200  # the lost model is reported on its own row, not as a failed leaderboard
    (row,) = board.body
    assert row["best"] is None and row["error"]["code"] == "store_corrupt" and f"job {job.id}" in row["error"]["message"]


def test_a_feed_over_a_missing_chunk_is_refused_before_anything_is_stored(tmp_path, iris):
    running = start(tmp_path, torch=False)
    try:
        running.user("alice")
        service = running.service
        assert running.call("POST", "/tasks", "alice", body={"name": "t", "input": [4], "output": [3]}).status == 201
        assert running.call("POST", "/tasks/t/cancel", "alice").status == 200  # no training meanwhile
        task = service.store.task_by_name(service.store.user_by_name("alice").id, "t")
        datasets.feed(service.store, service.blobs, task, *iris)
        chunk = service.store.list_chunks(task.id)[0]
        service.blobs.path(chunk.x_blob).unlink()
        blobs_before = _array_blob_files(tmp_path)
        assert running.call("POST", "/tasks/t/resume", "alice").status == 200

        reply = running.call("POST", "/tasks/t/feed", "alice", body={"X": iris[0][:5].tolist(), "y": [0, 1, 2, 0, 1]})

        assert reply.status == 500 and reply.body["error"]["code"] == "store_corrupt"
        message = reply.body["error"]["message"]
        assert "task 't', dataset version 1" in message and "examples 0 to 149" in message
        _no_internals(message, tmp_path)
        assert len(service.store.list_dataset_versions(task.id)) == 1
        assert _array_blob_files(tmp_path) == blobs_before
    finally:
        running.thread.stop()


def test_a_missing_members_blob_is_store_corrupt_for_feed_and_refine(tmp_path, iris):
    store, blobs = open_store(None, tmp_path)
    try:
        user = store.create_user("alice", "h" * 64)
        task = store.create_task(user.id, "t", "input: [4] output: [3]")
        version = datasets.feed(store, blobs, task, *iris)
        blobs.path(version.members_blob).unlink()
        with pytest.raises(StoreCorruptError, match="task 't', dataset version 1: its list of active examples"):
            datasets.feed(store, blobs, task, iris[0][:2], iris[1][:2])
        with pytest.raises(StoreCorruptError, match="dataset version 1"):
            datasets.refine(store, blobs, task, drop=[0])
        with pytest.raises(StoreCorruptError):
            datasets.load(store, blobs, version)
        assert len(store.list_dataset_versions(task.id)) == 1
    finally:
        store.close()


def test_a_job_failing_for_a_missing_blob_is_not_scored_as_a_bad_model(tmp_path, iris):
    """The selector gets no quality-0 observation for it: the arm stays
    untried, and the task gets no new pick for a while (no failure storm)."""
    store, blobs = open_store(None, tmp_path)
    user = store.create_user("alice", "h" * 64)
    task = store.create_task(user.id, "t", "input: [4] output: [3]")
    datasets.feed(store, blobs, task, *iris)
    blobs.path(store.list_chunks(task.id)[0].y_blob).unlink()
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: ThreadExecutor(SklearnJobs(), store, blobs, 1)}, tick_seconds=0.02)
    loop.start()
    try:
        assert until(lambda: any(j.status is JobStatus.FAILED for j in store.list_jobs(task.id)), 60)
        assert until(lambda: loop.n_running() == 0, 60)
        loop.step()
        jobs = store.list_jobs(task.id)
        failed = [j for j in jobs if j.status is JobStatus.FAILED]
        assert len(jobs) == len(failed) == 1  # held back: no second job fails the same way
        assert failure_code(store, failed[0]) == "store_corrupt"
        assert "task 't', dataset version 1" in failed[0].error
        tenant = f"{task.id}/{store.latest_dataset_version(task.id).id}"
        with loop._lock:
            stats = loop.selector.stats(tenant)
        assert stats["n_obs"] == 0 and stats["pending"] == [] and stats["eligible"]
        assert not loop.is_idle(task.id)  # untrained arms: not idle
    finally:
        loop.stop()
        store.close()


def test_a_model_failure_is_still_scored(tmp_path):
    """The other side: a failure of the model itself carries no storage code."""
    store, blobs = open_store("memory://")
    user = store.create_user("alice", "h" * 64)
    task = store.create_task(user.id, "t", "input: [2] output: [2]")
    version = datasets.feed(store, blobs, task, np.zeros((4, 2), "float32"), np.array([0, 1, 0, 1]))
    job = store.update_job(store.create_job(task.id, version.id, "m", {}).id, JobStatus.RUNNING)
    failed = fail_job(store, job.id, ValueError("the fit diverged"))
    assert failed.status is JobStatus.FAILED and failure_code(store, failed) is None


def test_a_lost_chunk_leaves_the_intact_best_model_readable(trained, iris, tmp_path_factory):
    """Only the validation size needs the examples: without them it is null,
    and best, the leaderboard row, infer and export all still answer."""
    assert trained.call("POST", "/tasks/iris/cancel", "alice").status == 200  # no retrain will come
    store, blobs = trained.service.store, trained.service.blobs
    task = store.task_by_name(store.user_by_name("alice").id, "iris")
    (chunk,) = store.list_chunks(task.id)
    blobs.path(chunk.y_blob).unlink()  # before any read of the size: none is known yet

    best = trained.call("GET", "/tasks/iris/best", "alice")
    assert best.status == 200, best.body
    assert best.body["validation_size"] is None and best.body["accuracy"] > 0
    (row,) = trained.call("GET", "/leaderboard", "alice").body
    assert "error" not in row and row["best"]["job_id"] == best.body["job_id"]
    assert row["best"]["validation_size"] is None
    infer = trained.call("POST", "/tasks/iris/infer", "alice", body={"X": iris[0][:3].tolist()})
    assert infer.status == 200, infer.body
    card = trained.client("alice").task("iris").export(tmp_path_factory.mktemp("out") / "m.joblib")
    assert card["provenance"]["job_id"] == best.body["job_id"]
    assert card["metrics"]["validation_size"] is None
    (seen,) = [s for s in card["input_preprocessing"] if s["step"] == "values seen in training"]
    assert seen["min"] is None and seen["max"] is None and "missing or damaged" in seen["note"]


def test_a_damaged_best_model_is_store_corrupt_for_best_and_the_leaderboard_too(trained, iris):
    """One byte flipped, the size unchanged: best and the leaderboard read the
    content, so they agree with infer."""
    store, blobs = trained.service.store, trained.service.blobs
    task = store.task_by_name(store.user_by_name("alice").id, "iris")
    job = models.best_job(store, task)
    path = blobs.path(job.artifact_blob)
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))

    infer = trained.call("POST", "/tasks/iris/infer", "alice", body={"X": iris[0][:3].tolist()})
    best = trained.call("GET", "/tasks/iris/best", "alice")
    for reply in (infer, best):
        assert reply.status == 500 and reply.body["error"]["code"] == "store_corrupt", reply.body
        assert f"job {job.id}" in reply.body["error"]["message"]
    (row,) = trained.call("GET", "/leaderboard", "alice").body
    assert row["best"] is None and row["error"]["code"] == "store_corrupt"


def test_a_sound_model_is_read_once_and_a_later_loss_still_caught(trained, monkeypatch):
    store, blobs = trained.service.store, trained.service.blobs
    task = store.task_by_name(store.user_by_name("alice").id, "iris")
    job = models.best_job(store, task)
    reads = []
    get_bytes = blobs.get_bytes
    monkeypatch.setattr(blobs, "get_bytes", lambda digest: reads.append(digest) or get_bytes(digest))
    for _ in range(2):
        assert trained.call("GET", "/tasks/iris/best", "alice").status == 200
        assert trained.call("GET", "/leaderboard", "alice").body[0]["best"]["job_id"] == job.id
    assert reads.count(job.artifact_blob) == 1  # the good verdict is kept
    blobs.path(job.artifact_blob).unlink()
    best = trained.call("GET", "/tasks/iris/best", "alice")
    assert best.status == 500 and best.body["error"]["code"] == "store_corrupt"


def test_a_store_that_cannot_be_read_is_an_outage_not_a_null_validation_size(trained, monkeypatch):
    """Only a lost or damaged blob makes the size null: an unavailable store
    answers 503, as every read does, instead of a best model without it."""
    from ease_jupyter.errors import StoreUnavailableError
    from ease_jupyter.service import validation

    def unavailable(*args, **kwargs):
        raise StoreUnavailableError("the database cannot be read now")

    monkeypatch.setattr(validation, "load", unavailable)
    monkeypatch.setattr(validation, "_sizes", type(validation._sizes)())  # nothing known yet
    best = trained.call("GET", "/tasks/iris/best", "alice")
    assert best.status == 503 and best.body["error"]["code"] == "store_unavailable", best.body


def test_a_model_above_the_check_limit_is_not_read_whole_on_a_read(trained, monkeypatch):
    store, blobs = trained.service.store, trained.service.blobs
    task = store.task_by_name(store.user_by_name("alice").id, "iris")
    job = models.best_job(store, task)
    monkeypatch.setattr(models, "CHECK_MAX_BYTES", blobs.size(job.artifact_blob) - 1)
    monkeypatch.setattr(models, "_sound", type(models._sound)())
    reads = []
    get_bytes = blobs.get_bytes
    monkeypatch.setattr(blobs, "get_bytes", lambda digest: reads.append(digest) or get_bytes(digest))
    assert trained.call("GET", "/tasks/iris/best", "alice").status == 200
    assert trained.call("GET", "/leaderboard", "alice").body[0]["best"]["job_id"] == job.id
    assert job.artifact_blob not in reads
    blobs.path(job.artifact_blob).unlink()  # its presence is still checked
    best = trained.call("GET", "/tasks/iris/best", "alice")
    assert best.status == 500 and best.body["error"]["code"] == "store_corrupt"
