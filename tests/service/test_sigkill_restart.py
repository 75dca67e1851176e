"""Restart recovery: SIGKILL ``easeml serve`` in the middle
of a torch (MOP) job, start it again on the same data dir, and check that the
tasks, data versions, finished jobs, metrics and selector (GP) state come
back, and that the interrupted job resumes from its last checkpointed MOP
unit: with 3 partitions an epoch is 3 units per config, the kill lands
inside an epoch, and no unit recorded before it is trained again.

What the kill left is read after the service is dead, from a store opened
afresh (as the restarted service opens it), never from a snapshot taken
while it ran: a unit whose write was under way as the service was stopped
can be missing from such a snapshot and still be in the store the restart
reads (SQLite's WAL holds it), so only the state read after the kill says
where the job resumes."""

from __future__ import annotations

import os
import signal
import json
import time
from typing import Callable

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.client import Client
from ease_jupyter.execution.automl import pick_schedule
from ease_jupyter.service.mop import PROGRESS_TAG, RESUMED_TAG, RESUMED_UNITS_TAG
from ease_jupyter.service.testing import ServeProcess
from ease_jupyter.store import JobStatus, open_store

from .conftest import http

EPOCHS = 2  # one rung (successive halving stops no config early): every epoch is all configs' units to catch
PARTITIONS = 6  # units finer than epochs
CONFIGS = 3  # learning rates per torch candidate
SCHEDULE = pick_schedule(CONFIGS, EPOCHS)


def _units_in(epoch: int) -> int:
    """Train units of a pick's epoch (1-based): the configs still live then, times the partitions."""
    return PARTITIONS * next(size for rung, size in zip(SCHEDULE.rungs, SCHEDULE.sizes) if epoch <= rung)


def _units_through(epoch: int) -> int:
    """Train units of a pick's first ``epoch`` epochs."""
    return sum(_units_in(e) for e in range(1, epoch + 1))


class Serve(ServeProcess):
    """``easeml serve`` with this module's training settings."""

    def __init__(self, data_dir, *extra: str):
        super().__init__(data_dir, "--executor", "thread", "--workers", "1", "--torch-epochs", str(EPOCHS),
                         "--mop-partitions", str(PARTITIONS), *extra, timeout=60)


def _history(client: Client, name: str) -> dict[int, dict]:
    return {h["id"]: h for h in client.task(name).history()}


def _metric_set(row: dict) -> set[tuple[int, str, float]]:
    return {(m["epoch"], k, v) for m in row["metrics"] for k, v in m.items() if k != "epoch"}


def _selector_obs(url: str, token: str) -> dict[str, int]:
    return http(url, "GET", "/api/v1/admin/progress", token=token).body["loop"]["selector_observations"]


def _progress(store, job_id: int) -> dict | None:
    """The job's MOP progress record, as the service last wrote it."""
    tag = store.tags("job", job_id).get(PROGRESS_TAG)
    return json.loads(tag) if tag else None


def _units_done(progress: dict) -> int:
    return sum(len(u["visited"]) for u in progress["units"].values())


def _inside_an_epoch(progress: dict | None, *, spare: int = 0) -> bool:
    """Past a finished epoch and some, not all, train units into the next one
    (with at least ``spare`` more units to go before the epoch ends)."""
    return (bool(progress) and 1 <= progress["epoch"] < EPOCHS
            and 0 < _units_done(progress) < _units_in(progress["epoch"] + 1) - spare)


def _caught(store, job_ids: list[int]) -> bool:
    """Every job is still running, well inside an epoch (a unit to spare)."""
    return all(_inside_an_epoch(_progress(store, j), spare=1) and store.get_job(j).status is JobStatus.RUNNING
               for j in job_ids)


def _stopped_while(serve: "Serve", still: Callable[[], bool]) -> bool:
    """SIGSTOP the service and look again: True (it stays stopped) if ``still()``."""
    serve.proc.send_signal(signal.SIGSTOP)
    if still():
        return True
    serve.proc.send_signal(signal.SIGCONT)
    return False


def _sigkill(serve: "Serve") -> None:
    os.kill(serve.proc.pid, signal.SIGKILL)
    assert serve.proc.wait(30) == -signal.SIGKILL


def _left_by_the_kill(data_dir, job_id: int, tasks: list[dict]) -> tuple[dict | None, dict[str, int]]:
    """The job's progress record and, per tenant (task/latest version), the
    finished jobs: what a restart finds. Call it once the service is dead and
    this process holds no connection to its database: the store opened here is
    then SQLite's first connection and recovers the WAL, as the restart will."""
    store, _ = open_store(None, data_dir)
    try:
        finished = {}
        for t in tasks:
            version = store.latest_dataset_version(t["id"])
            finished[f"{t['id']}/{version.id}"] = sum(
                1 for j in store.list_jobs(t["id"])
                if j.dataset_version_id == version.id and j.status in (JobStatus.SUCCEEDED, JobStatus.FAILED))
        return _progress(store, job_id), finished
    finally:
        store.close()


