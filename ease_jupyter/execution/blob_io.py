"""Bytes the units read and write where the workers are: a local path or an
fsspec URL.

With a file system shared by the driver and the workers, the "directory"
hop (Cerebro §4.2) writes checkpoints into a local directory. Without one
(a dask-gateway or Kubernetes cluster), checkpoints and partitions travel
through an object store instead: every reference here is either a plain
path or an fsspec URL (``s3://bucket/easeml``, ``file:///shared``,
``memory://`` in tests), and the units never care which.

* :func:`read_bytes`, :func:`write_atomic`, :func:`remove`: one object each.
  A local write goes to a temporary name and is renamed (``os.replace``), so
  a reader never sees half a checkpoint; any other URL is written with one
  ``pipe_file``: on an object store (S3 and its kin) a PUT makes the whole
  object appear at once, so no temporary name is needed there.
* :class:`StagedPartition`: a partition written once by the driver
  (:func:`stage_partition`, numpy's ``.npz`` format, no pickles) and read
  once per worker process (a small per-process cache keyed by URL), so only
  the URL travels with each unit.

Plain paths need nothing but the standard library; fsspec is imported for
URLs only.
"""

from __future__ import annotations

import io
import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ease_jupyter.errors import DataError
from ease_jupyter.npy_bytes import load_npz

__all__ = [
    "STAGED_CACHE_BYTES",
    "StagedPartition",
    "is_url",
    "read_bytes",
    "remove",
    "stage_partition",
    "write_atomic",
]

#: Bytes of staged partitions one worker process keeps in memory (the most
#: recently used one is always kept, whatever its size).
STAGED_CACHE_BYTES = 4 * 2**30


def is_url(ref: str) -> bool:
    """True for an fsspec URL (``protocol://...``), False for a plain path."""
    return "://" in ref


def _fs(url: str) -> tuple[Any, str]:
    import fsspec

    return fsspec.core.url_to_fs(url)


def _local_path(ref: str) -> str | None:
    """The local path of a plain path or a ``file://`` URL, else None."""
    if not is_url(ref):
        return ref
    if ref.startswith(("file://", "local://")):
        fs, path = _fs(ref)
        return path
    return None


def read_bytes(ref: str) -> bytes:
    """The whole object at ``ref`` (a path or an fsspec URL)."""
    local = _local_path(ref)
    if local is not None:
        with open(local, "rb") as f:
            return f.read()
    fs, path = _fs(ref)
    return fs.cat_file(path)


def write_atomic(base: str, relative: str, data: bytes) -> str:
    """Write ``data`` to ``base/relative`` so that no reader sees part of it,
    and return its reference in ``base``'s form (a path, or a URL).

    ``relative`` uses ``/`` separators; missing parent directories are made.
    """
    rel = relative.strip("/")
    local = _local_path(base)
    if local is not None:
        path = os.path.join(local, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return path if not is_url(base) else base.rstrip("/") + "/" + rel
    fs, root = _fs(base)
    path = root.rstrip("/") + "/" + rel
    # No temporary name and rename here: an object store has no rename (s3fs
    # copies, then deletes), while one PUT (or one completed multipart
    # upload) makes the whole object appear at once. Object stores have no
    # folders to make either, so parents are made only for a file system
    # that says they are missing: asking first would cost an extra request
    # per checkpoint.
    try:
        fs.pipe_file(path, data)
    except FileNotFoundError:
        if _is_object_store(fs):  # its "parent" is the bucket: making it would hide a mistyped URL
            bucket = root.strip("/").split("/", 1)[0]
            raise FileNotFoundError(f"blob URL {base!r}: bucket {bucket!r} not found, expected an existing "
                                    "bucket (none is created)") from None
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, data)
    return base.rstrip("/") + "/" + rel


#: fsspec protocols of object stores, whose top folder is a bucket or container.
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})


def _is_object_store(fs: Any) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return bool(OBJECT_STORES.intersection(protocols))


def remove(ref: str, *, missing_ok: bool = False) -> None:
    """Delete the object at ``ref``; a missing one raises ``FileNotFoundError``
    unless ``missing_ok``."""
    local = _local_path(ref)
    try:
        if local is not None:
            os.remove(local)
        else:
            fs, path = _fs(ref)
            if not fs.exists(path):
                raise FileNotFoundError(ref)
            fs.rm_file(path)
    except FileNotFoundError:
        if not missing_ok:
            raise


# -- staged partitions -----------------------------------------------------------


@dataclass(frozen=True)
class StagedPartition:
    """A partition the driver wrote once to ``url`` (npz with ``X`` and ``y``);
    the units receive this small value instead of the arrays."""

    url: str
    examples: int
    nbytes: int

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        """The ``(X, y)`` arrays, read once per worker process.

        The arrays are shared by every unit of the process that reads this
        partition: treat them as read-only.
        """
        return _STAGED.get(self.url)


def stage_partition(data: tuple[Any, Any], base: str, name: str) -> StagedPartition:
    """Write one ``(X, y)`` partition under ``base`` (a path or fsspec URL) as
    ``<name>.npz`` and return its :class:`StagedPartition`."""
    X, y = (np.asarray(a) for a in data)
    for field, a in (("X", X), ("y", y)):
        if a.dtype.kind not in "biufc":
            raise DataError(f"partition {name!r}.{field}", f"dtype {a.dtype}", "a numeric or boolean array (no objects)")
    if len(X) != len(y):
        raise DataError(f"partition {name!r}.y", f"{len(y)} rows", f"{len(X)} rows, as many as X")
    buf = io.BytesIO()
    np.savez(buf, X=X, y=y)
    url = write_atomic(base, f"{name}.npz", buf.getvalue())
    return StagedPartition(url, int(len(X)), int(X.nbytes + y.nbytes))


class _StagedCache:
    """Per-process LRU of staged partitions, bounded by bytes."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, url: str) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            if url in self._items:
                self._items.move_to_end(url)
                return self._items[url]
        npz = load_npz(read_bytes(url))
        arrays = (npz["X"], npz["y"])
        with self._lock:
            self._items[url] = arrays
            self._items.move_to_end(url)
            while len(self._items) > 1 and self._size() > self.capacity:
                self._items.popitem(last=False)
        return arrays

    def _size(self) -> int:
        return sum(X.nbytes + y.nbytes for X, y in self._items.values())

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_STAGED = _StagedCache(STAGED_CACHE_BYTES)
