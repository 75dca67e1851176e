"""``easeml users delete NAME [--yes] [--hub] [--data-dir DIR | --db URL]``:
the store's user deletion from the command line, with no service running
(it refuses while one holds the data dir). Her tasks, rows, unshared blobs,
uploads, tags and account go; bob's task, the blobs he shares with her
included, reads back exactly. It asks for the name unless --yes, and
refuses without --yes where nobody can answer."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.errors import NotFoundError
from ease_jupyter.service import ServiceConfig, budget, gc
from ease_jupyter.service.auth import create_user, hash_token
from ease_jupyter.service.core import Service
from ease_jupyter.service.embedded import DataDirLock
from ease_jupyter.store import JobStatus, JobUpdate, open_store

CAP = budget.CAP_PREFIX + "seconds"


def _data(seed: int, n: int = 12):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 2)).astype("float32"), np.arange(n) % 2


def _blobs_of(store, task_id: int) -> set[str]:
    refs = {v.members_blob for v in store.list_dataset_versions(task_id)}
    refs |= {d for c in store.list_chunks(task_id) for d in (c.x_blob, c.y_blob)}
    return refs | {j.artifact_blob for j in store.list_jobs(task_id) if j.artifact_blob}


def _rows(store, blobs, task_id: int):
    chunks = store.list_chunks(task_id)
    return (np.concatenate([blobs.get_array(c.x_blob) for c in chunks]),
            np.concatenate([blobs.get_array(c.y_blob) for c in chunks]))


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A stopped service's data dir: bob's task, and alice's two tasks (one
    fed bob's very rows), a trained model, a budget cap and an upload of hers."""
    monkeypatch.setattr(gc, "DELETE_GRACE_SECONDS", 0.0)  # the test's blobs are seconds old
    service = Service(ServiceConfig(data_dir=tmp_path, torch=False, executor="thread"))
    store, blobs = service.store, service.blobs
    create_user(store, "admin", admin=True)
    alice, token = create_user(store, "alice")
    bob, _ = create_user(store, "bob")
    X, y = _data(0)
    for who, name, (x, labels) in ((bob, "his", (X, y)), (alice, "shared", (X, y)), (alice, "own", _data(1))):
        service.create_task(who, {"name": name, "input": [2], "output": [2]})
        service.feed(who, name, {"X": x.tolist(), "y": labels.tolist()})
    own = store.task_by_name(alice.id, "own")
    job = store.create_job(own.id, store.latest_dataset_version(own.id).id, "logreg", {})
    store.update_job(job.id, JobStatus.RUNNING)
    store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.9, artifact_blob=blobs.put_bytes(b"model")))
    store.set_tag("user", alice.id, CAP, "100")
    upload = service.uploads.create(alice.id)
    service.uploads.append(alice.id, upload, 0, b"x" * 10)
    service.stop()
    return tmp_path, token


def _state(directory):
    store, blobs = open_store(None, directory)
    return store, blobs


def _delete(directory, *args: str, **kwargs):
    return CliRunner().invoke(main, ["users", "delete", "alice", "--data-dir", str(directory), *args], **kwargs)


def test_delete_with_yes_removes_her_and_keeps_bob_s_data(data_dir):
    directory, token = data_dir
    store, blobs = _state(directory)
    alice, bob = store.user_by_name("alice"), store.user_by_name("bob")
    tasks = store.list_tasks(alice.id)
    his = store.task_by_name(bob.id, "his")
    hers = set().union(*(_blobs_of(store, t.id) for t in tasks))
    alone, both = hers - _blobs_of(store, his.id), hers & _blobs_of(store, his.id)
    assert alone and both and all(blobs.exists(d) for d in hers)
    before = _rows(store, blobs, his.id)
    store.close()

    result = _delete(directory, "--yes")

    assert result.exit_code == 0, result.output
    assert "deleted local user 'alice': 2 task(s)" in result.output and "1 upload(s) (10 bytes)" in result.output
    store, blobs = _state(directory)
    try:
        for gone in ([lambda: store.user_by_name("alice"), lambda: store.get_user(alice.id),
                      lambda: store.user_by_token_hash(hash_token(token)), lambda: store.tags("user", alice.id)]
                     + [lambda t=t: store.get_task(t.id) for t in tasks]):
            with pytest.raises(NotFoundError):
                gone()
        assert store.find_by_tag("user", CAP) == ()
        assert [u.name for u in store.list_users()] == ["admin", "bob"]
        assert not any(blobs.exists(d) for d in alone) and all(blobs.exists(d) for d in both)
        after = _rows(store, blobs, his.id)
        assert all(np.array_equal(a, b) for a, b in zip(after, before))
        assert np.array_equal(after[0], _data(0)[0]) and np.array_equal(after[1], _data(0)[1])
        assert not (directory / "uploads" / str(alice.id)).exists()
    finally:
        store.close()
    again = _delete(directory, "--yes")
    assert again.exit_code == 1 and "no local account" in again.output


def test_without_yes_it_asks_and_refuses_where_nobody_can_answer(data_dir):
    directory, _ = data_dir
    headless = _delete(directory)  # no input at all: a script, a CI job
    assert headless.exit_code == 1 and "--yes" in headless.output and "no input" in headless.output
    wrong = _delete(directory, input="bob\n")
    assert wrong.exit_code == 1 and "not deleted" in wrong.output
    store, _ = _state(directory)
    assert len(store.list_tasks(store.user_by_name("alice").id)) == 2  # nothing changed
    store.close()
    typed = _delete(directory, input="alice\n")
    assert typed.exit_code == 0, typed.output
    assert "2 task(s) (shared, own)" in typed.output
    store, _ = _state(directory)
    with pytest.raises(NotFoundError):
        store.user_by_name("alice")
    store.close()


def test_it_refuses_while_a_service_holds_the_data_dir(data_dir):
    directory, _ = data_dir
    lock = DataDirLock(directory)  # what a running service holds
    try:
        result = _delete(directory, "--yes")
    finally:
        lock.release()
    assert result.exit_code == 1 and "DELETE /api/v1/users/alice" in result.output
    store, _ = _state(directory)
    assert len(store.list_tasks(store.user_by_name("alice").id)) == 2  # nothing changed
    store.close()


def test_help_and_bad_names():
    words = " ".join(CliRunner().invoke(main, ["users", "delete", "--help"]).output.split())
    assert "--yes" in words and "--data-dir" in words and "--db" in words and "--hub" in words
    assert "delete" in CliRunner().invoke(main, ["users", "--help"]).output
    bad = CliRunner().invoke(main, ["users", "delete", "../x", "--yes"])
    assert bad.exit_code == 2 and "NAME" in bad.output
