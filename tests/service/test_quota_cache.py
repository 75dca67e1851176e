"""The quota's per-owner count of stored bytes (``quota._StoredBytes``) is
reused only while nothing changed: a write by another process (a training
worker storing a model) or a task deletion makes the next check count again,
and the service's own feeds move the count on exactly."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.service import ServiceConfig
from ease_jupyter.service.auth import create_user
from ease_jupyter.service.core import Service
from ease_jupyter.store import JobStatus, JobUpdate, open_store

from .conftest import lend_deleted_ids


@pytest.fixture
def service(tmp_path):
    svc = Service(ServiceConfig(data_dir=tmp_path, executor="thread", tick_seconds=3600, torch=False))
    yield svc
    svc.store.close()


def _feed(svc: Service, user, name: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return svc.feed(user, name, {"X": rng.normal(size=(12, 4)).astype("float32").tolist(),
                                 "y": rng.integers(0, 3, 12).tolist()})


def _counted_afresh(svc: Service, owner_id: int) -> int:
    referenced = svc.store.owner_blobs(owner_id)
    return sum(svc.blobs.size(d) or 0 for d in referenced.data | referenced.models)


def _usage(svc: Service, owner_id: int) -> int:
    usage = svc.quota.usage(svc.store, svc.blobs, owner_id)
    return usage.data + usage.models


def test_own_feeds_move_the_count_on(service) -> None:
    user, _ = create_user(service.store, "alice")
    service.create_task(user, {"name": "t", "input": [4], "output": [3]})
    for seed in range(3):
        _feed(service, user, "t", seed)
        assert _usage(service, user.id) == _counted_afresh(service, user.id) > 0


def _worker_stores_a_model(data_dir, owner_id: int, version_id: int) -> None:
    """A worker process, with its own connection to the same database and
    blob store, stores a model of 1,500 bytes for task "t"."""
    store, blobs = open_store(f"sqlite:///{data_dir / 'easeml.sqlite'}", data_dir)
    try:
        task = store.task_by_name(owner_id, "t")
        job = store.create_job(task.id, version_id, "m", {})
        store.update_job(job.id, JobStatus.RUNNING)
        model = blobs.put_bytes(b"a trained model" * 100)
        store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, artifact_blob=model))
    finally:
        store.close()


def test_a_model_stored_by_another_process_is_counted(service, tmp_path) -> None:
    user, _ = create_user(service.store, "alice")
    service.create_task(user, {"name": "t", "input": [4], "output": [3]})
    version = _feed(service, user, "t", 0)
    before = _usage(service, user.id)
    _worker_stores_a_model(tmp_path, user.id, version["id"])
    assert _usage(service, user.id) == before + 1500 == _counted_afresh(service, user.id)


def test_deleting_a_task_forgets_the_count(service, monkeypatch) -> None:
    lend_deleted_ids(monkeypatch, service.store)
    user, _ = create_user(service.store, "alice")
    for name in ("kept", "gone"):
        service.create_task(user, {"name": name, "input": [4], "output": [3]})
    _feed(service, user, "kept", 0)
    _feed(service, user, "gone", 1)  # the newest version: its id is the highest
    _usage(service, user.id)
    service.delete_task(user, "gone")
    # A refine (no quota check) then takes the deleted version's id (lent
    # again), so the owner's stamp is the one counted before.
    kept = service.store.task_by_name(user.id, "kept")
    datasets.refine(service.store, service.blobs, kept, drop=[0])
    assert _usage(service, user.id) == _counted_afresh(service, user.id)


def test_a_count_read_across_a_delete_is_not_kept(service, monkeypatch):
    """A delete (``forget_usage``) between the stamp and the blobs it counts
    leaves nothing cached: the next check counts again."""
    from ease_jupyter.service import quota

    ada, _ = create_user(service.store, "ada")
    service.create_task(ada, {"name": "t", "input": [4], "output": [3]})
    _feed(service, ada, "t", 0)
    quota.forget_usage(service.store, ada.id)
    owner_blobs = service.store.owner_blobs

    def deleted_meanwhile(owner_id):
        found = owner_blobs(owner_id)
        quota.forget_usage(service.store, owner_id)
        return found

    monkeypatch.setattr(service.store, "owner_blobs", deleted_meanwhile)
    _usage(service, ada.id)
    monkeypatch.setattr(service.store, "owner_blobs", owner_blobs)
    expected = _counted_afresh(service, ada.id)
    asked = []
    monkeypatch.setattr(service.store, "owner_blobs", lambda owner_id: (asked.append(owner_id), owner_blobs(owner_id))[1])
    assert _usage(service, ada.id) == expected
    assert asked == [ada.id]  # counted again, not taken from a count made across the delete


def test_a_feed_reads_once_before_it_writes(service, monkeypatch) -> None:
    """The tags, the parent and its chunks, and the quota's stamp come from
    one read (``Store.feed_reads``); a count that stamp matches is reused,
    and a user's first feed (no version, no model yet) has nothing to count."""
    user, _ = create_user(service.store, "alice")
    service.create_task(user, {"name": "t", "input": [4], "output": [3]})
    store = service.store
    reads: list[str] = []
    for name in ("feed_reads", "tags", "feed_state", "owner_blobs_stamp", "owner_blobs"):
        method = getattr(store, name)
        monkeypatch.setattr(store, name, lambda *a, _m=method, _n=name, **k: (reads.append(_n), _m(*a, **k))[1])
    for seed in range(3):
        _feed(service, user, "t", seed)
        assert reads == ["feed_reads"]
        reads.clear()
        assert _usage(service, user.id) == _counted_afresh(service, user.id) > 0
        reads.clear()


