"""Versioned task data: feed, refine and load (pvldb §3.1; ACAI §3.2, §4.4).

A feed type-checks new examples against the task's program, writes the arrays
to the blob store and records a new, immutable dataset version holding the
parent's examples plus the new ones. A refine records a child version with
some examples turned on or off. Nothing here rewrites an old version, and every
check runs before anything is written, so bad input leaves the store as it was.

Rows are identified by content (``execution.row_keys``): a feed adds only
the rows the latest version does not hold yet (``FEED_MODES``), and
``load`` gives each row a split key, a hash of its input, so copies of a
row are on one side of the validation split.

A blob that a version needs and that cannot be read (deleted, damaged) is a
``StoreCorruptError`` naming the task and the version, never a path: ``load``
raises it, and ``feed`` checks the parent's blobs before it writes, since a
version over missing data could never be trained on.

A table's string columns are stored as their UTF-8 bytes and offsets
(``string_parts``), not as numpy's fixed-width unicode, which pads every value
to the longest one at 4 bytes a character: one long note would make every row
of its column cost as much. They read back as the same unicode arrays, so a
row's content digest does not depend on how it was stored, and blobs stored
before (one ``.npy`` entry per column) read as they always did.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

import numpy as np

from .errors import DataError, StaleParentError
from .npy_bytes import load_npy, load_npz
from .execution.row_keys import DIGEST_DTYPE, input_digests, row_digests, split_keys
from . import row_identity
from .schema import CheckedData, Program, check_data, check_inputs, parse, to_jsonable
from .store import BlobStore, DatasetVersion, ExampleChunk, NewChunk, Store, Task, VersionKind
from .store.base import unreadable_blob
from .store.space import storage_full

T = TypeVar("T")
FeedState = tuple[DatasetVersion | None, tuple[ExampleChunk, ...]]  # Store.feed_state: the parent and the chunks
MAX_STALE_RETRIES = 50  # versions another writer may store first before a feed or refine gives up
_NPY_MAGIC = b"\x93NUMPY"
_NPZ_MAGIC = b"PK"  # np.savez writes a zip archive

# What a feed does with rows the task's latest version already holds (same
# input and label): "dedupe" skips them, "append" adds them again as new
# examples, "replace" makes a version of exactly the fed rows.
DEDUPE, APPEND, REPLACE = "dedupe", "append", "replace"
FEED_MODES = (DEDUPE, APPEND, REPLACE)


@dataclass(frozen=True)
class LoadedData:
    """The active examples of one dataset version, in example-id order."""

    version: DatasetVersion
    example_ids: np.ndarray  # int64, sorted
    X: Any  # ndarray (one tensor), tuple of ndarrays (several), or list of records (recursive)
    y: np.ndarray
    # uint64 per example, a hash of its input row: the validation split's keys (holdout.validation_mask)
    split_keys: np.ndarray | None = None


@dataclass(frozen=True)
class FeedResult:
    """What a feed did. ``new``: fed rows the latest version did not hold
    (same input and label); ``duplicates``: fed rows it held already.
    ``created`` is False when no version was stored (a "dedupe" feed of
    rows all held already, or a "replace" by the same rows): ``version`` is
    then the latest one, unchanged."""

    version: DatasetVersion
    created: bool
    new: int
    duplicates: int
    mode: str
    chunk: NewChunk | None = None  # the arrays a created version added
    # The size of each blob a created version references (its members and the
    # chunk's arrays), known from the bytes written: no stat needed to count them.
    blob_sizes: Mapping[str, int] | None = None


def program_of(task: Task) -> Program:
    return _parsed(task.program)


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> Program:
    # A task's program never changes, and a parsed program is immutable (frozen
    # dataclasses): every feed of a task shares one parse.
    return parse(text)


def feed(store: Store, blobs: BlobStore, task: Task, X: Any, y: Any, *,
         reserve: Callable[[int], None] | None = None, mode: str = DEDUPE) -> DatasetVersion:
    """``feed_rows``, returning the version only."""
    return feed_rows(store, blobs, task, X, y, reserve=reserve, mode=mode).version


def feed_rows(store: Store, blobs: BlobStore, task: Task, X: Any, y: Any, *,
              reserve: Callable[[int], None] | None = None, mode: str = DEDUPE,
              state: FeedState | None = None) -> FeedResult:
    """Check (X, y) against the task's schema and store them as a new version.

    ``mode`` (``FEED_MODES``) says what happens to fed rows that the latest
    version holds already, the same input and label: "dedupe" (the default)
    adds only the others, so feeding the same rows again changes nothing
    and stores no version; "append" adds every fed row, copies included;
    "replace" stores a version holding exactly the fed rows (none of the
    parent's), unless they are the latest version's rows already. Repeats
    inside one feed are kept in every mode: only rows stored before count
    as duplicates. Rows a refine turned off are not in the latest version:
    feeding them again adds them as new examples.

    Before anything is written: the parent version's blobs must be readable
    (``StoreCorruptError`` otherwise), and ``reserve(n_bytes)``, when given,
    is called with the size of the blobs about to be written and may refuse
    by raising (the service's quota). The blobs are written before the
    version's row; if the row cannot be stored, the blobs this feed added are
    deleted again, so a failed feed leaves nothing behind. A feed or refine
    of the same task that stores its version first makes this one start
    again from the new latest version (``StaleParentError``), so concurrent
    feeds each keep all the examples before them.

    ``state``: ``Store.feed_state`` as the caller read it just before (with
    its other reads, ``Store.feed_reads``); the first attempt starts from it,
    and a retry reads it again.
    """
    if mode not in FEED_MODES:
        raise DataError("mode", repr(mode), " or ".join(map(repr, FEED_MODES)))
    # A table task's rows come checked against its table schema (service.task_schema).
    checked = X if isinstance(X, CheckedData) else check_data(program_of(task), X, y)
    inputs = input_digests(checked.X)
    fed = row_digests(inputs, checked.y)
    given = [state] if state is not None else []
    return _on_the_latest(lambda: _feed_once(store, blobs, task, checked, (inputs, fed), mode, reserve,
                                             given.pop() if given else store.feed_state(task.id)))


def _on_the_latest(attempt: Callable[[], T]) -> T:
    """``attempt()``, again while another writer stored a version first."""
    for _ in range(MAX_STALE_RETRIES):
        try:
            return attempt()
        except StaleParentError:
            continue
    return attempt()


def _feed_once(store: Store, blobs: BlobStore, task: Task, checked: CheckedData,
               digests: tuple[np.ndarray, np.ndarray], mode: str, reserve: Callable[[int], None] | None,
               state: FeedState) -> FeedResult:
    inputs, fed = digests  # of each fed row: its input, and its input with its label
    # One read: the parent, and its chunks (the next example id, and the blobs to check).
    parent, chunks = state
    first_id = chunks[-1].first_example_id + chunks[-1].count if chunks else 0
    parent_members = None if parent is None else _readable_members(blobs, task, parent, chunks)
    held = np.empty(0, dtype=fed.dtype) if parent is None else _held_rows(blobs, task, parent, parent_members, chunks)
    is_duplicate = np.isin(fed, held)
    new, duplicates = int((~is_duplicate).sum()), int(is_duplicate.sum())
    keep = ~is_duplicate if mode == DEDUPE else np.ones(checked.n, dtype=bool)
    same_rows = mode == REPLACE and held.size == fed.size and np.array_equal(np.sort(held), np.sort(fed))
    if parent is not None and (not keep.any() or same_rows):
        return FeedResult(parent, False, new, duplicates, mode)
    X = checked.X if keep.all() else _take(checked.X, np.flatnonzero(keep))
    y = checked.y[keep]
    n = int(keep.sum())
    new_ids = np.arange(first_id, first_id + n, dtype=np.int64)
    members = new_ids if parent_members is None or mode == REPLACE else np.concatenate([parent_members, new_ids])
    x_bytes, y_bytes, members_bytes = _input_bytes(X), npy_bytes(y), npy_bytes(members)
    if reserve is not None:
        reserve(len(x_bytes) + len(y_bytes) + len(members_bytes))
    with _undo_on_failure(store, blobs) as put:
        chunk = NewChunk(x_blob=put(x_bytes), y_blob=put(y_bytes), count=n)
        version = store.create_dataset_version(
            task.id,
            kind=VersionKind.FEED,
            parent_id=None if parent is None else parent.id,
            members_blob=put(members_bytes),
            n_examples=len(members),
            chunk=chunk,
        )
    row_identity.remember(chunk.x_blob, chunk.y_blob, inputs[keep], fed[keep])  # the next feed's and load's
    sizes = {version.members_blob: len(members_bytes), chunk.x_blob: len(x_bytes), chunk.y_blob: len(y_bytes)}
    return FeedResult(version, True, new, duplicates, mode, chunk, sizes)


def _held_rows(blobs: BlobStore, task: Task, version: DatasetVersion, members: np.ndarray,
               chunks: Iterable[ExampleChunk]) -> np.ndarray:
    """The row digests of ``version``'s active examples (cached per chunk;
    a chunk is read only the first time this process meets it)."""
    held = []
    for chunk in chunks:
        ids = np.arange(chunk.first_example_id, chunk.first_example_id + chunk.count)
        rows = np.flatnonzero(np.isin(ids, members))
        if rows.size == 0:
            continue
        digests = row_identity.cached(chunk.x_blob, chunk.y_blob)
        if digests is None:
            what = f"{version_name(task, version)}: the examples {chunk.first_example_id} to {ids[-1]}"
            digests = _chunk_digests(task, chunk, _get_inputs(blobs, chunk.x_blob, what),
                                     _array(blobs, chunk.y_blob, what))
        held.append(digests[1][rows])
    return np.concatenate(held) if held else np.empty(0, dtype=DIGEST_DTYPE)


def _chunk_digests(task: Task, chunk: ExampleChunk, X: Any, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(input digests, row digests) of a chunk whose stored arrays are X, y
    (cached). Records read back from JSON are first made the canonical
    records that the feed hashed."""
    found = row_identity.cached(chunk.x_blob, chunk.y_blob)
    if found is None:
        if isinstance(X, list):
            X = check_inputs(program_of(task), X).X
        inputs = input_digests(X)
        found = row_identity.remember(chunk.x_blob, chunk.y_blob, inputs, row_digests(inputs, y))
    return found


def version_name(task: Task, version: DatasetVersion) -> str:
    """How errors and reports name a version: ``task 'iris', dataset version 3``."""
    return f"task {task.name!r}, dataset version {version.number}"


def _readable_members(blobs: BlobStore, task: Task, version: DatasetVersion,
                      chunks: Iterable[ExampleChunk]) -> np.ndarray:
    """``version``'s members, after checking that every blob it needs (its
    members and the arrays of each of the task's ``chunks`` it uses) is there.
    Chunks are only checked for presence: reading them would cost a feed a
    pass over all data."""
    members = _members(blobs, version, task)
    for chunk in chunks:
        start, stop = np.searchsorted(members, [chunk.first_example_id, chunk.first_example_id + chunk.count])
        missing = [d for d in (chunk.x_blob, chunk.y_blob) if not blobs.exists(d)] if stop > start else []
        if missing:
            raise unreadable_blob(f"{version_name(task, version)}: the examples {chunk.first_example_id} to "
                           f"{chunk.first_example_id + chunk.count - 1}", missing[0])
    return members


@contextlib.contextmanager
def _undo_on_failure(store: Store, blobs: BlobStore) -> Iterator[Callable[[bytes], str]]:
    """A ``put`` for blobs that the block's row will reference. Blobs are
    content-addressed, so another feed or refine may put the same content at
    any moment and reference it. If the block fails, each blob that was not
    stored before it is deleted, but only while no committed row references
    it (``BlobStore.delete(unless=...)`` takes it out of reach first, then
    asks the store); a store that cannot say keeps it (``easeml gc`` takes it
    later). If the block succeeds, its blobs are checked after the commit and
    put again where such a delete took one in between. A full disk in the
    row's write is a ``StorageFullError``."""
    written: dict[str, bytes] = {}
    added: list[str] = []

    def put(data: bytes) -> str:
        # A blob stored before this block (the same array fed twice, or by another task) must stay.
        stored_before = blobs.exists(hashlib.sha256(data).hexdigest())
        digest = blobs.put_bytes(data)
        written[digest] = data
        if not stored_before:
            added.append(digest)
        return digest

    def referenced(digest: str) -> bool:
        try:
            return store.blob_referenced(digest)
        except Exception:  # noqa: BLE001 - unsure (the store is down, or its commit was): keep it
            return True

    try:
        yield put
    except StaleParentError:
        # Another writer got in first: the retry (or that writer, with the same
        # content) may use these blobs; unreferenced ones go with `easeml gc`.
        raise
    except BaseException as error:
        written_by_us = time.time()
        for digest in added:
            blobs.delete(digest, if_older_than=written_by_us, unless=lambda d=digest: referenced(d))
        full = storage_full(error, getattr(blobs, "root", None)) if isinstance(error, Exception) else None
        if full is not None and full is not error:
            raise full from None
        raise
    for digest, data in written.items():  # committed; a failing writer's delete may have taken one meanwhile
        if not blobs.exists(digest):
            blobs.put_bytes(data)


def refine(
    store: Store,
    blobs: BlobStore,
    task: Task,
    *,
    keep: Iterable[int] | None = None,
    drop: Iterable[int] | None = None,
) -> DatasetVersion:
    """Turn examples off (``drop``) or back on (``keep``) in a child of the
    latest version. Ids are the task's example ids, as ``load`` returns them.
    A refine that changes nothing returns the latest version (see ``refine_or_reuse``)."""
    return refine_or_reuse(store, blobs, task, keep=keep, drop=drop)[0]


def refine_or_reuse(
    store: Store,
    blobs: BlobStore,
    task: Task,
    *,
    keep: Iterable[int] | None = None,
    drop: Iterable[int] | None = None,
) -> tuple[DatasetVersion, bool]:
    """``refine``, also saying whether a version was created: (version, created).

    When every id to keep is already on and every id to drop already off, the
    active set would equal the latest version's, so that version is returned
    and nothing is written (an identical version would retrain every model)."""
    return _on_the_latest(lambda: _refine_once(store, blobs, task, keep, drop))


def _refine_once(store: Store, blobs: BlobStore, task: Task, keep: Iterable[int] | None,
                 drop: Iterable[int] | None) -> tuple[DatasetVersion, bool]:
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
    if not toggles:
        return parent, False
    with _undo_on_failure(store, blobs) as put:
        version = store.create_dataset_version(
            task.id,
            kind=VersionKind.REFINE,
            parent_id=parent.id,
            members_blob=put(npy_bytes(after.astype(np.int64))),
            n_examples=int(after.size),
            toggles=toggles,
        )
    return version, True


def load(store: Store, blobs: BlobStore, version: DatasetVersion) -> LoadedData:
    """Assemble the active examples of ``version`` from the feed chunks
    (``StoreCorruptError`` naming the task and version if a blob is missing)."""
    return _load(store, blobs, version)


def load_first(store: Store, blobs: BlobStore, version: DatasetVersion, rows: int) -> LoadedData:
    """Like :func:`load`, of the first active examples only: the feed chunks
    are read in order until at least ``rows`` of them are in hand (all of
    them where the version has fewer), so a few rows of a large version
    cost a few chunks' reads, not the whole version's."""
    return _load(store, blobs, version, enough=rows)


def load_span(store: Store, blobs: BlobStore, version: DatasetVersion, start: int, stop: int, *,
              max_bytes: int | None = None) -> LoadedData:
    """Like :func:`load`, of the active examples at positions ``start`` to
    ``stop`` (in example-id order) only, read from the feed chunks that hold
    them: a page of a large version costs that page's chunks. With
    ``max_bytes``, the chunks are read in order only until the rows in hand
    hold that many bytes (:func:`row_bytes`); the caller cuts the page."""
    return _load(store, blobs, version, span=slice(start, stop), max_bytes=max_bytes)


RECORD_ROW_BYTES = 1024  # what an example whose input is not an array counts as (a list of records)


def row_bytes(data: LoadedData) -> int:
    """The bytes of one example of ``data``: its input arrays, label and id
    (an estimate, ``RECORD_ROW_BYTES``, for an input of records)."""
    return _bytes(data.X, data.y, data.example_ids) // max(len(data.example_ids), 1)


def _bytes(X: Any, y: np.ndarray, example_ids: np.ndarray) -> int:
    parts = [X] if isinstance(X, np.ndarray) else list(X) if isinstance(X, tuple) else []
    x_bytes = sum(a.nbytes for a in parts) if parts else RECORD_ROW_BYTES * len(example_ids)
    return x_bytes + y.nbytes + example_ids.nbytes


def _load(store: Store, blobs: BlobStore, version: DatasetVersion, *, enough: int | None = None,
          span: slice | None = None, max_bytes: int | None = None) -> LoadedData:
    task = store.get_task(version.task_id)
    members = _members(blobs, version, task)
    wanted = members if span is None else members[span]
    xs: list[Any] = []
    ys: list[np.ndarray] = []
    keys: list[np.ndarray] = []
    ids_read: list[np.ndarray] = []
    rows_read = bytes_read = 0
    for chunk in store.list_chunks(version.task_id, up_to_version=version.id):
        if (enough is not None and rows_read >= enough) or (max_bytes is not None and bytes_read >= max_bytes):
            break
        if wanted.size == 0 or chunk.first_example_id > wanted[-1]:
            break
        ids = np.arange(chunk.first_example_id, chunk.first_example_id + chunk.count)
        rows = np.flatnonzero(np.isin(ids, wanted))
        if rows.size == 0:
            continue
        what = f"{version_name(task, version)}: the examples {chunk.first_example_id} to {ids[-1]}"
        chunk_X, chunk_y = _get_inputs(blobs, chunk.x_blob, what), _array(blobs, chunk.y_blob, what)
        xs.append(_take(chunk_X, rows))
        ys.append(chunk_y[rows])
        keys.append(split_keys(_chunk_digests(task, chunk, chunk_X, chunk_y)[0][rows]))
        ids_read.append(ids[rows])
        rows_read += rows.size
        bytes_read += _bytes(xs[-1], ys[-1], ids_read[-1])
    X = _concat(xs)
    if isinstance(X, list):
        # JSON gave back plain lists and string keys; the checker restores the
        # canonical records (float32 leaves) that feed originally checked.
        X = check_inputs(program_of(task), X).X
    example_ids = np.concatenate(ids_read) if ids_read else wanted[:0]
    return LoadedData(version=version, example_ids=example_ids, X=X, y=np.concatenate(ys),
                      split_keys=np.concatenate(keys))


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


def _members(blobs: BlobStore, version: DatasetVersion, task: Task | None = None) -> np.ndarray:
    what = (version_name(task, version) if task is not None
            else f"dataset version {version.number} (id {version.id})") + ": its list of active examples"
    return _array(blobs, version.members_blob, what)


def _array(blobs: BlobStore, digest: str, what: str) -> np.ndarray:
    return load_npy(blobs.get_referenced(digest, what))


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


def npy_bytes(array: np.ndarray) -> bytes:
    """What ``BlobStore.put_array`` stores, as bytes (so that their size, or
    digest, is known before the write)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def string_parts(strings: np.ndarray, field: str = "X") -> tuple[np.ndarray, np.ndarray]:
    """A 1-d unicode array as (the UTF-8 bytes of its values one after
    another, uint8; n + 1 offsets, value i being ``utf8[offsets[i]:offsets[i + 1]]``):
    each value costs its own length. Offsets are uint32 while the bytes fit,
    else int64. A value UTF-8 cannot encode (a lone surrogate) is a DataError
    naming ``field[i]``."""
    encoded = []
    for i, value in enumerate(strings.tolist()):
        try:
            encoded.append(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise DataError(f"{field}[{i}]", "text with a lone surrogate", "text that UTF-8 can encode") from None
    ends = np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))
    total = int(ends[-1]) if len(ends) else 0
    offsets = np.concatenate([np.zeros(1, dtype=np.int64), ends]).astype(np.uint32 if total < 2**32 else np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def strings_from_parts(field: str, utf8: Any, offsets: Any) -> np.ndarray:
    """The unicode array ``string_parts`` took apart; a DataError naming
    ``field.utf8``, ``field.offsets`` or ``field[i]`` for parts that do not fit."""
    utf8, offsets = np.asarray(utf8), np.asarray(offsets)
    if utf8.ndim != 1 or utf8.dtype != np.uint8:
        raise DataError(f"{field}.utf8", f"an array of dtype {utf8.dtype} and shape {utf8.shape}",
                        "the values' UTF-8 bytes: a 1-d uint8 array")
    if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or offsets.size == 0:
        raise DataError(f"{field}.offsets", f"an array of dtype {offsets.dtype} and shape {offsets.shape}",
                        "n + 1 integer offsets into utf8 (1-d)")
    bounds = offsets.astype(np.int64)
    if bounds[0] != 0 or bounds[-1] != utf8.size or (np.diff(bounds) < 0).any():
        raise DataError(f"{field}.offsets", f"offsets from {bounds[0]} to {bounds[-1]}"
                        + (", going down somewhere" if (np.diff(bounds) < 0).any() else ""),
                        f"offsets from 0 to {utf8.size} (the bytes in utf8) that never go down")
    data, values = utf8.tobytes(), []
    for i, (start, stop) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        try:
            values.append(data[start:stop].decode("utf-8"))
        except UnicodeDecodeError:
            raise DataError(f"{field}[{i}]", "bytes that are not UTF-8", "UTF-8 text") from None
    return np.array(values, dtype=str) if values else np.empty(0, dtype="<U1")


def _input_bytes(X: Any) -> bytes:
    if isinstance(X, np.ndarray):
        return npy_bytes(X)
    if isinstance(X, tuple):  # several tensor fields in program order, or a table's columns and masks
        entries: dict[str, np.ndarray] = {}
        for i, part in enumerate(X):
            if part.dtype.kind == "U" and part.ndim == 1:  # a string column: UTF-8 and offsets, not padded
                entries[f"utf8_{i}"], entries[f"offsets_{i}"] = string_parts(part)
            else:
                entries[f"arr_{i}"] = part  # the name np.savez(*X) gives it
        buffer = io.BytesIO()
        np.savez(buffer, **entries)
        return buffer.getvalue()
    # Recursive records (and ragged chains) have no array layout: store JSON.
    return json.dumps(to_jsonable(X)).encode()


def _get_inputs(blobs: BlobStore, digest: str, what: str) -> Any:
    data = blobs.get_referenced(digest, what)
    if data.startswith(_NPY_MAGIC):
        return load_npy(data)
    if data.startswith(_NPZ_MAGIC):
        return _archive_parts(load_npz(data), what)
    return json.loads(data)


def _archive_parts(archive: dict[str, np.ndarray], what: str) -> tuple[np.ndarray, ...]:
    """The arrays of a stored ``.npz``, in order: entry ``arr_i`` as it is,
    ``utf8_i`` with ``offsets_i`` as the unicode array they encode."""
    names, parts = set(archive), []
    while True:
        i = len(parts)
        if f"arr_{i}" in names:
            parts.append(archive[f"arr_{i}"])
        elif f"utf8_{i}" in names:
            parts.append(strings_from_parts(f"{what}: stored column {i}", archive[f"utf8_{i}"],
                                            archive[f"offsets_{i}"]))
        else:
            return tuple(parts)
