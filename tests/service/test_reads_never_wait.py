"""A read of a task never waits for the control loop: right after a feed,
while no turn of the loop can run (its lock is held here), ``GET
/tasks/{name}`` answers at once with the new version, the arms the selector
will explore for it, and ``idle: false``."""

from __future__ import annotations

import time

from .conftest import IRIS_MODELS


def test_task_read_right_after_a_feed_does_not_wait_for_a_turn(svc, iris):
    X, y = iris
    task = svc.client("alice").task("iris", input=[4], output=[3])
    loop = svc.service.loop
    with loop._lock:  # no turn can take the feed in until this block ends
        task.feed(X[:30], y[:30])
        t0 = time.monotonic()
        reply = svc.call("GET", "/tasks/iris", "alice")
        waited = time.monotonic() - t0
    assert reply.status == 200, reply.body
    info = reply.body
    assert info["latest_version"]["number"] == 1
    assert info["arms"] == info["candidates"] == IRIS_MODELS
    assert info["idle"] is False
    # a turn would have been waited for up to seconds; a read takes milliseconds
    assert waited < 2.0, f"the read waited {waited:.2f} s for the control loop"


def test_task_read_counts_no_arms_without_data_or_when_cancelled(svc, iris):
    X, y = iris
    task = svc.client("alice").task("iris", input=[4], output=[3])
    assert svc.call("GET", "/tasks/iris", "alice").body["arms"] == 0  # nothing fed yet
    task.feed(X[:30], y[:30])
    assert svc.call("GET", "/tasks/iris", "alice").body["arms"] == IRIS_MODELS
    task.cancel()
    assert svc.call("GET", "/tasks/iris", "alice").body["arms"] == 0
