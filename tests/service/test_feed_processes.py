"""Feeds in processes of their own (``service/feed_processes.py``): a
service with ``feed_processes`` stores every HTTP feed there, with the same
answers, errors and quota as in its own process, trains on what they
stored, replaces a feed process that died, and stops them with itself."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from ease_jupyter.service import ServiceConfig
from ease_jupyter.service.arrays import to_npy_bytes
from ease_jupyter.service.testing import alive

from .conftest import lend_deleted_ids, serving, start, until

KIB = 1024
QUOTA = 20 * KIB


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    def not_here(*args, **kwargs):
        raise AssertionError("a feed ran in the service's own process")

    with serving(tmp_path_factory.mktemp("feeds"), "alice", "bob", "carol", "dave", "erin", "frank", "gina",
                 torch=False, quota_bytes=QUOTA, feed_processes=1) as running:
        running.service.feeder.feed = not_here
        yield running


def _task(s, who: str, name: str) -> None:
    assert s.call("POST", "/tasks", who, body={"name": name, "input": [4], "output": [3]}).status == 201


def test_a_feed_stores_its_version_elsewhere_and_the_loop_trains_on_it(fed, iris):
    _task(fed, "alice", "iris")
    body = {"X": iris[0].tolist(), "y": iris[1].tolist()}

    first = fed.call("POST", "/tasks/iris/feed", "alice", body=body)
    again = fed.call("POST", "/tasks/iris/feed", "alice", body=body)

    assert first.status == 201 and (first.body["number"], first.body["n_examples"]) == (1, 150), first.body
    assert (first.body["created"], first.body["new"], first.body["duplicates"]) == (True, 150, 0)
    assert again.status == 200 and (again.body["created"], again.body["duplicates"]) == (False, 150)
    assert [v["number"] for v in fed.call("GET", "/tasks/iris/versions", "alice").body] == [1]
    assert until(lambda: fed.call("GET", "/tasks/iris/best", "alice").status == 200, 60)  # the loop was told


def test_a_feed_called_in_the_service_goes_to_the_feed_process_too(fed, iris):
    """``Service.feed`` with a JSON object takes the same path as the route,
    so a task's feeds never run in two processes at once."""
    _task(fed, "frank", "own")
    frank = fed.service.store.user_by_name("frank")
    out = fed.service.feed(frank, "own", {"X": iris[0].tolist(), "y": iris[1].tolist()})
    assert (out["created"], out["n_examples"]) == (True, 150)


def test_errors_from_the_feed_process_name_the_field(fed):
    _task(fed, "bob", "t")
    bad_shape = fed.call("POST", "/tasks/t/feed", "bob", body={"X": [[1.0, 2.0]], "y": [0]})
    bad_json = fed.call("POST", "/tasks/t/feed", "bob", raw=b"{not json")
    nested = fed.call("POST", "/tasks/t/feed", "bob", raw=b"[" * 5000 + b"]" * 5000)
    missing = fed.call("POST", "/tasks/nothing/feed", "bob", body={"X": [[1.0] * 4], "y": [0]})

    assert bad_shape.status == 400 and bad_shape.body["error"]["field"].startswith("X"), bad_shape.body
    assert bad_json.status == 400 and bad_json.body["error"]["field"] == "body", bad_json.body
    assert nested.status == 400 and nested.body["error"]["field"] == "body", nested.body
    assert missing.status == 404
    assert fed.call("GET", "/tasks/t/versions", "bob").body == []


def test_the_quota_holds_in_the_feed_process_and_an_upload_feed_consumes_it(fed):
    _task(fed, "carol", "u")
    X = np.random.default_rng(0).normal(size=(550, 4)).astype("float32")  # 9 KB .npy
    uid = fed.call("POST", "/uploads", "carol").body["id"]
    assert fed.call("PUT", f"/uploads/{uid}?offset=0", "carol", raw=to_npy_bytes(X)).status == 200

    fed_upload = fed.call("POST", "/tasks/u/feed", "carol", body={"X": {"upload": uid}, "y": [0] * 550})
    over = fed.call("POST", "/tasks/u/feed", "carol", body={"X": (X + 1).tolist(), "y": [1] * 550})

    assert fed_upload.status == 201, fed_upload.body
    assert fed.call("GET", f"/uploads/{uid}", "carol").status == 404  # consumed
    assert over.status == 413, over.body
    error = over.body["error"]
    assert (error["code"], error["field"], error["expected"]) == ("quota_exceeded", "quota", f"at most {QUOTA} bytes")
    assert [v["number"] for v in fed.call("GET", "/tasks/u/versions", "carol").body] == [1]


