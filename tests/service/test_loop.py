"""The control loop: feed -> train -> best -> infer, the per-user cap, new
versions, cancel, and restart recovery."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ease_jupyter.errors import NotFoundError
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.service.loop import STATE_TAG
from ease_jupyter.service.runner import evaluate_grid
from ease_jupyter.service.candidates import task_candidates
from ease_jupyter.zoo import Engine
from ease_jupyter.store import JobStatus, open_store

from .conftest import IRIS_MODELS, start


@pytest.fixture(params=["thread", "process"])
def any_executor(request, tmp_path):
    r = start(tmp_path, executor=request.param, workers=2)
    r.user("alice")
    try:
        yield r
    finally:
        r.thread.stop()


def test_feed_train_best_infer_end_to_end(any_executor, iris):
    svc = any_executor
    X, y = iris
    task = svc.client("alice").task("iris", input=[4], output=[3])
    with pytest.raises(NotFoundError):
        task.best()
    version = task.feed(X, y)
    assert version["number"] == 1 and version["n_examples"] == 150
    assert task.wait(timeout=90)
    best = task.best()
    assert best["accuracy"] > 0.85 and best["dataset_version"] == 1
    assert {"model", "config", "accuracy", "dataset_version"} <= set(best)
    pred = task.infer(X[:20])
    assert pred.shape == (20,) and (pred == y[:20]).mean() > 0.8
    jobs = task.jobs()
    assert jobs and all(j["status"] == "succeeded" for j in jobs)
    assert len({(j["model"], str(j["config"])) for j in jobs}) == len(jobs)  # no arm twice
    history = task.history()
    assert all(h["metrics"][0]["val_score"] == h["accuracy"] for h in history)
    prov = task.provenance()
    assert {"feed"} <= {e["kind"] for e in prov["edges"]}
    assert any(e["kind"] == "train" for e in task.provenance(direction="forward")["edges"])
    board = svc.client("alice").leaderboard()
    assert board[0]["task"] == "iris" and board[0]["best"]["accuracy"] == best["accuracy"]
    # the selector state was persisted as a blob pointed at by a job tag
    assert svc.service.store.find_by_tag("job", STATE_TAG)


def test_cap_on_running_jobs_per_user(tmp_path, iris):
    X, y = iris
    r = start(tmp_path, workers=3, max_running_per_user=1)
    try:
        r.user("alice"), r.user("bob")
        seen_max: dict[int, int] = {}
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                for owner, n in r.service.loop.progress()["running_per_user"].items():
                    seen_max[int(owner)] = max(seen_max.get(int(owner), 0), n)
                time.sleep(0.002)

        sampler = threading.Thread(target=sample)
        sampler.start()
        ta = r.client("alice").task("a1", input=[4], output=[3])
        tb = r.client("alice").task("a2", input=[4], output=[3])
        tc = r.client("bob").task("b1", input=[4], output=[3])
        for t in (ta, tb, tc):
            t.feed(X, y)
        assert all(t.wait(timeout=120) for t in (ta, tb, tc))
        stop.set()
        sampler.join()
        assert seen_max and max(seen_max.values()) == 1
        n_models = sum(c.engine is Engine.SKLEARN for c in task_candidates(r.service.store.get_task(ta.refresh()["id"])).values())
        assert n_models == 6  # one pick per candidate model (its grid trains within the job)
        assert len(ta.jobs()) == len(tb.jobs()) == len(tc.jobs()) == n_models
    finally:
        r.thread.stop()


def test_new_version_restarts_selection_and_cancel_stops_it(svc, iris):
    X, y = iris
    task = svc.client("alice").task("iris", input=[4], output=[3])
    task.feed(X[:100], y[:100])
    assert task.wait(timeout=90)
    v2 = task.feed(X[100:], y[100:])
    assert task.wait(timeout=90)
    jobs = task.jobs()
    assert {j["dataset_version"] for j in jobs} == {1, 2}
    assert sum(j["dataset_version"] == 2 for j in jobs) == IRIS_MODELS
    assert task.best()["dataset_version"] == v2["number"]
    task.refine(drop=[0, 1, 2])
    task.cancel()
    assert task.wait(timeout=30)
    n = len(task.jobs())
    time.sleep(0.5)
    assert len(task.jobs()) == n  # nothing new once cancelled
    assert not [j for j in task.jobs() if j["status"] in ("queued", "running")]
    assert task.refresh()["cancelled"]


def test_restart_restores_state_and_requeues_running_jobs(tmp_path, iris):
    X, y = iris
    r = start(tmp_path)
    r.user("alice")
    task = r.client("alice").task("iris", input=[4], output=[3])
    task.feed(X, y)
    assert task.wait(timeout=90)
    before_jobs = task.jobs()
    before_best = task.best()
    before_state = r.service.loop.selector.to_dict()
    r.thread.stop()

    # a job left RUNNING, as if the service died mid-training
    store, _ = open_store(None, tmp_path)
    t = store.task_by_name(store.user_by_name("alice").id, "iris")
    version = store.latest_dataset_version(t.id)
    crashed = store.create_job(t.id, version.id, "knn", {"grid": {"n_neighbors": [3, 7, 15]}})
    store.update_job(crashed.id, JobStatus.RUNNING)
    store.close()

    r2 = start(tmp_path)
    try:
        r2.tokens = r.tokens
        loop = r2.service.loop
        assert loop.selector.users == [u["name"] for u in before_state["users"] if u]
        restored = loop.selector.to_dict()["users"][-1]
        assert len(restored["obs"]) >= len(before_state["users"][-1]["obs"])
        task2 = r2.client("alice").task("iris")
        assert task2.wait(timeout=60)
        job = store_job = r2.service.store.get_job(crashed.id)
        assert job.status is JobStatus.SUCCEEDED and job.attempts == 2
        assert [v["number"] for v in task2.versions()] == [1]
        assert task2.best()["accuracy"] >= before_best["accuracy"]
        assert len(task2.jobs()) == len(before_jobs) + 1
        assert store_job.accuracy is not None
    finally:
        r2.thread.stop()


@pytest.mark.slow
def test_a_killed_worker_process_is_survived(tmp_path):
    """A worker process killed mid-job: the job is re-queued and re-run, and its
    result equals a run without the failure."""
    import os
    import signal

    from ease_jupyter.datasets import load

    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, 20)).astype("float32")
    y = (X[:, :3].sum(axis=1) > 0).astype("int64") + (X[:, 3] > 1)
    r = start(tmp_path, executor="process", workers=1)
    try:
        r.user("alice")
        task = r.client("alice").task("big", input=[20], output=[3])
        task.feed(X, y)
        store = r.service.store
        executor = r.service.loop.executors[next(iter(r.service.loop.executors))]
        deadline = time.monotonic() + 60
        victim = None
        while victim is None and time.monotonic() < deadline:
            running = store.list_jobs(status=JobStatus.RUNNING)
            if running and executor.worker_pids():
                victim = running[0].id
                os.kill(executor.worker_pids()[0], signal.SIGKILL)
            time.sleep(0.01)
        assert victim is not None
        assert task.wait(timeout=240)
        job = store.get_job(victim)
        assert job.status is JobStatus.SUCCEEDED and job.attempts == 2
        jobs = task.jobs()
        assert len(jobs) == 6 and all(j["status"] == "succeeded" for j in jobs)
    finally:
        r.thread.stop()
    store, blobs = open_store(None, tmp_path)
    t = store.get_task(job.task_id)
    data = load(store, blobs, store.get_dataset_version(job.dataset_version_id))
    cand = task_candidates(t)[job.model]
    with LocalEngine(1, torch_threads=None) as engine:
        clean = evaluate_grid(cand, dict(job.config)["grid"], data, True, engine)
    assert clean.best_score == job.accuracy
    store.close()
