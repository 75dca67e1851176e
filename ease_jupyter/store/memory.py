"""Dict-backed ``Store`` and ``BlobStore`` for tests and quick notebooks.

Every method holds one re-entrant lock for its whole body, which makes each
call atomic with respect to the others (the contract's "one transaction per
method"). Writes first check everything and build every new record, and only
then insert them, so a call that raises leaves the dicts untouched. Records are
frozen dataclasses (configs deep-frozen), so handing out the stored objects
themselves is safe.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, Iterator, Mapping

from ease_jupyter.errors import AlreadyExistsError, DataError, InvalidStateError, NotFoundError

from . import _validate as v
from ._frozen import FrozenDict, freeze
from .base import (
    BlobInfo,
    BlobStore,
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
    Store,
    Task,
    Toggle,
    User,
    VersionKind,
)
from .base import HUB, LOCAL, check_origin


class InMemoryStore(Store):
    """A ``Store`` that lives in this process only. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._users: dict[int, User] = {}
        self._token_hashes: dict[str, int] = {}  # token hash -> user id
        self._tasks: dict[int, Task] = {}
        self._versions: dict[int, DatasetVersion] = {}
        self._chunks: dict[int, ExampleChunk] = {}
        self._toggles: dict[int, tuple[Toggle, ...]] = {}  # by version id
        self._jobs: dict[int, Job] = {}
        self._metrics: dict[tuple[int, int, str], Metric] = {}
        self._edges: dict[int, Edge] = {}
        self._tags: dict[tuple[str, int], dict[str, str]] = {}
        # Last id handed out per table; like SQL sequences, ids start at 1.
        self._last_id: dict[str, int] = {}

    def _next_id(self, table: str) -> int:
        """The id the next insert into ``table`` gets (not yet taken; see ``_take_id``)."""
        return self._last_id.get(table, 0) + 1

    def _take_id(self, table: str) -> int:
        self._last_id[table] = self._next_id(table)
        return self._last_id[table]

    # -- lookups that raise NotFoundError --------------------------------------
    def _user(self, user_id: Any) -> User:
        user_id = v.check_id("user_id", user_id)
        try:
            return self._users[user_id]
        except KeyError:
            raise NotFoundError(f"user {user_id}: not found") from None

    def _task(self, task_id: Any) -> Task:
        task_id = v.check_id("task_id", task_id)
        try:
            return self._tasks[task_id]
        except KeyError:
            raise NotFoundError(f"task {task_id}: not found") from None

    def _version(self, version_id: Any, *, field: str = "version_id", task_id: int | None = None) -> DatasetVersion:
        version_id = v.check_id(field, version_id)
        version = self._versions.get(version_id)
        if version is None:
            raise NotFoundError(f"dataset version {version_id}: not found")
        if task_id is not None and version.task_id != task_id:
            raise NotFoundError(f"dataset version {version_id}: not found in task {task_id}")
        return version

    def _job(self, job_id: Any) -> Job:
        job_id = v.check_id("job_id", job_id)
        try:
            return self._jobs[job_id]
        except KeyError:
            raise NotFoundError(f"job {job_id}: not found") from None

    def _check_entity_exists(self, entity: str, entity_id: Any) -> int:
        lookup = {"task": self._task, "dataset": self._version, "job": self._job, "user": self._user}[entity]
        return lookup(entity_id).id

    def _examples_known_at(self, version: DatasetVersion) -> int:
        """How many examples the task had when ``version`` was created."""
        ends = [
            c.first_example_id + c.count
            for c in self._chunks.values()
            if c.task_id == version.task_id and self._versions[c.version_id].number <= version.number
        ]
        return max(ends, default=0)

    # -- users --------------------------------------------------------------
    def create_user(self, name: str, token_hash: str | None, *, is_admin: bool = False,
                    origin: str = LOCAL) -> User:
        v.check_text("name", name)
        check_origin(origin)
        if token_hash is not None:
            v.check_text("token_hash", token_hash)
        with self._lock:
            if any(u.name == name and u.origin == origin for u in self._users.values()):
                raise AlreadyExistsError(f"user name {name!r}: already taken among {origin} users")
            if token_hash in self._token_hashes:
                raise AlreadyExistsError("token_hash: already used by another user")
            user = User(self._take_id("user"), name, bool(is_admin), v.utcnow(), origin)
            self._users[user.id] = user
            if token_hash is not None:
                self._token_hashes[token_hash] = user.id
            return user

    def get_user(self, user_id: int) -> User:
        with self._lock:
            return self._user(user_id)

    def user_by_name(self, name: str, origin: str = LOCAL) -> User:
        with self._lock:
            for user in self._users.values():
                if user.name == name and user.origin == origin:
                    return user
        raise NotFoundError(f"user {name!r}: not found")

    def user_by_token_hash(self, token_hash: str) -> User:
        with self._lock:
            user_id = self._token_hashes.get(token_hash)
            if user_id is None:
                raise NotFoundError("no user has this token")
            return self._users[user_id]

    def set_user_token_hash(self, user_id: int, token_hash: str | None) -> User:
        if token_hash is not None:
            v.check_text("token_hash", token_hash)
        with self._lock:
            user = self._user(user_id)
            if token_hash is not None and self._token_hashes.get(token_hash, user.id) != user.id:
                raise AlreadyExistsError("token_hash: already used by another user")
            for old in [h for h, owner in self._token_hashes.items() if owner == user.id]:
                del self._token_hashes[old]
            if token_hash is not None:
                self._token_hashes[token_hash] = user.id
            return user

    def set_user_admin(self, user_id: int, is_admin: bool) -> User:
        if not isinstance(is_admin, bool):
            raise DataError("is_admin", repr(is_admin), "true or false")
        with self._lock:
            user = replace(self._user(user_id), is_admin=is_admin)
            self._users[user.id] = user
            return user

    def link_user_to_hub(self, user_id: int) -> User:
        with self._lock:
            user = self._user(user_id)
            if user.origin != LOCAL:
                raise InvalidStateError(f"user {user.name!r}: already a {user.origin} user, expected a local one")
            hub = next((u for u in self._users.values() if u.name == user.name and u.origin == HUB), None)
            if hub is not None:
                owned = sum(t.owner_id == hub.id for t in self._tasks.values())
                if owned:
                    raise AlreadyExistsError(f"hub user {user.name!r}: already owns {owned} task(s)")
                self._users[hub.id] = replace(hub, origin=LOCAL)  # hub users hold no token
            for old in [h for h, owner in self._token_hashes.items() if owner == user.id]:
                del self._token_hashes[old]
            self._users[user.id] = linked = replace(user, origin=HUB)
            return linked

    def list_users(self) -> tuple[User, ...]:
        with self._lock:
            return tuple(sorted(self._users.values(), key=lambda u: u.id))

    def delete_user(self, user_id: int) -> User:
        with self._lock:
            user = self._user(user_id)
            owned = sum(1 for t in self._tasks.values() if t.owner_id == user.id)
            if owned:
                raise InvalidStateError(f"user {user.name!r}: owns {owned} task(s), expected none "
                                        "(delete her tasks first)")
            for old in [h for h, owner in self._token_hashes.items() if owner == user.id]:
                del self._token_hashes[old]
            self._tags.pop(("user", user.id), None)
            del self._users[user.id]
            return user

    # -- tasks --------------------------------------------------------------
    def create_task(self, owner_id: int, name: str, program: str) -> Task:
        v.check_text("name", name)
        if not isinstance(program, str):
            raise DataError("program", repr(program), "the ease.ml program as a string")
        with self._lock:
            owner = self._user(owner_id)
            if any(t.owner_id == owner.id and t.name == name for t in self._tasks.values()):
                raise AlreadyExistsError(f"task {name!r}: user {owner.name!r} already has a task by that name")
            task = Task(self._take_id("task"), owner.id, name, program, v.utcnow())
            self._tasks[task.id] = task
            return task

    def get_task(self, task_id: int) -> Task:
        with self._lock:
            return self._task(task_id)

    def task_by_name(self, owner_id: int, name: str) -> Task:
        with self._lock:
            owner = self._user(owner_id)
            for task in self._tasks.values():
                if task.owner_id == owner.id and task.name == name:
                    return task
        raise NotFoundError(f"task {name!r}: user {owner.name!r} has no task by that name")

    def list_tasks(self, owner_id: int | None = None) -> tuple[Task, ...]:
        with self._lock:
            if owner_id is not None:
                owner_id = self._user(owner_id).id
            tasks = [t for t in self._tasks.values() if owner_id is None or t.owner_id == owner_id]
            return tuple(sorted(tasks, key=lambda t: t.id))

    def set_task_cancelled(self, task_id: int, cancelled: bool) -> Task:
        with self._lock:
            task = replace(self._task(task_id), cancelled=bool(cancelled))
            self._tasks[task.id] = task
            return task

    def delete_task(self, task_id: int) -> frozenset[str]:
        with self._lock:
            task = self._task(task_id)
            jobs = {j.id for j in self._jobs.values() if j.task_id == task.id}
            running = sorted(j for j in jobs if self._jobs[j].status is JobStatus.RUNNING)
            if running:
                raise InvalidStateError(f"task {task.name!r}: job {running[0]} is running, expected no running job "
                                        "(cancel the task and let its jobs finish first)")
            versions = {x.id for x in self._versions.values() if x.task_id == task.id}
            chunks = [c for c in self._chunks.values() if c.task_id == task.id]
            referenced = {self._versions[x].members_blob for x in versions}
            referenced.update(d for c in chunks for d in (c.x_blob, c.y_blob))
            referenced.update(self._jobs[j].artifact_blob for j in jobs if self._jobs[j].artifact_blob is not None)
            nodes = {Node(NodeKind.DATASET, x) for x in versions} | {Node(NodeKind.MODEL, j) for j in jobs}
            owned = {("task", task.id)} | {("dataset", x) for x in versions} | {("job", j) for j in jobs}
            # Everything is known; from here on nothing can fail.
            for edge_id in [i for i, e in self._edges.items() if e.dst in nodes or e.src in nodes or e.job_id in jobs]:
                del self._edges[edge_id]
            for key in [k for k in self._metrics if k[0] in jobs]:
                del self._metrics[key]
            for key in owned:
                self._tags.pop(key, None)
            for job_id in jobs:
                del self._jobs[job_id]
            for chunk in chunks:
                del self._chunks[chunk.id]
            for version_id in versions:
                del self._versions[version_id]
                self._toggles.pop(version_id, None)
            del self._tasks[task.id]
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
        with self._lock:
            task = self._task(task_id)
            parent = None if parent_id is None else self._version(parent_id, field="parent_id", task_id=task.id)
            if toggles:
                known = self._examples_known_at(parent)  # a refine always has a parent
                for example_id in toggles:
                    if example_id >= known:
                        raise NotFoundError(
                            f"example {example_id}: not in task {task.id} at dataset version {parent.id}"
                            f" (it had examples 0..{known - 1})"
                        )
            latest = max((x for x in self._versions.values() if x.task_id == task.id), key=lambda x: x.number,
                         default=None)
            v.check_latest_parent(task.id, parent_id, None if latest is None else latest.id)
            now = v.utcnow()
            number = 1 + sum(1 for x in self._versions.values() if x.task_id == task.id)
            version = DatasetVersion(
                self._next_id("version"), task.id, number, kind, parent_id, members_blob, int(n_examples), now
            )
            new_chunk = None
            if chunk is not None:
                ends = (c.first_example_id + c.count for c in self._chunks.values() if c.task_id == task.id)
                first = max(ends, default=0)
                new_chunk = ExampleChunk(
                    self._next_id("chunk"), task.id, version.id, first, int(chunk.count), chunk.x_blob, chunk.y_blob
                )
            new_toggles = tuple(Toggle(version.id, e, active) for e, active in sorted(toggles.items()))
            src = None if parent is None else Node(NodeKind.DATASET, parent.id)
            edge = self._new_edge(EdgeKind(kind.value), src, Node(NodeKind.DATASET, version.id), None, now)
            # Everything is built; from here on nothing can fail.
            self._take_id("version")
            self._versions[version.id] = version
            if new_chunk is not None:
                self._take_id("chunk")
                self._chunks[new_chunk.id] = new_chunk
            self._toggles[version.id] = new_toggles
            self._edges[self._take_id("edge")] = edge
            return version

    def _new_edge(self, kind: EdgeKind, src: Node | None, dst: Node, job_id: int | None, now: datetime) -> Edge:
        """The next provenance edge (its id not yet taken)."""
        return Edge(self._next_id("edge"), kind, src, dst, job_id, now)

    def get_dataset_version(self, version_id: int) -> DatasetVersion:
        with self._lock:
            return self._version(version_id)

    def list_dataset_versions(self, task_id: int) -> tuple[DatasetVersion, ...]:
        with self._lock:
            task = self._task(task_id)
            return tuple(sorted((x for x in self._versions.values() if x.task_id == task.id), key=lambda x: x.number))

    def list_chunks(self, task_id: int, *, up_to_version: int | None = None) -> tuple[ExampleChunk, ...]:
        with self._lock:
            task = self._task(task_id)
            limit = None
            if up_to_version is not None:
                limit = self._version(up_to_version, field="up_to_version", task_id=task.id).number
            chunks = [
                c
                for c in self._chunks.values()
                if c.task_id == task.id and (limit is None or self._versions[c.version_id].number <= limit)
            ]
            return tuple(sorted(chunks, key=lambda c: c.first_example_id))

    def list_toggles(self, version_id: int) -> tuple[Toggle, ...]:
        with self._lock:
            return self._toggles[self._version(version_id).id]

    # -- jobs and metrics ---------------------------------------------------
    def create_job(self, task_id: int, dataset_version_id: int, model: str, config: Mapping[str, Any]) -> Job:
        v.check_key("model", model)
        clean_config = v.check_config(config)
        with self._lock:
            task = self._task(task_id)
            version = self._version(dataset_version_id, field="dataset_version_id", task_id=task.id)
            job = Job(
                id=self._take_id("job"),
                task_id=task.id,
                dataset_version_id=version.id,
                model=model,
                config=freeze(clean_config),
                status=JobStatus.QUEUED,
                created_at=v.utcnow(),
            )
            self._jobs[job.id] = job
            return job

    def get_job(self, job_id: int) -> Job:
        with self._lock:
            return self._job(job_id)

    def list_jobs(self, task_id: int | None = None, *, status: JobStatus | None = None) -> tuple[Job, ...]:
        status = None if status is None else v.check_status(status)
        with self._lock:
            if task_id is not None:
                task_id = self._task(task_id).id
            jobs = [
                j
                for j in self._jobs.values()
                if (task_id is None or j.task_id == task_id) and (status is None or j.status is status)
            ]
            return tuple(sorted(jobs, key=lambda j: j.id))

    def update_job(self, job_id: int, status: JobStatus, update: JobUpdate | None = None) -> Job:
        with self._lock:
            before = self._job(job_id)
            now = v.utcnow()
            after = v.apply_job_update(before, status, update, now)
            edge = None
            if v.adds_train_edge(before, after):
                src = Node(NodeKind.DATASET, after.dataset_version_id)
                edge = self._new_edge(EdgeKind.TRAIN, src, Node(NodeKind.MODEL, after.id), after.id, now)
            self._jobs[after.id] = after
            if edge is not None:
                self._edges[self._take_id("edge")] = edge
            return after

    def add_metric(self, job_id: int, epoch: int, name: str, value: float) -> Metric:
        epoch = v.check_count("epoch", epoch, minimum=0)
        v.check_key("name", name)
        value = v.check_finite("value", value)
        with self._lock:
            job = self._job(job_id)
            metric = Metric(job.id, epoch, name, value, v.utcnow())
            self._metrics[(job.id, epoch, name)] = metric
            return metric

    def list_metrics(self, job_id: int) -> tuple[Metric, ...]:
        with self._lock:
            job = self._job(job_id)
            keys = sorted(k for k in self._metrics if k[0] == job.id)
            return tuple(self._metrics[k] for k in keys)

    # -- provenance -----------------------------------------------------------
    def _check_node(self, node: Node) -> Node:
        node = v.check_node(node)
        if node.kind is NodeKind.DATASET:
            self._version(node.id, field="node.id")
        else:
            self._job(node.id)
        return node

    def edges_into(self, node: Node) -> tuple[Edge, ...]:
        with self._lock:
            node = self._check_node(node)
            return tuple(e for _, e in sorted(self._edges.items()) if e.dst == node)

    def edges_out_of(self, node: Node) -> tuple[Edge, ...]:
        with self._lock:
            node = self._check_node(node)
            return tuple(e for _, e in sorted(self._edges.items()) if e.src == node)

    # -- metadata tags ----------------------------------------------------------
    def set_tag(self, entity: str, entity_id: int, key: str, value: str) -> None:
        v.check_entity(entity)
        v.check_key("key", key)
        if not isinstance(value, str):
            raise DataError("value", repr(value), "a string")
        with self._lock:
            entity_id = self._check_entity_exists(entity, entity_id)
            self._tags.setdefault((entity, entity_id), {})[key] = value

    def tags(self, entity: str, entity_id: int) -> Mapping[str, str]:
        v.check_entity(entity)
        with self._lock:
            entity_id = self._check_entity_exists(entity, entity_id)
            return FrozenDict(sorted(self._tags.get((entity, entity_id), {}).items()))

    def find_by_tag(self, entity: str, key: str, value: str | None = None) -> tuple[int, ...]:
        v.check_entity(entity)
        with self._lock:
            return tuple(
                sorted(
                    entity_id
                    for (kind, entity_id), tags in self._tags.items()
                    if kind == entity and key in tags and (value is None or tags[key] == value)
                )
            )


