"""``GET /tasks/{name}`` and ``/jobs`` built from one store read each
(``reads.py``) answer exactly what the single-purpose helpers compose."""

from __future__ import annotations

import json

from ease_jupyter.service import notify, profile_view, task_schema
from ease_jupyter.service.core import job_json, task_json, version_json
from ease_jupyter.service.failures import ERROR_CODE_TAG, error_code
from ease_jupyter.service.profiling import TAG_PREDICTED, TAG_RUNS, TAG_SOURCE
from ease_jupyter.store import JobStatus, JobUpdate
from ease_jupyter.testing.store_contract import feed

# what the control loop adds; it may change between two reads
LOOP_FIELDS = {"idle", "candidates", "blocked", "status", "reason", "arms"}


def _fields(store, task):
    return task_schema.fields_in(store.tags("task", task.id))


def _reference_task(store, task):
    out = {**task_json(task), **_fields(store, task)}
    latest = store.latest_dataset_version(task.id)
    out["latest_version"] = None if latest is None else version_json(latest)
    counts = {}
    for job in store.list_jobs(task.id):
        counts[job.status.value] = counts.get(job.status.value, 0) + 1
    out["jobs"] = counts
    out["muted"] = notify.is_muted(store, task.id)
    return out


def _reference_jobs(store, task):
    numbers = {v.id: v.number for v in store.list_dataset_versions(task.id)}
    return [{**job_json(j, numbers.get(j.dataset_version_id), error_code(store, j)),
             **profile_view.prediction_fields(store.tags("job", j.id))} for j in store.list_jobs(task.id)]


def test_task_and_jobs_pages_equal_the_composed_helpers(svc):
    store = svc.service.store
    made = svc.call("POST", "/tasks", "alice", body={"name": "t", "input": [4], "output": [3]})
    task = store.task_by_name(store.user_by_name("alice").id, "t")
    assert made.status == 201 and made.body == {**task_json(task), **_fields(store, task)}
    store.set_tag("task", task.id, task_schema.CLASSES_TAG, json.dumps(["cat", "dog", "eel"]))
    notify.set_muted(store, task.id, True)
    # the loop is not told of these versions and jobs: nothing it does changes them
    v1 = feed(store, task.id, 5, seed="a")
    v2 = feed(store, task.id, 3, seed="b")
    failed = store.create_job(task.id, v1.id, "svc", {"C": 1})
    done = store.create_job(task.id, v2.id, "lr", {})
    store.create_job(task.id, v2.id, "knn", {"k": 3})
    for job, status in ((failed, JobStatus.FAILED), (done, JobStatus.SUCCEEDED)):
        store.update_job(job.id, JobStatus.RUNNING)
        store.update_job(job.id, status, JobUpdate(accuracy=0.9 if status is JobStatus.SUCCEEDED else None))
    store.set_tag("job", failed.id, ERROR_CODE_TAG, "bad_data")
    store.set_tag("job", done.id, TAG_PREDICTED, "1.5")
    store.set_tag("job", done.id, TAG_SOURCE, "flops")
    store.set_tag("job", done.id, TAG_RUNS, json.dumps([{"n": 10, "threads": 1, "seconds": 0.25}]))

    page = svc.call("GET", "/tasks/t", "alice").body
    assert {k: v for k, v in page.items() if k not in LOOP_FIELDS} == _reference_task(store, task)
    assert page["class_names"] == ["cat", "dog", "eel"] and page["muted"] is True
    assert list(page["jobs"].items()) == [("failed", 1), ("succeeded", 1), ("queued", 1)]

    jobs = svc.call("GET", "/tasks/t/jobs", "alice").body
    assert jobs == _reference_jobs(store, task)
    assert [j["error_code"] for j in jobs] == ["bad_data", None, None]
    assert jobs[1]["predicted_seconds"] == 1.5 and jobs[1]["profiling_seconds"] == 0.25

    again = svc.call("POST", "/tasks", "alice", body={"name": "t", "input": [4], "output": [3]})
    assert again.status == 200 and again.body == {**task_json(task), **_fields(store, task)}
    assert svc.call("GET", "/tasks/t/jobs", "bob").status == 404


def _reference_board(service, owner_id):
    from ease_jupyter.errors import NotFoundError, StoreCorruptError
    from ease_jupyter.service import models

    rows = []
    for task in service.store.list_tasks(owner_id):
        row = {"task": task.name, "best": None}
        try:
            row["best"] = models.best(service.store, task, service.blobs)
        except NotFoundError:
            pass
        except StoreCorruptError as error:
            row["error"] = {"code": error.code, "message": str(error)}
        rows.append(row)
    return json.loads(json.dumps(rows))  # as the body carries it


def test_leaderboard_equals_best_of_each_task(tmp_path, iris):
    from ease_jupyter.service.models import UNUSABLE_TAG, best_job

    from .conftest import start

    running = start(tmp_path, torch=False)
    try:
        running.user("alice")
        X, y = iris
        client = running.client("alice")
        trained = client.task("iris", input=[4], output=[3])
        trained.feed(X, y)
        client.task("empty", input=[4], output=[3])
        assert trained.wait(120)
        service = running.service
        owner = service.store.user_by_name("alice").id
        board = running.call("GET", "/leaderboard", "alice").body
        assert board == _reference_board(service, owner)
        assert board[0]["best"]["accuracy"] > 0.5 and board[1] == {"task": "empty", "best": None}
        task = service.store.task_by_name(owner, "iris")
        first = best_job(service.store, task)
        service.store.set_tag("job", first.id, UNUSABLE_TAG, "lost in a test")  # skipped from now on
        board = running.call("GET", "/leaderboard", "alice").body
        assert board == _reference_board(service, owner)
        assert (board[0]["best"] or {}).get("job_id") != first.id
    finally:
        running.thread.stop()
