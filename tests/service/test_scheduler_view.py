"""GET /scheduler and the ``decision`` events over real HTTP/WebSocket: the
admin's full view, the anonymised view of everyone else, and the numbers
behind them (best accuracy, accuracy-loss estimate, share of compute)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_wine


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    return X.astype("float32"), y.astype("int64")


def _train_two(svc, iris, wine):
    alice = svc.client("alice").task("iris", input=[4], output=[3])
    bob = svc.client("bob").task("wine", input=[13], output=[3])
    alice.feed(*iris)
    bob.feed(*wine)
    assert alice.wait(timeout=180) and bob.wait(timeout=180)
    return alice, bob


def test_admin_sees_everything_and_the_numbers_add_up(svc, iris, wine):
    alice, bob = _train_two(svc, iris, wine)
    svc.user("carol")  # no tasks: not listed
    view = svc.client("admin").scheduler()
    assert view["policy"] == "default" and view["mode"] == "gain_rate"  # the service's default rule
    assert view["viewer"] == {"name": "admin", "admin": True}
    rows = {row["name"]: row for row in view["users"]}
    assert set(rows) == {"alice", "bob"}
    assert rows["alice"]["tasks"] == ["iris"] and rows["bob"]["tasks"] == ["wine"]
    assert not rows["alice"]["you"] and rows["alice"]["running"] == 0  # both idle

    for row, task in ((rows["alice"], alice), (rows["bob"], bob)):
        assert row["best_accuracy"] == pytest.approx(task.best()["accuracy"])
        spent = sum(j["cost_seconds"] or 0.0 for j in task.jobs() if j["status"] in ("succeeded", "failed"))
        assert row["compute_seconds"] == pytest.approx(spent, rel=1e-6)
        assert row["per_task"][0]["task"] == task.name
    shares = [row["compute_share"] for row in view["users"]]
    assert sum(shares) == pytest.approx(1.0) and all(0 < s < 1 for s in shares)
    assert view["compute_seconds"] == pytest.approx(rows["alice"]["compute_seconds"] + rows["bob"]["compute_seconds"])

    # The accuracy-loss estimate: max posterior mean over the tenant's arms minus
    # its best observation, clipped at 0 (read back from the live selector).
    loop = svc.service.loop
    for row, task in ((rows["alice"], alice), (rows["bob"], bob)):
        tenant = next(n for n, t in loop._tenants.items() if t.task_id == task.info["id"])
        means = [m for m, _ in loop.selector.posterior(tenant).values()]
        expected = max(0.0, max(means) - loop.selector.best(tenant)[1])
        assert row["accuracy_loss"] == pytest.approx(expected)
        assert row["accuracy_loss"] >= 0

    last = view["last_decision"]
    assert last["user"] in ("alice", "bob") and last["task"] in ("iris", "wine")
    assert last["phase"] in ("initial", "gain_rate") and last["policy"] == "gain_rate"
    owner = alice if last["user"] == "alice" else bob
    assert last["job_id"] in {j["id"] for j in owner.jobs()}


def test_others_are_anonymised_with_stable_labels(svc, iris, wine):
    _train_two(svc, iris, wine)
    view = svc.client("bob").scheduler()
    assert view["viewer"] == {"name": "bob", "admin": False}
    rows = {row["name"]: row for row in view["users"]}
    # users by id: admin (1), alice (2), bob (3); alice is "user 2" to bob
    assert set(rows) == {"user 2", "bob"}
    assert rows["bob"]["you"] and rows["bob"]["tasks"] == ["wine"] and "per_task" in rows["bob"]
    other = rows["user 2"]
    assert other["tasks"] is None and other["n_tasks"] == 1 and "per_task" not in other
    assert other["best_accuracy"] is not None and other["compute_share"] > 0
    text = json.dumps(view)
    assert "alice" not in text and "iris" not in text  # no name or task of others anywhere
    last = view["last_decision"]
    if last["user"] != "bob":
        assert last["user"] == "user 2" and last["task"] is None and last["job_id"] is None

    # Stable: the same labels later, also after a new user with a task joins.
    svc.user("zed")
    svc.client("zed").task("z", input=[4], output=[3]).feed(*iris)
    again = {row["name"] for row in svc.client("bob").scheduler()["users"]}
    assert again == {"user 2", "bob", "user 4"}  # zed is the 4th user
    alice_view = {row["name"] for row in svc.client("alice").scheduler()["users"]}
    assert {"alice", "user 3", "user 4"} == alice_view
    assert svc.call("GET", "/scheduler").status == 401


def test_decision_events_reach_everyone_anonymised(svc, iris):
    admin, bob, alice = (svc.client(n).events() for n in ("admin", "bob", "alice"))
    try:
        task = svc.client("alice").task("iris", input=[4], output=[3])
        task.feed(*iris)
        assert task.wait(timeout=180)
        jobs = {j["id"] for j in task.jobs()}

        def decisions(stream):
            return [e for e in stream.iter(timeout=1.0) if e["type"] == "decision"]

        seen_admin, seen_bob, seen_alice = decisions(admin), decisions(bob), decisions(alice)
    finally:
        for stream in (admin, bob, alice):
            stream.close()
    # One decision event per launched pick, and every job of the task came from one.
    assert {e["job_id"] for e in seen_admin} == jobs and len(seen_admin) == len(jobs)
    assert all(e["user"] == "alice" and e["task"] == "iris" for e in seen_admin)
    assert [e["job_id"] for e in seen_alice] == [e["job_id"] for e in seen_admin]
    assert all(e["user"] == "alice" for e in seen_alice)
    # Bob sees the same decisions, with alice anonymised and no task or job.
    assert [e["decision"] for e in seen_bob] == [e["decision"] for e in seen_admin]
    assert [e["model"] for e in seen_bob] == [e["model"] for e in seen_admin]
    for e in seen_bob:
        assert e["user"] == "user 2" and e["task"] is None and e["job_id"] is None and "owner_id" not in e
        assert e["phase"] in ("initial", "gain_rate") and e["mode"] == "gain_rate"
        for c in e["candidates"] or []:
            assert c["user"] == "user 2" and c["task"] is None
    assert "alice" not in json.dumps(seen_bob) and "iris" not in json.dumps(seen_bob)
    by_gain = [e for e in seen_admin if e["phase"] == "gain_rate"]
    assert all(isinstance(e["candidates"], list) and e["candidates"] for e in by_gain)
    seqs = [e["seq"] for e in seen_bob]
    assert seqs == sorted(seqs) and np.all(np.diff([e["decision"] for e in seen_bob]) > 0)
