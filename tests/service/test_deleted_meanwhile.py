"""A task deleted by another notebook of hers while a request of hers
reads it answers as a name she has no task by (the same 404 a missing
task gets), never with the store's id of the task that was."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter.service import core


@pytest.mark.parametrize("method, path, body", [("POST", "/tasks/gone/infer", {"X": [[0.0, 0.0, 0.0, 0.0]]}),
                                                ("GET", "/tasks/gone/model", None),
                                                ("GET", "/tasks/gone/history", None)])
def test_a_task_deleted_during_her_request_is_a_missing_name(svc, monkeypatch, method, path, body):
    task = svc.client("alice").task("gone", input=[4], output=[3])
    rng = np.random.default_rng(0)
    task.feed(rng.normal(size=(12, 4)).astype("float32"), rng.integers(0, 3, 12))
    assert task.wait(timeout=120)  # trained, and nothing of it runs when it goes
    service = svc.service
    stored = service.store.task_by_name(service.store.user_by_name("alice").id, "gone")
    looked_up = service._task

    def deleted_right_after_the_look_up(caller, name):
        found = looked_up(caller, name)
        monkeypatch.setattr(service, "_task", looked_up)  # (the delete's own look-up)
        service.delete_task(caller, name)  # her other notebook's DELETE, as the route runs it
        return found

    monkeypatch.setattr(service, "_task", deleted_right_after_the_look_up)
    reply = svc.call(method, path, "alice", body=body)
    missing = svc.call(method, path.replace("gone", "never"), "alice", body=body)

    assert reply.status == 404, reply.body
    assert reply.body["error"]["message"] == missing.body["error"]["message"].replace("never", "gone")
    assert f"task {stored.id}" not in reply.body["error"]["message"]
