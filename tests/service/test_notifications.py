"""Notifications (``service/notify.py``): made from the service's own activity
for the task's owner only (improved, idle, failed, budget), muted per task,
and shown in a plain kernel as a line under the next cell's output."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from ease_jupyter.service import notify

from .conftest import serving, until

WAIT = 240  # seconds a small task may take to be tried in full on a busy CI machine


class Raises(LogisticRegression):
    def fit(self, X, y):  # noqa: ARG002
        raise ValueError("my fit broke on purpose")


@pytest.fixture
def served(tmp_path):
    with serving(tmp_path, "ada", "bob", torch=False, allow_user_models=True) as running:
        yield running


@pytest.fixture(scope="module")
def small():
    """Three well separated classes: every candidate trains in a blink."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 20)
    X = (rng.normal(size=(60, 4)) + 3 * y[:, None]).astype("float32")
    return X, y.astype("int64")


def notes_until(stream, done, timeout: float = WAIT) -> list[dict]:
    """The notification events of ``stream`` until ``done(notes)`` holds (or time is up)."""
    notes: list[dict] = []
    deadline = time.monotonic() + timeout
    while not done(notes) and time.monotonic() < deadline:
        event = stream.get(timeout=1)
        if event is not None and event.get("type") == "notification":
            notes.append(event)
    return notes


def idle_of(task: str):
    return lambda notes: any(n["kind"] == "idle" and n["task"] == task for n in notes)


def test_the_owner_hears_of_improved_failed_and_idle_and_nobody_else_does(served, small):
    X, y = small
    ada, bob = served.client("ada"), served.client("bob")
    with ada.events() as heard, bob.events() as overheard:
        task = ada.task("blobs", input=[4], output=[3])
        task.add_model(Raises(), name="raises")
        task.feed(X, y)
        notes = notes_until(heard, idle_of("blobs"))
        extra = notes_until(overheard, lambda n: False, timeout=1.0)
        # Looked at again with no new work (as after a restart): idle once more, and no news.
        served.service.loop.notify(task.info["id"])
        again = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                e.get("type") == "task" and e.get("status") == "idle" for e in again):
            event = heard.get(timeout=1)
            again += [event] if event is not None else []
        again += notes_until(heard, lambda n: False, timeout=1.0)
    assert any(e.get("type") == "task" and e.get("status") == "idle" for e in again), again
    assert not [e for e in again if e.get("type") == "notification"]
    kinds = [n["kind"] for n in notes]
    assert kinds[-1] == "idle" and {"improved", "failed"} <= set(kinds), kinds
    assert all(n["task"] == "blobs" and n["task_id"] == task.info["id"] and "\n" not in n["message"]
               for n in notes)
    failed = [n for n in notes if n["kind"] == "failed"]
    assert len(failed) == 1 and "my fit broke on purpose" in failed[0]["message"]
    assert {j["id"]: j for j in task.jobs()}[failed[0]["job_id"]]["model"] == "raises"
    improved = [n["accuracy"] for n in notes if n["kind"] == "improved"]
    assert improved == sorted(set(improved))  # each one better than the last
    best = task.best()
    assert improved[-1] == best["accuracy"] and notes[-1]["accuracy"] == best["accuracy"]
    assert best["model"] in notes[-1]["message"] and notes[-1]["job_id"] == best["job_id"]
    succeeded = [j for j in task.jobs() if j["status"] == "succeeded"]
    assert len(improved) <= len(succeeded)
    assert extra == []  # bob's stream carried none of ada's notifications


def test_a_muted_task_sends_none_and_unmuting_brings_them_back(served, small):
    X, y = small
    ada = served.client("ada")
    quiet, loud = ada.task("quiet", input=[4], output=[3]), ada.task("loud", input=[4], output=[3])
    answer = served.call("PUT", "/tasks/quiet/mute", "ada", body={"muted": True})
    assert answer.status == 200 and answer.body == {"name": "quiet", "muted": True}
    assert quiet.refresh()["muted"] is True and loud.refresh()["muted"] is False
    with ada.events() as heard:
        quiet.feed(X, y)
        loud.feed(X, y)
        assert quiet.wait(timeout=WAIT)
        notes = notes_until(heard, idle_of("loud"))
    assert {n["task"] for n in notes} == {"loud"}
    assert served.call("PUT", "/tasks/quiet/mute", "ada", body={"muted": False}).body["muted"] is False
    assert quiet.refresh()["muted"] is False
    with ada.events() as heard:
        quiet.feed(X[:30] + 0.5, y[:30])  # a new version: everything is tried again
        notes = notes_until(heard, idle_of("quiet"))
    assert {n["kind"] for n in notes} >= {"improved", "idle"} and {n["task"] for n in notes} == {"quiet"}


