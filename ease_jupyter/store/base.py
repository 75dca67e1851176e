"""The storage contract every backend follows (after Optuna's ``BaseStorage``).

Guarantees, checked by ``tests/store/test_contract.py`` against every backend:

* Every method returns frozen records (or tuples of them); mutating what you
  got back is impossible and never changes the store.
* Dataset versions are immutable. There is no method that changes or deletes a
  version, its examples or its membership, except ``delete_task``, which
  removes a whole task with everything in it. ``create_dataset_version`` writes the
  version, its new examples, its on/off toggles and its provenance edge in one
  transaction: either all of it is stored or none of it.
* Version numbers count 1, 2, 3, ... per task, in creation order, with no gaps.
* Example ids count 0, 1, 2, ... per task, in feed order, and are never reused.
* Record ids (users, tasks, versions, chunks, jobs, edges) are never given
  again once their row is deleted, so an id never names a later record.
* Jobs move only along the life cycle of ``JOB_TRANSITIONS`` (ACAI §3.3):
  queued -> running -> succeeded | failed | cancelled; queued -> cancelled;
  running -> queued (re-queued after a lost worker or a restart).
* Unknown ids raise ``NotFoundError`` (so does an id of another task where a
  method needs one of this task's: a parent version, a job's version, an
  example to toggle); taken unique names raise ``AlreadyExistsError``;
  forbidden transitions raise ``InvalidStateError``; malformed arguments raise
  ``DataError`` naming the field. A failed call leaves the store as it was.
* Provenance is a DAG whose nodes are dataset versions and trained models;
  feeds, refines and training jobs are its edges (ACAI §4.4).

Arrays never go into the SQL tables: they live in a ``BlobStore`` and the
records hold their content digests.
"""

from __future__ import annotations

import abc
import enum
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple

from ease_jupyter.errors import DataError, NotFoundError


class JobStatus(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def is_finished(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


JOB_TRANSITIONS: Mapping[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.CANCELLED}),
    JobStatus.RUNNING: frozenset(
        {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.QUEUED}
    ),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}


class VersionKind(str, enum.Enum):
    FEED = "feed"  # parent's members plus newly fed examples
    REFINE = "refine"  # parent's examples with some turned on or off


class NodeKind(str, enum.Enum):
    DATASET = "dataset"  # a dataset version id
    MODEL = "model"  # the model a training job produced (its job id)


class EdgeKind(str, enum.Enum):
    FEED = "feed"
    REFINE = "refine"
    TRAIN = "train"


# Where an account's identity comes from. Each origin is its own namespace of
# names: the hub user "carol" and the local account "carol" are two users.
LOCAL, HUB = "local", "hub"
USER_ORIGINS = (LOCAL, HUB)


def check_origin(origin: Any) -> str:
    """``origin`` if it is one of ``USER_ORIGINS``, else DataError naming the field."""
    if origin not in USER_ORIGINS:
        raise DataError("origin", repr(origin), " or ".join(map(repr, USER_ORIGINS)))
    return origin


@dataclass(frozen=True)
class User:
    id: int
    name: str
    is_admin: bool
    created_at: datetime
    # "local": logs in with an ease.ml token (``easeml users add``, ``POST /users``);
    # "hub": logs in through JupyterHub, never with an ease.ml token.
    origin: str = LOCAL


@dataclass(frozen=True)
class Task:
    id: int
    owner_id: int
    name: str
    program: str  # the ease.ml program, as printed by ease_jupyter.schema
    created_at: datetime
    cancelled: bool = False


@dataclass(frozen=True)
class ExampleChunk:
    """The examples one feed added: ids first_example_id .. first_example_id+count-1,
    stored as rows of the arrays behind x_blob and y_blob."""

    id: int
    task_id: int
    version_id: int
    first_example_id: int
    count: int
    x_blob: str
    y_blob: str


@dataclass(frozen=True)
class DatasetVersion:
    id: int
    task_id: int
    number: int  # 1, 2, 3 ... within the task
    kind: VersionKind
    parent_id: int | None
    members_blob: str  # digest of a sorted int64 array of the active example ids
    n_examples: int  # how many examples are active
    created_at: datetime


