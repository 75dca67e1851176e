"""Deleting a task (``DELETE /tasks/{name}``, ``task.delete()``, ``%easeml
delete``): its versions, jobs, tags, blobs only it used and its place in the
selector go; other tasks, their provenance, blobs and models stay; running
jobs end first; another user's task and an unknown one are 404."""

from __future__ import annotations

import json
import urllib.parse
from types import SimpleNamespace

import numpy as np
import pytest

from ease_jupyter.errors import InvalidStateError, NotFoundError
from ease_jupyter.magics import commands
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service import ServiceConfig, deletion, gc
from ease_jupyter.service.core import Service
from ease_jupyter.service.loop import STATE_TAG, ControlLoop
from ease_jupyter.store import JobStatus
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor, lend_deleted_ids, until

FLAT = format_program(program_from_shapes([2], [2]))


def _data(seed: int, n: int = 16):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    return (rng.normal(size=(n, 2)) + y[:, None] * 3).astype("float32"), y


def _blobs_of(store, task_id: int) -> set[str]:
    refs = {v.members_blob for v in store.list_dataset_versions(task_id)}
    refs |= {d for c in store.list_chunks(task_id) for d in (c.x_blob, c.y_blob)}
    return refs | {j.artifact_blob for j in store.list_jobs(task_id) if j.artifact_blob}


def _view(svc, who: str, name: str) -> dict:
    return {what: svc.call("GET", f"/tasks/{name}/{what}", who).body
            for what in ("versions", "jobs", "provenance?direction=all", "tags")}


def test_deleting_a_task_leaves_other_tasks_and_users_intact(svc, monkeypatch):
    monkeypatch.setattr(gc, "DELETE_GRACE_SECONDS", 0.0)  # the test's blobs are seconds old
    store, blobs = svc.service.store, svc.service.blobs
    X, y = _data(0)
    alice, bob = svc.client("alice"), svc.client("bob")
    gone = alice.task("gone", input=[2], output=[2])
    kept = alice.task("kept", input=[2], output=[2])
    theirs = bob.task("gone", input=[2], output=[2])  # the same name, another user
    gone.feed(X, y)
    gone.feed(*_data(1))
    gone.refine(drop=[0])
    kept.feed(X, y)  # the same arrays: blobs shared with "gone"
    theirs.feed(*_data(2))
    svc.call("PUT", "/tasks/gone/tags", "alice", body={"note": "old"})
    assert all(t.wait(timeout=180) for t in (gone, kept, theirs))
    before = {("alice", "kept"): _view(svc, "alice", "kept"), ("bob", "gone"): _view(svc, "bob", "gone")}
    predictions = kept.infer(X), theirs.infer(X)
    ids = {t: store.task_by_name(store.user_by_name(u).id, n).id
           for t, (u, n) in {"gone": ("alice", "gone"), "kept": ("alice", "kept")}.items()}
    own = _blobs_of(store, ids["gone"]) - _blobs_of(store, ids["kept"]) - _blobs_of(store, theirs.info["id"])
    shared = _blobs_of(store, ids["gone"]) & _blobs_of(store, ids["kept"])
    assert own and shared

    assert svc.call("DELETE", "/tasks/kept", "bob").status == 404  # alice's task, asked by bob
    out = gone.delete()

    assert (out["deleted"], out["versions"], out["name"]) == (True, 3, "gone") and out["jobs"] >= 1
    assert out["blobs_deleted"] >= len(own) and out["bytes_freed"] > 0
    assert not any(blobs.exists(d) for d in own) and all(blobs.exists(d) for d in shared)
    for path in ("", "/versions", "/jobs", "/provenance"):
        assert svc.call("GET", "/tasks/gone" + path, "alice").status == 404
    assert [t["name"] for t in svc.call("GET", "/tasks", "alice").body] == ["kept"]
    assert {("alice", "kept"): _view(svc, "alice", "kept"), ("bob", "gone"): _view(svc, "bob", "gone")} == before
    assert all(np.array_equal(a, b) for a, b in zip((kept.infer(X), theirs.infer(X)), predictions))
    loop = svc.service.loop
    assert not [t for t in loop.state.tenants.values() if t.task_id == ids["gone"]]
    assert not [u for u in loop.selector.users if u.startswith(f"{ids['gone']}/")]
    holder = max(store.find_by_tag("job", STATE_TAG))  # the saved state moved to a job that is left
    assert blobs.exists(store.tags("job", holder)[STATE_TAG]) and loop.saved.load() is not None
    # Gone for good: a second delete and an unknown name are 404; the name is free again.
    assert svc.call("DELETE", "/tasks/gone", "alice").status == 404
    assert svc.call("DELETE", "/tasks/never", "alice").status == 404
    again = alice.task("gone", input=[2], output=[2])
    assert again.versions() == [] and svc.call("GET", "/tasks/gone/tags", "alice").body == {}


