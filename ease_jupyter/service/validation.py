"""How many held-out examples a score was measured on: the validation size
shown beside each model's accuracy (``best``, the leaderboard).

It is the number of examples of the dataset version that the task's fixed
split (``execution.holdout.validation_mask`` over ``LoadedData.split_keys``)
holds out, the same split every job of the version is scored on. A version
never changes, so each count is computed once per process (it reads the
version's examples) and kept.
"""

from __future__ import annotations

import threading
import weakref
from typing import Iterable

from ..datasets import load
from ..errors import StoreCorruptError
from ..execution.holdout import validation_mask
from ..store import BlobStore, DatasetVersion, Store

# Keyed by the version's id and its members blob: ids alone are not trusted across a deletion (a SQLite
# database from before schema 0004 reused them).
_sizes: "weakref.WeakKeyDictionary[Store, dict[tuple[int, str], int]]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def validation_size(store: Store, blobs: BlobStore, version: DatasetVersion) -> int | None:
    """The number of held-out examples of ``version``; None where its
    examples cannot be read (not kept: a repaired blob gives the size)."""
    key = (version.id, version.members_blob)
    with _lock:
        known = _sizes.setdefault(store, {}).get(key)
    if known is not None:
        return known
    try:
        data = load(store, blobs, version)
    except StoreCorruptError:  # lost or damaged (an unavailable store is the caller's 503)
        return None
    size = int(validation_mask(data.split_keys).sum())  # as runner.evaluate_grid splits
    with _lock:
        _sizes.setdefault(store, {})[key] = size
    return size


def validation_sizes(store: Store, blobs: BlobStore, version_ids: Iterable[int]) -> dict[int, int | None]:
    """``{version id: validation size}`` (``validation_size``)."""
    return {version_id: validation_size(store, blobs, store.get_dataset_version(version_id))
            for version_id in set(version_ids)}
