"""``Store.task_overview``, ``task_jobs``, ``owner_results`` and
``job_results``: a backend's one-read answer equals what the base class
composes from the single-purpose calls."""

from __future__ import annotations

import pytest

from ease_jupyter.errors import NotFoundError
from ease_jupyter.store import JobStatus, JobUpdate, Store

from .helpers import feed


def _populated(store: Store) -> tuple[int, int, int]:
    """Two users' tasks with versions, jobs in several states and tags; (task, other task, empty task)."""
    ada = store.create_user("ada", "h-ada")
    bob = store.create_user("bob", "h-bob")
    task = store.create_task(ada.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    other = store.create_task(bob.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    empty = store.create_task(ada.id, "e", "x: {a: [4]} -> y: {c: [3]}")
    v1 = feed(store, task.id, 5, seed="a")
    v2 = feed(store, task.id, 3, seed="b")
    w = feed(store, other.id, 4, seed="c")
    failed = store.create_job(task.id, v1.id, "svc", {"C": 1})
    done = store.create_job(task.id, v2.id, "lr", {})
    store.create_job(task.id, v2.id, "knn", {"k": 3})  # stays queued
    theirs = store.create_job(other.id, w.id, "svc", {})
    for job, status in ((failed, JobStatus.FAILED), (done, JobStatus.SUCCEEDED)):
        store.update_job(job.id, JobStatus.RUNNING)
        store.update_job(job.id, status, JobUpdate(accuracy=0.5 if status is JobStatus.SUCCEEDED else None))
    store.add_metric(done.id, 0, "accuracy", 0.4)
    store.add_metric(done.id, 1, "accuracy", 0.5)
    store.add_metric(done.id, 0, "C=1", 0.3)
    store.set_tag("job", failed.id, "easeml.error_code", "bad_data")
    store.set_tag("job", done.id, "z", "last")
    store.set_tag("job", done.id, "a", "first")
    store.set_tag("job", theirs.id, "a", "not ada's")
    store.set_tag("task", task.id, "easeml.muted", "true")
    store.set_tag("task", task.id, "b", "2")
    store.set_tag("task", other.id, "b", "bob's")
    return task.id, other.id, empty.id


def test_one_read_equals_the_composed_reads(store: Store) -> None:
    ids = _populated(store)
    for task_id in ids:
        assert store.task_overview(task_id) == Store.task_overview(store, task_id)
        assert store.task_jobs(task_id) == Store.task_jobs(store, task_id)
    for user in store.list_users():
        assert store.owner_results(user.id) == Store.owner_results(store, user.id)
        assert store.owner_results(user.id, skip_tag="a") == Store.owner_results(store, user.id, skip_tag="a")
    jobs = [job.id for job in store.list_jobs()]
    assert store.job_results(jobs + [999]) == Store.job_results(store, jobs + [999])  # 999: no such job, left out
    tasks, succeeded, task_tags = store.owner_results(store.user_by_name("ada").id)
    assert [t.name for t in tasks] == ["t", "e"] and [j.model for j in succeeded[ids[0]]] == ["lr"]
    assert store.owner_results(store.user_by_name("ada").id, skip_tag="z")[1][ids[0]] == ()  # lr has tag z
    assert succeeded[ids[2]] == () and dict(task_tags[ids[0]]) == {"b": "2", "easeml.muted": "true"}
    versions, metrics, job_tags = store.job_results([jobs[1]])
    assert [(m.epoch, m.name) for m in metrics[jobs[1]]] == [(0, "C=1"), (0, "accuracy"), (1, "accuracy")]
    assert list(versions) == [store.list_jobs()[1].dataset_version_id] and list(job_tags[jobs[1]]) == ["a", "z"]
    tags, latest, counts = store.task_overview(ids[0])
    assert dict(tags) == {"b": "2", "easeml.muted": "true"} and list(tags) == ["b", "easeml.muted"]
    assert latest.number == 2
    assert list(counts.items()) == [("failed", 1), ("succeeded", 1), ("queued", 1)]  # order of first job
    numbers, jobs, job_tags = store.task_jobs(ids[0])
    assert [job.model for job in jobs] == ["svc", "lr", "knn"]
    assert sorted(numbers.values()) == [1, 2]
    assert [dict(job_tags[job.id]) for job in jobs] == [{"easeml.error_code": "bad_data"},
                                                        {"a": "first", "z": "last"}, {}]


def test_missing_task_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.task_overview(99)
    with pytest.raises(NotFoundError):
        store.task_jobs(99)
    with pytest.raises(NotFoundError):
        store.owner_results(99)