class MemoryBlobStore(BlobStore):
    """A ``BlobStore`` in a dict. Thread-safe; ``bytes`` are immutable, so no copies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blobs: dict[str, bytes] = {}
        self._written: dict[str, float] = {}  # digest -> time of its last put

    def put_bytes(self, data: bytes) -> str:
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            self._blobs.setdefault(digest, data)
            self._written[digest] = time.time()
        return digest

    def get_bytes(self, digest: str) -> bytes:
        v.check_digest("digest", digest)
        with self._lock:
            try:
                return self._blobs[digest]
            except KeyError:
                raise NotFoundError(f"blob {digest}: not found") from None

    def exists(self, digest: str) -> bool:
        v.check_digest("digest", digest)
        with self._lock:
            return digest in self._blobs

    def delete(self, digest: str, *, if_older_than: float | None = None,
               unless: Callable[[], bool] | None = None) -> bool:
        v.check_digest("digest", digest)
        with self._lock:
            if digest not in self._blobs:
                return False
            if if_older_than is not None and self._written[digest] >= if_older_than:
                return False
            taken = self._blobs.pop(digest), self._written.pop(digest)  # out of reach while ``unless`` asks
        try:
            keep = unless is not None and unless()
        except BaseException:
            self._restore(digest, *taken)
            raise
        if keep:
            self._restore(digest, *taken)
        return not keep

    def _restore(self, digest: str, data: bytes, written: float) -> None:
        with self._lock:  # a put meanwhile stored it afresh: that copy (and its time) stays
            self._blobs.setdefault(digest, data)
            self._written.setdefault(digest, written)

    def iter_blobs(self) -> Iterator[BlobInfo]:
        with self._lock:
            listing = [BlobInfo(d, len(b), self._written[d]) for d, b in self._blobs.items()]
        return iter(listing)
