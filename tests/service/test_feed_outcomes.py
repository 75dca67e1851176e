"""What a feed leaves behind when it ends in an error, and the labels it
may take (``service/feeding.py``, ``Service.feed``, ``task_schema``): the
class names a version uses are stored before it; a feed that failed, or a
retry that found its rows stored, still reaches the control loop; named
labels never take over a task's class indices; an integer too large for
int64 is an out-of-range index, not a name; a user's feeds share one feed
process; a forget that finds a feed process dead replaces it."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.errors import DataError
from ease_jupyter.service import ServiceConfig
from ease_jupyter.service.core import Service
from ease_jupyter.service.feed_processes import FeedProcesses
from ease_jupyter.service.task_schema import CLASSES_TAG, class_names

X2 = [[1.0, 2.0], [3.0, 4.0]]


@pytest.fixture
def service(tmp_path):
    svc = Service(ServiceConfig(data_dir=tmp_path, executor="thread", torch=False))  # the loop is not started
    ada = svc.store.create_user("ada", None)
    svc.create_task(ada, {"name": "pets", "input": [2], "output": [3]})
    yield svc, ada
    svc.stop()


def test_the_class_names_a_version_uses_are_stored_before_it(service, monkeypatch):
    svc, ada = service
    real = svc.store.set_tag
    failures = []

    def fails_once(entity, entity_id, key, value):
        if key == CLASSES_TAG and not failures:
            failures.append(key)
            raise RuntimeError("the database is locked")
        return real(entity, entity_id, key, value)

    monkeypatch.setattr(svc.store, "set_tag", fails_once)
    with pytest.raises(RuntimeError, match="locked"):
        svc.feed(ada, "pets", {"X": X2, "y": ["cat", "dog"]})
    assert svc.feed(ada, "pets", {"X": X2, "y": ["cat", "dog"]})["created"]  # the retry stores it, names first
    svc.feed(ada, "pets", {"X": [[5.0, 6.0]], "y": ["bird"]})
    task = svc._task(ada, "pets")
    loaded = datasets.load(svc.store, svc.blobs, svc.store.latest_dataset_version(task.id))
    names = class_names(svc.store, task)
    assert [names[i] for i in loaded.y] == ["cat", "dog", "bird"]


def test_every_feed_outcome_reaches_the_loop(service, monkeypatch):
    svc, ada = service
    told = []
    monkeypatch.setattr(svc.loop, "notify", lambda task_id=None: told.append(task_id))
    task = svc._task(ada, "pets")
    svc.feed(ada, "pets", {"X": X2, "y": [0, 1]})
    after_stored = len(told)
    assert svc.feed(ada, "pets", {"X": X2, "y": [0, 1]})["created"] is False  # a retry that finds it stored
    after_retry = len(told)
    real = svc.feeder.feed

    def stored_then_failed(*args, **kwargs):
        real(*args, **kwargs)
        raise RuntimeError("its process was killed after the commit")

    monkeypatch.setattr(svc.feeder, "feed", stored_then_failed)
    with pytest.raises(RuntimeError):
        svc.feed(ada, "pets", {"X": [[7.0, 8.0]], "y": [2]})
    assert 0 < after_stored < after_retry < len(told) and set(told) == {task.id}


def test_named_labels_never_take_over_a_tasks_class_indices(service):
    svc, ada = service
    svc.feed(ada, "pets", {"X": X2, "y": [0, 2]})
    with pytest.raises(DataError, match="y: found class names such as 'zebra', expected class indices 0 to 2"):
        svc.feed(ada, "pets", {"X": [[5.0, 6.0]], "y": ["zebra"]})
    assert class_names(svc.store, svc._task(ada, "pets")) is None


def test_an_integer_too_large_for_int64_is_an_out_of_range_index_not_a_name(service):
    svc, ada = service
    with pytest.raises(DataError, match=r"y\[0\].*out of range.*expected a class index in \[0, 3\)"):
        svc.feed(ada, "pets", {"X": [[5.0, 6.0]], "y": [10**30]})
    assert class_names(svc.store, svc._task(ada, "pets")) is None


def test_a_users_feeds_share_one_feed_process_and_a_dead_one_is_replaced_at_a_forget(tmp_path):
    svc = Service(ServiceConfig(data_dir=tmp_path, executor="thread", torch=False))
    processes = FeedProcesses(2, None, tmp_path, None)
    try:
        ada = svc.store.create_user("ada", None)
        tasks = [svc.create_task(ada, {"name": f"t{i}", "input": [2], "output": [3]}) and svc._task(ada, f"t{i}")
                 for i in range(4)]
        assert len({processes.shard(t) for t in tasks}) == 1  # her quota is checked by one process
        dead = processes.pids()[0]
        import os
        import signal

        os.kill(dead, signal.SIGKILL)
        processes.forget(ada.id)
        assert dead not in processes.pids()
        fed = processes.feed(ada, tasks[0], b'{"X": [[1.0, 2.0]], "y": [1]}')
        assert fed.created
    finally:
        processes.close()
        svc.stop()