@dataclass(frozen=True)
class Toggle:
    """One example turned on (active=True) or off by a refine."""

    version_id: int
    example_id: int
    active: bool


@dataclass(frozen=True)
class Job:
    id: int
    task_id: int
    dataset_version_id: int
    model: str  # zoo candidate name
    config: Mapping[str, Any]  # the augmented config (e.g. {"lr": 0.01})
    status: JobStatus
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    accuracy: float | None = None  # best validation score
    cost_seconds: float | None = None  # measured training time
    artifact_blob: str | None = None  # the trained model's bytes
    error: str | None = None
    attempts: int = 0  # times it entered RUNNING


@dataclass(frozen=True)
class Metric:
    job_id: int
    epoch: int
    name: str
    value: float
    created_at: datetime


@dataclass(frozen=True, order=True)
class Node:
    kind: NodeKind
    id: int


@dataclass(frozen=True)
class Edge:
    id: int
    kind: EdgeKind
    src: Node | None  # None for a task's first feed (data from outside)
    dst: Node
    job_id: int | None
    created_at: datetime


@dataclass(frozen=True)
class NewChunk:
    """Arrays (already in the blob store) that a feed adds."""

    x_blob: str
    y_blob: str
    count: int


@dataclass(frozen=True)
class JobUpdate:
    """Fields ``update_job`` may set alongside a status change. None means unchanged."""

    accuracy: float | None = None
    cost_seconds: float | None = None
    artifact_blob: str | None = None
    error: str | None = None


