"""The statements of the page reads (``SQLStore.task_overview``,
``task_jobs``, ``owner_results``, ``job_results``), built once.

These reads answer every polling client, so their statements are made once
with bound parameters: SQLAlchemy then neither rebuilds the expression nor
recomputes its cache key per call (a statement object memoizes its key),
which was most of such a read's CPU. They select columns, not ORM entities,
and make the records straight from the rows (loading entities into a
session cost more than running the statement)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, func, select

from .._frozen import freeze
from ..base import DatasetVersion, Job, JobStatus, Metric, Task, VersionKind
from .models import DatasetVersionRow, JobRow, MetricRow, TagRow, TaskRow, UserRow

# Each record type's fields, in the order of its constructor, and the row to record.
_TASK = tuple(TaskRow.__table__.c[n] for n in ("id", "owner_id", "name", "program", "created_at", "cancelled"))
VERSION_COLUMNS = tuple(DatasetVersionRow.__table__.c[n] for n in (
    "id", "task_id", "number", "kind", "parent_id", "members_blob", "n_examples", "created_at"))
_JOB = tuple(JobRow.__table__.c[n] for n in (
    "id", "task_id", "dataset_version_id", "model", "config", "status", "created_at", "started_at", "finished_at",
    "accuracy", "cost_seconds", "artifact_blob", "error", "attempts"))
_METRIC = tuple(MetricRow.__table__.c[n] for n in ("job_id", "epoch", "name", "value", "created_at"))


def task_record(row: Any) -> Task:
    return Task(*row)


def version_record(row: Any) -> DatasetVersion:
    return DatasetVersion(row[0], row[1], row[2], VersionKind(row[3]), *row[4:])


def job_record(row: Any) -> Job:
    return Job(row[0], row[1], row[2], row[3], freeze(row[4]), JobStatus(row[5]), *row[6:])


def metric_record(row: Any) -> Metric:
    return Metric(*row)

_ID = bindparam("id")
_IDS = bindparam("ids", expanding=True)

TASK_EXISTS = select(TaskRow.id).where(TaskRow.id == _ID)
USER_EXISTS = select(UserRow.id).where(UserRow.id == _ID)
EXISTS = {TaskRow: TASK_EXISTS, UserRow: USER_EXISTS}

TASK_TAGS = select(TagRow.key, TagRow.value).where(TagRow.entity == "task", TagRow.entity_id == _ID)
LATEST_VERSION = (select(*VERSION_COLUMNS).where(DatasetVersionRow.task_id == _ID)
                  .order_by(DatasetVersionRow.number.desc()).limit(1))
# {status: count} in the order of each status's first job, as counting a list by id gives
JOB_COUNTS = (select(JobRow.status, func.count()).where(JobRow.task_id == _ID)
              .group_by(JobRow.status).order_by(func.min(JobRow.id)))

VERSION_NUMBERS = select(DatasetVersionRow.id, DatasetVersionRow.number).where(DatasetVersionRow.task_id == _ID)
TASK_JOBS = select(*_JOB).where(JobRow.task_id == _ID).order_by(JobRow.id)
TASK_JOBS_WITH_STATUS = (select(*_JOB).where(JobRow.task_id == _ID, JobRow.status == bindparam("status"))
                         .order_by(JobRow.id))
TASK = select(*_TASK).where(TaskRow.id == _ID)
TASK_JOB_TAGS = (select(TagRow.entity_id, TagRow.key, TagRow.value)
                 .where(TagRow.entity == "job",
                        TagRow.entity_id.in_(select(JobRow.id).where(JobRow.task_id == _ID).scalar_subquery())))

OWNED = select(TaskRow.id).where(TaskRow.owner_id == _ID).scalar_subquery()
OWNER_TASKS = select(*_TASK).where(TaskRow.owner_id == _ID).order_by(TaskRow.id)
OWNER_SUCCEEDED = (select(*_JOB).where(JobRow.task_id.in_(OWNED), JobRow.status == JobStatus.SUCCEEDED.value)
                   .order_by(JobRow.id))
OWNER_SUCCEEDED_TAGGED = select(TagRow.entity_id).where(
    TagRow.entity == "job", TagRow.key == bindparam("key"),
    TagRow.entity_id.in_(select(JobRow.id).where(JobRow.task_id.in_(OWNED),
                                                 JobRow.status == JobStatus.SUCCEEDED.value).scalar_subquery()))
OWNER_TASK_TAGS = select(TagRow.entity_id, TagRow.key, TagRow.value).where(TagRow.entity == "task",
                                                                            TagRow.entity_id.in_(OWNED))

JOBS = select(*_JOB).where(JobRow.id.in_(_IDS))
VERSIONS = select(*VERSION_COLUMNS).where(DatasetVersionRow.id.in_(_IDS))
METRICS = select(*_METRIC).where(MetricRow.job_id.in_(_IDS)).order_by(MetricRow.job_id, MetricRow.epoch,
                                                                       MetricRow.name)
JOB_TAGS = select(TagRow.entity_id, TagRow.key, TagRow.value).where(TagRow.entity == "job",
                                                                    TagRow.entity_id.in_(_IDS))
