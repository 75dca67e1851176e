"""The content digests of stored examples, computed when read and cached.

A feed asks which of its rows the latest version holds already, and every
load hands out the split keys of its rows (``execution.row_keys``). Both are
computed from the stored arrays rather than stored beside them: a chunk's
blobs are content-addressed, so its digests are a pure function of
``(x_blob, y_blob)`` and are cached under that pair in this process, and
nothing stored (no column, no migration, no backfill of old tasks) can
disagree with the data. The cost is one hashing pass over a chunk per
process (about what reading its rows from the blob store costs; the
measured figure is in docs/service.md, "Where the keys come from"), and
32 bytes a row stay cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

CACHE_ROWS = 4_000_000  # about 128 MiB of digests; least recently used chunks go first


class _DigestCache:
    def __init__(self, max_rows: int):
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._rows = 0

    def get(self, key: tuple[str, str]) -> tuple[np.ndarray, np.ndarray] | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: tuple[str, str], value: tuple[np.ndarray, np.ndarray]) -> None:
        with self._lock:
            if key in self._items:
                return
            self._items[key] = value
            self._rows += len(value[0])
            while self._rows > self.max_rows and len(self._items) > 1:
                _, (old, _) = self._items.popitem(last=False)
                self._rows -= len(old)


_cache = _DigestCache(CACHE_ROWS)


def cached(x_blob: str, y_blob: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(input digests, row digests) of every row of the chunk stored as
    ``x_blob``, ``y_blob``, if this process has met it; else None."""
    return _cache.get((x_blob, y_blob))


def remember(x_blob: str, y_blob: str, inputs: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cache a chunk's digests (``execution.row_keys.input_digests`` and
    ``row_digests`` of its stored rows); returns them."""
    _cache.put((x_blob, y_blob), (inputs, rows))
    return inputs, rows
