"""Torch candidates in the control loop: an image task gets MOP jobs (one per
pick, the candidate's learning-rate grid as one workload) with per-epoch
metrics stored and published, and infer uses the best checkpoint."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from ease_jupyter.service.mop import TorchProcessExecutor
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
def test_image_task_trains_torch_jobs_over_http(tmp_path, digits_images, executor, engine):
    X, y = digits_images
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
        predictions = np.asarray(task.infer(X[:50]))
        assert predictions.shape == (50,) and predictions.dtype.kind in "iu"
        assert (predictions == y[:50]).mean() > 0.5
        # The refine panel's scores come from the torch net too (softmax of its logits).
        scores = task.suspicion()
        assert scores["loss_kind"] == "cross_entropy" and scores["model"]["job_id"] == best["job_id"]
        assert len(scores["loss"]) == 600 and np.isfinite(scores["loss"]).all()
        wrong = predictions != y[:50]
        assert np.all(scores["loss"][:50][wrong] > np.log(2) - 1e-6)  # p(label) <= 1/2 where argmax is wrong
        executor_used = running.service.loop.executors[Engine.TORCH]
        if executor == "process":
            assert isinstance(executor_used, TorchProcessExecutor)
            pids = executor_used.worker_pids()
            assert pids and os.getpid() not in pids
        else:
            assert type(executor_used._engine).__name__ == ("DaskEngine" if engine == "dask" else "LocalEngine")
    finally:
        running.thread.stop()
