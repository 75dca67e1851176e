"""The scheduler view explains each decision in plain words: why that task was
served, why that model, and why the viewer's own tasks wait, for every rule
a live service can run; the numbers stay in their own fields."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.config import LIVE_POLICIES
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.scheduler_view import (Viewer, decision_event, decision_view, is_own_model, rule_words,
                                                 scheduler_view)
from ease_jupyter.service.user_models import UserModel, UserModels
from ease_jupyter.store import InMemoryStore, MemoryBlobStore
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor

FLAT = format_program(program_from_shapes([4], [3]))
# Internal terms a scientist should not have to know (whole words; "EI" is case-sensitive).
JARGON = re.compile(r"\b(UCB|EI|GP|beta|sigma|posterior|greedy|hallucinat\w*|gain_rate|round_robin|pass|V_t)\b")


def manual(store) -> ManualExecutor:
    """Jobs that finish when the test says so (``finish_all``)."""
    return ManualExecutor(store, workers=2, accuracy=lambda job: 0.5 + 0.45 * ((job.id * 7) % 10) / 10)


def _three_users():
    store, blobs = InMemoryStore(), MemoryBlobStore()
    rng = np.random.default_rng(0)
    tasks = []
    for name in ("ada", "bob", "cy"):
        user = store.create_user(name, name[0] * 64)
        task = store.create_task(user.id, f"{name}-task", FLAT)
        datasets.feed(store, blobs, task, rng.normal(size=(40, 4)).astype("float32"), rng.integers(0, 3, 40))
        tasks.append(task)
    return store, blobs, tasks


def _decisions(policy: str):
    store, blobs, tasks = _three_users()
    executor = manual(store)
    decisions: list[dict] = []
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, policy=policy, max_running_per_user=1,
                       on_decision=decisions.append)
    loop.recover()
    for _ in range(10):
        loop.step()
        executor.finish_all()
    loop.stop()
    return store, tasks, decisions


@pytest.mark.parametrize("policy", LIVE_POLICIES)
def test_every_rules_decisions_are_explained_in_plain_words(policy):
    store, tasks, decisions = _decisions(policy)
    assert decisions
    users = store.list_users()
    names = {t.id: t.name for t in tasks}
    sentence = rule_words(policy)
    assert sentence and not JARGON.search(sentence)
    for raw in decisions:
        for viewer_id in (u.id for u in users):
            seen = decision_view(raw, Viewer(users, viewer_id, admin=False), names)
            you = raw["owner_id"] == viewer_id
            assert seen["reason"].startswith("serving you next: " if you else f"serving {seen['user']} next: ")
            assert "chosen by the" not in seen["reason"]  # every phase of every rule has its words
            assert seen["model_reason"].startswith(f"trying {raw['model']} next: ")
            assert "the rule chose it" not in seen["model_reason"]
            for text in (seen["reason"], seen["model_reason"], seen["your_wait"] or ""):
                assert not JARGON.search(text), text
            if you:
                assert seen["your_wait"] is None


def test_the_default_rule_says_why_in_its_own_terms():
    store, tasks, decisions = _decisions("default")
    users = store.list_users()
    names = {t.id: t.name for t in tasks}
    first = decisions[0]
    owner = Viewer(users, first["owner_id"], admin=False)
    view = decision_view(first, owner, names)
    assert view["reason"] == ("serving you next: your task has no trained model yet, and every new task gets its "
                              "first model before any task gets more")
    assert view["model_reason"] == (f"trying {first['model']} next: it has the best expected gain in accuracy per "
                                    "second among your task's untried models")
    # two workers: the turn serves ada's and bob's new tasks; the others are told why they wait
    ada, bob, cy = users
    assert (decisions[0]["owner_id"], decisions[1]["owner_id"]) == (ada.id, bob.id)
    assert [w["owner_id"] for w in decisions[0]["waiting"]] == [bob.id, cy.id]
    assert [w["owner_id"] for w in decisions[1]["waiting"]] == [cy.id]
    assert decision_view(decisions[0], Viewer(users, cy.id, admin=False), names)["your_wait"] == (
        "waiting: new tasks get their first model in the order they arrived, before any task gets more")
    assert decision_view(decisions[1], Viewer(users, ada.id, admin=False), names)["your_wait"] is None  # served
    later = next(d for d in decisions if d["phase"] == "gain_rate")
    view = decision_view(later, Viewer(users, later["owner_id"], admin=False), names)
    assert view["reason"] == ("serving you next: your task can gain more accuracy per second than the average "
                              "waiting task, and of those it has waited longest for a turn")
    assert view["candidates"] and all("gap" in c for c in view["candidates"])  # the numbers, apart
    other = next(u for u in users if u.id != later["owner_id"])
    assert decision_view(later, Viewer(users, other.id, admin=False), names)["reason"].startswith(
        "serving user ")


def test_a_waiting_viewer_is_told_why_her_task_waits():
    store, _, _ = _three_users()
    ada, bob, cy = store.list_users()
    raw = {"owner_id": ada.id, "task_id": 1, "model": "knn", "phase": "gain_rate", "policy": "gain_rate",
           "rule": "default", "chooser": "capped_ei", "decision": 7, "job_id": 3, "time": 0.0,
           "candidates": [{"tenant": "1/1", "task_id": 1, "owner_id": ada.id, "gap": 0.02},
                          {"tenant": "2/2", "task_id": 2, "owner_id": bob.id, "gap": 0.03}],
           "waiting": [{"task_id": 2, "owner_id": bob.id}, {"task_id": 3, "owner_id": cy.id}]}
    users = [ada, bob, cy]
    names = {1: "a", 2: "b", 3: "c"}

    def wait_of(user):
        return decision_view(raw, Viewer(users, user.id, admin=False), names)["your_wait"]

    assert wait_of(bob) == ("waiting: your task is among those that can gain the most per second, and another of "
                            "them has waited longer")
    assert wait_of(cy) == "waiting: other tasks can gain more accuracy per second right now"
    assert wait_of(ada) is None  # she is served
    raw["waiting"] = [{"task_id": 2, "owner_id": bob.id}]
    assert wait_of(cy) is None  # nothing of hers waits

    hybrid = dict(raw, phase="round_robin", policy="hybrid", rule="hybrid", chooser="ucb", candidates=None)
    view = decision_view(hybrid, Viewer(users, bob.id, admin=False), names)
    assert view["reason"] == ("serving user 1 next: progress has levelled off, so the tasks now take turns, and it "
                              "is their task's turn")
    assert view["your_wait"] == "waiting: the tasks take turns, and yours comes later"
    assert view["model_reason"].startswith("trying knn next: it is the most promising of their task's untried models")


def _bobs_pick(store, model: str = "knn") -> dict:
    """A launched pick of bob's task, as ``Admission.decided`` keeps it."""
    ada, bob = store.list_users()[:2]
    task = next(t for t in store.list_tasks() if t.owner_id == bob.id)
    return {"owner_id": bob.id, "task_id": task.id, "model": model, "phase": "gain_rate", "policy": "gain_rate",
            "rule": "default", "chooser": "capped_ei", "decision": 7, "job_id": 3, "time": 0.0, "mode": "gain_rate",
            "candidates": [{"tenant": "2/2", "task_id": task.id, "owner_id": bob.id, "gap": 0.03}],
            "waiting": [{"task_id": 1, "owner_id": ada.id}]}