@pytest.mark.slow
def test_sigkill_mid_training_then_restart(tmp_path, request):
    from sklearn.datasets import load_digits, load_iris

    token = CliRunner().invoke(main, ["users", "add", "ada", "--admin", "--data-dir", str(tmp_path)]).output.strip()
    Xi, yi = load_iris(return_X_y=True)
    d = load_digits()
    Xd = (d.images[:600] / 16.0).astype("float32")[..., None]
    yd = d.target[:600].astype("int64")

    first = Serve(tmp_path)
    # Polls the job tags the service writes (SQLite WAL: never blocks it); closed before the kill is read.
    polling, _ = open_store(None, tmp_path)
    try:
        client = Client(first.url, token)
        iris = client.task("iris", input=[4], output=[3])
        iris.feed(Xi.astype("float32"), yi)
        iris.refine(drop=[0, 1, 2])  # a second version
        digits = client.task("digits", input=[8, 8, 1], output=[10])
        digits.feed(Xd, yd)
        # (No wait for iris first: the digits picks may all finish meanwhile.)
        # Wait for a finished job and a torch job inside an epoch, stop the
        # service (SIGSTOP) and look again: the kill comes only if the job is
        # still well inside the epoch. At most one more unit can have been on
        # its way to the store when the service stopped, so a spare unit keeps
        # the state the kill leaves inside the epoch too; that state is read
        # after the kill (below), and the rest of the test checks against it.
        deadline, victim = time.monotonic() + 300, None
        while time.monotonic() < deadline and victim is None:
            hist = _history(client, "digits")
            running = [h for h in hist.values() if h["status"] == "running"]
            if any(h["status"] == "succeeded" for h in hist.values()) and running:
                job = running[0]
                if _inside_an_epoch(_progress(polling, job["id"]), spare=1):
                    before = {
                        "tasks": http(first.url, "GET", "/api/v1/tasks", token=token).body,
                        "history": {n: _history(client, n) for n in ("iris", "digits")},
                        "obs": _selector_obs(first.url, token),
                        "versions": {n: http(first.url, "GET", f"/api/v1/tasks/{n}/versions", token=token).body
                                     for n in ("iris", "digits")},
                    }
                    if _stopped_while(first, lambda: _caught(polling, [job["id"]])):
                        victim = before["history"]["digits"][job["id"]]
                        break
            time.sleep(0.02)
        assert victim is not None, "no torch job was caught inside an epoch"
        _sigkill(first)
    finally:
        polling.close()
        if first.proc.poll() is None:
            first.stop(signal.SIGKILL)
    frozen, finished = _left_by_the_kill(tmp_path, victim["id"], before["tasks"])
    assert _inside_an_epoch(frozen), frozen
    # the record is consistent: every recorded unit is counted once
    assert frozen["trained_units"] == _units_through(frozen["epoch"]) + _units_done(frozen)
    assert frozen["partitions"] == PARTITIONS

    second = Serve(tmp_path)
    try:
        client = Client(second.url, token)
        # tasks and versions: the same ids, none lost, none duplicated
        assert http(second.url, "GET", "/api/v1/tasks", token=token).body == before["tasks"]
        for n in ("iris", "digits"):
            versions = http(second.url, "GET", f"/api/v1/tasks/{n}/versions", token=token).body
            assert versions == before["versions"][n]
            assert len({v["id"] for v in versions}) == len(versions)
        assert [v["number"] for v in before["versions"]["iris"]] == [1, 2]
        # the selector state came back: one observation per finished job, none lost
        # (a job may have finished between the snapshot of `before` and the kill)
        restored = _selector_obs(second.url, token)
        assert restored == finished
        assert all(restored[name] >= n for name, n in before["obs"].items())
        assert sum(before["obs"].values()) >= 2
        # finished jobs and their metrics are intact
        for n in ("iris", "digits"):
            now = _history(client, n)
            for job_id, row in before["history"][n].items():
                if row["status"] in ("succeeded", "failed"):
                    assert now[job_id]["status"] == row["status"]
                    assert now[job_id]["accuracy"] == row["accuracy"]
                    assert _metric_set(now[job_id]) == _metric_set(row)
        stored = {m["epoch"] for m in victim["metrics"] if "val_accuracy" in m}
        assert client.task("digits").wait(timeout=400), client.task("digits").jobs()
        final = _history(client, "digits")
        resumed = final[victim["id"]]
        assert resumed["status"] == "succeeded", resumed
        assert resumed["attempts"] == 2
        # the metrics stored before the kill are unchanged, and the epochs go on from there to the end
        assert _metric_set(victim) <= _metric_set(resumed)
        epochs = [m["epoch"] for m in resumed["metrics"] if "val_accuracy" in m]
        assert epochs == list(range(1, EPOCHS + 1))
        # every arm trained once on the version: nothing was re-trained after the restart
        live = [h for h in final.values() if h["status"] != "cancelled"]
        assert len({h["model"] for h in live}) == len(live) == 4
        digits_id = next(t["id"] for t in before["tasks"] if t["name"] == "digits")
        tenant = f"{digits_id}/{before['versions']['digits'][-1]['id']}"
        assert _selector_obs(second.url, token)[tenant] == 4
    finally:
        assert second.stop() == 0
    store, _ = open_store(None, tmp_path)
    request.addfinalizer(store.close)
    tags = store.tags("job", victim["id"])
    # resumed after the epochs and units recorded at the kill, not from the start of the epoch
    assert int(tags[RESUMED_TAG]) == frozen["epoch"] and max(stored, default=0) <= frozen["epoch"]
    resumed_units = json.loads(tags[RESUMED_UNITS_TAG])
    assert resumed_units == {"epoch": frozen["epoch"], "units": _units_done(frozen),
                             "visited": {t: u["visited"] for t, u in frozen["units"].items()}}
    assert 0 < resumed_units["units"] < _units_in(frozen["epoch"] + 1)
    # every unit trained exactly once over both runs: none recorded before the kill ran again
    final_progress = _progress(store, victim["id"])
    assert final_progress["epoch"] == EPOCHS and final_progress["units"] == {}
    assert final_progress["trained_units"] == _units_through(EPOCHS)


