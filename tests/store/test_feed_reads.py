"""The reads of a feed's path, each in one statement where the store can:
``feed_state`` and ``owner_blobs_stamp`` agree with the single-purpose
calls, and unknown tasks and users are NotFoundError, not empty answers."""

from __future__ import annotations

import pytest

from ease_jupyter.errors import NotFoundError
from ease_jupyter.store import JobStatus, JobUpdate, Store

from .helpers import feed


def test_feed_state_is_the_latest_version_and_the_chunks(store: Store) -> None:
    ada = store.create_user("ada", "h-ada")
    task = store.create_task(ada.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    other = store.create_task(ada.id, "o", "x: {a: [4]} -> y: {c: [3]}")
    assert store.feed_state(task.id) == (None, ())
    feed(store, task.id, 5, seed="a")
    feed(store, other.id, 2, seed="x")
    v2 = feed(store, task.id, 3, seed="b")
    latest, chunks = store.feed_state(task.id)
    assert latest == v2 == store.latest_dataset_version(task.id)
    assert chunks == store.list_chunks(task.id) and [c.count for c in chunks] == [5, 3]
    with pytest.raises(NotFoundError, match="task 999: not found"):
        store.feed_state(999)


def test_tags_of_an_unknown_entity_are_not_found(store: Store) -> None:
    ada = store.create_user("ada", "h-ada")
    task = store.create_task(ada.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    assert store.tags("task", task.id) == {}
    store.set_tag("task", task.id, "k", "1")
    store.set_tag("task", task.id, "k", "2")
    assert store.tags("task", task.id) == {"k": "2"}
    for entity, what in (("task", "task"), ("user", "user"), ("dataset", "dataset version"), ("job", "job")):
        with pytest.raises(NotFoundError, match=f"{what} 999: not found"):
            store.tags(entity, 999)
        with pytest.raises(NotFoundError, match=f"{what} 999: not found"):
            store.set_tag(entity, 999, "k", "v")


def test_the_owner_blobs_stamp_moves_with_every_referencing_write(store: Store) -> None:
    ada = store.create_user("ada", "h-ada")
    bob = store.create_user("bob", "h-bob")
    task = store.create_task(ada.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    theirs = store.create_task(bob.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    stamps = [store.owner_blobs_stamp(ada.id)]
    v1 = feed(store, task.id, 5, seed="a")
    stamps.append(store.owner_blobs_stamp(ada.id))
    feed(store, theirs.id, 5, seed="b")  # another owner's write
    assert store.owner_blobs_stamp(ada.id) == stamps[-1]
    job = store.create_job(task.id, v1.id, "lr", {})
    store.update_job(job.id, JobStatus.RUNNING)
    assert store.owner_blobs_stamp(ada.id) == stamps[-1]  # no model yet
    store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, artifact_blob="ab" * 32))
    stamps.append(store.owner_blobs_stamp(ada.id))
    if stamps[0] is not None:  # (a store without a cheap stamp says None)
        assert len(set(stamps)) == len(stamps)
    with pytest.raises(NotFoundError, match="user 999: not found"):
        store.owner_blobs_stamp(999) if stamps[0] is not None else store.owner_blobs(999)


def test_feed_reads_are_the_tags_the_feed_state_and_the_stamp(store: Store) -> None:
    ada = store.create_user("ada", "h-ada")
    task = store.create_task(ada.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    assert store.feed_reads(task.id, ada.id) == ({}, None, (), store.owner_blobs_stamp(ada.id))
    store.set_tag("task", task.id, "classes", '["cat"]')
    feed(store, task.id, 5, seed="a")
    feed(store, task.id, 3, seed="b")
    tags, latest, chunks, stamp = store.feed_reads(task.id, ada.id)
    assert tags == store.tags("task", task.id) == {"classes": '["cat"]'}
    assert (latest, chunks) == store.feed_state(task.id) and latest.number == 2 and len(chunks) == 2
    assert stamp == store.owner_blobs_stamp(ada.id)
    with pytest.raises(NotFoundError, match="task 999: not found"):
        store.feed_reads(999, ada.id)
    if stamp is not None:  # (a store without a cheap stamp says None)
        with pytest.raises(NotFoundError, match="user 999: not found"):
            store.feed_reads(task.id, 999)
