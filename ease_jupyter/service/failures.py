"""Why a job failed: because of its model, or for want of storage.

A job can fail because of its model (a fit that raises: the selector learns
that the model is bad for the task) or because of the storage (a missing
blob, a full disk, the owner's quota, a store that cannot be written: the
model is no worse for it). ``fail_job`` records the second kind's error code
as the job's ``FAILURE_TAG``; the control loop does not report such a job to
the selector (``failure_code``), and picks its arm again later. A cluster
that could not run the job (``ClusterUnavailableError``: no worker, a worker
lost with the job's data) counts as the second kind too (``storage_code``).

One quota refusal is the model's own: a trained model larger than the room
its owner has left (``quota.ModelOverQuotaError``). Training it again makes
a model of the same size, so retrying would train it in full again and
again; it fails as any model that fails on its own (code
``quota_exceeded``, no ``FAILURE_TAG``): the selector scores the arm 0 and,
ranging over untried arms, never picks it again for that dataset version.

Every failure whose error carries a code (a storage error, a GPU out of
memory, a device that failed) also gets it as ``ERROR_CODE_TAG``, which the
API shows as the job's ``error_code`` (``error_code``).

A failure of the model's own is paid for: ``mark_failed`` records the
seconds its attempt ran (its profiling runs included) as its
``cost_seconds``, which its owner's budget counts (``budget.job_seconds``).
A failure of the service's own (the second kind, ``held_code``: storage or
cluster) is not: its ``cost_seconds`` is 0, so its owner does not pay for
a missing blob, a full disk or a lost cluster, nor for its retries.
"""

from __future__ import annotations

import traceback
from datetime import datetime, timezone
from typing import Mapping

from ..errors import ClusterUnavailableError, EaseMLError, StorageError
from ..store import Job, JobStatus, JobUpdate, Store
from ..store.space import is_disk_full
from .budget import run_seconds
from .quota import ModelOverQuotaError

FAILURE_TAG = "easeml.failure"  # the error code of a job that failed for want of storage or cluster
ERROR_CODE_TAG = "easeml.error_code"  # the error code of any failure that has one


def storage_code(error: BaseException) -> str | None:
    """The error code of a storage failure, or of a cluster that could not
    run the job; None for any other error."""
    if isinstance(error, (StorageError, ClusterUnavailableError)):
        return error.code
    return "storage_full" if is_disk_full(error) else None


def held_code(error: BaseException) -> str | None:
    """The code of a failure of the service's own (storage or cluster: the
    job is held and retried, not scored, and its owner does not pay for
    it); None for a failure of the model's own, a model over its owner's
    quota included (see the module docstring)."""
    return None if isinstance(error, ModelOverQuotaError) else storage_code(error)


def fail_job(store: Store, job_id: int, error: BaseException, *, earlier_seconds: float = 0.0) -> Job:
    """Mark a running job FAILED with ``error``; a storage failure also gets
    its code as ``FAILURE_TAG`` (see the module docstring). ``earlier_seconds``:
    what its earlier attempts ran and kept (``mark_failed``)."""
    code = storage_code(error)
    held = held_code(error)
    if held is not None:
        store.set_tag("job", job_id, FAILURE_TAG, held)
    if code is not None:
        message = str(error)  # our storage errors name the object and the limit
    else:
        message = "".join(traceback.format_exception_only(type(error), error)).strip()
    any_code = code or _own_code(error)
    if any_code is not None:
        store.set_tag("job", job_id, ERROR_CODE_TAG, any_code)
    return mark_failed(store, job_id, message, paid=held is None, earlier_seconds=earlier_seconds)


def mark_failed(store: Store, job_id: int, message: str, *, paid: bool = True, earlier_seconds: float = 0.0) -> Job:
    """Move a running job to FAILED with ``message`` and, as its cost, the
    seconds its attempt ran (``budget.run_seconds``) plus ``earlier_seconds``,
    what its earlier attempts ran and left for this one to resume from (a
    torch job's finished units, as its success would count them); 0 when
    not ``paid`` (a failure of the service's own, ``held_code``)."""
    seconds: float | None = 0.0  # unpaid: not None, or budget.job_seconds would count its run time
    if paid:
        job = store.get_job(job_id)
        seconds = run_seconds(job, datetime.now(timezone.utc)) + earlier_seconds if job.started_at is not None \
            else None
    return store.update_job(job_id, JobStatus.FAILED, JobUpdate(error=message, cost_seconds=seconds))


def _own_code(error: BaseException | None) -> str | None:
    """The ``code`` of our error, or of the error it was raised from (a MOP
    workload wraps a unit's error)."""
    seen = 0
    while error is not None and seen < 8:
        code = getattr(error, "code", None)
        if isinstance(error, EaseMLError) and isinstance(code, str):
            return code
        error, seen = error.__cause__, seen + 1
    return None


def error_code(store: Store, job: Job) -> str | None:
    """The code of a failed job's error, where it has one."""
    return error_code_in(job, store.tags("job", job.id)) if job.status is JobStatus.FAILED else None


def error_code_in(job: Job, tags: Mapping[str, str]) -> str | None:
    """``error_code`` from the job's tags already read."""
    return tags.get(ERROR_CODE_TAG) if job.status is JobStatus.FAILED else None


def failure_code(store: Store, job: Job) -> str | None:
    """The storage error code of a failed job (``fail_job``), else None: a
    job that failed for its model, or did not fail."""
    if job.status is not JobStatus.FAILED:
        return None
    return store.tags("job", job.id).get(FAILURE_TAG)
