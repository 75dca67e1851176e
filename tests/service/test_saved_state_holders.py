"""The saved selector state at a restart: a tag whose job is gone (a save
racing a task's deletion on PostgreSQL leaves one) is passed over, and a
state blob that is lost or damaged makes the service rebuild the selector
from the jobs instead of refusing to start."""

from __future__ import annotations

import sqlalchemy as sa

from ease_jupyter.service.gc import collect_garbage
from ease_jupyter.service.loop import STATE_TAG, saved_state_digest
from ease_jupyter.store import open_store

from .conftest import start


def trained_data_dir(tmp_path, iris):
    running = start(tmp_path)
    running.user("alice")
    try:
        task = running.client("alice").task("iris", input=[4], output=[3])
        task.feed(*iris)
        assert task.wait(timeout=120)
        tokens = running.tokens
    finally:
        running.thread.stop()
    return tokens


def restart_answers(tmp_path, tokens) -> None:
    running = start(tmp_path)
    running.tokens = tokens
    try:
        assert running.service.loop.selector is not None
        assert running.client("alice").task("iris").best()["accuracy"] > 0.5
    finally:
        running.thread.stop()


def test_a_state_tag_of_a_deleted_job_is_passed_over(tmp_path, iris):
    tokens = trained_data_dir(tmp_path, iris)
    store, blobs = open_store(None, tmp_path)
    try:
        holder, digest = saved_state_digest(store)
        gone = max(j.id for j in store.list_jobs()) + 100
        with store.engine.begin() as connection:  # what the race leaves: a newer tag row, its job deleted
            connection.execute(sa.text("INSERT INTO tags (entity, entity_id, key, value) VALUES ('job', :id, :key, :value)"),
                               {"id": gone, "key": STATE_TAG, "value": "0" * 64})
        assert gone in store.find_by_tag("job", STATE_TAG)
        assert saved_state_digest(store) == (holder, digest)
        report = collect_garbage(store, blobs, grace_seconds=0, dry_run=True)
        assert report.missing == 0 and report.referenced > 0
    finally:
        store.close()
    restart_answers(tmp_path, tokens)


def test_a_lost_state_blob_rebuilds_the_selector_at_start(tmp_path, iris):
    tokens = trained_data_dir(tmp_path, iris)
    store, blobs = open_store(None, tmp_path)
    try:
        _, digest = saved_state_digest(store)
        blobs.path(digest).write_bytes(b"damaged")
    finally:
        store.close()
    restart_answers(tmp_path, tokens)
    store, blobs = open_store(None, tmp_path)
    try:
        blobs.path(digest).unlink()
    finally:
        store.close()
    restart_answers(tmp_path, tokens)