class Store(abc.ABC):
    """Metadata store. See the module docstring for the guarantees."""

    # -- users --------------------------------------------------------------
    @abc.abstractmethod
    def create_user(self, name: str, token_hash: str | None, *, is_admin: bool = False,
                    origin: str = LOCAL) -> User:
        """Names are unique per origin (``USER_ORIGINS``), token hashes across
        all users. ``token_hash=None``: no ease.ml token reaches the user."""

    @abc.abstractmethod
    def get_user(self, user_id: int) -> User: ...

    @abc.abstractmethod
    def user_by_name(self, name: str, origin: str = LOCAL) -> User:
        """The user ``name`` of that origin's namespace."""

    @abc.abstractmethod
    def user_by_token_hash(self, token_hash: str) -> User: ...

    @abc.abstractmethod
    def set_user_token_hash(self, user_id: int, token_hash: str | None) -> User:
        """Replace the user's token hash; None revokes it, so that no token
        reaches the user any more."""

    @abc.abstractmethod
    def set_user_admin(self, user_id: int, is_admin: bool) -> User:
        """Give or take the user's admin flag (a bool, else ``DataError``
        naming ``is_admin``); returns her as she is now. Nothing else of
        hers changes; an unknown user is a ``NotFoundError``."""

    @abc.abstractmethod
    def link_user_to_hub(self, user_id: int) -> User:
        """Make the local account ``user_id`` the hub user of the same name
        (origin "hub", same id, so its tasks come along) and revoke its token,
        in one transaction; returns it as it is now.

        A hub account of that name that owns no task trades places with it:
        it becomes a local account with no token (nothing logs in to it), so
        no id is deleted and none is reused. One that owns tasks makes this an
        AlreadyExistsError and changes nothing; so does a user that is already
        a hub user (InvalidStateError)."""

    @abc.abstractmethod
    def list_users(self) -> tuple[User, ...]: ...

    @abc.abstractmethod
    def delete_user(self, user_id: int) -> User:
        """Remove a user who owns no task, with her tags (entity "user": her
        budgets, caps, settings) and her token hash, in one transaction;
        returns her record as it was. Her tasks go first, each with
        ``delete_task`` (``service/deletion.py`` ``delete_user`` does both).

        A user who still owns a task is an ``InvalidStateError``; an unknown
        one a ``NotFoundError``. Either changes nothing, and no other user's
        rows ever change. Her name and token hash are free again at once;
        her id is never given to a later user, and nothing of hers is left
        to attach to one."""

    # -- tasks --------------------------------------------------------------
    @abc.abstractmethod
    def create_task(self, owner_id: int, name: str, program: str) -> Task:
        """Names are unique per owner; two owners may use the same name."""

    @abc.abstractmethod
    def get_task(self, task_id: int) -> Task: ...

    @abc.abstractmethod
    def task_by_name(self, owner_id: int, name: str) -> Task: ...

    @abc.abstractmethod
    def list_tasks(self, owner_id: int | None = None) -> tuple[Task, ...]:
        """An owner's tasks, or every task when owner_id is None; by id."""

    @abc.abstractmethod
    def set_task_cancelled(self, task_id: int, cancelled: bool) -> Task: ...

    @abc.abstractmethod
    def delete_task(self, task_id: int) -> frozenset[str]:
        """Remove a task with its dataset versions, chunks, toggles, jobs,
        metrics, provenance edges and tags (of the task, its versions and its
        jobs), in one transaction; no other task's rows change. Returns the
        blob digests the removed rows referenced (members, chunk arrays, model
        artifacts), which may now be unreferenced: blobs are not the store's.

        A task with a RUNNING job is an ``InvalidStateError`` (its runner
        still writes to it: cancel the task and let the job finish first);
        an unknown task is a ``NotFoundError``. Either changes nothing."""

    # -- dataset versions ---------------------------------------------------
    @abc.abstractmethod
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
        """Atomically store a version, its chunk (feed), its toggles (refine)
        and its provenance edge (parent -> version, or None -> version).

        A feed needs ``chunk``; a refine needs ``toggles`` and a parent. The
        parent must belong to the same task and be its latest version (None
        only for the first): ``StaleParentError`` otherwise, after the checks
        of ``toggles``, so that two writers who read the same latest version
        cannot both build on it.
        """

    @abc.abstractmethod
    def get_dataset_version(self, version_id: int) -> DatasetVersion: ...

    @abc.abstractmethod
    def list_dataset_versions(self, task_id: int) -> tuple[DatasetVersion, ...]:
        """Ordered by number."""

    @abc.abstractmethod
    def list_chunks(self, task_id: int, *, up_to_version: int | None = None) -> tuple[ExampleChunk, ...]:
        """A task's example chunks in example-id order; with ``up_to_version``
        (a version id), only chunks fed at or before that version."""

    @abc.abstractmethod
    def list_toggles(self, version_id: int) -> tuple[Toggle, ...]: ...

    def latest_dataset_version(self, task_id: int) -> DatasetVersion | None:
        versions = self.list_dataset_versions(task_id)
        return versions[-1] if versions else None

    def next_example_id(self, task_id: int) -> int:
        chunks = self.list_chunks(task_id)
        return chunks[-1].first_example_id + chunks[-1].count if chunks else 0

    def feed_state(self, task_id: int) -> tuple[DatasetVersion | None, tuple[ExampleChunk, ...]]:
        """(the latest version or None, every chunk of the task): what a feed
        reads before it writes, in one read where the store can."""
        return self.latest_dataset_version(task_id), self.list_chunks(task_id)

    def feed_reads(self, task_id: int, owner_id: int) -> tuple[Mapping[str, str], DatasetVersion | None,
                                                               tuple[ExampleChunk, ...], OwnerBlobsStamp | None]:
        """(the task's tags, ``feed_state``, ``owner_blobs_stamp(owner_id)``):
        everything a service feed reads before it writes (its table schema and
        class names, the parent and chunks, the quota's stamp), in one read
        where the store can. NotFoundError for an unknown task, and for an
        unknown user where the store has a stamp (without one: None)."""
        return (self.tags("task", task_id), *self.feed_state(task_id), self.owner_blobs_stamp(owner_id))

    def task_overview(self, task_id: int) -> tuple[Mapping[str, str], DatasetVersion | None, dict[str, int]]:
        """(the task's tags, its latest version or None, {job status: count}
        in order of each status's first job): what ``GET /tasks/{name}``
        shows, in one read where the store can."""
        counts: dict[str, int] = {}
        for job in self.list_jobs(task_id):
            counts[job.status.value] = counts.get(job.status.value, 0) + 1
        return self.tags("task", task_id), self.latest_dataset_version(task_id), counts

    def task_jobs(self, task_id: int) -> tuple[dict[int, int], tuple[Job, ...], dict[int, Mapping[str, str]]]:
        """({version id: number}, the task's jobs by id, {job id: its tags}):
        what ``GET /tasks/{name}/jobs`` shows, in one read where the store can."""
        numbers = {version.id: version.number for version in self.list_dataset_versions(task_id)}
        jobs = self.list_jobs(task_id)
        return numbers, jobs, {job.id: self.tags("job", job.id) for job in jobs}

    def owner_results(self, owner_id: int, *, skip_tag: str | None = None
                      ) -> tuple[tuple[Task, ...], dict[int, tuple[Job, ...]], dict[int, Mapping[str, str]]]:
        """(the owner's tasks by id, {task id: its succeeded jobs by id, less
        those with tag ``skip_tag``}, {task id: its tags}): what the
        leaderboard picks from, in one read where the store can."""
        tasks = self.list_tasks(owner_id)
        skip = set(self.find_by_tag("job", skip_tag)) if skip_tag is not None else set()
        return (tasks, {t.id: tuple(j for j in self.list_jobs(t.id, status=JobStatus.SUCCEEDED) if j.id not in skip)
                        for t in tasks}, {t.id: self.tags("task", t.id) for t in tasks})

    def job_results(self, job_ids: Iterable[int]) -> tuple[dict[int, DatasetVersion], dict[int, tuple[Metric, ...]],
                                                             dict[int, Mapping[str, str]]]:
        """({version id: version} of the jobs' versions, {job id: its metrics},
        {job id: its tags}), in one read where the store can; jobs that are
        not there (deleted meanwhile) are left out."""
        jobs = []
        for job_id in job_ids:
            try:
                jobs.append(self.get_job(job_id))
            except NotFoundError:
                pass
        return ({job.dataset_version_id: self.get_dataset_version(job.dataset_version_id) for job in jobs},
                {job.id: self.list_metrics(job.id) for job in jobs}, {job.id: self.tags("job", job.id) for job in jobs})

    # -- jobs and metrics ---------------------------------------------------
    @abc.abstractmethod
    def create_job(self, task_id: int, dataset_version_id: int, model: str, config: Mapping[str, Any]) -> Job:
        """A QUEUED job. The version must belong to the task."""

    @abc.abstractmethod
    def get_job(self, job_id: int) -> Job: ...

    @abc.abstractmethod
    def list_jobs(self, task_id: int | None = None, *, status: JobStatus | None = None) -> tuple[Job, ...]:
        """Ordered by id."""

    @abc.abstractmethod
    def update_job(self, job_id: int, status: JobStatus, update: JobUpdate | None = None) -> Job:
        """Move a job along JOB_TRANSITIONS, stamping started_at/finished_at.

        Entering RUNNING sets ``started_at`` (the current attempt's start) and
        adds one to ``attempts``; a re-queue (running -> queued) clears
        ``started_at``; entering a finished state sets ``finished_at``.
        Entering SUCCEEDED with an ``artifact_blob`` adds the TRAIN provenance
        edge (dataset version -> model) in the same transaction.
        """

    @abc.abstractmethod
    def add_metric(self, job_id: int, epoch: int, name: str, value: float) -> Metric:
        """Record a finite ``value``. Reporting the same (epoch, name) again
        replaces it: a re-queued job may repeat an epoch."""

    @abc.abstractmethod
    def list_metrics(self, job_id: int) -> tuple[Metric, ...]:
        """Ordered by (epoch, name)."""

    # -- provenance -----------------------------------------------------------
    @abc.abstractmethod
    def edges_into(self, node: Node) -> tuple[Edge, ...]: ...

    @abc.abstractmethod
    def edges_out_of(self, node: Node) -> tuple[Edge, ...]: ...

    def lineage(self, node: Node, *, direction: str = "backward") -> tuple[Edge, ...]:
        """Every edge reachable from ``node`` going backward (its ancestry) or
        forward (everything derived from it), breadth first, each edge once."""
        if direction not in ("backward", "forward"):
            raise ValueError(f"direction: found {direction!r}, expected 'backward' or 'forward'")
        seen: dict[int, Edge] = {}
        frontier: deque[Node] = deque([node])
        while frontier:
            current = frontier.popleft()
            edges: Iterable[Edge] = (
                self.edges_into(current) if direction == "backward" else self.edges_out_of(current)
            )
            for edge in edges:
                if edge.id in seen:
                    continue
                seen[edge.id] = edge
                nxt = edge.src if direction == "backward" else edge.dst
                if nxt is not None:
                    frontier.append(nxt)
        return tuple(seen.values())

    # -- storage accounting ----------------------------------------------------
    def owner_blobs(self, owner_id: int) -> "OwnerBlobs":
        """The digests of the blobs an owner's rows reference: her dataset
        versions' members and chunks, and her jobs' models. What her storage
        quota counts (``service/quota.py``)."""
        data: set[str] = set()
        models: set[str] = set()
        for task in self.list_tasks(owner_id):
            data.update(v.members_blob for v in self.list_dataset_versions(task.id))
            for chunk in self.list_chunks(task.id):
                data.update((chunk.x_blob, chunk.y_blob))
            models.update(j.artifact_blob for j in self.list_jobs(task.id) if j.artifact_blob is not None)
        return OwnerBlobs(frozenset(data), frozenset(models - data))

    def blob_referenced(self, digest: str) -> bool:
        """Whether a dataset version's members, a chunk's arrays or a job's
        model is the blob ``digest``: a failed write may delete a blob it put
        only while no committed row references it (``datasets``)."""
        for task in self.list_tasks():
            if any(v.members_blob == digest for v in self.list_dataset_versions(task.id)):
                return True
            if any(digest in (c.x_blob, c.y_blob) for c in self.list_chunks(task.id)):
                return True
            if any(j.artifact_blob == digest for j in self.list_jobs(task.id)):
                return True
        return False

    def owner_blobs_stamp(self, owner_id: int) -> OwnerBlobsStamp | None:
        """Numbers that change whenever ``owner_blobs(owner_id)`` may have
        changed (the count and the highest id of her dataset versions and of
        her jobs with a model), in one cheap read; None where a store has no
        cheap way (then callers ask ``owner_blobs`` every time).
        NotFoundError for an unknown user."""
        return None

    # -- metadata tags (ACAI §3.2) --------------------------------------------
    @abc.abstractmethod
    def set_tag(self, entity: str, entity_id: int, key: str, value: str) -> None:
        """Set (or overwrite) a key-value tag on a 'task', 'dataset', 'job' or 'user'."""

    @abc.abstractmethod
    def tags(self, entity: str, entity_id: int) -> Mapping[str, str]: ...

    @abc.abstractmethod
    def find_by_tag(self, entity: str, key: str, value: str | None = None) -> tuple[int, ...]:
        """Ids of entities with tag ``key`` (equal to ``value`` when given), ascending."""

    def close(self) -> None:
        """Release connections. The default does nothing."""

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def unreadable_blob(what: str, digest: str) -> Exception:
    """The error for a blob that ``what`` (a row: "task 'iris', job 7")
    references and that is missing or damaged: it names the row, never a path."""
    from ease_jupyter.errors import StoreCorruptError

    return StoreCorruptError(f"{what}: the stored data (blob {digest[:12]}) is missing or damaged; "
                             "`easeml fsck` reports such data and repairs what it can",
                             field="blob", found="missing or damaged", expected="a readable blob")


