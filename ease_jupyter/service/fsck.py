"""Find (and repair) rows whose blobs cannot be read: ``easeml fsck``.

Three kinds of rows reference blobs, and each has its own repair:

* a dataset version's list of active examples (``members``): rebuilt from
  the rows, which determine it (a feed's parent plus its chunk, a refine's
  parent with its toggles); the rebuilt blob has the same digest, so the
  row needs no change;
* a feed's arrays (``chunk``): the examples are lost. If the task's latest
  version uses them, one refine of it that drops all of the task's lost
  examples makes a new latest version the service trains on; older
  versions keep their rows (they are immutable) and stay unloadable, which
  is reported but is no open problem (a model trained on one stays usable);
* a finished job's model (``model``): the job is tagged unusable
  (``models.UNUSABLE_TAG``: ``best``/``infer`` skip it), and if it was
  trained on the task's latest version a new queued job retrains the same
  model and grid.

Every blob is read whole and, in the directory store, checked against its
digest, so damaged content is found as well as missing files; ``--repair``
deletes a damaged blob before it repairs its rows, so that the rebuilt or
retrained content is written afresh. Repairs are
picked up by the service when it starts: ``easeml fsck --repair`` refuses
to run while a service holds the data dir.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

import numpy as np

from .. import datasets
from ..errors import EaseMLError, NotFoundError, StoreCorruptError
from ..store import BlobStore, DatasetVersion, JobStatus, Store, Task, VersionKind
from . import models

MEMBERS, CHUNK, MODEL = "members", "chunk", "model"


@dataclass
class Problem:
    """One row whose blob cannot be read, and what ``--repair`` did about it."""

    kind: str  # MEMBERS, CHUNK or MODEL
    what: str  # the row, by owner, task, version or job: never a path
    digest: str
    task_id: int
    version_id: int | None = None
    job_id: int | None = None
    repair: str | None = None  # what was done, or why nothing could be
    open: bool = True  # still needs attention (False once repaired or worked around)


@dataclass
class FsckReport:
    checked: int = 0  # blobs read
    problems: list[Problem] = field(default_factory=list)
    repaired: bool = False  # was --repair given

    @property
    def open(self) -> list[Problem]:
        return [p for p in self.problems if p.open]

    def as_dict(self) -> dict:
        return {"checked": self.checked, "repaired": self.repaired, "open": len(self.open),
                "problems": [asdict(p) for p in self.problems]}


@dataclass(frozen=True)
class _Reference:
    kind: str
    digest: str
    task: Task
    version: DatasetVersion | None = None
    job_id: int | None = None
    what: str = ""
    examples: tuple[int, int] | None = None  # a chunk's first example id and count


def references(store: Store) -> list[_Reference]:
    """Every (row, blob) pair to check, task by task. Models already tagged
    unusable are left out: they were dealt with."""
    unusable = set(store.find_by_tag("job", models.UNUSABLE_TAG))
    owners = {u.id: u.name for u in store.list_users()}
    out: list[_Reference] = []
    for task in store.list_tasks():
        owner = owners.get(task.owner_id, f"user {task.owner_id}")
        label = f"{owner}'s task {task.name!r}"
        versions = {v.id: v for v in store.list_dataset_versions(task.id)}
        for v in versions.values():
            out.append(_Reference(MEMBERS, v.members_blob, task, v,
                                  what=f"{label}, dataset version {v.number}: its list of active examples"))
        for c in store.list_chunks(task.id):
            v = versions[c.version_id]
            what = (f"{label}, dataset version {v.number}: the examples {c.first_example_id} to "
                    f"{c.first_example_id + c.count - 1}")
            out.extend(_Reference(CHUNK, d, task, v, what=what, examples=(c.first_example_id, c.count))
                       for d in dict.fromkeys((c.x_blob, c.y_blob)))
        for job in store.list_jobs(task.id, status=JobStatus.SUCCEEDED):
            if job.artifact_blob is not None and job.id not in unusable:
                v = versions[job.dataset_version_id]
                out.append(_Reference(MODEL, job.artifact_blob, task, v, job.id,
                                      what=f"{label}, job {job.id} ({job.model}, dataset version {v.number}): "
                                           "its trained model"))
    return out


def check(store: Store, blobs: BlobStore, *, repair: bool = False,
          progress: Callable[[Iterator[_Reference], int], Iterator[_Reference]] | None = None) -> FsckReport:
    """Read every referenced blob; report those that cannot be read and,
    with ``repair``, repair them (see the module docstring). ``progress``
    wraps the scan (e.g. in a progress bar): (iterator, total) -> iterator."""
    refs = references(store)
    report = FsckReport(repaired=repair)
    readable: dict[str, bool] = {}
    lost_chunks: list[tuple[Problem, _Reference]] = []
    scan: Iterator[_Reference] = iter(refs) if progress is None else progress(iter(refs), len(refs))
    for ref in scan:
        if ref.digest not in readable:
            readable[ref.digest] = _readable(blobs, ref.digest)
            report.checked += 1
        if not readable[ref.digest]:
            problem = Problem(ref.kind, ref.what, ref.digest, ref.task.id,
                              None if ref.version is None else ref.version.id, ref.job_id)
            report.problems.append(problem)
            if ref.kind == CHUNK:
                lost_chunks.append((problem, ref))
    if repair:
        # A damaged blob goes first: unreadable, it is worth nothing, and a repair or a
        # retrain that puts the same content again would only touch the damaged file.
        for digest in {p.digest for p in report.problems}:
            blobs.delete(digest)
    # Members first: a chunk's repair refines the latest version, which needs its members.
    if repair:
        for problem in report.problems:
            if problem.kind == MEMBERS:
                _rebuild_members(store, blobs, problem)
    _judge_chunks(store, blobs, lost_chunks, repair)
    if repair:
        for problem in report.problems:
            if problem.kind == MODEL:
                _retrain(store, blobs, problem)
    return report


def _readable(blobs: BlobStore, digest: str) -> bool:
    try:
        blobs.get_bytes(digest)  # the directory store re-hashes what it reads
    except (NotFoundError, StoreCorruptError):
        return False
    return True


def members_from_rows(store: Store, task_id: int) -> dict[int, np.ndarray]:
    """Every version's active example ids (version id -> sorted int64 ids),
    from the rows alone: a feed adds its chunk's ids to its parent's (a
    "replace" feed holds its chunk's alone, which its count of examples
    tells: a feed's new ids are fresh, so only then is it its chunk's size,
    or where its parent holds none and both readings agree), a refine
    applies its toggles to its parent's."""
    chunks: dict[int, list[np.ndarray]] = {}
    for c in store.list_chunks(task_id):
        chunks.setdefault(c.version_id, []).append(np.arange(c.first_example_id, c.first_example_id + c.count))
    members: dict[int, np.ndarray] = {}
    for v in store.list_dataset_versions(task_id):  # by number: parents first
        ids = members[v.parent_id] if v.parent_id is not None else np.empty(0, dtype=np.int64)
        if v.kind is VersionKind.FEED:
            fed = np.concatenate(chunks.get(v.id, [np.empty(0, dtype=np.int64)]))
            ids = fed if v.n_examples == fed.size else np.union1d(ids, fed)
        else:
            toggles = store.list_toggles(v.id)
            ids = np.setdiff1d(ids, [t.example_id for t in toggles if not t.active])
            ids = np.union1d(ids, [t.example_id for t in toggles if t.active])
        members[v.id] = ids.astype(np.int64)
    return members