def test_deleting_a_task_makes_the_feed_process_count_again(fed, monkeypatch):
    """After a delete, a store may give a new version the deleted one's id
    (lent here as a SQLite database from before migration 0004 can), so the
    owner's stamp is the one the feed process counted at; the service tells
    the process to forget its count, or it would refuse this last feed."""
    lend_deleted_ids(monkeypatch, fed.service.store)
    rng = np.random.default_rng(1)
    rows = lambda n: {"X": rng.normal(size=(n, 4)).astype("float32").tolist(), "y": [0] * n}  # noqa: E731
    for name in ("kept", "gone"):
        _task(fed, "erin", name)
    assert fed.call("POST", "/tasks/kept/feed", "erin", body=rows(12)).status == 201
    assert fed.call("POST", "/tasks/gone/feed", "erin", body=rows(500)).status == 201  # about 17 KB of 20 KiB
    assert fed.call("DELETE", "/tasks/gone", "erin").status == 200
    assert fed.call("POST", "/tasks/kept/refine", "erin", body={"drop": [0]}).status == 201  # takes gone's id

    reply = fed.call("POST", "/tasks/kept/feed", "erin", body=rows(400))  # about 13 KB

    assert reply.status == 201, reply.body


def test_a_killed_feed_process_answers_503_at_most_once_and_is_replaced(fed, iris):
    """Killed just before a feed: that feed is stored by its replacement
    (the pool knew) or answered 503, whether stored unknown (it did not
    yet); the next one is stored, and nothing is stored twice."""
    _task(fed, "dave", "k")
    (pid,) = fed.service.feed_processes.pids()
    os.kill(pid, signal.SIGKILL)
    body = {"X": iris[0].tolist(), "y": iris[1].tolist(), "mode": "append"}

    first = fed.call("POST", "/tasks/k/feed", "dave", body=body)
    again = fed.call("POST", "/tasks/k/feed", "dave", body=body)

    assert first.status in (201, 503), first.body
    if first.status == 503:
        assert (first.body["error"]["code"], first.body["error"]["field"]) == ("store_unavailable", "feed")
    assert again.status == 201, again.body
    stored = fed.call("GET", "/tasks/k/versions", "dave").body
    assert len(stored) == (2 if first.status == 201 else 1) and again.body["number"] == len(stored)
    assert fed.service.feed_processes.pids() != [pid]


def test_a_feed_after_the_feed_process_died_idle_is_stored_not_refused(fed, iris):
    """A feed process that died while idle (the OOM killer, say) is replaced
    when the next feed comes, and that feed, which never reached it, is
    stored: a 503 would tell her its fate is unknown when it is not."""
    _task(fed, "gina", "idle")
    feeds = fed.service.feed_processes
    pool = feeds._pools[feeds.shard(fed.service.store.task_by_name(fed.service.store.user_by_name("gina").id,
                                                                     "idle"))]
    (pid,) = feeds.pids()
    os.kill(pid, signal.SIGKILL)
    assert until(lambda: pool._broken, 10)  # the pool has seen its process go

    reply = fed.call("POST", "/tasks/idle/feed", "gina", body={"X": [[0.5, 1.0, 1.5, 2.0]] * 12, "y": [0, 1, 2] * 4})

    assert reply.status == 201, reply.body
    assert [v["number"] for v in fed.call("GET", "/tasks/idle/versions", "gina").body] == [1]
    assert feeds.pids() != [pid]


def test_the_feed_processes_stop_with_the_service(tmp_path):
    running = start(tmp_path, torch=False, feed_processes=2)
    pids = running.service.feed_processes.pids()
    assert len(set(pids)) == 2 and os.getpid() not in pids
    running.thread.stop()
    assert until(lambda: not any(alive(p) for p in pids), 10)



@pytest.mark.parametrize("config, field", [({"feed_processes": -1}, "feed_processes"),
                                           ({"feed_processes": 1, "db_url": "memory://"}, "feed_processes")])
def test_bad_feed_process_settings_name_the_field(config, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        ServiceConfig(**config)