def test_a_delete_answers_what_left_her_quota_whoever_else_holds_the_same_bytes(svc, monkeypatch):
    """A delete's counts are what left the owner's quota, never what left the
    blob store: two tasks of hers alike but for whether bob holds the same
    bytes answer the same, so she cannot probe for other users' data."""
    monkeypatch.setattr(gc, "DELETE_GRACE_SECONDS", 0.0)
    store, blobs = svc.service.store, svc.service.blobs
    X, y = _data(0)
    svc.client("bob").task("his", input=[2], output=[2]).feed(X, y)
    alice = svc.client("alice")
    answers = {}
    for name, inputs in (("held", X), ("unique", _data(5)[0])):  # bob's very arrays; arrays nobody else has
        task = alice.task(name, input=[2], output=[2])
        task.feed(inputs, y)
        task.cancel()
        sizes = {d: blobs.size(d) for d in _blobs_of(store, task.info["id"])}
        answers[name] = task.delete()
        assert answers[name]["blobs_deleted"] == len(sizes) and answers[name]["bytes_freed"] == sum(sizes.values())
    assert (answers["held"]["blobs_deleted"], answers["held"]["bytes_freed"]) == \
        (answers["unique"]["blobs_deleted"], answers["unique"]["bytes_freed"])
    assert svc.client("bob").task("his").data()[0].size == 16  # bob's arrays stayed stored


def test_a_delete_waits_for_running_jobs_and_the_selector_forgets_the_task(tmp_path):
    service = Service(ServiceConfig(db_url="memory://", data_dir=tmp_path, torch=False))
    store, blobs = service.store, service.blobs
    manual = ManualExecutor(store, workers=2)
    service.loop = loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: manual}, tick_seconds=0.01)
    loop.recover()
    alice = store.create_user("alice", None)
    for name, seed in (("busy", 0), ("other", 1)):
        service.feed(alice, service.create_task(alice, {"name": name, "input": [2], "output": [2]})[0]["name"],
                     {"X": _data(seed)[0].tolist(), "y": _data(seed)[1].tolist()})
    loop.step()
    busy = store.task_by_name(alice.id, "busy")
    assert any(r.task_id == busy.id for r in loop.state.running.values())

    with pytest.raises(InvalidStateError, match="still running after 0.2 s"):
        deletion.delete_task(store, blobs, loop, store.set_task_cancelled(busy.id, True), wait_seconds=0.2)
    assert store.get_task(busy.id).cancelled and store.list_dataset_versions(busy.id)  # nothing deleted

    manual.finish_all()
    loop.step()  # collects the finished jobs; the cancelled task gets no new pick
    assert not any(r.task_id == busy.id for r in loop.state.running.values())
    out = service.delete_task(alice, "busy")
    assert out["deleted"] and out["jobs"] >= 1
    with pytest.raises(NotFoundError):
        store.get_task(busy.id)
    assert [t.task_id for t in loop.state.tenants.values()] == [store.task_by_name(alice.id, "other").id]
    assert not [u for u in loop.selector.users if u.startswith(f"{busy.id}/")]
    loop.step()  # the loop goes on with the other task
    manual.finish_all()
    loop.step()
    other = store.task_by_name(alice.id, "other")
    assert store.list_jobs(other.id, status=JobStatus.SUCCEEDED)
    with pytest.raises(NotFoundError):
        service.delete_task(alice, "busy")

    for _ in range(20):  # train "other" out: its tenant stays in the selector, idle
        manual.finish_all()
        loop.step()
    assert not loop.state.running and [t.task_id for t in loop.state.tenants.values()] == [other.id]
    service.delete_task(alice, "other")  # no turn in between: the deletion itself drops the tenant
    assert loop.state.tenants == {} and list(loop.selector.users) == []
    service.store.close()


