"""Versioned task data: feed, refine and load (pvldb §3.1; ACAI §3.2, §4.4).

A feed type-checks new examples against the task's program, writes the arrays
to the blob store and records a new, immutable dataset version holding the
parent's examples plus the new ones. A refine records a child version with
some examples turned on or off. Nothing here rewrites an old version, and every
check runs before anything is written, so bad input leaves the store as it was.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from .errors import DataError
from .schema import Program, check_data, check_inputs, parse
from .store import BlobStore, DatasetVersion, NewChunk, Store, Task, VersionKind

_NPY_MAGIC = b"\x93NUMPY"
_NPZ_MAGIC = b"PK"  # np.savez writes a zip archive


@dataclass(frozen=True)
class LoadedData:
    """The active examples of one dataset version, in example-id order."""

    version: DatasetVersion
    example_ids: np.ndarray  # int64, sorted
    X: Any  # ndarray (one tensor), tuple of ndarrays (several), or list of records (recursive)
    y: np.ndarray


def program_of(task: Task) -> Program:
    return parse(task.program)


def feed(store: Store, blobs: BlobStore, task: Task, X: Any, y: Any) -> DatasetVersion:
    """Check (X, y) against the task's schema and store them as a new version."""
    checked = check_data(program_of(task), X, y)
    parent = store.latest_dataset_version(task.id)
    first_id = store.next_example_id(task.id)
    new_ids = np.arange(first_id, first_id + checked.n, dtype=np.int64)
    members = new_ids if parent is None else np.concatenate([_members(blobs, parent), new_ids])
    chunk = NewChunk(x_blob=_put_inputs(blobs, checked.X), y_blob=blobs.put_array(checked.y), count=checked.n)
    return store.create_dataset_version(
        task.id,
        kind=VersionKind.FEED,
        parent_id=None if parent is None else parent.id,
        members_blob=blobs.put_array(members),
        n_examples=len(members),
        chunk=chunk,
    )


def refine(
    store: Store,
    blobs: BlobStore,
    task: Task,
    *,
    keep: Iterable[int] | None = None,
    drop: Iterable[int] | None = None,
) -> DatasetVersion:
    """Turn examples off (``drop``) or back on (``keep``) in a child of the
    latest version. Ids are the task's example ids, as ``load`` returns them."""
    parent = store.latest_dataset_version(task.id)
    if parent is None:
        raise DataError("task", f"task {task.name!r} with no data", "a feed before refine")
    if keep is None and drop is None:
        raise DataError("keep/drop", "neither", "example ids to keep or to drop")
    known = store.next_example_id(task.id)
    keep_ids = _example_ids("keep", keep, known)
    drop_ids = _example_ids("drop", drop, known)
    both = np.intersect1d(keep_ids, drop_ids)
    if both.size:
        raise DataError("keep/drop", f"id {int(both[0])} in both", "each id in at most one of them")
    before = _members(blobs, parent)
    after = np.union1d(np.setdiff1d(before, drop_ids), keep_ids)
    if after.size == 0:
        raise DataError("drop", "every example dropped", "at least one example left on")
    toggles = {int(i): True for i in np.setdiff1d(keep_ids, before)}
    toggles.update({int(i): False for i in np.intersect1d(drop_ids, before)})
    return store.create_dataset_version(
        task.id,
        kind=VersionKind.REFINE,
        parent_id=parent.id,
        members_blob=blobs.put_array(after.astype(np.int64)),
        n_examples=int(after.size),
        toggles=toggles,
    )


def load(store: Store, blobs: BlobStore, version: DatasetVersion) -> LoadedData:
    """Assemble the active examples of ``version`` from the feed chunks."""
    members = _members(blobs, version)
    xs: list[Any] = []
    ys: list[np.ndarray] = []
    for chunk in store.list_chunks(version.task_id, up_to_version=version.id):
        ids = np.arange(chunk.first_example_id, chunk.first_example_id + chunk.count)
        rows = np.flatnonzero(np.isin(ids, members))
        if rows.size == 0:
            continue
        xs.append(_take(_get_inputs(blobs, chunk.x_blob), rows))
        ys.append(blobs.get_array(chunk.y_blob)[rows])
    X = _concat(xs)
    if isinstance(X, list):
        # JSON gave back plain lists and string keys; the checker restores the
        # canonical records (float32 leaves) that feed originally checked.
        X = check_inputs(program_of(store.get_task(version.task_id)), X).X
    return LoadedData(version=version, example_ids=members, X=X, y=np.concatenate(ys))


def _take(X: Any, rows: np.ndarray) -> Any:
    if isinstance(X, np.ndarray):
        return X[rows]
    if isinstance(X, tuple):
        return tuple(part[rows] for part in X)
    return [X[i] for i in rows]


def _concat(parts: list[Any]) -> Any:
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    if all(isinstance(p, tuple) for p in parts):
        return tuple(np.concatenate(column) for column in zip(*parts))
    # Ragged chains may be stored as one array in one feed and a list in another.
    return [record for part in parts for record in part]


def _members(blobs: BlobStore, version: DatasetVersion) -> np.ndarray:
    return blobs.get_array(version.members_blob)


def _example_ids(field: str, ids: Iterable[int] | None, known: int) -> np.ndarray:
    if ids is None:
        return np.empty(0, dtype=np.int64)
    array = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids)
    if array.size == 0:
        return np.empty(0, dtype=np.int64)
    if array.dtype.kind not in "iu":
        raise DataError(field, f"ids of dtype {array.dtype}", "integer example ids")
    bad = array[(array < 0) | (array >= known)]
    if bad.size:
        raise DataError(field, f"unknown example id {int(bad[0])}", f"ids in [0, {known})")
    return np.unique(array.astype(np.int64))


def _put_inputs(blobs: BlobStore, X: Any) -> str:
    if isinstance(X, np.ndarray):
        return blobs.put_array(X)
    if isinstance(X, tuple):  # several tensor fields, in program order
        buffer = io.BytesIO()
        np.savez(buffer, *X)
        return blobs.put_bytes(buffer.getvalue())
    # Recursive records (and ragged chains) have no array layout: store JSON.
    return blobs.put_bytes(json.dumps(_to_jsonable(X)).encode())


def _get_inputs(blobs: BlobStore, digest: str) -> Any:
    data = blobs.get_bytes(digest)
    if data.startswith(_NPY_MAGIC):
        return blobs.get_array(digest)
    if data.startswith(_NPZ_MAGIC):
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return tuple(archive[f"arr_{i}"] for i in range(len(archive.files)))
    return json.loads(data)


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    return value
