"""``SQLStore``: the ``Store`` contract on SQLAlchemy (SQLite or PostgreSQL).

Every public method is one short transaction (``with Session.begin()``): it
checks, writes and converts the rows it touched into frozen records before the
transaction ends, so no ORM object ever escapes.

Concurrency. Writers that allocate something per task (version numbers,
example ids) or read-modify-write a row (job status, tags, metrics) first lock
the parent row with ``SELECT ... FOR UPDATE``; on PostgreSQL that queues them,
and a later ``max(...) + 1`` sees the earlier writer's commit. SQLite has no row
locks, but its write transactions begin with ``BEGIN IMMEDIATE`` (see
``engine.py``), which queues writers for the whole database. The unique
constraints on ``(task_id, number)`` and ``(task_id, first_example_id)`` back
this up: a bug here would fail loudly, never store duplicates.
"""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime
from typing import Any, Iterator, Mapping, TypeVar

from sqlalchemy import delete, false, func, insert, or_, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ease_jupyter.errors import (
    AlreadyExistsError,
    DataError,
    InvalidStateError,
    NotFoundError,
    StoreUnavailableError,
)

from .. import _validate as v
from .._frozen import FrozenDict
from ..base import (
    DatasetVersion,
    Edge,
    EdgeKind,
    ExampleChunk,
    Job,
    JobStatus,
    JobUpdate,
    Metric,
    NewChunk,
    Node,
    NodeKind,
    OwnerBlobs,
    Store,
    Task,
    Toggle,
    User,
    VersionKind,
)
from ..base import HUB, LOCAL, check_origin
from .engine import is_sqlite_memory, make_engine, upgrade, writer
from .failures import mapped_errors
from .models import (
    Base,
    DatasetVersionRow,
    EdgeRow,
    ExampleChunkRow,
    JobRow,
    MetricRow,
    TagRow,
    TaskRow,
    ToggleRow,
    UserRow,
)

RowT = TypeVar("RowT", bound=Base)
# What update_job may change besides the status.
_JOB_FIELDS_UPDATED = ("started_at", "finished_at", "accuracy", "cost_seconds", "artifact_blob", "error", "attempts")
# Tag entity -> (table, name in messages).
_TAGGABLE: dict[str, tuple[type[Base], str]] = {
    "task": (TaskRow, "task"),
    "dataset": (DatasetVersionRow, "dataset version"),
    "job": (JobRow, "job"),
    "user": (UserRow, "user"),
}


