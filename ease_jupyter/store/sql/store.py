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
from typing import Any, Iterable, Iterator, Mapping, TypeVar

from sqlalchemy import bindparam, delete, false, func, insert, literal, or_, select, union_all, update
from sqlalchemy.engine import Connection
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
    OwnerBlobsStamp,
    Store,
    Task,
    Toggle,
    User,
    VersionKind,
)
from ..base import HUB, LOCAL, check_origin, micros
from .engine import is_sqlite_memory, make_engine, upgrade, writer
from .failures import mapped_errors
from . import read_queries as q
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

# Plain columns in the records' field order: reading them skips the ORM's
# identity map, which a feed's reads never need.
_CHUNK_COLUMNS = tuple(ExampleChunkRow.__table__.c[name] for name in (
    "id", "task_id", "version_id", "first_example_id", "count", "x_blob", "y_blob"))


def _edge_values(kind: EdgeKind, src: Node | None, dst: Node, job_id: int | None, now: datetime) -> dict[str, Any]:
    return {"kind": kind.value, "src_kind": None if src is None else src.kind.value,
            "src_id": None if src is None else src.id, "dst_kind": dst.kind.value, "dst_id": dst.id,
            "job_id": job_id, "created_at": now}


_EDGE_FIELDS = ("kind", "src_kind", "src_id", "dst_kind", "dst_id", "job_id", "created_at")


# The statements of a feed's reads and writes, built once: building and keying a
# statement costs SQLAlchemy several times what SQLite takes to run it.
_TASK_ID = bindparam("task_id")
_TASK_VERSIONS = (select(*q.VERSION_COLUMNS).where(DatasetVersionRow.task_id == _TASK_ID)
                  .order_by(DatasetVersionRow.number))
_NEXT_EXAMPLE_ID = (select(func.max(ExampleChunkRow.first_example_id + ExampleChunkRow.count))
                    .where(ExampleChunkRow.task_id == _TASK_ID))
_TASK_CHUNKS = (select(*_CHUNK_COLUMNS).where(ExampleChunkRow.task_id == _TASK_ID)
                .order_by(ExampleChunkRow.first_example_id))
