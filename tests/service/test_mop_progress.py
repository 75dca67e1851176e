"""A torch job's stored MOP progress: one typed record, its JSON and the runner's resume state."""

from __future__ import annotations

import json
import math

from ease_jupyter.execution.mop.resume import TrialProgress
from ease_jupyter.service.mop_progress import JobProgress
from ease_jupyter.store import open_store


def test_progress_round_trips_through_the_stored_json_and_resumes_from_the_newest_checkpoints():
    _, blobs = open_store("memory://")
    ckpt = {name: blobs.put_bytes(name.encode()) for name in ("t0-e1", "t1-e1", "t0-u1", "t0-u2")}
    progress = JobProgress(partitions=2)
    for trial, score in (("t0", 0.5), ("t1", float("nan"))):
        progress.record_epoch(trial, 1, score, ckpt[f"{trial}-e1"])
    assert progress.complete(["t0", "t1"], 1) and progress.epoch == 1
    progress.record_unit("t0", TrialProgress(visited=(1,), loss_sum=2.0, examples=4.0, seconds=0.5), ckpt["t0-u1"])
    progress.record_unit("t0", TrialProgress(visited=(1, 0), loss_sum=3.0, examples=8.0, seconds=1.0), ckpt["t0-u2"])
    assert not progress.complete(["t0", "t1"], 2)  # no score of epoch 2 yet

    again = JobProgress.from_json(progress.to_json())
    assert json.loads(again.to_json()) == json.loads(progress.to_json())
    assert again.trained_units == 2 and again.best == {"t0": (0.5, ckpt["t0-e1"], 1)}  # a NaN score is never best
    state = again.resume_state(blobs)
    assert (state.epoch, state.partitions) == (1, 2)
    assert state.trials["t0"].visited == (1, 0) and state.trials["t0"].scores == (0.5,)
    assert state.trials["t1"].visited == () and math.isnan(state.trials["t1"].scores[0])
    assert state.checkpoints == {"t0": b"t0-u2", "t1": b"t1-e1"}  # a unit's checkpoint wins over its epoch's


def test_a_record_written_by_the_earlier_format_still_loads():
    stored = {"epoch": 1, "ckpts": {"t0": "d0"}, "scores": {"t0": [0.25]}, "best": {"t0": [0.25, "d0", 1]},
              "seconds": 3.5, "partitions": 4, "units": {"t0": {"visited": [2], "loss_sum": 1.0, "examples": 2.0,
                                                                 "seconds": 0.1, "ckpt": "d1"}},
              "trained_units": 5}
    progress = JobProgress.from_json(json.dumps(stored))
    assert json.loads(progress.to_json()) == stored


# -- the record as a torch job keeps it: what fails the job, and what does not -------------------------


def _digits_job():
    """A queued lenet job (one rate, one epoch) on 200 8x8 digits, in memory."""
    from sklearn.datasets import load_digits

    from ease_jupyter import datasets
    from ease_jupyter.schema import format_program, program_from_shapes
    from ease_jupyter.store import InMemoryStore, MemoryBlobStore

    d = load_digits()
    X, y = (d.images[:200] / 16.0).astype("float32")[..., None], d.target[:200].astype("int64")
    store, blobs = InMemoryStore(), MemoryBlobStore()
    user = store.create_user("ada", "h" * 64)
    task = store.create_task(user.id, "digits", format_program(program_from_shapes([8, 8, 1], [10])))
    datasets.feed(store, blobs, task, X, y)
    version = store.latest_dataset_version(task.id)
    return store, blobs, store.create_job(task.id, version.id, "lenet", {"lrs": [0.1], "epochs": 1})


def test_a_progress_record_that_cannot_be_stored_fails_the_job_as_a_storage_failure():
    """The job's result is read from its record, and a restart resumes from
    it: a job that trained on without it would be wrong, so it fails, and
    for want of storage (the selector learns nothing of the model from it)."""
    from ease_jupyter.errors import StoreUnavailableError
    from ease_jupyter.execution.engine import LocalEngine
    from ease_jupyter.service.failures import failure_code
    from ease_jupyter.service.mop import PROGRESS_TAG, run_torch_job
    from ease_jupyter.store import JobStatus

    store, blobs, job = _digits_job()
    set_tag, writes = store.set_tag, []

    def unwritable(entity, entity_id, key, value):
        if key == PROGRESS_TAG:
            writes.append(value)
            raise StoreUnavailableError("the database is read-only")
        set_tag(entity, entity_id, key, value)

    store.set_tag = unwritable
    with LocalEngine(1) as engine:
        done = run_torch_job(store, blobs, engine, job.id, partitions=2)
    store.set_tag = set_tag
    assert done.status is JobStatus.FAILED and "the database is read-only" in done.error, done.error
    assert failure_code(store, done) == "store_unavailable"
    assert len(writes) == 1  # it stopped at the first record it could not store: no unit trained on unrecorded


def test_a_metrics_event_that_cannot_go_out_does_not_fail_the_job():
    """The event is for whoever watches; the metrics and the record are stored all the same."""
    from ease_jupyter.execution.engine import LocalEngine
    from ease_jupyter.service.mop import PROGRESS_TAG, run_torch_job
    from ease_jupyter.store import JobStatus

    store, blobs, job = _digits_job()
    sent = []

    def broken(owner, event):
        sent.append(event)
        raise ConnectionError("nobody listens")

    with LocalEngine(1) as engine:
        done = run_torch_job(store, blobs, engine, job.id, partitions=2, publish=broken)
    assert done.status is JobStatus.SUCCEEDED, done.error
    assert len(sent) == 1 and {m.name for m in store.list_metrics(job.id)} >= {"val_accuracy", "train_loss"}
    assert json.loads(store.tags("job", job.id)[PROGRESS_TAG])["epoch"] == 1


def test_a_resumed_job_that_fails_of_its_own_pays_for_its_earlier_attempts_too():
    """Its earlier attempts' units are its work (a success counts them in its
    cost): a failure of the model's own after a restart pays for them too,
    not only for the attempt that failed."""
    from ease_jupyter.execution.engine import LocalEngine
    from ease_jupyter.service.mop import BEST_TRIAL_TAG, PROGRESS_TAG, run_torch_job
    from ease_jupyter.store import JobStatus

    store, blobs, job = _digits_job()
    earlier = 500.0  # seconds an earlier attempt trained and recorded before the service stopped
    store.set_tag("job", job.id, PROGRESS_TAG, JobProgress(partitions=2, seconds=earlier).to_json())
    set_tag = store.set_tag

    def breaks_at_the_end(entity, entity_id, key, value):
        if key == BEST_TRIAL_TAG:
            raise RuntimeError("the model's own failure, after training")
        set_tag(entity, entity_id, key, value)

    store.set_tag = breaks_at_the_end
    with LocalEngine(1) as engine:
        done = run_torch_job(store, blobs, engine, job.id, partitions=2)
    store.set_tag = set_tag
    assert done.status is JobStatus.FAILED and "the model's own failure" in done.error, done.error
    ran = (done.finished_at - done.started_at).total_seconds()
    assert earlier < done.cost_seconds <= earlier + ran + 0.01