class SQLStore(Store):
    """A ``Store`` in a SQL database.

    Args:
        url: A SQLAlchemy URL, e.g. ``sqlite:////home/me/.easeml/easeml.sqlite``
            or ``postgresql+psycopg2://user:pass@host/db``. ``sqlite://`` is a
            private in-memory database (handy in tests).
        migrate: Run ``alembic upgrade head`` on open (the default). Turn it
            off only if migrations are run separately, e.g. by a deploy step.
        **engine_kwargs: Passed to ``sqlalchemy.create_engine`` (e.g. ``echo=True``).
    """

    def __init__(self, url: str, *, migrate: bool = True, **engine_kwargs: Any) -> None:
        self.url = make_url(url)
        self.engine = make_engine(self.url, **engine_kwargs)
        if migrate:
            try:
                with mapped_errors():
                    upgrade(self.engine)
            except BaseException:
                self.engine.dispose()
                raise
        self._reads = sessionmaker(self.engine, expire_on_commit=False)
        self._writes = sessionmaker(writer(self.engine), expire_on_commit=False)
        # An in-memory SQLite database is one connection shared by all threads;
        # two transactions on it would interleave, so take turns.
        self._turns = threading.RLock() if is_sqlite_memory(self.url) else contextlib.nullcontext()
        # SQLite has one writer at a time. This process's writers queue here,
        # where the next one starts as soon as the lock is free, rather than in
        # SQLite's busy handler, which polls with sleeps of up to 100 ms (other
        # processes' writers still meet it there).
        self._write_turns = threading.RLock() if self.url.get_backend_name() == "sqlite" else contextlib.nullcontext()
        self._outage = False  # the last write failed as the database could not be written (see _writing)

    def __repr__(self) -> str:
        return f"SQLStore({self.url.render_as_string(hide_password=True)!r})"

    def close(self) -> None:
        self.engine.dispose()

    # Every transaction goes through these two, so database outages become
    # storage errors here and nowhere else (failures.py); the commit is inside.
    @contextlib.contextmanager
    def _reading(self) -> Iterator[Session]:
        with mapped_errors(), self._turns, self._reads.begin() as session:
            yield session

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Session]:
        if self._outage and not is_sqlite_memory(self.url):  # (that one connection is the database)
            # A SQLite connection opened while the file was read-only stays
            # read-only: write on fresh ones until a write has succeeded again.
            self.engine.dispose()
        try:
            with mapped_errors(), self._turns, self._write_turns, self._writes.begin() as session:
                yield session
        except StoreUnavailableError:
            self._outage = True
            raise
        self._outage = False

    def check_writable(self) -> None:
        """Write in a transaction and roll it back: ``StoreUnavailableError``
        (or ``StorageFullError``) when the database cannot take writes now."""
        with self._writing() as s:
            # A statement that changes no row still takes the write lock (SQLite)
            # or is refused in a read-only transaction (PostgreSQL).
            s.execute(update(UserRow.__table__).where(false()).values(name=UserRow.__table__.c.name))
            s.rollback()

    # -- lookups that raise NotFoundError --------------------------------------
    @staticmethod
    def _row(
        session: Session, model: type[RowT], ident: Any, *, what: str, field: str, lock: bool = False
    ) -> RowT:
        ident = v.check_id(field, ident)
        row = session.get(model, ident, with_for_update=lock)
        if row is None:
            raise NotFoundError(f"{what} {ident}: not found")
        return row

    def _user(self, session: Session, user_id: Any) -> UserRow:
        return self._row(session, UserRow, user_id, what="user", field="user_id")

    def _task(self, session: Session, task_id: Any, *, lock: bool = False) -> TaskRow:
        return self._row(session, TaskRow, task_id, what="task", field="task_id", lock=lock)

    def _job(self, session: Session, job_id: Any, *, lock: bool = False) -> JobRow:
        return self._row(session, JobRow, job_id, what="job", field="job_id", lock=lock)

    def _version(
        self, session: Session, version_id: Any, *, field: str = "version_id", task_id: int | None = None
    ) -> DatasetVersionRow:
        row = self._row(session, DatasetVersionRow, version_id, what="dataset version", field=field)
        if task_id is not None and row.task_id != task_id:
            raise NotFoundError(f"dataset version {row.id}: not found in task {task_id}")
        return row

    def _entity(self, session: Session, entity: str, entity_id: Any, *, lock: bool = False) -> int:
        model, what = _TAGGABLE[entity]
        return self._row(session, model, entity_id, what=what, field="entity_id", lock=lock).id

    @staticmethod
    def _examples_known_at(session: Session, version: DatasetVersionRow) -> int:
        """How many examples the task had when ``version`` was created."""
        end = session.scalar(
            select(func.max(ExampleChunkRow.first_example_id + ExampleChunkRow.count))
            .join(DatasetVersionRow, DatasetVersionRow.id == ExampleChunkRow.version_id)
            .where(ExampleChunkRow.task_id == version.task_id, DatasetVersionRow.number <= version.number)
        )
        return end or 0

    # -- users --------------------------------------------------------------
    def create_user(self, name: str, token_hash: str | None, *, is_admin: bool = False,
                    origin: str = LOCAL) -> User:
        v.check_text("name", name)
        check_origin(origin)
        if token_hash is not None:
            v.check_text("token_hash", token_hash)
        try:
            with self._writing() as s:
                taken = select(UserRow.id).where(UserRow.origin == origin, UserRow.name == name)
                if s.scalar(taken) is not None:
                    raise AlreadyExistsError(f"user name {name!r}: already taken among {origin} users")
                self._check_token_hash_free(s, token_hash)
                row = UserRow(name=name, origin=origin, token_hash=token_hash, is_admin=bool(is_admin),
                              created_at=v.utcnow())
                s.add(row)
                s.flush()
                return row.to_record()
        except IntegrityError:
            # Only a concurrent create_user can get here (PostgreSQL checks at insert time).
            raise AlreadyExistsError(f"user name {name!r} or its token: taken by a concurrent call") from None

    @staticmethod
    def _check_token_hash_free(session: Session, token_hash: str | None, *, owner_id: int | None = None) -> None:
        if token_hash is None:
            return
        holder = session.scalar(select(UserRow.id).where(UserRow.token_hash == token_hash))
        if holder is not None and holder != owner_id:
            raise AlreadyExistsError("token_hash: already used by another user")

    def get_user(self, user_id: int) -> User:
        with self._reading() as s:
            return self._user(s, user_id).to_record()

    def user_by_name(self, name: str, origin: str = LOCAL) -> User:
        with self._reading() as s:
            row = s.scalar(select(UserRow).where(UserRow.origin == origin, UserRow.name == name))
            if row is None:
                raise NotFoundError(f"user {name!r}: not found")
            return row.to_record()

    def user_by_token_hash(self, token_hash: str) -> User:
        with self._reading() as s:
            row = s.scalar(select(UserRow).where(UserRow.token_hash == token_hash))
            if row is None:
                raise NotFoundError("no user has this token")
            return row.to_record()

    def set_user_token_hash(self, user_id: int, token_hash: str | None) -> User:
        if token_hash is not None:
            v.check_text("token_hash", token_hash)
        try:
            with self._writing() as s:
                row = self._row(s, UserRow, user_id, what="user", field="user_id", lock=True)
                self._check_token_hash_free(s, token_hash, owner_id=row.id)
                row.token_hash = token_hash
                s.flush()
                return row.to_record()
        except IntegrityError:
            raise AlreadyExistsError("token_hash: taken by a concurrent call") from None

    def link_user_to_hub(self, user_id: int) -> User:
        try:
            with self._writing() as s:
                row = self._row(s, UserRow, user_id, what="user", field="user_id", lock=True)
                if row.origin != LOCAL:
                    raise InvalidStateError(f"user {row.name!r}: already a {row.origin} user, expected a local one")
                hub = s.scalar(select(UserRow).where(UserRow.origin == HUB, UserRow.name == row.name)
                               .with_for_update())
                if hub is not None:
                    owned = s.scalar(select(func.count()).select_from(TaskRow).where(TaskRow.owner_id == hub.id))
                    if owned:
                        raise AlreadyExistsError(f"hub user {row.name!r}: already owns {owned} task(s)")
                    # (origin, name) is unique at every statement: park the hub row
                    # under a name no user can have ('#') while the two trade places.
                    hub.name = f"#{hub.id}"
                    s.flush()
                row.origin, row.token_hash = HUB, None
                s.flush()
                if hub is not None:
                    hub.name, hub.origin = row.name, LOCAL  # hub users hold no token
                    s.flush()
                return row.to_record()
        except IntegrityError:  # a hub login created the hub user meanwhile (PostgreSQL)
            raise AlreadyExistsError(f"user {user_id}: its hub name was taken by a concurrent call") from None

    def list_users(self) -> tuple[User, ...]:
        with self._reading() as s:
            return tuple(r.to_record() for r in s.scalars(select(UserRow).order_by(UserRow.id)))

    # -- tasks --------------------------------------------------------------
    def create_task(self, owner_id: int, name: str, program: str) -> Task:
        v.check_text("name", name)
        if not isinstance(program, str):
            raise DataError("program", repr(program), "the ease.ml program as a string")
        try:
            with self._writing() as s:
                owner = self._user(s, owner_id)
                taken = select(TaskRow.id).where(TaskRow.owner_id == owner.id, TaskRow.name == name)
                if s.scalar(taken) is not None:
                    raise AlreadyExistsError(f"task {name!r}: user {owner.name!r} already has a task by that name")
                row = TaskRow(owner_id=owner.id, name=name, program=program, created_at=v.utcnow(), cancelled=False)
                s.add(row)
                s.flush()
                return row.to_record()
        except IntegrityError:
            raise AlreadyExistsError(f"task {name!r}: created by a concurrent call") from None

    def get_task(self, task_id: int) -> Task:
        with self._reading() as s:
            return self._task(s, task_id).to_record()

    def task_by_name(self, owner_id: int, name: str) -> Task:
        with self._reading() as s:
            owner = self._user(s, owner_id)
            row = s.scalar(select(TaskRow).where(TaskRow.owner_id == owner.id, TaskRow.name == name))
            if row is None:
                raise NotFoundError(f"task {name!r}: user {owner.name!r} has no task by that name")
            return row.to_record()

    def list_tasks(self, owner_id: int | None = None) -> tuple[Task, ...]:
        with self._reading() as s:
            query = select(TaskRow).order_by(TaskRow.id)
            if owner_id is not None:
                query = query.where(TaskRow.owner_id == self._user(s, owner_id).id)
            return tuple(r.to_record() for r in s.scalars(query))

    def set_task_cancelled(self, task_id: int, cancelled: bool) -> Task:
        with self._writing() as s:
            row = self._task(s, task_id, lock=True)
            row.cancelled = bool(cancelled)
            s.flush()
            return row.to_record()

    def delete_task(self, task_id: int) -> frozenset[str]:
        with self._writing() as s:
            task = self._task(s, task_id, lock=True)  # queues feeds and job creations of the task
            jobs = select(JobRow.id).where(JobRow.task_id == task.id).scalar_subquery()
            versions = select(DatasetVersionRow.id).where(DatasetVersionRow.task_id == task.id).scalar_subquery()
            running = s.scalar(select(func.min(JobRow.id)).where(JobRow.task_id == task.id,
                                                                 JobRow.status == JobStatus.RUNNING.value))
            if running is not None:
                raise InvalidStateError(f"task {task.name!r}: job {running} is running, expected no running job "
                                        "(cancel the task and let its jobs finish first)")
            referenced = set(s.scalars(select(DatasetVersionRow.members_blob).where(DatasetVersionRow.task_id == task.id)))
            for x_blob, y_blob in s.execute(select(ExampleChunkRow.x_blob, ExampleChunkRow.y_blob)
                                            .where(ExampleChunkRow.task_id == task.id)):
                referenced.update((x_blob, y_blob))
            referenced.update(s.scalars(select(JobRow.artifact_blob).where(JobRow.task_id == task.id,
                                                                          JobRow.artifact_blob.is_not(None))))
            # Children first: the foreign keys (checked per statement) must hold after each.
            nodes = ((NodeKind.DATASET.value, versions), (NodeKind.MODEL.value, jobs))
            s.execute(delete(EdgeRow).where(or_(
                EdgeRow.job_id.in_(jobs),
                *(((EdgeRow.src_kind == kind) & EdgeRow.src_id.in_(ids)) for kind, ids in nodes),
                *(((EdgeRow.dst_kind == kind) & EdgeRow.dst_id.in_(ids)) for kind, ids in nodes))))
            s.execute(delete(TagRow).where(or_(
                (TagRow.entity == "task") & (TagRow.entity_id == task.id),
                (TagRow.entity == "dataset") & TagRow.entity_id.in_(versions),
                (TagRow.entity == "job") & TagRow.entity_id.in_(jobs))))
            s.execute(delete(MetricRow).where(MetricRow.job_id.in_(jobs)))
            s.execute(delete(ToggleRow).where(ToggleRow.version_id.in_(versions)))
            s.execute(delete(JobRow).where(JobRow.task_id == task.id))
            s.execute(delete(ExampleChunkRow).where(ExampleChunkRow.task_id == task.id))
            s.execute(update(DatasetVersionRow).where(DatasetVersionRow.task_id == task.id).values(parent_id=None))
            s.execute(delete(DatasetVersionRow).where(DatasetVersionRow.task_id == task.id))
            s.delete(task)
            s.flush()
            return frozenset(referenced)

    # -- dataset versions ---------------------------------------------------
    def create_dataset_version(
        self,
        task_id: int,
        *,
        kind: VersionKind,
        parent_id: int | None,
        members_blob: str,
        n_examples: int,
        chunk: NewChunk | None = None,
        toggles: Mapping[int, bool] | None = None,
    ) -> DatasetVersion:
        kind, parent_id, toggles = v.check_version_args(
            kind=kind, parent_id=parent_id, members_blob=members_blob,
            n_examples=n_examples, chunk=chunk, toggles=toggles,
        )  # fmt: skip
        with self._writing() as s:
            # Locking the task queues concurrent creators of versions of this task.
            task = self._task(s, task_id, lock=True)
            # One statement for the version's number, the latest version, the chunk's
            # first example id and the parent's task: the write lock is held for each round trip.
            last, latest, end, parent_task = s.execute(select(
                select(func.max(DatasetVersionRow.number)).where(DatasetVersionRow.task_id == task.id)
                .scalar_subquery(),
                select(DatasetVersionRow.id).where(DatasetVersionRow.task_id == task.id)
                .order_by(DatasetVersionRow.number.desc()).limit(1).scalar_subquery(),
                select(func.max(ExampleChunkRow.first_example_id + ExampleChunkRow.count))
                .where(ExampleChunkRow.task_id == task.id).scalar_subquery(),
                select(DatasetVersionRow.task_id).where(DatasetVersionRow.id == parent_id).scalar_subquery(),
            )).one()
            if parent_id is not None and parent_task is None:
                raise NotFoundError(f"dataset version {parent_id}: not found")
            if parent_id is not None and parent_task != task.id:
                raise NotFoundError(f"dataset version {parent_id}: not found in task {task.id}")
            parent = self._version(s, parent_id, field="parent_id") if toggles else None
            if toggles:
                known = self._examples_known_at(s, parent)  # a refine always has a parent
                for example_id in toggles:
                    if example_id >= known:
                        raise NotFoundError(
                            f"example {example_id}: not in task {task.id} at dataset version {parent.id}"
                            f" (it had examples 0..{known - 1})"
                        )
            v.check_latest_parent(task.id, parent_id, latest)
            now = v.utcnow()
            row = DatasetVersionRow(
                task_id=task.id, number=(last or 0) + 1, kind=kind.value, parent_id=parent_id,
                members_blob=members_blob, n_examples=int(n_examples), created_at=now,
            )  # fmt: skip
            s.add(row)
            s.flush()  # assigns row.id
            if chunk is not None:
                s.add(
                    ExampleChunkRow(
                        task_id=task.id, version_id=row.id, first_example_id=end or 0,
                        count=int(chunk.count), x_blob=chunk.x_blob, y_blob=chunk.y_blob,
                    )  # fmt: skip
                )
            if toggles:
                # One executemany: a refine may toggle many thousands of examples.
                s.execute(
                    insert(ToggleRow),
                    [{"version_id": row.id, "example_id": e, "active": a} for e, a in sorted(toggles.items())],
                )
            src = None if parent_id is None else Node(NodeKind.DATASET, parent_id)
            s.add(self._new_edge(EdgeKind(kind.value), src, Node(NodeKind.DATASET, row.id), None, now))
            s.flush()
            return row.to_record()

    @staticmethod
    def _new_edge(kind: EdgeKind, src: Node | None, dst: Node, job_id: int | None, now: datetime) -> EdgeRow:
        return EdgeRow(
            kind=kind.value,
            src_kind=None if src is None else src.kind.value,
            src_id=None if src is None else src.id,
            dst_kind=dst.kind.value,
            dst_id=dst.id,
            job_id=job_id,
            created_at=now,
        )

    def get_dataset_version(self, version_id: int) -> DatasetVersion:
        with self._reading() as s:
            return self._version(s, version_id).to_record()

    def list_dataset_versions(self, task_id: int) -> tuple[DatasetVersion, ...]:
        with self._reading() as s:
            task = self._task(s, task_id)
            query = select(DatasetVersionRow).where(DatasetVersionRow.task_id == task.id)
            return tuple(r.to_record() for r in s.scalars(query.order_by(DatasetVersionRow.number)))

    def list_chunks(self, task_id: int, *, up_to_version: int | None = None) -> tuple[ExampleChunk, ...]:
        with self._reading() as s:
            task = self._task(s, task_id)
            query = select(ExampleChunkRow).where(ExampleChunkRow.task_id == task.id)
            if up_to_version is not None:
                limit = self._version(s, up_to_version, field="up_to_version", task_id=task.id)
                query = query.join(DatasetVersionRow, DatasetVersionRow.id == ExampleChunkRow.version_id).where(
                    DatasetVersionRow.number <= limit.number
                )
            return tuple(r.to_record() for r in s.scalars(query.order_by(ExampleChunkRow.first_example_id)))

    # The three below answer what the base class computes from whole lists,
    # each in one transaction: every feed (and the control loop's reaction
    # to it) asks them, and a task's history only grows.
    def latest_dataset_version(self, task_id: int) -> DatasetVersion | None:
        with self._reading() as s:
            task = self._task(s, task_id)
            query = select(DatasetVersionRow).where(DatasetVersionRow.task_id == task.id)
            row = s.scalars(query.order_by(DatasetVersionRow.number.desc()).limit(1)).first()
            return None if row is None else row.to_record()

    def next_example_id(self, task_id: int) -> int:
        with self._reading() as s:
            task = self._task(s, task_id)
            end = s.scalar(select(func.max(ExampleChunkRow.first_example_id + ExampleChunkRow.count))
                           .where(ExampleChunkRow.task_id == task.id))
            return end or 0

    def owner_blobs(self, owner_id: int) -> OwnerBlobs:
        with self._reading() as s:
            owner = self._user(s, owner_id).id
            owned = select(TaskRow.id).where(TaskRow.owner_id == owner).scalar_subquery()
            data = set(s.scalars(select(DatasetVersionRow.members_blob).where(DatasetVersionRow.task_id.in_(owned))))
            for x_blob, y_blob in s.execute(select(ExampleChunkRow.x_blob, ExampleChunkRow.y_blob)
                                            .where(ExampleChunkRow.task_id.in_(owned))):
                data.update((x_blob, y_blob))
            models = set(s.scalars(select(JobRow.artifact_blob).where(JobRow.task_id.in_(owned),
                                                                      JobRow.artifact_blob.is_not(None))))
            return OwnerBlobs(frozenset(data), frozenset(models - data))

    def list_toggles(self, version_id: int) -> tuple[Toggle, ...]:
        with self._reading() as s:
            version = self._version(s, version_id)
            query = select(ToggleRow).where(ToggleRow.version_id == version.id).order_by(ToggleRow.example_id)
            return tuple(r.to_record() for r in s.scalars(query))

    # -- jobs and metrics ---------------------------------------------------
    def create_job(self, task_id: int, dataset_version_id: int, model: str, config: Mapping[str, Any]) -> Job:
        v.check_text("model", model)
        clean_config = v.check_config(config)
        with self._writing() as s:
            task = self._task(s, task_id)
            version = self._version(s, dataset_version_id, field="dataset_version_id", task_id=task.id)
            row = JobRow(
                task_id=task.id, dataset_version_id=version.id, model=model, config=clean_config,
                status=JobStatus.QUEUED.value, created_at=v.utcnow(), attempts=0,
            )  # fmt: skip
            s.add(row)
            s.flush()
            return row.to_record()

    def get_job(self, job_id: int) -> Job:
        with self._reading() as s:
            return self._job(s, job_id).to_record()

    def list_jobs(self, task_id: int | None = None, *, status: JobStatus | None = None) -> tuple[Job, ...]:
        status = None if status is None else v.check_status(status)
        with self._reading() as s:
            query = select(JobRow).order_by(JobRow.id)
            if task_id is not None:
                query = query.where(JobRow.task_id == self._task(s, task_id).id)
            if status is not None:
                query = query.where(JobRow.status == status.value)
            return tuple(r.to_record() for r in s.scalars(query))

    def update_job(self, job_id: int, status: JobStatus, update: JobUpdate | None = None) -> Job:
        with self._writing() as s:
            row = self._job(s, job_id, lock=True)
            before = row.to_record()
            now = v.utcnow()
            after = v.apply_job_update(before, status, update, now)
            row.status = after.status.value
            for field in _JOB_FIELDS_UPDATED:
                setattr(row, field, getattr(after, field))
            if v.adds_train_edge(before, after):
                src = Node(NodeKind.DATASET, after.dataset_version_id)
                s.add(self._new_edge(EdgeKind.TRAIN, src, Node(NodeKind.MODEL, after.id), after.id, now))
            s.flush()
            return row.to_record()

    def add_metric(self, job_id: int, epoch: int, name: str, value: float) -> Metric:
        epoch = v.check_count("epoch", epoch, minimum=0)
        v.check_text("name", name)
        value = v.check_finite("value", value)
        with self._writing() as s:
            job = self._job(s, job_id, lock=True)  # queues two reports of the same metric
            row = s.get(MetricRow, (job.id, epoch, name))
            if row is None:
                row = MetricRow(job_id=job.id, epoch=epoch, name=name)
                s.add(row)
            row.value, row.created_at = value, v.utcnow()
            s.flush()
            return row.to_record()

    def list_metrics(self, job_id: int) -> tuple[Metric, ...]:
        with self._reading() as s:
            job = self._job(s, job_id)
            query = select(MetricRow).where(MetricRow.job_id == job.id).order_by(MetricRow.epoch, MetricRow.name)
            return tuple(r.to_record() for r in s.scalars(query))

    # -- provenance -----------------------------------------------------------
    def _node(self, session: Session, node: Node) -> Node:
        node = v.check_node(node)
        if node.kind is NodeKind.DATASET:
            self._version(session, node.id, field="node.id")
        else:
            self._job(session, node.id)
        return node

    def edges_into(self, node: Node) -> tuple[Edge, ...]:
        with self._reading() as s:
            node = self._node(s, node)
            query = select(EdgeRow).where(EdgeRow.dst_kind == node.kind.value, EdgeRow.dst_id == node.id)
            return tuple(r.to_record() for r in s.scalars(query.order_by(EdgeRow.id)))

    def edges_out_of(self, node: Node) -> tuple[Edge, ...]:
        with self._reading() as s:
            node = self._node(s, node)
            query = select(EdgeRow).where(EdgeRow.src_kind == node.kind.value, EdgeRow.src_id == node.id)
            return tuple(r.to_record() for r in s.scalars(query.order_by(EdgeRow.id)))

    # -- metadata tags ----------------------------------------------------------
    def set_tag(self, entity: str, entity_id: int, key: str, value: str) -> None:
        v.check_entity(entity)
        v.check_text("key", key)
        if not isinstance(value, str):
            raise DataError("value", repr(value), "a string")
        with self._writing() as s:
            entity_id = self._entity(s, entity, entity_id, lock=True)  # queues concurrent setters
            row = s.get(TagRow, (entity, entity_id, key))
            if row is None:
                s.add(TagRow(entity=entity, entity_id=entity_id, key=key, value=value))
            else:
                row.value = value

    def tags(self, entity: str, entity_id: int) -> Mapping[str, str]:
        v.check_entity(entity)
        with self._reading() as s:
            entity_id = self._entity(s, entity, entity_id)
            query = select(TagRow.key, TagRow.value).where(TagRow.entity == entity, TagRow.entity_id == entity_id)
            return FrozenDict(sorted((key, value) for key, value in s.execute(query)))

    def find_by_tag(self, entity: str, key: str, value: str | None = None) -> tuple[int, ...]:
        v.check_entity(entity)
        with self._reading() as s:
            query = select(TagRow.entity_id).where(TagRow.entity == entity, TagRow.key == key)
            if value is not None:
                query = query.where(TagRow.value == value)
            return tuple(s.scalars(query.order_by(TagRow.entity_id)))
