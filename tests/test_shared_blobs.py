"""Blobs are content-addressed, so two tasks fed the same rows (or a refine
and a feed with the same members) share them. A writer that fails deletes
the blobs it added only while no committed row references them, and a
writer that succeeds puts its blobs again if such a delete took one between
its put and its commit (``datasets._undo_on_failure``): no version is left
pointing at a missing blob."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.store import open_store

X = np.arange(8, dtype=np.float32).reshape(4, 2)
Y = np.array([0, 1, 0, 1])


@pytest.fixture
def two_tasks(tmp_path):
    store, blobs = open_store(None, tmp_path)
    ada = store.create_user("ada", None)
    program = format_program(program_from_shapes([2], [2]))
    return store, blobs, store.create_task(ada.id, "one", program), store.create_task(ada.id, "two", program)


def test_a_failed_feed_keeps_the_blobs_a_version_committed_meanwhile_uses(two_tasks, monkeypatch):
    store, blobs, one, two = two_tasks
    real = store.create_dataset_version

    def another_feed_commits_then_this_one_fails(task_id, **row):
        monkeypatch.setattr(store, "create_dataset_version", real)
        datasets.feed(store, blobs, two, X, Y)  # finds one's new blobs and references them
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(store, "create_dataset_version", another_feed_commits_then_this_one_fails)
    with pytest.raises(RuntimeError, match="went away"):
        datasets.feed(store, blobs, one, X, Y)
    assert store.latest_dataset_version(one.id) is None
    loaded = datasets.load(store, blobs, store.latest_dataset_version(two.id))
    assert np.array_equal(loaded.X, X) and np.array_equal(loaded.y, Y)


def test_a_failed_feed_still_deletes_the_blobs_no_one_references(two_tasks, monkeypatch):
    store, blobs, one, _ = two_tasks
    before = {b.digest for b in blobs.iter_blobs()}

    def fails(task_id, **row):
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(store, "create_dataset_version", fails)
    with pytest.raises(RuntimeError):
        datasets.feed(store, blobs, one, X, Y)
    assert {b.digest for b in blobs.iter_blobs()} == before


def test_a_feed_puts_its_blobs_again_when_a_failing_writer_deleted_them_before_its_commit(two_tasks, monkeypatch):
    store, blobs, one, _ = two_tasks
    real = store.create_dataset_version

    def deleted_then_committed(task_id, **row):
        for digest in (row["members_blob"], row["chunk"].x_blob, row["chunk"].y_blob):
            blobs.delete(digest)  # what another writer's undo did, before any row referenced them
        return real(task_id, **row)

    monkeypatch.setattr(store, "create_dataset_version", deleted_then_committed)
    version = datasets.feed(store, blobs, one, X, Y)
    monkeypatch.setattr(store, "create_dataset_version", real)
    loaded = datasets.load(store, blobs, version)
    assert np.array_equal(loaded.X, X) and np.array_equal(loaded.y, Y)


def test_a_refine_puts_its_members_again_when_a_failing_writer_deleted_them(two_tasks, monkeypatch):
    store, blobs, one, _ = two_tasks
    datasets.feed(store, blobs, one, X, Y)
    real = store.create_dataset_version

    def deleted_then_committed(task_id, **row):
        blobs.delete(row["members_blob"])
        return real(task_id, **row)

    monkeypatch.setattr(store, "create_dataset_version", deleted_then_committed)
    version = datasets.refine(store, blobs, one, drop=[0])
    monkeypatch.setattr(store, "create_dataset_version", real)
    assert list(datasets.load(store, blobs, version).example_ids) == [1, 2, 3]
