"""The statements of the page reads (``SQLStore.task_overview``,
``task_jobs``, ``owner_results``, ``job_results``), built once.

These reads answer every polling client, so their statements are made once
with bound parameters: SQLAlchemy then neither rebuilds the expression nor
recomputes its cache key per call (a statement object memoizes its key),
which was most of such a read's CPU."""

from __future__ import annotations

from sqlalchemy import bindparam, func, select

from ..base import JobStatus
from .models import DatasetVersionRow, JobRow, MetricRow, TagRow, TaskRow, UserRow

_ID = bindparam("id")
_IDS = bindparam("ids", expanding=True)

TASK_EXISTS = select(TaskRow.id).where(TaskRow.id == _ID)
USER_EXISTS = select(UserRow.id).where(UserRow.id == _ID)

TASK_TAGS = select(TagRow.key, TagRow.value).where(TagRow.entity == "task", TagRow.entity_id == _ID)
LATEST_VERSION = (select(DatasetVersionRow).where(DatasetVersionRow.task_id == _ID)
                  .order_by(DatasetVersionRow.number.desc()).limit(1))
# {status: count} in the order of each status's first job, as counting a list by id gives
JOB_COUNTS = (select(JobRow.status, func.count()).where(JobRow.task_id == _ID)
              .group_by(JobRow.status).order_by(func.min(JobRow.id)))

VERSION_NUMBERS = select(DatasetVersionRow.id, DatasetVersionRow.number).where(DatasetVersionRow.task_id == _ID)
TASK_JOBS = select(JobRow).where(JobRow.task_id == _ID).order_by(JobRow.id)
TASK_JOB_TAGS = (select(TagRow.entity_id, TagRow.key, TagRow.value)
                 .where(TagRow.entity == "job",
                        TagRow.entity_id.in_(select(JobRow.id).where(JobRow.task_id == _ID).scalar_subquery())))

_OWNED = select(TaskRow.id).where(TaskRow.owner_id == _ID).scalar_subquery()
OWNER_TASKS = select(TaskRow).where(TaskRow.owner_id == _ID).order_by(TaskRow.id)
OWNER_SUCCEEDED = (select(JobRow).where(JobRow.task_id.in_(_OWNED), JobRow.status == JobStatus.SUCCEEDED.value)
                   .order_by(JobRow.id))
OWNER_SUCCEEDED_TAGGED = select(TagRow.entity_id).where(
    TagRow.entity == "job", TagRow.key == bindparam("key"),
    TagRow.entity_id.in_(select(JobRow.id).where(JobRow.task_id.in_(_OWNED),
                                                 JobRow.status == JobStatus.SUCCEEDED.value).scalar_subquery()))
OWNER_TASK_TAGS = select(TagRow.entity_id, TagRow.key, TagRow.value).where(TagRow.entity == "task",
                                                                            TagRow.entity_id.in_(_OWNED))

JOBS = select(JobRow).where(JobRow.id.in_(_IDS))
VERSIONS = select(DatasetVersionRow).where(DatasetVersionRow.id.in_(_IDS))
METRICS = select(MetricRow).where(MetricRow.job_id.in_(_IDS)).order_by(MetricRow.job_id, MetricRow.epoch,
                                                                       MetricRow.name)
JOB_TAGS = select(TagRow.entity_id, TagRow.key, TagRow.value).where(TagRow.entity == "job",
                                                                    TagRow.entity_id.in_(_IDS))