def test_the_magic_asks_before_deleting(svc):
    session = commands.Session()
    session.client = svc.client("alice")
    svc.client("alice").task("t", input=[2], output=[2])
    args = SimpleNamespace(command="delete", name="t", values=[], yes=False)
    asked: list[str] = []

    kept = commands.delete(session, args, {}, ask=lambda q: asked.append(q) or "no")
    assert "not deleted" in kept.title and svc.call("GET", "/tasks/t", "alice").status == 200
    assert "cannot be undone" in asked[0] and "'t'" in asked[0]

    done = commands.delete(session, args, {}, ask=lambda q: "t")
    assert done.title.startswith("task t deleted") and svc.call("GET", "/tasks/t", "alice").status == 404

    svc.client("alice").task("u", input=[2], output=[2])
    args = SimpleNamespace(command="delete", name="u", values=[], yes=True)
    assert commands.delete(session, args, {}, ask=lambda q: pytest.fail("asked despite --yes")).data["deleted"]
    with pytest.raises(NotFoundError):  # unknown: an error before any question
        commands.delete(session, SimpleNamespace(command="delete", name="nope", values=[], yes=False), {},
                        ask=lambda q: pytest.fail("asked about a task that does not exist"))
    with pytest.raises(Exception, match="words"):  # "delete my task" never deletes "my"
        commands.delete(session, SimpleNamespace(command="delete", name="my", values=["task"], yes=True), {})


def test_feeding_the_same_rows_over_http_answers_200_and_counts_them(svc):
    t = svc.client("alice").task("f", input=[2], output=[2])
    X, y = _data(3)
    first = svc.call("POST", "/tasks/f/feed", "alice", body={"X": X.tolist(), "y": y.tolist()})
    assert first.status == 201 and (first.body["new"], first.body["duplicates"], first.body["created"]) == (16, 0, True)
    again = svc.call("POST", "/tasks/f/feed", "alice", body={"X": X.tolist(), "y": y.tolist()})
    assert again.status == 200 and (again.body["new"], again.body["duplicates"]) == (0, 16)
    assert again.body["id"] == first.body["id"] and again.body["n_examples"] == 16
    appended = t.feed(X, y, mode="append")
    assert (appended["number"], appended["n_examples"], appended["mode"]) == (2, 32, "append")
    bad = svc.call("POST", "/tasks/f/feed", "alice", body={"X": X.tolist(), "y": y.tolist(), "mode": "upsert"})
    assert bad.status == 400 and bad.body["error"]["field"] == "mode"
    assert len(svc.call("GET", "/tasks/f/versions", "alice").body) == 2
    session = commands.Session()
    session.client = svc.client("alice")
    shown = commands.feed(session, SimpleNamespace(command="feed", name="f", values=["X", "y"], mode=None),
                          {"X": X, "y": y})
    assert "fed 0 new row(s), 16 already there, no new version" in shown.title
    assert until(lambda: t.refresh()["idle"], 120)