def test_a_decision_event_follows_the_subscription_not_the_stored_admin_flag():
    """A stream subscribes with None only when its token gave admin rights
    (``websocket.py``). A user whose stored flag says admin but who subscribed
    with her own id (a demoted hub admin, a hub token without the admin
    scope: the flag is the one of her first login) sees what anyone sees."""
    store = InMemoryStore()
    ada = store.create_user("ada", "a" * 64, is_admin=True)  # stored at her first login, since demoted
    bob = store.create_user("bob", "b" * 64)
    store.create_task(ada.id, "ada-task", FLAT)
    store.create_task(bob.id, "bob-secret", FLAT)
    event_for = decision_event(store, _bobs_pick(store))
    seen = event_for(ada.id)
    assert (seen["type"], seen["user"], seen["task"], seen["job_id"]) == ("decision", "user 2", None, None)
    assert [c["user"] for c in seen["candidates"]] == ["user 2"] and seen["candidates"][0]["task"] is None
    assert "bob" not in json.dumps(seen)
    admin = event_for(None)  # an admin's subscription
    assert (admin["user"], admin["task"], admin["job_id"]) == ("bob", "bob-secret", 3)


def test_another_users_own_model_is_not_named():
    """A zoo model's name is public; the name of a model a user added to her
    task is hers: others read "their own model" (the owner and admins, the name)."""
    store = InMemoryStore()
    for name in ("ada", "bob", "cy"):
        user = store.create_user(name, name[0] * 64, is_admin=name == "cy")
        store.create_task(user.id, f"{name}-task", FLAT)
    ada, bob, cy = store.list_users()
    raw = _bobs_pick(store, "fraud_v2")
    bob_task = raw["task_id"]
    UserModels(store).put(bob_task, UserModel("fraud_v2", "estimator", {}, "c" * 64, 60.0, 10, "x", 0.0))
    assert is_own_model(store, raw) and not is_own_model(store, _bobs_pick(store, "knn"))
    event_for = decision_event(store, raw)
    other = event_for(ada.id)
    assert other["model"] is None and "fraud_v2" not in json.dumps(other)
    assert other["model_reason"] == ("trying their own model next: it has the best expected gain in accuracy per "
                                     "second among their task's untried models")
    for viewer in (bob.id, None):  # the owner, an admin's subscription
        assert event_for(viewer)["model"] == "fraud_v2"
        assert event_for(viewer)["model_reason"].startswith("trying fraud_v2 next: ")
    # GET /scheduler's last_decision says the same
    state = {"tenants": {}, "running": [], "policy": "default", "mode": "gain_rate", "last_decision": raw}
    seen = scheduler_view(store, state, ada)["last_decision"]
    assert seen["model"] is None and seen["model_reason"].startswith("trying their own model next: ")
    assert scheduler_view(store, state, bob)["last_decision"]["model"] == "fraud_v2"
    assert scheduler_view(store, state, cy)["last_decision"]["model"] == "fraud_v2"
    # a zoo model's name stays for everyone
    assert decision_event(store, _bobs_pick(store, "knn"))(ada.id)["model"] == "knn"
    # the last pick's task deleted since: the view still answers, the model's name hidden
    store.delete_task(bob_task)
    assert is_own_model(store, raw)
    assert scheduler_view(store, state, ada)["last_decision"]["model"] is None
