"""Notifications for a task's owner, made from the control loop's own events.

The loop already tells each owner what happens to her jobs and tasks
(``{"type": "job" | "task", ...}`` on the ``EventBus``). ``Notifier`` sits
on the loop's ``publish`` (the one place every job, idle and over-budget
event passes through), passes each event on unchanged, and where one is
worth a user's attention adds a ``Notification`` for her:

- ``improved``: a job succeeded with a better accuracy than every other
  finished job on the task's latest dataset version (the first one too);
- ``idle``: the task has nothing pending or running, every candidate tried,
  after jobs of it finished (a restart that finds it idle tells nobody);
- ``failed``: a job failed;
- ``budget``: the owner's budget ran out (or her deadline passed), so the
  task gets no new models.

A notification is an event ``{"type": "notification", "task", "task_id",
"kind", "message", ...}`` published to the owner only: her notebooks get it
on their event streams, and the JupyterLab extension shows it as a toast.
A task tagged ``easeml.muted`` (``PUT /tasks/NAME/mute``) sends none.
"""

from __future__ import annotations

import enum
import logging
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import DataError, NotFoundError
from ..store import JobStatus, Store

log = logging.getLogger(__name__)

MUTED_TAG = "easeml.muted"  # reserved task tag: "true" while the task sends no notifications

Publish = Callable[[int, dict], None]


class Kind(str, enum.Enum):
    IMPROVED = "improved"
    IDLE = "idle"
    FAILED = "failed"
    BUDGET = "budget"


@dataclass(frozen=True)
class Notification:
    """One thing to tell a task's owner, in one line."""

    task: str
    task_id: int
    kind: Kind
    message: str
    job_id: int | None = None
    accuracy: float | None = None

    def event(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "notification", "task": self.task, "task_id": self.task_id,
                               "kind": self.kind.value, "message": self.message}
        if self.job_id is not None:
            out["job_id"] = self.job_id
        if self.accuracy is not None:
            out["accuracy"] = self.accuracy
        return out


# ------------------------------------------------------------------ mute
def is_muted(store: Store, task_id: int) -> bool:
    return muted_in(store.tags("task", task_id))


def muted_in(tags: Mapping[str, str]) -> bool:
    """Whether a task's tags, already read, say it is muted."""
    return tags.get(MUTED_TAG) == "true"


def set_muted(store: Store, task_id: int, muted: bool) -> None:
    # The store has no tag deletion: unmuting writes "false".
    store.set_tag("task", task_id, MUTED_TAG, "true" if muted else "false")


def muted_from_body(body: Any) -> bool:
    """``{"muted": true|false}``; anything else is a DataError (nothing stored)."""
    if not isinstance(body, dict) or not isinstance(body.get("muted"), bool):
        found = repr(body.get("muted")) if isinstance(body, dict) and "muted" in body else "no 'muted'"
        raise DataError("muted", found, "true or false")
    extra = sorted(set(body) - {"muted"})
    if extra:
        raise DataError("mute", f"unknown field(s) {', '.join(map(repr, extra))}", "only 'muted'")
    return body["muted"]


def _why(error: str | None) -> str:
    """The line of a job's error that says what went wrong: the exception
    line of a traceback (``ValueError: ...``), else its first line."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return "no reason recorded"
    raised = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return raised[-1] if raised else lines[0]


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*:")


_FINISHED = frozenset({JobStatus.SUCCEEDED.value, JobStatus.FAILED.value})


# ------------------------------------------------------------------ the tap
class Notifier:
    """``publish`` for the control loop: passes every event on, then publishes
    the notification it calls for, if any, to the same owner. A failure to
    make one is logged and never stops the loop's turn."""

    def __init__(self, store: Store, publish: Publish):
        self.store, self._publish = store, publish
        self._worked: set[int] = set()  # tasks with a job finished since their last idle notification

    def __call__(self, owner_id: int, event: dict) -> None:
        self._publish(owner_id, event)
        try:
            note = self.notification_for(event)
            if note is not None and not is_muted(self.store, note.task_id):
                self._publish(owner_id, note.event())
        except NotFoundError:  # the task was deleted meanwhile
            pass
        except Exception:  # noqa: BLE001 - a notification is never worth a failed turn
            log.exception("could not make a notification for %s", event.get("type"))

    def notification_for(self, event: dict) -> Notification | None:
        kind, status = event.get("type"), event.get("status")
        if kind == "job" and status in _FINISHED:
            self._worked.add(event["task_id"])
        if kind == "job" and status == JobStatus.FAILED.value:
            return self._failed(event)
        if kind == "job" and status == JobStatus.SUCCEEDED.value:
            return self._improved(event)
        if kind == "task" and status == "idle":
            return self._idle(event)
        if kind == "task" and status == "over_budget":
            return self._budget(event)
        return None

    def _failed(self, event: dict) -> Notification:
        task = self.store.get_task(event["task_id"])
        job = self.store.get_job(event["job_id"])
        return Notification(task.name, task.id, Kind.FAILED,
                            f"{task.name}: job {job.id} ({job.model}) failed: {_why(job.error)}"[:300],
                            job_id=job.id)

    def _improved(self, event: dict) -> Notification | None:
        accuracy = event.get("accuracy")
        if accuracy is None or not math.isfinite(accuracy):
            return None
        store = self.store
        job = store.get_job(event["job_id"])
        latest = store.latest_dataset_version(job.task_id)
        if latest is None or job.dataset_version_id != latest.id:
            return None  # a stale result: the task has newer data
        others = [j.accuracy for j in store.list_jobs(job.task_id, status=JobStatus.SUCCEEDED)
                  if j.id != job.id and j.dataset_version_id == latest.id
                  and j.accuracy is not None and math.isfinite(j.accuracy)]
        if others and accuracy <= max(others):
            return None
        task = store.get_task(job.task_id)
        before = f" (was {max(others):.4g})" if others else ""
        return Notification(task.name, task.id, Kind.IMPROVED,
                            f"{task.name}: best model now {job.model}, accuracy {accuracy:.4g}{before}",
                            job_id=job.id, accuracy=accuracy)

    def _idle(self, event: dict) -> Notification | None:
        from .models import best_job

        if event["task_id"] not in self._worked:
            return None  # idle again without new work (a restart, a setting changed): no news
        self._worked.discard(event["task_id"])
        store = self.store
        task = store.get_task(event["task_id"])
        if task.cancelled or store.latest_dataset_version(task.id) is None:
            return None  # nothing was trained for it: its idleness is no news
        best = best_job(store, task)
        found = "no model trained" if best is None else f"best {best.model}, accuracy {best.accuracy:.4g}"
        return Notification(task.name, task.id, Kind.IDLE, f"{task.name}: done, every candidate tried; {found}",
                            job_id=None if best is None else best.id,
                            accuracy=None if best is None else best.accuracy)

    def _budget(self, event: dict) -> Notification:
        task = self.store.get_task(event["task_id"])
        reason = event.get("reason") or "budget spent"
        return Notification(task.name, task.id, Kind.BUDGET, f"{task.name}: no new models: {reason}")
