"""Restart recovery (issue 5 item 3): SIGKILL ``easeml serve`` in the middle
of a torch (MOP) job, start it again on the same data dir, and check that the
tasks, data versions, finished jobs, metrics and selector (GP) state come
back, and that the interrupted job resumes from its last checkpointed epoch."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.client import Client

from .conftest import http

EPOCHS = 4


class Serve:
    """``easeml serve`` as a subprocess; its output is drained on a thread."""

    def __init__(self, data_dir):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ease_jupyter", "serve", "--data-dir", str(data_dir), "--port", "0",
             "--executor", "thread", "--workers", "1", "--torch-epochs", str(EPOCHS)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.url = None
        deadline = time.monotonic() + 60
        while self.url is None and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                break
            self.lines.append(line)
            m = re.search(r"listening on (http://[\d.:]+)/api/v1", line)
            self.url = m.group(1) if m else None
        assert self.url, "serve did not announce its URL:\n" + "".join(self.lines)
        self._drain = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._drain.start()

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(60)


def _history(client: Client, name: str) -> dict[int, dict]:
    return {h["id"]: h for h in client.task(name).history()}


def _metric_set(row: dict) -> set[tuple[int, str, float]]:
    return {(m["epoch"], k, v) for m in row["metrics"] for k, v in m.items() if k != "epoch"}


def _selector_obs(url: str, token: str) -> dict[str, int]:
    return http(url, "GET", "/api/v1/admin/progress", token=token).body["loop"]["selector_observations"]


@pytest.mark.slow
def test_sigkill_mid_training_then_restart(tmp_path):
    from sklearn.datasets import load_digits, load_iris

    token = CliRunner().invoke(main, ["users", "add", "ada", "--admin", "--data-dir", str(tmp_path)]).output.strip()
    Xi, yi = load_iris(return_X_y=True)
    d = load_digits()
    Xd = (d.images[:600] / 16.0).astype("float32")[..., None]
    yd = d.target[:600].astype("int64")

    first = Serve(tmp_path)
    try:
        client = Client(first.url, token)
        iris = client.task("iris", input=[4], output=[3])
        iris.feed(Xi.astype("float32"), yi)
        iris.refine(drop=[0, 1, 2])  # a second version
        digits = client.task("digits", input=[8, 8, 1], output=[10])
        digits.feed(Xd, yd)
        assert iris.wait(timeout=120)
        # wait for a finished torch job and another one part-way through its epochs
        deadline, victim = time.monotonic() + 300, None
        while time.monotonic() < deadline and victim is None:
            hist = _history(client, "digits")
            if any(h["status"] == "succeeded" for h in hist.values()):
                for h in hist.values():
                    done = {m["epoch"] for m in h["metrics"] if "val_accuracy" in m}
                    if h["status"] == "running" and done and max(done) < EPOCHS:
                        victim = h
            time.sleep(0.05)
        assert victim is not None, "no torch job was caught mid-training"
        before = {
            "tasks": http(first.url, "GET", "/api/v1/tasks", token=token).body,
            "history": {n: _history(client, n) for n in ("iris", "digits")},
            "obs": _selector_obs(first.url, token),
        }
        before["versions"] = {n: http(first.url, "GET", f"/api/v1/tasks/{n}/versions", token=token).body
                              for n in ("iris", "digits")}
        os.kill(first.proc.pid, signal.SIGKILL)
        assert first.proc.wait(30) == -signal.SIGKILL
    finally:
        if first.proc.poll() is None:
            first.stop(signal.SIGKILL)

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
        # the selector state came back: the same observations per tenant
        assert _selector_obs(second.url, token) == before["obs"]
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
    from ease_jupyter.service.mop import RESUMED_TAG
    from ease_jupyter.store import open_store

    store, _ = open_store(None, tmp_path)
    try:
        resumed_from = int(store.tags("job", victim["id"])[RESUMED_TAG])
        assert max(stored) <= resumed_from < EPOCHS  # resumed from its checkpoint, not from epoch 0
    finally:
        store.close()