class OwnerBlobsStamp(NamedTuple):
    """What ``Store.owner_blobs_stamp`` returns: numbers that together move
    with every write that changes an owner's referenced blobs."""

    versions: int  # her dataset versions
    newest_version: int  # their highest id
    models: int  # her jobs with a model
    newest_model: int  # their highest id
    # The newest creation times (µs since the epoch): SQLite gives a row made after a
    # delete the deleted row's id again, which could bring back an old count and highest id.
    versions_created: int
    models_created: int

    def with_version(self, version: "DatasetVersion") -> "OwnerBlobsStamp":
        """The stamp once ``version``, stored by the caller just after this
        stamp was read, is in the store (and nothing else changed)."""
        return self._replace(versions=self.versions + 1, newest_version=max(self.newest_version, version.id),
                             versions_created=max(self.versions_created, micros(version.created_at)))


def micros(moment: datetime) -> int:
    """A creation time as a stamp holds it."""
    return round(moment.timestamp() * 1e6)


@dataclass(frozen=True)
class OwnerBlobs:
    """What ``Store.owner_blobs`` returns; a digest is in one set only."""

    data: frozenset[str]  # dataset versions' members and chunks' arrays
    models: frozenset[str]  # jobs' artifacts


@dataclass(frozen=True)
class BlobInfo:
    """One stored blob, as ``BlobStore.iter_blobs`` lists it."""

    digest: str
    size: int  # bytes
    written_at: float  # POSIX time of its last put (a put of existing content counts)