@pytest.mark.slow
def test_sigkill_while_two_workloads_train_resumes_both_per_unit(tmp_path, request):
    """Two tasks' torch jobs share the workers (MOP across tasks); a SIGKILL
    inside an epoch of both: after the restart each resumes from its own last
    recorded unit, and over both runs each trains every unit exactly once."""
    from sklearn.datasets import load_digits

    token = CliRunner().invoke(main, ["users", "add", "ada", "--admin", "--data-dir", str(tmp_path)]).output.strip()
    d = load_digits()
    X, y = (d.images[:600] / 16.0).astype("float32")[..., None], d.target[:600].astype("int64")
    names = ("d1", "d2")
    first = Serve(tmp_path, "--max-torch-workloads", "2")
    polling, _ = open_store(None, tmp_path)
    try:
        client = Client(first.url, token)
        for name in names:
            client.task(name, input=[8, 8, 1], output=[10]).feed(X, y)
        deadline, victims = time.monotonic() + 300, None
        while time.monotonic() < deadline and victims is None:
            running = {n: [h for h in _history(client, n).values() if h["status"] == "running"] for n in names}
            if all(running.values()):
                jobs = [running[n][0]["id"] for n in names]
                if _caught(polling, jobs) and _stopped_while(first, lambda: _caught(polling, jobs)):
                    victims = jobs
                    break
            time.sleep(0.02)
        assert victims is not None, "the two torch jobs were never caught inside an epoch at once"
        _sigkill(first)
    finally:
        polling.close()
        if first.proc.poll() is None:
            first.stop(signal.SIGKILL)
    store, _ = open_store(None, tmp_path)
    frozen = {j: _progress(store, j) for j in victims}
    store.close()
    assert all(_inside_an_epoch(p) for p in frozen.values()), frozen

    second = Serve(tmp_path, "--max-torch-workloads", "2")
    try:
        watch, _ = open_store(None, tmp_path)
        try:
            deadline = time.monotonic() + 400
            while time.monotonic() < deadline and not all(
                    watch.get_job(j).status is JobStatus.SUCCEEDED for j in victims):
                time.sleep(0.2)
            assert [watch.get_job(j).status for j in victims] == [JobStatus.SUCCEEDED] * 2
        finally:
            watch.close()
    finally:
        assert second.stop() == 0
    store, _ = open_store(None, tmp_path)
    request.addfinalizer(store.close)
    for job_id, before in frozen.items():
        assert store.get_job(job_id).attempts == 2
        tags = store.tags("job", job_id)
        assert json.loads(tags[RESUMED_UNITS_TAG]) == {
            "epoch": before["epoch"], "units": _units_done(before),
            "visited": {t: u["visited"] for t, u in before["units"].items()}}
        after = _progress(store, job_id)
        assert after["epoch"] == EPOCHS and after["trained_units"] == _units_through(EPOCHS)