@pytest.mark.parametrize("body", [{"muted": "yes"}, {}, {"muted": True, "loud": 1}, [True]])
def test_bad_mutes_and_another_users_mute_change_nothing(served, body):
    served.client("ada").task("mine", input=[4], output=[3])
    store = served.service.store
    task_id = store.task_by_name(store.user_by_name("ada").id, "mine").id
    before = dict(store.tags("task", task_id))
    bad = served.call("PUT", "/tasks/mine/mute", "ada", body=body)
    assert bad.status == 400 and bad.body["error"]["field"] in ("muted", "mute", "body")
    other = served.call("PUT", "/tasks/mine/mute", "bob", body={"muted": True})
    assert other.status == 404
    assert dict(store.tags("task", task_id)) == before
    assert served.call("GET", "/tasks/mine", "ada").body["muted"] is False
    assert served.call("PUT", "/tasks/mine/tags", "ada", body={notify.MUTED_TAG: "true"}).status == 400


def test_a_spent_budget_is_a_notification(served, small):
    X, y = small
    ada = served.client("ada")
    assert served.call("PUT", "/budget", "ada", body={"seconds": 0.001}).status == 200
    task = ada.task("thrifty", input=[4], output=[3])
    with ada.events() as heard:
        task.feed(X, y)
        notes = notes_until(heard, lambda n: any(x["kind"] == "budget" for x in n))
    budget = [n for n in notes if n["kind"] == "budget"]
    assert budget and budget[0]["task"] == "thrifty" and "budget" in budget[0]["message"]


def test_a_plain_kernel_prints_the_line_under_the_next_cell(served, small, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    X, y = small
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "ease_jupyter")
        shell.user_ns.update(X=X, y=y)
        shell.run_cell(f"%easeml connect {served.url} --token {served.tokens['ada']}")
        shell.run_cell("%easeml task kernel --input 4 --output 3")
        shell.run_cell("%easeml feed kernel X y")
        capsys.readouterr()
        printed = []

        def heard() -> bool:
            shell.run_cell("1")
            printed.append(capsys.readouterr().out)
            return "ease.ml [idle] kernel: done" in printed[-1]

        assert until(heard, WAIT, every=0.5), printed
        line = next(line for line in printed[-1].splitlines() if "[idle]" in line)
        assert line.startswith("ease.ml [idle] kernel: done, every candidate tried; best ")
        assert any("ease.ml [improved] kernel: best model now" in out for out in printed)
    finally:
        notices = getattr(shell, "_easeml_notices", None)
        if notices is not None:
            notices.close()
        InteractiveShell.clear_instance()


def test_outside_ipython_notifications_are_log_lines(served, small, caplog):
    from ease_jupyter.magics.notifications import log_notifications

    X, y = small
    ada = served.client("ada")
    feed = log_notifications(ada)
    try:
        with caplog.at_level("INFO", logger="ease_jupyter.notifications"):
            ada.task("logged", input=[4], output=[3]).feed(X, y)
            assert until(lambda: any("[idle] logged: done" in r.getMessage() for r in caplog.records), WAIT)
    finally:
        feed.close()
    assert all(r.name == "ease_jupyter.notifications" for r in caplog.records if "logged" in r.getMessage())


def test_an_admins_notebook_and_lab_show_only_her_own_notifications(served):
    """An admin's event stream carries every user's events; her notebook's
    cell lines (saved in her .ipynb) and her JupyterLab toasts show only the
    notifications whose ``owner_id`` is her own. Bob's is published before
    hers on the one stream, so it has arrived once hers has."""
    from ease_jupyter.lab.handlers import NotificationRelay, ServiceConnection
    from ease_jupyter.magics.notifications import NotificationFeed

    served.user("root", admin=True)
    store = served.service.store
    root, bob = store.user_by_name("root"), store.user_by_name("bob")
    feed = NotificationFeed(served.client("root"))  # open: subscribed
    relay = NotificationRelay(ServiceConnection(served.url, served.tokens["root"]))
    try:
        relay.start()
        assert relay.connected.wait(60)
        for owner, task in ((bob, "bob-private"), (root, "root-own")):
            served.service.events.publish(owner.id, {"type": "notification", "task": task, "task_id": 1,
                                                     "kind": "idle", "message": f"{task}: done"})
        got: list[dict] = []
        assert until(lambda: got.extend(feed.take()) or any(n["owner_id"] == root.id for n in got), WAIT)
        assert [(n["owner_id"], n["task"]) for n in got] == [(root.id, "root-own")]
        toasts = lambda: relay.since(0)["notifications"]  # noqa: E731
        assert until(lambda: any(n["owner_id"] == root.id for n in toasts()), WAIT)
        assert [(n["owner_id"], n["task"]) for n in toasts()] == [(root.id, "root-own")]
    finally:
        feed.close()
        relay.stop()