def test_a_deleted_tasks_name_can_be_declared_again_even_if_a_reader_cached_it(svc):
    """A read racing the delete may put the deleted task back in the
    service's by-name cache; declaring the name again must still create it."""
    alice = svc.client("alice")
    alice.task("again", input=[2], output=[2])
    caller = svc.service.store.user_by_name("alice")
    stale = svc.service._task(caller, "again")
    assert svc.call("DELETE", "/tasks/again", "alice").status == 200
    svc.service._task_cache[(caller.id, "again")] = stale  # the racing reader's late write
    made = svc.call("POST", "/tasks", "alice", body={"name": "again", "input": [3], "output": [2]})
    assert made.status == 201, made.body
    assert made.body["id"] != stale.id or made.body["program"] != stale.program


def _lose_the_first_answer(monkeypatch, path: str) -> list[int]:
    """The first DELETE of ``path`` reaches the service and is answered, but
    the answer is lost (the connection breaks while it is read). Returns the
    statuses the service sent for that path's DELETEs, one per request."""
    import http.client

    real = http.client.HTTPConnection.getresponse
    statuses: list[int] = []

    def getresponse(self):
        response = real(self)
        if (getattr(self, "_method", None), getattr(self, "_easeml_path", None)) == ("DELETE", path):
            statuses.append(response.status)
            if len(statuses) == 1:
                response.read()  # the service did answer; the client never sees it
                self.close()
                raise ConnectionResetError("the connection broke before the answer arrived")
        return response

    real_request = http.client.HTTPConnection.request

    def request(self, method, url, *args, **kwargs):
        self._easeml_path = url.split("?")[0]  # Task.delete adds ?id=
        return real_request(self, method, url, *args, **kwargs)

    monkeypatch.setattr(http.client.HTTPConnection, "getresponse", getresponse)
    monkeypatch.setattr(http.client.HTTPConnection, "request", request)
    return statuses


def test_a_delete_sent_again_after_a_lost_answer_is_success_for_her_and_a_plain_404_for_all(svc, monkeypatch):
    """The transport sends a DELETE again when its reused connection broke
    after sending (client._REPEATABLE): the second one meets a task that is
    gone. Task.delete() takes that 404 as done; the service's 404 stays the
    one a never-existing name and another user's task get, so it says nothing
    about whose tasks existed."""
    from ease_jupyter.client import Task

    alice = svc.client("alice")
    task = alice.task("gone", input=[2], output=[2])  # this request opens the connection the DELETE reuses
    svc.client("bob").task("bobs", input=[2], output=[2])
    statuses = _lose_the_first_answer(monkeypatch, "/api/v1/tasks/gone")
    out = task.delete()
    assert statuses == [200, 404]  # deleted by the first request, answered 404 to the one sent again
    assert out == {**out, "id": task.info["id"], "name": "gone", "deleted": True, "already_deleted": True}
    assert svc.call("GET", "/tasks/gone", "alice").status == 404
    # To each caller, every 404 reads the same (but for the name asked), whether the task
    # was hers and deleted just now, another user's and alive, or never anybody's.
    for who, names in (("alice", ("gone", "bobs", "never")), ("bob", ("gone", "never"))):
        answers = [svc.call("DELETE", f"/tasks/{name}", who) for name in names]
        assert [a.status for a in answers] == [404] * len(names)
        assert len({json.dumps(a.body).replace(repr(n), "'X'") for a, n in zip(answers, names)}) == 1, answers
    assert svc.call("GET", "/tasks/bobs", "bob").status == 200
    # A Task she made by hand, never shown by the service, still raises.
    with pytest.raises(NotFoundError):
        Task(alice, {"name": "never"}).delete()