# (an entity's row with its tags: no row, no such entity)
_ENTITY_TAGS = {
    entity: select(model.id, TagRow.key, TagRow.value).where(model.id == bindparam("entity_id"))
    .outerjoin(TagRow, (TagRow.entity == entity) & (TagRow.entity_id == model.id))
    for entity, (model, _) in _TAGGABLE.items()
}
# One statement: every kind of blob reference of an owner, tagged "d" (data) or "m" (a model).
_OWNER_BLOBS = union_all(
    select(DatasetVersionRow.members_blob, literal("d")).where(DatasetVersionRow.task_id.in_(q.OWNED)),
    select(ExampleChunkRow.x_blob, literal("d")).where(ExampleChunkRow.task_id.in_(q.OWNED)),
    select(ExampleChunkRow.y_blob, literal("d")).where(ExampleChunkRow.task_id.in_(q.OWNED)),
    select(JobRow.artifact_blob, literal("m")).where(JobRow.task_id.in_(q.OWNED), JobRow.artifact_blob.is_not(None)),
)
_OWNER_BLOBS_STAMP = select(
    select(UserRow.id).where(UserRow.id == bindparam("id")).scalar_subquery(),  # (q.OWNED's owner)
    select(func.count()).select_from(DatasetVersionRow).where(DatasetVersionRow.task_id.in_(q.OWNED)).scalar_subquery(),
    select(func.max(DatasetVersionRow.id)).where(DatasetVersionRow.task_id.in_(q.OWNED)).scalar_subquery(),
    select(func.count()).select_from(JobRow)
    .where(JobRow.task_id.in_(q.OWNED), JobRow.artifact_blob.is_not(None)).scalar_subquery(),
    select(func.max(JobRow.id)).where(JobRow.task_id.in_(q.OWNED), JobRow.artifact_blob.is_not(None)).scalar_subquery(),
    # (the newest creation times: see OwnerBlobsStamp)
    select(func.max(DatasetVersionRow.created_at)).where(DatasetVersionRow.task_id.in_(q.OWNED)).scalar_subquery(),
    select(func.max(JobRow.created_at))
    .where(JobRow.task_id.in_(q.OWNED), JobRow.artifact_blob.is_not(None)).scalar_subquery(),
)
# What a new version needs: the task's existence, the next number, the latest
# version, the next example id, and the parent's task and number.
_VERSION_SLOTS = select(
    select(TaskRow.id).where(TaskRow.id == _TASK_ID).scalar_subquery(),
    select(func.max(DatasetVersionRow.number)).where(DatasetVersionRow.task_id == _TASK_ID).scalar_subquery(),
    select(DatasetVersionRow.id).where(DatasetVersionRow.task_id == _TASK_ID)
    .order_by(DatasetVersionRow.number.desc()).limit(1).scalar_subquery(),
    select(func.max(ExampleChunkRow.first_example_id + ExampleChunkRow.count))
    .where(ExampleChunkRow.task_id == _TASK_ID).scalar_subquery(),
    select(DatasetVersionRow.task_id).where(DatasetVersionRow.id == bindparam("parent_id")).scalar_subquery(),
    select(DatasetVersionRow.number).where(DatasetVersionRow.id == bindparam("parent_id")).scalar_subquery(),
)
_LOCK_TASK = select(TaskRow.id).where(TaskRow.id == _TASK_ID).with_for_update()
_INSERT_VERSION = insert(DatasetVersionRow.__table__)
_INSERT_CHUNK = insert(ExampleChunkRow.__table__)
_INSERT_EDGE = insert(EdgeRow.__table__)


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
        self._write_engine = writer(self.engine)
        self._writes = sessionmaker(self._write_engine, expire_on_commit=False)
        # An in-memory SQLite database is one connection shared by all threads;
        # two transactions on it would interleave, so take turns.
        self._turns = threading.RLock() if is_sqlite_memory(self.url) else contextlib.nullcontext()
        # SQLite has one writer at a time. This process's writers queue here,
        # where the next one starts as soon as the lock is free, rather than in
        # SQLite's busy handler, which polls with sleeps of up to 100 ms (other
        # processes' writers still meet it there).
        self._write_turns = threading.RLock() if self.url.get_backend_name() == "sqlite" else contextlib.nullcontext()
        self._outage = False  # the last write failed as the database could not be written (see _writing)
        # PostgreSQL queues writers of one task on its row (SELECT ... FOR UPDATE);
        # SQLite's write transactions queue for the whole database (BEGIN IMMEDIATE).
        self._row_locks = self.url.get_backend_name() != "sqlite"

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
    def _reading_rows(self) -> Iterator[Connection]:
        """``_reading`` on a plain connection, for the hot reads of prebuilt
        Core statements (no ORM objects, no session to set up)."""
        with mapped_errors(), self._turns, self.engine.begin() as connection:
            yield connection

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Session]:
        with self._write_transaction(self._writes.begin) as session:
            yield session

    @contextlib.contextmanager
    def _writing_rows(self) -> Iterator[Connection]:
        """``_writing`` on a plain connection, for writes of prebuilt Core statements."""
        with self._write_transaction(self._write_engine.begin) as connection:
            yield connection

    @contextlib.contextmanager
    def _write_transaction(self, begin: Any) -> Iterator[Any]:
        if self._outage and not is_sqlite_memory(self.url):  # (that one connection is the database)
            # A SQLite connection opened while the file was read-only stays
            # read-only: write on fresh ones until a write has succeeded again.
            self.engine.dispose()
        try:
            with mapped_errors(), self._turns, self._write_turns, begin() as transaction:
                yield transaction
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

    # The hot paths (every feed, every sync of the control loop) run their main
    # query first and look for the parent row only when it found nothing: an
    # empty answer must still tell "no rows" from "no such task" (NotFoundError).
    @staticmethod
    def _check_exists(c: Connection, model: type[Base], ident: int, *, what: str) -> None:
        if c.scalar(q.EXISTS[model], {"id": ident}) is None:
            raise NotFoundError(f"{what} {ident}: not found")

    @staticmethod
    def _examples_known_at(session: Session | Connection, task_id: int, number: int) -> int:
        """How many examples the task had when its version ``number`` was created."""
        end = session.scalar(
            select(func.max(ExampleChunkRow.first_example_id + ExampleChunkRow.count))
            .join(DatasetVersionRow, DatasetVersionRow.id == ExampleChunkRow.version_id)
            .where(ExampleChunkRow.task_id == task_id, DatasetVersionRow.number <= number)
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

    def set_user_admin(self, user_id: int, is_admin: bool) -> User:
        if not isinstance(is_admin, bool):
            raise DataError("is_admin", repr(is_admin), "true or false")
        with self._writing() as s:
            row = self._row(s, UserRow, user_id, what="user", field="user_id", lock=True)
            row.is_admin = is_admin
            s.flush()
            return row.to_record()

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

    def delete_user(self, user_id: int) -> User:
        try:
            with self._writing() as s:
                row = self._row(s, UserRow, user_id, what="user", field="user_id", lock=True)
                owned = s.scalar(select(func.count()).select_from(TaskRow).where(TaskRow.owner_id == row.id))
                if owned:
                    raise InvalidStateError(f"user {row.name!r}: owns {owned} task(s), expected none "
                                            "(delete her tasks first)")
                user = row.to_record()
                s.execute(delete(TagRow).where(TagRow.entity == "user", TagRow.entity_id == row.id))
                s.delete(row)
                s.flush()
                return user
        except IntegrityError:  # a task of hers created meanwhile (the foreign key, PostgreSQL)
            raise InvalidStateError(f"user {user_id}: a task of hers was created meanwhile, expected none "
                                    "(delete her tasks first)") from None

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
        task_id = v.check_id("task_id", task_id)
        with self._reading_rows() as c:
            row = c.execute(q.TASK, {"id": task_id}).first()
            if row is None:
                raise NotFoundError(f"task {task_id}: not found")
            return q.task_record(row)

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
        task_id = v.check_id("task_id", task_id)
        # Core statements built once (see _VERSION_SLOTS) on a plain connection: no
        # ORM session or unit of work, and the write lock is held for fewer round trips.
        with self._writing_rows() as c:
            if self._row_locks and c.scalar(_LOCK_TASK, {"task_id": task_id}) is None:
                # (locking the task queues concurrent creators of versions of this task)
                raise NotFoundError(f"task {task_id}: not found")
            # One statement for the task's existence, the version's number, the latest
            # version, the chunk's first example id and the parent's task and number.
            found, last, latest, end, parent_task, parent_number = c.execute(
                _VERSION_SLOTS, {"task_id": task_id, "parent_id": parent_id}).one()
            if found is None:
                raise NotFoundError(f"task {task_id}: not found")
            if parent_id is not None and parent_task is None:
                raise NotFoundError(f"dataset version {parent_id}: not found")
            if parent_id is not None and parent_task != task_id:
                raise NotFoundError(f"dataset version {parent_id}: not found in task {task_id}")
            if toggles:
                known = self._examples_known_at(c, task_id, parent_number)  # a refine always has a parent
                for example_id in toggles:
                    if example_id >= known:
                        raise NotFoundError(
                            f"example {example_id}: not in task {task_id} at dataset version {parent_id}"
                            f" (it had examples 0..{known - 1})"
                        )
            v.check_latest_parent(task_id, parent_id, latest)
            now = v.utcnow()
            number = (last or 0) + 1
            version_id = c.execute(_INSERT_VERSION, {
                "task_id": task_id, "number": number, "kind": kind.value, "parent_id": parent_id,
                "members_blob": members_blob, "n_examples": int(n_examples), "created_at": now,
            }).inserted_primary_key[0]  # fmt: skip
            record = DatasetVersion(version_id, task_id, number, kind, parent_id, members_blob, int(n_examples), now)
            if chunk is not None:
                c.execute(_INSERT_CHUNK, {
                    "task_id": task_id, "version_id": version_id, "first_example_id": end or 0,
                    "count": int(chunk.count), "x_blob": chunk.x_blob, "y_blob": chunk.y_blob,
                })  # fmt: skip
            if toggles:
                # One executemany: a refine may toggle many thousands of examples.
                c.execute(
                    insert(ToggleRow.__table__),
                    [{"version_id": version_id, "example_id": e, "active": a} for e, a in sorted(toggles.items())],
                )
            src = None if parent_id is None else Node(NodeKind.DATASET, parent_id)
            edge = self._new_edge(EdgeKind(kind.value), src, Node(NodeKind.DATASET, version_id), None, now)
            c.execute(_INSERT_EDGE, {name: getattr(edge, name) for name in _EDGE_FIELDS})
            return record

    @staticmethod
    def _new_edge(kind: EdgeKind, src: Node | None, dst: Node, job_id: int | None, now: datetime) -> EdgeRow:
        return EdgeRow(**_edge_values(kind, src, dst, job_id, now))

    def get_dataset_version(self, version_id: int) -> DatasetVersion:
        with self._reading() as s:
            return self._version(s, version_id).to_record()

    def list_dataset_versions(self, task_id: int) -> tuple[DatasetVersion, ...]:
        task_id = v.check_id("task_id", task_id)
        with self._reading_rows() as c:
            versions = tuple(map(q.version_record, c.execute(_TASK_VERSIONS, {"task_id": task_id})))
            if not versions:
                self._check_exists(c, TaskRow, task_id, what="task")
            return versions

    def list_chunks(self, task_id: int, *, up_to_version: int | None = None) -> tuple[ExampleChunk, ...]:
        task_id = v.check_id("task_id", task_id)
        if up_to_version is None:
            with self._reading_rows() as c:
                chunks = tuple(ExampleChunk(*r) for r in c.execute(_TASK_CHUNKS, {"task_id": task_id}))
                if not chunks:
                    self._check_exists(c, TaskRow, task_id, what="task")
                return chunks
        with self._reading() as s:
            self._task(s, task_id)
            limit = self._version(s, up_to_version, field="up_to_version", task_id=task_id)
            query = (select(*_CHUNK_COLUMNS).where(ExampleChunkRow.task_id == task_id)
                     .join(DatasetVersionRow, DatasetVersionRow.id == ExampleChunkRow.version_id)
                     .where(DatasetVersionRow.number <= limit.number))
            return tuple(ExampleChunk(*r) for r in s.execute(query.order_by(ExampleChunkRow.first_example_id)))

    # The three below answer what the base class computes from whole lists,
    # each in one transaction: every feed (and the control loop's reaction
    # to it) asks them, and a task's history only grows.
    def feed_state(self, task_id: int) -> tuple[DatasetVersion | None, tuple[ExampleChunk, ...]]:
        task_id = v.check_id("task_id", task_id)
        with self._reading_rows() as c:
            latest, chunks = _feed_state_rows(c, task_id)
            if latest is None and not chunks:
                self._check_exists(c, TaskRow, task_id, what="task")
            return latest, chunks

    def feed_reads(self, task_id: int, owner_id: int) -> tuple[Mapping[str, str], DatasetVersion | None,
                                                               tuple[ExampleChunk, ...], OwnerBlobsStamp | None]:
        task_id = v.check_id("task_id", task_id)
        owner = v.check_id("user_id", owner_id)
        with self._reading_rows() as c:  # one read: the task's tags (it exists), its feed state, her stamp
            return (_tags_rows(c, "task", task_id), *_feed_state_rows(c, task_id), _stamp_row(c, owner))

    def latest_dataset_version(self, task_id: int) -> DatasetVersion | None:
        task_id = v.check_id("task_id", task_id)
        with self._reading_rows() as c:
            row = c.execute(q.LATEST_VERSION, {"id": task_id}).first()
            if row is None:
                self._check_exists(c, TaskRow, task_id, what="task")
                return None
            return q.version_record(row)

    # The four below answer the pages every polling client reads (the task,
    # its jobs, the leaderboard: ``Store.task_overview`` and the others) in
    # one transaction each, with statements built once (``read_queries``).
    @classmethod
    def _exists(cls, c: Connection, model: type[Base], ident: Any, *, what: str, field: str) -> int:
        ident = v.check_id(field, ident)
        cls._check_exists(c, model, ident, what=what)
        return ident

    def task_overview(self, task_id: int) -> tuple[Mapping[str, str], DatasetVersion | None, dict[str, int]]:
        with self._reading_rows() as c:
            task_id = self._exists(c, TaskRow, task_id, what="task", field="task_id")
            tags = FrozenDict(sorted((key, value) for key, value in c.execute(q.TASK_TAGS, {"id": task_id})))
            latest = c.execute(q.LATEST_VERSION, {"id": task_id}).first()
            counts = {status: n for status, n in c.execute(q.JOB_COUNTS, {"id": task_id})}
            return tags, None if latest is None else q.version_record(latest), counts

    def task_jobs(self, task_id: int) -> tuple[dict[int, int], tuple[Job, ...], dict[int, Mapping[str, str]]]:
        with self._reading_rows() as c:
            task_id = self._exists(c, TaskRow, task_id, what="task", field="task_id")
            numbers = {version_id: number for version_id, number in c.execute(q.VERSION_NUMBERS, {"id": task_id})}
            jobs = tuple(map(q.job_record, c.execute(q.TASK_JOBS, {"id": task_id})))
            found: dict[int, list[tuple[str, str]]] = {job.id: [] for job in jobs}
            for job_id, key, value in c.execute(q.TASK_JOB_TAGS, {"id": task_id}):
                if job_id in found:  # (a job created since the jobs were read has no row here)
                    found[job_id].append((key, value))
            return numbers, jobs, {job_id: FrozenDict(sorted(pairs)) for job_id, pairs in found.items()}

    def owner_results(self, owner_id: int, *, skip_tag: str | None = None
                      ) -> tuple[tuple[Task, ...], dict[int, tuple[Job, ...]], dict[int, Mapping[str, str]]]:
        with self._reading_rows() as c:
            owner_id = self._exists(c, UserRow, owner_id, what="user", field="user_id")
            tasks = tuple(map(q.task_record, c.execute(q.OWNER_TASKS, {"id": owner_id})))
            skip = set() if skip_tag is None else set(c.scalars(q.OWNER_SUCCEEDED_TAGGED, {"id": owner_id, "key": skip_tag}))
            jobs: dict[int, list[Job]] = {task.id: [] for task in tasks}
            for row in c.execute(q.OWNER_SUCCEEDED, {"id": owner_id}):
                job = q.job_record(row)
                if job.id not in skip:
                    jobs.setdefault(job.task_id, []).append(job)
            tags: dict[int, list[tuple[str, str]]] = {task.id: [] for task in tasks}
            for task_id, key, value in c.execute(q.OWNER_TASK_TAGS, {"id": owner_id}):
                tags.setdefault(task_id, []).append((key, value))
            return (tasks, {task.id: tuple(jobs[task.id]) for task in tasks},
                    {task.id: FrozenDict(sorted(tags[task.id])) for task in tasks})

    def job_results(self, job_ids: Iterable[int]) -> tuple[dict[int, DatasetVersion], dict[int, tuple[Metric, ...]],
                                                             dict[int, Mapping[str, str]]]:
        job_ids = [v.check_id("job_id", job_id) for job_id in job_ids]
        if not job_ids:
            return {}, {}, {}
        with self._reading_rows() as c:
            rows = {job.id: job for job in map(q.job_record, c.execute(q.JOBS, {"ids": job_ids}))}
            job_ids = [job_id for job_id in job_ids if job_id in rows]  # (deleted meanwhile: left out)
            version_ids = sorted({job.dataset_version_id for job in rows.values()})
            versions = {r.id: r for r in map(q.version_record, c.execute(q.VERSIONS, {"ids": version_ids}))}
            metrics: dict[int, list[Metric]] = {job_id: [] for job_id in job_ids}
            for metric in map(q.metric_record, c.execute(q.METRICS, {"ids": job_ids})):
                metrics[metric.job_id].append(metric)
            tags: dict[int, list[tuple[str, str]]] = {job_id: [] for job_id in job_ids}
            for job_id, key, value in c.execute(q.JOB_TAGS, {"ids": job_ids}):
                tags[job_id].append((key, value))
            return (versions, {job_id: tuple(found) for job_id, found in metrics.items()},
                    {job_id: FrozenDict(sorted(found)) for job_id, found in tags.items()})

    def next_example_id(self, task_id: int) -> int:
        task_id = v.check_id("task_id", task_id)
        with self._reading_rows() as c:
            end = c.scalar(_NEXT_EXAMPLE_ID, {"task_id": task_id})
            if end is None:
                self._check_exists(c, TaskRow, task_id, what="task")
            return end or 0

    def owner_blobs(self, owner_id: int) -> OwnerBlobs:
        owner = v.check_id("user_id", owner_id)
        with self._reading_rows() as c:
            data: set[str] = set()
            models: set[str] = set()
            for digest, kind in c.execute(_OWNER_BLOBS, {"id": owner}):
                (data if kind == "d" else models).add(digest)
            if not data and not models:
                self._check_exists(c, UserRow, owner, what="user")
            return OwnerBlobs(frozenset(data), frozenset(models - data))

    def blob_referenced(self, digest: str) -> bool:
        v.check_digest("digest", digest)
        holders = (select(DatasetVersionRow.id).where(DatasetVersionRow.members_blob == digest),
                   select(ExampleChunkRow.id).where(or_(ExampleChunkRow.x_blob == digest,
                                                        ExampleChunkRow.y_blob == digest)),
                   select(JobRow.id).where(JobRow.artifact_blob == digest))
        with self._reading_rows() as c:
            return any(c.execute(query.limit(1)).first() is not None for query in holders)

    def owner_blobs_stamp(self, owner_id: int) -> OwnerBlobsStamp:
        owner = v.check_id("user_id", owner_id)
        with self._reading_rows() as c:
            return _stamp_row(c, owner)

    def list_toggles(self, version_id: int) -> tuple[Toggle, ...]:
        with self._reading() as s:
            version = self._version(s, version_id)
            query = select(ToggleRow).where(ToggleRow.version_id == version.id).order_by(ToggleRow.example_id)
            return tuple(r.to_record() for r in s.scalars(query))

    # -- jobs and metrics ---------------------------------------------------
    def create_job(self, task_id: int, dataset_version_id: int, model: str, config: Mapping[str, Any]) -> Job:
        v.check_key("model", model)
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
        if task_id is not None:  # every sync of the control loop: prebuilt, the task looked for only if no job
            task_id = v.check_id("task_id", task_id)
            with self._reading_rows() as c:
                jobs = tuple(map(q.job_record, c.execute(q.TASK_JOBS, {"id": task_id}) if status is None
                                 else c.execute(q.TASK_JOBS_WITH_STATUS, {"id": task_id, "status": status.value})))
                if not jobs:
                    self._check_exists(c, TaskRow, task_id, what="task")
                return jobs
        with self._reading() as s:
            query = select(JobRow).order_by(JobRow.id)
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
        v.check_key("name", name)
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
        v.check_key("key", key)
        if not isinstance(value, str):
            raise DataError("value", repr(value), "a string")
        entity_id = v.check_id("entity_id", entity_id)
        tags = TagRow.__table__
        overwrite = update(tags).where(tags.c.entity == entity, tags.c.entity_id == entity_id,
                                       tags.c.key == key).values(value=value)
        with self._writing() as s:
            # A tag that is there already proves its entity exists (delete_task removes
            # the tags with their rows): one statement overwrites it.
            if s.execute(overwrite).rowcount:
                return
            self._entity(s, entity, entity_id, lock=True)  # queues concurrent setters of a new key
            # A setter that held the lock before this one may have added the key meanwhile (PostgreSQL).
            if not s.execute(overwrite).rowcount:
                s.execute(insert(tags).values(entity=entity, entity_id=entity_id, key=key, value=value))

    def tags(self, entity: str, entity_id: int) -> Mapping[str, str]:
        v.check_entity(entity)
        entity_id = v.check_id("entity_id", entity_id)
        with self._reading_rows() as c:
            return _tags_rows(c, entity, entity_id)

    def find_by_tag(self, entity: str, key: str, value: str | None = None) -> tuple[int, ...]:
        v.check_entity(entity)
        with self._reading() as s:
            query = select(TagRow.entity_id).where(TagRow.entity == entity, TagRow.key == key)
            if value is not None:
                query = query.where(TagRow.value == value)
            return tuple(s.scalars(query.order_by(TagRow.entity_id)))


# -- reads on an open connection, shared by the single reads and feed_reads ----
def _tags_rows(c, entity: str, entity_id: int) -> Mapping[str, str]:
    """One statement: the entity's row (NotFoundError without one) with its tags."""
    rows = c.execute(_ENTITY_TAGS[entity], {"entity_id": entity_id}).all()
    if not rows:
        raise NotFoundError(f"{_TAGGABLE[entity][1]} {entity_id}: not found")
    return FrozenDict(sorted((key, value) for _, key, value in rows if key is not None))


def _feed_state_rows(c, task_id: int) -> tuple[DatasetVersion | None, tuple[ExampleChunk, ...]]:
    """The task's latest version and its chunks (nothing checks that the task exists)."""
    latest = c.execute(q.LATEST_VERSION, {"id": task_id}).first()
    chunks = tuple(ExampleChunk(*r) for r in c.execute(_TASK_CHUNKS, {"task_id": task_id}))
    return None if latest is None else q.version_record(latest), chunks


def _stamp_row(c, owner: int) -> OwnerBlobsStamp:
    """``owner_blobs_stamp`` (NotFoundError for an unknown user)."""
    row = c.execute(_OWNER_BLOBS_STAMP, {"id": owner}).one()
    if row[0] is None:
        raise NotFoundError(f"user {owner}: not found")
    return OwnerBlobsStamp(*(0 if x is None else micros(x) if isinstance(x, datetime) else int(x) for x in row[1:]))