class BlobStore(abc.ABC):
    """Content-addressed bytes: the key of a blob is the sha256 of its content,
    so writing the same content twice stores it once and a key never changes
    meaning. Writes are atomic: a reader sees a whole blob or none.

    Deletion is for garbage collection (``ease_jupyter.service.gc``), which
    relies on one rule: every ``put_bytes`` (also of content already stored)
    sets the blob's ``written_at`` to now, and ``delete(digest,
    if_older_than=t)`` deletes only a blob last written before ``t``. So a
    blob that someone has just put, and is about to reference, survives a
    collection that started before the put."""

    @abc.abstractmethod
    def put_bytes(self, data: bytes) -> str:
        """Store ``data`` (or refresh the ``written_at`` of equal content); its digest."""

    @abc.abstractmethod
    def get_bytes(self, digest: str) -> bytes: ...

    @abc.abstractmethod
    def exists(self, digest: str) -> bool: ...

    @abc.abstractmethod
    def delete(self, digest: str, *, if_older_than: float | None = None,
               unless: Callable[[], bool] | None = None) -> bool:
        """Delete a blob; True if this call deleted it. A missing blob is a
        no-op (False). With ``if_older_than`` (POSIX time), a blob written (or
        put again) at or after that moment is kept (False), also when the put
        races with this call. With ``unless``, the blob is first taken out of
        reach (an ``exists`` from then on says False, and a put stores it
        afresh), then kept if ``unless()`` is true: a writer that checks its
        blobs after committing the row that references them either finds
        them or puts them again, so none is lost to a delete that
        ``unless`` asked the store about (``datasets``)."""

    @abc.abstractmethod
    def iter_blobs(self) -> Iterator[BlobInfo]:
        """Every stored blob, in no particular order. Blobs put or deleted
        while the iteration runs may or may not be listed."""

    def size(self, digest: str) -> int | None:
        """The blob's size in bytes; None when it is missing."""
        from ease_jupyter.errors import NotFoundError

        try:
            return len(self.get_bytes(digest))
        except NotFoundError:
            return None

    def get_referenced(self, digest: str, what: str) -> bytes:
        """The bytes of a blob that a row references; ``what`` names the row
        ("task 'iris', dataset version 3"). A blob that is missing or damaged
        is ``unreadable_blob(what, digest)``."""
        from ease_jupyter.errors import NotFoundError, StoreCorruptError

        try:
            return self.get_bytes(digest)
        except (NotFoundError, StoreCorruptError):
            raise unreadable_blob(what, digest) from None

    def put_array(self, array: Any) -> str:
        import io

        import numpy as np

        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
        return self.put_bytes(buffer.getvalue())

    def get_array(self, digest: str) -> Any:
        from ease_jupyter.npy_bytes import load_npy

        return load_npy(self.get_bytes(digest))