def _rebuild_members(store: Store, blobs: BlobStore, problem: Problem) -> None:
    rebuilt = members_from_rows(store, problem.task_id).get(problem.version_id)
    if rebuilt is None:
        problem.repair = "not rebuilt: the version has no rows to rebuild it from"
        return
    # Stored exactly as a feed or refine stores it, so equal ids give the same digest.
    buffer = datasets.npy_bytes(rebuilt)
    if hashlib.sha256(buffer).hexdigest() != problem.digest:
        problem.repair = "not rebuilt: the rows give another list than the one stored"
        return
    blobs.put_bytes(buffer)
    problem.repair, problem.open = "rebuilt from the version's rows", False


def _judge_chunks(store: Store, blobs: BlobStore, lost: list[tuple[Problem, _Reference]], repair: bool) -> None:
    """A lost chunk is open only while its task's latest version uses it;
    ``repair`` drops all such examples of a task with one refine."""
    by_task: dict[int, list[tuple[Problem, _Reference]]] = {}
    for problem, ref in lost:
        by_task.setdefault(problem.task_id, []).append((problem, ref))
    for task_id, chunks in by_task.items():
        task = store.get_task(task_id)
        latest = store.latest_dataset_version(task.id)
        members = members_from_rows(store, task.id)[latest.id]
        in_use: list[tuple[Problem, np.ndarray]] = []
        for problem, ref in chunks:
            assert ref.examples is not None
            first, count = ref.examples
            used = np.intersect1d(members, np.arange(first, first + count))
            if used.size:
                in_use.append((problem, used))
            else:
                problem.repair = f"examples lost; the latest version ({latest.number}) does not use them"
                problem.open = False
        if not repair or not in_use:
            continue
        drop = np.unique(np.concatenate([used for _, used in in_use]))
        try:
            version = datasets.refine(store, blobs, task, drop=drop.tolist())
        except EaseMLError as error:  # e.g. every example of the task was lost
            for problem, _ in in_use:
                problem.repair = f"not dropped: {error}"
            continue
        for problem, _ in in_use:
            problem.repair = (f"examples lost; dropped from the latest data by a refine "
                              f"(dataset version {version.number})")
            problem.open = False


def _retrain(store: Store, blobs: BlobStore, problem: Problem) -> None:
    job = store.get_job(problem.job_id)
    task = store.get_task(job.task_id)
    latest = store.latest_dataset_version(task.id)
    store.set_tag("job", job.id, models.UNUSABLE_TAG, "its trained model is missing or damaged")
    if task.cancelled or latest is None or latest.id != job.dataset_version_id:
        problem.repair = "marked unusable (trained on older data: not retrained)"
    else:
        again = store.create_job(task.id, job.dataset_version_id, job.model, dict(job.config))
        problem.repair = f"marked unusable; job {again.id} retrains it"
    problem.open = False