def test_a_feed_sees_a_model_stored_by_another_process(tmp_path) -> None:
    """The stamp a feed reads with its other reads is fresh: a model another
    process stored since the last count takes the owner over her quota,
    although the feed alone would fit."""
    from ease_jupyter.errors import QuotaExceededError

    first = Service(ServiceConfig(data_dir=tmp_path, executor="thread", tick_seconds=3600, torch=False))
    user, _ = create_user(first.store, "alice")
    first.create_task(user, {"name": "t", "input": [4], "output": [3]})
    version = _feed(first, user, "t", 0)
    used = _usage(first, user.id)
    first.store.close()
    # The second feed's new blobs: 12 rows of X and y, and the list of all 24 example ids.
    adding = sum(len(datasets.npy_bytes(a)) for a in (np.zeros((12, 4), "float32"), np.zeros(12, "int64"),
                                                      np.arange(24, dtype="int64")))
    service = Service(ServiceConfig(data_dir=tmp_path, executor="thread", tick_seconds=3600, torch=False,
                                    quota_bytes=used + adding + 750))
    try:
        _usage(service, user.id)  # counted at this stamp
        _worker_stores_a_model(tmp_path, user.id, version["id"])
        with pytest.raises(QuotaExceededError):
            _feed(service, user, "t", 1)
        assert _usage(service, user.id) == used + 1500 == _counted_afresh(service, user.id)
    finally:
        service.store.close()


def test_a_retried_check_reads_the_stamp_afresh(service, monkeypatch) -> None:
    """A feed's stamp serves its first quota check only: a retry (another
    writer stored a version first) must count what that writer stored."""
    user, _ = create_user(service.store, "alice")
    service.create_task(user, {"name": "t", "input": [4], "output": [3]})
    _feed(service, user, "t", 0)
    stamp = service.store.owner_blobs_stamp(user.id)
    _usage(service, user.id)  # counted at this stamp
    asked = []
    stamp_of = service.store.owner_blobs_stamp
    monkeypatch.setattr(service.store, "owner_blobs_stamp", lambda owner_id: (asked.append(owner_id), stamp_of(owner_id))[1])
    reserve = service.quota.reserve(service.store, service.blobs, user.id, what="feed", stamp=stamp)
    reserve(10)
    assert asked == []  # the first check took the feed's stamp
    reserve(10)
    assert asked == [user.id]  # the retry's check did not


def test_feeds_in_a_row_never_count_again(service, monkeypatch) -> None:
    """Each feed moves the count on to the stamp its version gives (its count,
    highest id and creation time), so the next feed's stamp matches it and
    nothing is counted again, however many feeds come in a row."""
    user, _ = create_user(service.store, "alice")
    service.create_task(user, {"name": "t", "input": [4], "output": [3]})
    store = service.store
    counted: list[int] = []
    owner_blobs = store.owner_blobs
    monkeypatch.setattr(store, "owner_blobs", lambda owner_id: (counted.append(owner_id), owner_blobs(owner_id))[1])
    for seed in range(4):
        _feed(service, user, "t", seed)
    assert counted == []
    monkeypatch.undo()
    assert _usage(service, user.id) == _counted_afresh(service, user.id) > 0
