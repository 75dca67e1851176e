"""``.npy`` and ``.npz`` bytes read safely from many threads at once.

numpy reads each array's header with ``ast.literal_eval``. On CPython 3.11,
two threads building an AST at the same moment can make one of them fail with
``SystemError: AST constructor recursion depth mismatch`` (CPython issue
106905; the fix was not backported to 3.11). The service reads stored arrays
on many request threads, so every read here holds one process-wide lock. The
lock costs little: reading from bytes already in memory is a copy made while
holding the GIL.
"""

from __future__ import annotations

import io
import threading

import numpy as np

_READING = threading.Lock()


def load_npy(data: bytes) -> np.ndarray:
    """The array of ``np.save`` bytes (no pickles)."""
    with _READING:
        return np.load(io.BytesIO(data), allow_pickle=False)


def load_npz(data: bytes) -> dict[str, np.ndarray]:
    """Every array of ``np.savez`` bytes, by name (no pickles)."""
    with _READING, np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}
