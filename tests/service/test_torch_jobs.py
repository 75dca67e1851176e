"""Torch candidates in the control loop: an image task gets MOP jobs (one per
pick, the candidate's learning-rate grid as one workload) with per-epoch
metrics stored and published, and infer uses the best checkpoint."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from ease_jupyter.service.executors import ProcessExecutor
from ease_jupyter.zoo import Engine

from .conftest import start


@pytest.fixture(scope="module")
def digits_images():
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.images[:600] / 16.0).astype("float32")[..., None]  # [n, 8, 8, 1]
    return X, d.target[:600].astype("int64")


@pytest.mark.parametrize("executor,engine", [
    ("thread", "local"),
    pytest.param("process", "local", marks=pytest.mark.slow),  # torch in a spawned worker, events relayed
    pytest.param("thread", "dask", marks=pytest.mark.slow),  # MOP units on a Dask LocalCluster
])
def test_image_task_trains_torch_jobs_over_http(tmp_path, digits_images, executor, engine, monkeypatch):
    X, y = digits_images
    from ease_jupyter.execution.engine.base import Engine as UnitEngine

    copies: list[int] = []  # the service places a small task's partitions on every worker ("auto")
    place = UnitEngine.place_partitions
    monkeypatch.setattr(UnitEngine, "place_partitions",
                        lambda self, parts, **kw: copies.append(kw["replication"]) or place(self, parts, **kw))
    running = start(tmp_path, torch_epochs=2, workers=2, executor=executor, engine=engine)
    try:
        running.user("alice")
        client = running.client("alice")
        with client.events() as stream:
            task = client.task("digits", input=[8, 8, 1], output=[10])
            task.feed(X, y)
            info = running.call("GET", "/tasks/digits", "alice").body
            assert info["arms"] == 4  # lenet, resnet_small, vgg_small, mobilenet_small
            deadline = time.monotonic() + 240
            done = []
            while time.monotonic() < deadline:
                done = [j for j in task.jobs() if j["status"] == "succeeded"]
                if len(done) >= 2:
                    break
                time.sleep(0.5)
            assert len(done) >= 2, task.jobs()
            events = []
            while len(events) < 100_000 and (event := stream.get(0.05)) is not None:
                events.append(event)
        job = done[0]
        assert job["config"]["epochs"] == 2 and len(job["config"]["lrs"]) == 3
        history = {h["id"]: h for h in task.history()}
        epochs = history[job["id"]]["metrics"]
        assert [m["epoch"] for m in epochs] == [1, 2]
        for row in epochs:
            assert 0.0 <= row["val_accuracy"] <= 1.0 and np.isfinite(row["train_loss"])
            assert sum(k.startswith("val_accuracy[lr=") for k in row) == 3
        assert job["accuracy"] == pytest.approx(max(m["val_accuracy"] for m in epochs))
        metric_events = [e for e in events if e.get("type") == "metrics"]
        assert metric_events and {"epoch", "lr", "val_accuracy", "train_loss", "job_id"} <= set(metric_events[0])
        best = task.best()
        assert best["accuracy"] > 0.5
        if executor == "process":  # infer and suspicion run in the torch worker, never in the service process
            from ease_jupyter.service import models

            def not_here(*args, **kwargs):
                raise AssertionError("a torch model ran in the service process")
            monkeypatch.setattr(models, "torch_outputs", not_here)
        predictions = np.asarray(task.infer(X[:50]))
        assert predictions.shape == (50,) and predictions.dtype.kind in "iu"
        assert (predictions == y[:50]).mean() > 0.5
        # The refine panel's scores come from the torch net too (softmax of its logits).
        # Jobs keep finishing meanwhile, so the best model may change between the two reads.
        scores = task.suspicion()
        best_after = task.best()
        assert scores["loss_kind"] == "cross_entropy"
        assert scores["model"]["job_id"] in {best["job_id"], best_after["job_id"]}
        assert len(scores["loss"]) == 600 and np.isfinite(scores["loss"]).all()
        wrong = predictions != y[:50]
        assert np.all(scores["loss"][:50][wrong] > np.log(2) - 1e-6)  # p(label) <= 1/2 where argmax is wrong
        executor_used = running.service.loop.executors[Engine.TORCH]
        if executor == "process":
            assert isinstance(executor_used, ProcessExecutor)
            pids = executor_used.worker_pids()
            assert pids and os.getpid() not in pids
        else:
            assert type(executor_used.engines()[0]).__name__ == ("DaskEngine" if engine == "dask" else "LocalEngine")
            assert copies and set(copies) == {2}
    finally:
        running.thread.stop()


@pytest.fixture(scope="module")
def recorded_job(digits_images):
    """A torch job run in-process with 3 partitions, and every progress record
    it wrote (``easeml.mop.progress`` after each train unit and each epoch)."""
    from ease_jupyter import datasets
    from ease_jupyter.execution.engine import LocalEngine
    from ease_jupyter.schema import program_from_shapes
    from ease_jupyter.schema import format_program
    from ease_jupyter.service.mop import PROGRESS_TAG, run_torch_job
    from ease_jupyter.store import InMemoryStore, MemoryBlobStore

    X, y = digits_images
    store, blobs = InMemoryStore(), MemoryBlobStore()
    user = store.create_user("ada", "h" * 64)
    task = store.create_task(user.id, "digits", format_program(program_from_shapes([8, 8, 1], [10])))
    datasets.feed(store, blobs, task, X[:240], y[:240])
    version = store.latest_dataset_version(task.id)
    records: list[dict] = []
    set_tag = store.set_tag

    def spy(entity, entity_id, key, value):
        if key == PROGRESS_TAG:
            records.append(json.loads(value))
        set_tag(entity, entity_id, key, value)

    store.set_tag = spy
    engine = LocalEngine(1)
    job = store.create_job(task.id, version.id, "lenet", {"lrs": [0.1, 0.03], "epochs": 2})
    assert run_torch_job(store, blobs, engine, job.id, partitions=3).status.value == "succeeded"
    store.set_tag = set_tag
    yield store, blobs, engine, job, records
    engine.close()


@pytest.mark.parametrize("units_done", [2, 6, None])  # inside epoch 2; its train units all done; an old epoch record
def test_a_torch_job_resumes_from_its_last_recorded_unit(recorded_job, units_done):
    from ease_jupyter.service.mop import PROGRESS_TAG, RESUMED_TAG, RESUMED_UNITS_TAG, run_torch_job

    store, blobs, engine, first, records = recorded_job
    per_epoch = 2 * 3  # configs x partitions
    assert [r["trained_units"] for r in records] == [1, 2, 3, 4, 5, 6, 6, 7, 8, 9, 10, 11, 12, 12]
    if units_done is None:  # written before unit-level records existed: resume at the epoch boundary
        record = {k: v for k, v in records[per_epoch].items() if k not in ("units", "partitions", "trained_units")}
    else:
        record = next(r for r in records if r["epoch"] == 1 and sum(len(u["visited"]) for u in r["units"].values())
                      == units_done)
    # the same pick, interrupted where the record was written, then re-queued
    job = store.create_job(first.task_id, first.dataset_version_id, "lenet", dict(first.config))
    store.set_tag("job", job.id, PROGRESS_TAG, json.dumps(record))
    done = run_torch_job(store, blobs, engine, job.id, partitions=2)  # the job keeps its recorded 3 partitions
    assert done.status.value == "succeeded", done.error
    tags = store.tags("job", job.id)
    assert tags[RESUMED_TAG] == "1"
    resumed = json.loads(tags[RESUMED_UNITS_TAG])
    assert resumed["epoch"] == 1 and resumed["units"] == (units_done or 0)
    final = json.loads(tags[PROGRESS_TAG])
    assert final["epoch"] == 2 and final["units"] == {}
    assert final["partitions"] == (2 if units_done is None else 3)  # an old record has none: the configured count
    # only the units not recorded before were trained: each unit once in all
    assert final["trained_units"] - record.get("trained_units", 0) == 2 * final["partitions"] - (units_done or 0)
    if units_done is not None:
        assert final["trained_units"] == 2 * per_epoch
    metrics = {(m.epoch, m.name) for m in store.list_metrics(job.id)}
    assert {(2, "val_accuracy"), (2, "train_loss"), (2, "train_loss[lr=0.1]")} <= metrics
    assert not any(epoch == 1 for epoch, _ in metrics)  # epoch 1 was done before: not trained, not re-stored
    first_metrics = {(m.epoch, m.name): m.value for m in store.list_metrics(first.id)}
    if units_done == 6:  # every train unit had finished: validation alone gives the same numbers
        for m in store.list_metrics(job.id):
            assert m.value == pytest.approx(first_metrics[(m.epoch, m.name)], rel=1e-9), m.name