def test_deleting_again_after_an_answer_lost_on_a_new_connection_is_success(svc, monkeypatch):
    """On a connection that was not reused the transport does not send again:
    the lost answer is her error, and her delete() again is done."""
    alice = svc.client("alice")
    task = alice.task("gone", input=[2], output=[2])
    alice.close()  # the DELETE opens a new connection
    statuses = _lose_the_first_answer(monkeypatch, "/api/v1/tasks/gone")
    with pytest.raises(ConnectionResetError):
        task.delete()
    assert statuses == [200] and svc.call("GET", "/tasks/gone", "alice").status == 404
    again = task.delete()
    assert statuses == [200, 404] and again["deleted"] and again["already_deleted"]


def test_a_delete_sent_again_leaves_a_task_declared_under_its_name_since(svc, monkeypatch):
    """Task.delete names its task (``?id=&created_at=``): when its first
    request deleted the task but the answer was lost, and the name was
    declared again meanwhile (another notebook of hers), the delete sent
    again meets another task and is answered 404, the plain 404 of a
    missing task. Here the store gives the new task the deleted one's id (as
    a SQLite database from before migration 0004 can), so the id alone would
    not tell them apart."""
    lend_deleted_ids(monkeypatch, svc.service.store)
    alice = svc.client("alice")
    old = alice.task("reused", input=[2], output=[2])
    assert svc.call("DELETE", "/tasks/reused", "alice").status == 200  # the first request: its answer lost
    new = alice.task("reused", input=[3], output=[2])
    assert new.info["id"] == old.info["id"] and new.info["created_at"] != old.info["created_at"]

    out = old.delete()  # sent again
    assert (out["already_deleted"], out["id"]) == (True, old.info["id"])
    kept = svc.call("GET", "/tasks/reused", "alice")
    assert kept.status == 200 and kept.body["program"] == new.program


def _which(task: dict) -> str:
    return f"id={task['id']}&created_at={urllib.parse.quote(task['created_at'])}"


def test_a_delete_naming_another_task_of_the_name_is_the_plain_404(svc):
    """With ``?id=`` (and ``created_at=``), only that task of the name is
    deleted; any other answer is the 404 every caller gets for a name she
    has no task by, whoever's task has the name."""
    alice, bob = svc.client("alice"), svc.client("bob")
    alice.task("spare", input=[2], output=[2])
    first = alice.task("t", input=[2], output=[2]).info
    assert svc.call("DELETE", "/tasks/t", "alice").status == 200
    svc.client("bob").task("later", input=[2], output=[2])  # so that the next task gets another id
    task = alice.task("t", input=[2], output=[2]).info
    bobs = bob.task("bobs", input=[2], output=[2]).info
    assert task["id"] != first["id"]
    asked = {"alice": (f"t?id={first['id']}", f"t?created_at={urllib.parse.quote(first['created_at'])}",
                       f"t?id={task['id']}&created_at={urllib.parse.quote(first['created_at'])}",
                       f"bobs?{_which(bobs)}", "never", "never?id=1"),
             "bob": (f"t?{_which(task)}", f"bobs?id={task['id']}", "never?id=1")}
    for who, paths in asked.items():
        answers = [svc.call("DELETE", f"/tasks/{path}", who) for path in paths]
        assert [a.status for a in answers] == [404] * len(paths), answers
        names = [path.split("?")[0] for path in paths]
        assert len({json.dumps(a.body).replace(repr(n), "'X'") for a, n in zip(answers, names)}) == 1, answers
    assert svc.call("GET", "/tasks/t", "alice").body["id"] == task["id"]
    assert svc.call("GET", "/tasks/bobs", "bob").status == 200
    for path, field in (("t?id=first", "id"), ("t?created_at=yesterday", "created_at"),
                        ("t?created_at=2024-01-01T00:00:00", "created_at")):  # no UTC offset
        bad = svc.call("DELETE", f"/tasks/{path}", "alice")
        assert bad.status == 400 and bad.body["error"]["field"] == field, bad.body
    gone = svc.call("DELETE", f"/tasks/t?{_which(task)}", "alice")
    assert gone.status == 200 and gone.body["id"] == task["id"]
    assert svc.call("GET", "/tasks/t", "alice").status == 404
