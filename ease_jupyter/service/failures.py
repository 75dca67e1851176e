"""Why a job failed: because of its model, or for want of storage.

A job can fail because of its model (a fit that raises: the selector learns
that the model is bad for the task) or because of the storage (a missing
blob, a full disk, the owner's quota, a store that cannot be written: the
model is no worse for it). ``fail_job`` records the second kind's error code
as the job's ``FAILURE_TAG``; the control loop does not report such a job to
the selector (``failure_code``).
"""

from __future__ import annotations

import traceback

from ..errors import StorageError
from ..store import Job, JobStatus, JobUpdate, Store
from ..store.space import is_disk_full

FAILURE_TAG = "easeml.failure"  # the error code of a job that failed for want of storage


def storage_code(error: BaseException) -> str | None:
    """The error code of a storage failure; None for any other error."""
    if isinstance(error, StorageError):
        return error.code
    return "storage_full" if is_disk_full(error) else None


def fail_job(store: Store, job_id: int, error: BaseException) -> Job:
    """Mark a running job FAILED with ``error``; a storage failure also gets
    its code as ``FAILURE_TAG`` (see the module docstring)."""
    code = storage_code(error)
    if code is not None:
        store.set_tag("job", job_id, FAILURE_TAG, code)
        message = str(error)  # our storage errors name the object and the limit
    else:
        message = "".join(traceback.format_exception_only(type(error), error)).strip()
    return store.update_job(job_id, JobStatus.FAILED, JobUpdate(error=message))


def failure_code(store: Store, job: Job) -> str | None:
    """The storage error code of a failed job (``fail_job``), else None: a
    job that failed for its model, or did not fail."""
    if job.status is not JobStatus.FAILED:
        return None
    return store.tags("job", job.id).get(FAILURE_TAG)
