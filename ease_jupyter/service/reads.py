"""The task and jobs pages from one store read each.

``GET /tasks/{name}`` and ``GET /tasks/{name}/jobs`` are the reads every
polling client repeats. Each part of their JSON used to be its own store
call (a transaction with an existence check of the task or job, e.g. the
task's tags read three times: table schema, class names, mute flag); here
the store hands back everything at once (``Store.task_overview``,
``Store.task_jobs``) and the JSON is built from it, field for field as the
single-purpose helpers build it. The leaderboard reads all of the owner's
tasks' results in two reads, where ``models.best`` makes six per task.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import NotFoundError, StoreCorruptError
from ..store import BlobStore, Store, Task
from . import models
from .failures import error_code_in
from .notify import muted_in
from .profile_view import prediction_fields
from .profiling import prediction_in
from .task_schema import fields_in, names_in
from .validation import validation_size


def task_page(store: Store, task: Task, task_json: Callable[[Task], dict[str, Any]],
              version_json: Callable[[Any], dict[str, Any]], status: Callable[[Task, bool], dict[str, Any]]
              ) -> dict[str, Any]:
    """What ``Service.get_task`` answers; ``status`` is the control loop's ``task_status``."""
    tags, latest, counts = store.task_overview(task.id)
    out = {**task_json(task), **fields_in(tags)}
    out["latest_version"] = None if latest is None else version_json(latest)
    out["jobs"] = counts
    out.update(status(task, latest is not None))  # idle, candidates, blocked, status, reason
    # The configs the selector explores for the latest version (scikit-learn
    # configs plus torch candidates, one arm each) follow from the program,
    # so a read never waits for the control loop to take in a feed.
    out["arms"] = out["candidates"] if latest is not None and not task.cancelled else 0
    out["muted"] = muted_in(tags)
    return out


def jobs_page(store: Store, task: Task, job_json: Callable[..., dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``Service.jobs`` answers: each job's row with its error code
    and its prediction and profiling seconds, all from the one read."""
    numbers, jobs, tags = store.task_jobs(task.id)
    rows = []
    for job in jobs:
        job_tags = tags.get(job.id, {})
        row = job_json(job, numbers.get(job.dataset_version_id), error_code_in(job, job_tags))
        row.update(prediction_fields(job_tags))
        rows.append(row)
    return rows


def leaderboard(store: Store, blobs: BlobStore, owner_id: int) -> list[dict[str, Any]]:
    """What ``Service.leaderboard`` answers: per task of the owner, by id,
    ``models.best`` (None without a trained model), or the error of a model
    whose artifact is lost, so that it does not hide the other rows."""
    tasks, succeeded, task_tags = store.owner_results(owner_id, skip_tag=models.UNUSABLE_TAG)
    picks = {task.id: models.pick_best(succeeded[task.id], ()) for task in tasks}
    versions, metrics, job_tags = store.job_results([job.id for job in picks.values() if job is not None])
    rows = []
    for task in tasks:
        row: dict[str, Any] = {"task": task.name, "best": None}
        job = picks[task.id]
        try:
            # (no model, or its job or version deleted meanwhile: PostgreSQL reads each statement at its own time)
            if job is None or job.id not in metrics or job.dataset_version_id not in versions:
                raise NotFoundError(f"task {task.name!r} has no trained model yet")
            models.check_model(blobs, task, job)  # StoreCorruptError for a lost or damaged model
            version = versions[job.dataset_version_id]
            row["best"] = models.best_json(job, version, metrics[job.id], names_in(task_tags[task.id]),
                                           prediction_in(job_tags[job.id]), validation_size(store, blobs, version),
                                           tags=job_tags[job.id])
        except NotFoundError:
            pass
        except StoreCorruptError as error:
            row["error"] = {"code": error.code, "message": str(error)}
        rows.append(row)
    return rows
