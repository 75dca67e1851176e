"""SQLAlchemy ORM models: one class per table, plus the row -> record conversions.

The schema itself is created by the Alembic migrations in
``ease_jupyter/store/migrations``; ``tests/store/test_migrations.py`` checks
that they and these models agree. Change both together (add a new revision,
never edit a released one).

Node ids in ``provenance_edges`` point at a dataset version or a job depending
on ``*_kind``, so they carry no foreign key; the store checks them instead.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from .._frozen import freeze
from ..base import (
    LOCAL,
    USER_ORIGINS,
    DatasetVersion,
    Edge,
    EdgeKind,
    ExampleChunk,
    Job,
    JobStatus,
    Metric,
    Node,
    NodeKind,
    Task,
    Toggle,
    User,
    VersionKind,
)

# Explicit constraint names, so that migrations can refer to them and every
# database (SQLite, PostgreSQL) ends up with the same names.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

DIGEST = String(64)  # sha256 hex of a blob
NAME = String(200)
# Job model names, metric names, tag keys: up to _validate.MAX_KEY_BYTES on every
# backend; PostgreSQL would enforce a length, SQLite never does.
KEY = String(200).with_variant(Text(), "postgresql")
STATUSES = tuple(s.value for s in JobStatus)
# SQLite remembers the largest id it gave and never gives it again (migration
# 0004), as PostgreSQL's sequences and the memory store do: a deleted row's id
# never names a later row. For the tables whose rows are named by an ``id``.
NEVER_REUSED = {"sqlite_autoincrement": True}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend.

    PostgreSQL stores ``timestamptz`` and may hand back another offset; SQLite
    has no time zone at all and would drop it. We store UTC and always return
    an aware UTC datetime.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the store only accepts timezone-aware datetimes")
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UserRow(Base):
    __tablename__ = "users"
    # Each origin (a local account, a hub login) is its own namespace of names.
    __table_args__ = (UniqueConstraint("origin", "name"), CheckConstraint(_in("origin", USER_ORIGINS), name="origin"),
                      NEVER_REUSED)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(NAME)
    origin: Mapped[str] = mapped_column(String(16), default=LOCAL, server_default=LOCAL)
    # Only a hash of the token is stored; looking a user up by it is the hot path of auth.
    # NULL: revoked, or a hub user (who logs in through the hub).
    token_hash: Mapped[str | None] = mapped_column(String(128), unique=True, index=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    def to_record(self) -> User:
        return User(self.id, self.name, self.is_admin, self.created_at, self.origin)


class TaskRow(Base):
    __tablename__ = "tasks"
    __table_args__ = (UniqueConstraint("owner_id", "name"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(NAME)
    program: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    cancelled: Mapped[bool] = mapped_column(Boolean, default=False)

    def to_record(self) -> Task:
        return Task(self.id, self.owner_id, self.name, self.program, self.created_at, self.cancelled)


class DatasetVersionRow(Base):
    __tablename__ = "dataset_versions"
    __table_args__ = (
        # The database itself refuses a second version with the same number,
        # whatever happens to concurrent writers.
        UniqueConstraint("task_id", "number"),
        CheckConstraint("number >= 1", name="number_positive"),
        CheckConstraint("n_examples >= 0", name="n_examples_nonnegative"),
        CheckConstraint(_in("kind", tuple(k.value for k in VersionKind)), name="kind"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    number: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_versions.id"))
    members_blob: Mapped[str] = mapped_column(DIGEST)
    n_examples: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    def to_record(self) -> DatasetVersion:
        return DatasetVersion(
            self.id, self.task_id, self.number, VersionKind(self.kind), self.parent_id,
            self.members_blob, self.n_examples, self.created_at,
        )  # fmt: skip


class ExampleChunkRow(Base):
    __tablename__ = "example_chunks"
    __table_args__ = (
        UniqueConstraint("task_id", "first_example_id"),  # example ids are never reused
        CheckConstraint("count >= 1", name="count_positive"),
        CheckConstraint("first_example_id >= 0", name="first_example_id_nonnegative"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"), index=True)
    first_example_id: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    x_blob: Mapped[str] = mapped_column(DIGEST)
    y_blob: Mapped[str] = mapped_column(DIGEST)

    def to_record(self) -> ExampleChunk:
        return ExampleChunk(
            self.id, self.task_id, self.version_id, self.first_example_id, self.count, self.x_blob, self.y_blob
        )


class ToggleRow(Base):
    __tablename__ = "toggles"

    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"), primary_key=True)
    example_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    active: Mapped[bool] = mapped_column(Boolean)

    def to_record(self) -> Toggle:
        return Toggle(self.version_id, self.example_id, self.active)


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(_in("status", STATUSES), name="status"),
        CheckConstraint("attempts >= 0", name="attempts_nonnegative"),
        Index(None, "task_id", "status"),  # the control loop asks for a task's queued/running jobs
        Index(None, "status"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    dataset_version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"))
    model: Mapped[str] = mapped_column(KEY)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    accuracy: Mapped[float | None] = mapped_column(Double)
    cost_seconds: Mapped[float | None] = mapped_column(Double)
    artifact_blob: Mapped[str | None] = mapped_column(DIGEST)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)

    def to_record(self) -> Job:
        return Job(
            id=self.id,
            task_id=self.task_id,
            dataset_version_id=self.dataset_version_id,
            model=self.model,
            config=freeze(self.config),
            status=JobStatus(self.status),
            created_at=self.created_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            accuracy=self.accuracy,
            cost_seconds=self.cost_seconds,
            artifact_blob=self.artifact_blob,
            error=self.error,
            attempts=self.attempts,
        )


class MetricRow(Base):
    __tablename__ = "metrics"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(KEY, primary_key=True)
    value: Mapped[float] = mapped_column(Double)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    def to_record(self) -> Metric:
        return Metric(self.job_id, self.epoch, self.name, self.value, self.created_at)


class EdgeRow(Base):
    __tablename__ = "provenance_edges"
    __table_args__ = (
        Index(None, "src_kind", "src_id"),
        Index(None, "dst_kind", "dst_id"),
        CheckConstraint(_in("kind", tuple(k.value for k in EdgeKind)), name="kind"),
        # A source is either absent (data from outside) or complete.
        CheckConstraint("(src_kind IS NULL) = (src_id IS NULL)", name="src_complete"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    src_kind: Mapped[str | None] = mapped_column(String(16))
    src_id: Mapped[int | None] = mapped_column(Integer)
    dst_kind: Mapped[str] = mapped_column(String(16))
    dst_id: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    def to_record(self) -> Edge:
        src = None if self.src_kind is None else Node(NodeKind(self.src_kind), self.src_id)
        return Edge(
            self.id, EdgeKind(self.kind), src, Node(NodeKind(self.dst_kind), self.dst_id), self.job_id, self.created_at
        )


class TagRow(Base):
    __tablename__ = "tags"
    # find_by_tag; not on the value, which may be longer than an index row holds (a job's progress)
    __table_args__ = (Index(None, "entity", "key"),)

    entity: Mapped[str] = mapped_column(String(16), primary_key=True)
    entity_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(KEY, primary_key=True)
    value: Mapped[str] = mapped_column(Text)
