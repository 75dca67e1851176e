"""Deleting a task: its rows, its control-loop state and the blobs only it used.

In order:

1. the task is cancelled (by the caller, ``Service.delete_task``): no new
   pick of it starts, its queued jobs are cancelled, a feed is refused;
2. the control loop waits for its running jobs to end
   (``loop.forget.forget_task``; ``InvalidStateError`` if they outlast
   ``wait_seconds``, and the task stays cancelled), then, under its lock,
   what its jobs took is added to the owner's spent budget
   (``budget.record_deleted``: deleting a task gives none of it back), the
   store removes the task with its versions, jobs, metrics, edges and
   tags (``Store.delete_task``), the selector forgets its tenants, and the
   selector state is saved again on a job that remains;
3. the blobs its rows and its jobs' tags referenced are deleted where
   nothing else references them (``gc.delete_unreferenced``): blobs are
   content-addressed, so another task fed the same arrays keeps them.

Other tasks' rows, provenance and blobs are untouched. The answer counts
what left the owner's quota (her blobs that no row of hers references any
more), never what left the blob store, which depends on other users' data.

Deleting a user (``delete_user``: ``DELETE /users/{name}``, ``easeml users
delete``) cancels all her tasks at once, then deletes each as above (so a
running job of hers ends first, and content another user also fed stays),
then her uploads not fed yet, and last her account row with its tags
(budgets, caps, the models setting) and token (``Store.delete_user``, which
refuses while she owns a task). The caller forgets what it keeps in memory
about her (``Service.delete_user``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Callable

from ..errors import DataError, InvalidStateError, NotFoundError
from ..store import BlobStore, Store, Task, User
from . import budget, gc
from .arrays import Uploads
from .user_models import UserModels

log = logging.getLogger(__name__)

DELETE_WAIT_SECONDS = 60.0  # how long a delete waits for the task's running jobs to end


def same_task(store: Store, task: Task, caller: User, task_id: int | None,
              created_at: str | None = None) -> Task:
    """The caller's task of ``task``'s name, unless it is another than the
    one she named (``DELETE /tasks/{name}?id=N&created_at=T``): a delete sent
    again after its task was deleted and a new one declared under its name
    must not delete the new one. The id alone does not tell them apart
    where the store gives a new row the id of a deleted one (SQLite does,
    for the highest), so ``created_at``, the task JSON's, is compared too.
    ``task`` may come from a cache, so a mismatch is read again from the
    store. The refusal is the 404 of a name the caller has no task by
    (``Store.task_by_name``), word for word, so it tells nobody more than a
    missing task does."""
    created = _created_at(created_at)
    if _is(task, task_id, created):
        return task
    task = store.task_by_name(caller.id, task.name)  # NotFoundError when it is gone
    if not _is(task, task_id, created):
        raise NotFoundError(f"task {task.name!r}: user {caller.name!r} has no task by that name")
    return task


def _is(task: Task, task_id: int | None, created: datetime | None) -> bool:
    stamp = task.created_at if task.created_at.tzinfo is not None else task.created_at.replace(tzinfo=timezone.utc)
    return (task_id is None or task_id == task.id) and (created is None or created == stamp)


def _created_at(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise DataError("created_at", repr(text)[:80], "the task's created_at as its JSON gives it "
                        "(ISO 8601 with a UTC offset)")
    return value


def delete_task(store: Store, blobs: BlobStore, loop: Any, task: Task, *,
                wait_seconds: float = DELETE_WAIT_SECONDS) -> dict[str, Any]:
    """Remove ``task`` (cancelled already) as the module docstring says;
    what went, as a JSON-ready dict."""
    counts: dict[str, int] = {}

    def remove() -> set[str]:
        jobs = store.list_jobs(task.id)
        counts.update(versions=len(store.list_dataset_versions(task.id)), jobs=len(jobs))
        in_tags = gc.job_tag_digests(store, (j.id for j in jobs))  # before the tags go with the jobs
        in_tags |= {m.code for m in UserModels(store).list(task.id)}  # her models' code, in the task's tags
        before = budget.record_deleted(store, task.owner_id, jobs, gpu_pool=loop.gpu_pool,
                                       now=datetime.now(timezone.utc), price=loop.job_cost)
        try:
            return set(store.delete_task(task.id)) | in_tags
        except BaseException:
            budget.restore_deleted(store, task.owner_id, before)  # the task stays: its jobs count as they are
            raise

    before = store.owner_blobs(task.owner_id)
    used = loop.forget_task(task.id, task.name, remove, wait_seconds=wait_seconds)
    after = store.owner_blobs(task.owner_id)
    # What the deletion took off her quota, from her own rows only: the blobs
    # deleted from the store would tell her whether anyone else holds the same
    # bytes (a first feed of n rows always stores the same list of ids).
    released = {d: blobs.size(d) or 0 for d in (before.data | before.models) & used
                if d not in after.data | after.models}
    deleted, freed = gc.delete_unreferenced(store, blobs, used, grace_seconds=gc.DELETE_GRACE_SECONDS)
    log.info("task %d deleted: %d blobs (%d bytes) deleted from the blob store", task.id, deleted, freed)
    return {"id": task.id, "name": task.name, "deleted": True, **counts, "blobs_deleted": len(released),
            "bytes_freed": sum(released.values())}


class NoLoop:
    """What ``delete_task`` asks of a control loop, where none runs (``easeml
    users delete`` on the store of a stopped service): nothing to wait for or
    forget. A job the store still says is running (a service that crashed
    left it so) keeps its task: ``Store.delete_task`` refuses it."""

    gpu_pool = False
    job_cost = None

    def notify(self, task_id: int | None = None) -> None:
        pass

    def forget_task(self, task_id: int, name: str, remove: Callable[[], Any], *, wait_seconds: float) -> Any:
        return remove()


DELETE_USER_ROUNDS = 3  # passes over her tasks: a hub login may still make one while the first pass runs


def delete_user(store: Store, blobs: BlobStore, loop: Any, user: User, *, uploads: Uploads | None = None,
                wait_seconds: float = DELETE_WAIT_SECONDS,
                deleted: Callable[[Task], None] | None = None) -> dict[str, Any]:
    """Remove ``user`` as the module docstring says: her tasks (all
    cancelled first, then each through ``delete_task``; ``deleted(task)``
    after each), her uploads not fed yet (``Uploads.discard_owner``), then her
    account (``Store.delete_user``). What went, as a JSON-ready dict:
    ``delete_task``'s counts summed, the task names and the uploads.

    A task whose jobs still run after ``wait_seconds`` stops it with an
    ``InvalidStateError`` (409): what was deleted stays deleted, her other
    tasks stay cancelled, and calling it again finishes the work."""
    totals = {"tasks": 0, "versions": 0, "jobs": 0, "blobs_deleted": 0, "bytes_freed": 0}
    names: list[str] = []
    for _ in range(DELETE_USER_ROUNDS):
        tasks = [store.set_task_cancelled(t.id, True) for t in store.list_tasks(user.id)]  # no new pick of any
        if not tasks:
            break
        for task in tasks:
            loop.notify(task.id)
        for task in tasks:
            try:
                out = delete_task(store, blobs, loop, task, wait_seconds=wait_seconds)
            except NotFoundError:  # deleted meanwhile (her own DELETE /tasks/{name})
                continue
            totals["tasks"] += 1
            for key in ("versions", "jobs", "blobs_deleted", "bytes_freed"):
                totals[key] += out[key]
            names.append(task.name)
            if deleted is not None:
                deleted(task)
    uploads_deleted, upload_bytes = (0, 0) if uploads is None else uploads.discard_owner(user.id)
    try:
        store.delete_user(user.id)
    except InvalidStateError:
        raise InvalidStateError(f"user {user.name!r}: still made new tasks while her account was deleted; "
                                "send the delete again") from None
    log.info("user %d (%s, %s) deleted: %d tasks, %d uploads", user.id, user.name, user.origin, totals["tasks"],
             uploads_deleted)
    return {"id": user.id, "name": user.name, "origin": user.origin, "deleted": True, **totals,
            "task_names": names, "uploads_deleted": uploads_deleted, "upload_bytes_freed": upload_bytes}
