"""The scheduler view explains each decision in plain words: why that task was
served, why that model, and why the viewer's own tasks wait, for every rule
a live service can run; the numbers stay in their own fields."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.config import LIVE_POLICIES
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.scheduler_view import Viewer, decision_view, rule_words
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
