"""Two users' image tasks over HTTP: their torch picks train at the same time
on the service's one engine (MOP across tasks, one PoolDriver interleaving
both workloads), both finish with their per-epoch metrics, and both infer;
on a service in the test process and on a real ``easeml serve``."""

from __future__ import annotations

import time
from datetime import datetime

import numpy as np
import pytest

from ease_jupyter.client import Client
from ease_jupyter.service import ServiceConfig
from ease_jupyter.service.testing import ServeProcess, add_user
from ease_jupyter.zoo import Engine

from .conftest import start

USERS = ("alice", "bob")


@pytest.fixture(scope="module")
def digits_images():
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.images[:400] / 16.0).astype("float32")[..., None]  # [n, 8, 8, 1]
    return X, d.target[:400].astype("int64")


def _span(job: dict) -> tuple[float, float]:
    return (datetime.fromisoformat(job["started_at"]).timestamp(),
            datetime.fromisoformat(job["finished_at"]).timestamp())


def submit_digits(clients: dict[str, Client], X, y) -> dict:
    """Each user's image task, both created and fed before either trains."""
    tasks = {name: client.task(f"digits-{name}", input=[8, 8, 1], output=[10]) for name, client in clients.items()}
    for task in tasks.values():
        task.feed(X, y)
    return tasks


def assert_trained_at_once_and_infer(tasks: dict, X, y, *, timeout: float, context=lambda: "") -> None:
    """Both users' tasks get two succeeded torch jobs, some job of alice's
    and some of bob's ran at the same time (from their start and finish
    times), each job reports both epochs of all three learning rates, and
    each task infers well above chance. ``context()``: more to show on a
    failure (a subprocess's log)."""
    deadline = time.monotonic() + timeout
    done: dict[str, list[dict]] = {}
    while time.monotonic() < deadline:
        done = {n: [j for j in t.jobs() if j["status"] == "succeeded"] for n, t in tasks.items()}
        if all(len(d) >= 2 for d in done.values()):
            break
        time.sleep(0.5)
    assert all(len(d) >= 2 for d in done.values()), ({n: t.jobs() for n, t in tasks.items()}, context())
    spans = {n: [_span(j) for j in d] for n, d in done.items()}
    overlaps = [(a, b) for a in spans["alice"] for b in spans["bob"] if a[0] < b[1] and b[0] < a[1]]
    assert overlaps, spans  # the two users' workloads trained at the same time
    for name, task in tasks.items():
        job = done[name][0]
        history = {h["id"]: h for h in task.history()}
        assert [m["epoch"] for m in history[job["id"]]["metrics"]] == [1, 2]
        assert all(sum(k.startswith("val_accuracy[lr=") for k in row) == 3
                   for row in history[job["id"]]["metrics"])
        predictions = np.asarray(task.infer(X[:50]))
        # the best of the first two nets after two epochs: well above chance (0.1), not a quality bar
        assert predictions.shape == (50,) and (predictions == y[:50]).mean() > 0.25


@pytest.mark.parametrize("executor,engine", [
    ("thread", "local"),
    pytest.param("process", "dask", marks=pytest.mark.slow),  # one worker process, jobs on threads, a LocalCluster
])
def test_two_users_torch_jobs_overlap_and_both_finish(tmp_path, digits_images, executor, engine):
    X, y = digits_images
    # One running job per user: any overlap is between the two users' tasks.
    running = start(tmp_path, torch_epochs=2, workers=2, executor=executor, engine=engine,
                    max_running_per_user=1, max_torch_workloads=2)
    try:
        for name in USERS:
            running.user(name)
        tasks = submit_digits({name: running.client(name) for name in USERS}, X, y)
        assert_trained_at_once_and_infer(tasks, X, y, timeout=240)
    finally:
        running.thread.stop()


@pytest.mark.slow
def test_two_users_torch_jobs_overlap_on_easeml_serve(tmp_path, digits_images):
    """The same on ``easeml serve --engine dask --workers 2`` in its own process."""
    X, y = digits_images
    tokens = {name: add_user(tmp_path, name) for name in USERS}
    serve = ServeProcess(tmp_path, "--engine", "dask", "--workers", "2", "--torch-epochs", "2",
                         "--max-running", "1", "--max-torch-workloads", "2")
    try:
        tasks = submit_digits({name: Client(serve.url, tokens[name]) for name in USERS}, X, y)
        assert_trained_at_once_and_infer(tasks, X, y, timeout=300, context=serve.output)
    finally:
        stopped = serve.stop()
    assert stopped == 0, serve.output()


def test_max_torch_workloads_is_checked_and_sets_the_torch_slots(tmp_path):
    with pytest.raises(ValueError, match="max_torch_workloads"):
        ServiceConfig(data_dir=tmp_path, max_torch_workloads=0)
    running = start(tmp_path, max_torch_workloads=3)
    try:
        assert running.service.loop.executors[Engine.TORCH].workers == 3
    finally:
        running.thread.stop()


def test_serve_offers_the_flag():
    from click.testing import CliRunner

    from ease_jupyter.cli import main

    out = CliRunner().invoke(main, ["serve", "--help"]).output
    assert "--max-torch-workloads" in out
    bad = CliRunner().invoke(main, ["serve", "--max-torch-workloads", "0"])
    assert bad.exit_code == 2 and "--max-torch-workloads" in bad.output
