"""Content keys of examples: which rows are the same row.

Two uses, one hash:

* ``input_digests(X)``: a 16-byte BLAKE2b digest of each input row. Its
  first 8 bytes, as ``split_keys``, decide the row's side of the
  validation split (``holdout.validation_mask``), so copies of one input
  can never sit on both sides, and a row keeps its side in every version.
* ``row_digests(input_digests, y)``: the digest of (input row, label), the
  identity a feed uses to tell rows already stored from new ones.

Rows are hashed as stored: a tensor row by its bytes (with its dtype and
shape, so a float32 and a float64 row differ only where the feed's schema
check would have made them differ), a tuple of per-column arrays column by
column, a string column by the UTF-8 of each value (so the width numpy
gives a unicode array does not matter), and a JSON record by its canonical
JSON text. Numeric 1-d columns (table columns) are hashed as float64, with
-0.0 as 0.0 and one NaN, so the same value stored as int in one feed and
float in another is the same row. Pure: numpy and hashlib only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

import numpy as np

from ease_jupyter.schema import to_jsonable

DIGEST_BYTES = 16  # 128 bits: no two different rows of any realistic task collide
# Raw bytes (numpy's "S" strings would drop trailing zero bytes when read back).
DIGEST_DTYPE = np.dtype(f"V{DIGEST_BYTES}")
_BLOCK_BYTES = 8 << 20  # canonicalise large tensors a block of rows at a time


def input_digests(X: Any) -> np.ndarray:
    """One ``DIGEST_BYTES`` digest per input row (a ``DIGEST_DTYPE`` array).

    ``X`` is what a feed stores: an ndarray (one tensor field, rows first),
    a tuple of ndarrays (several fields or table columns, same number of
    rows), or a list of JSON-able records."""
    if isinstance(X, np.ndarray):
        return _digest_parts([X])
    if isinstance(X, tuple):
        return _digest_parts(list(X))
    return _digest_records(X)


def split_keys(digests: np.ndarray) -> np.ndarray:
    """The uint64 split keys of ``input_digests`` (their first 8 bytes)."""
    raw = np.ascontiguousarray(digests, dtype=DIGEST_DTYPE).view(np.uint8).reshape(len(digests), DIGEST_BYTES)
    return raw[:, :8].copy().view("<u8").ravel()


def row_digests(input_digest: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The identity of each example: its input digest and its label."""
    labels = _row_bytes(np.asarray(y), canonical_numbers=True)
    out = np.empty(len(input_digest), dtype=DIGEST_DTYPE)
    for i, (head, label) in enumerate(zip(input_digest.tolist(), labels)):
        h = hashlib.blake2b(head, digest_size=DIGEST_BYTES)
        h.update(label)
        out[i] = h.digest()
    return out


def _digest_parts(parts: list[np.ndarray]) -> np.ndarray:
    n = len(parts[0]) if parts else 0
    hashers = [hashlib.blake2b(digest_size=DIGEST_BYTES) for _ in range(n)]
    for part in parts:
        part = np.asarray(part)
        # Table columns are 1-d: hash their values; tensors keep their bytes.
        tag = f"{part.dtype.kind}{part.shape[1:]}".encode() if part.ndim > 1 else b"c"
        for h, row in zip(hashers, _row_bytes(part, canonical_numbers=part.ndim == 1)):
            h.update(tag)
            h.update(len(row).to_bytes(8, "little"))  # field boundaries cannot shift
            h.update(row)
    return np.array([h.digest() for h in hashers], dtype=DIGEST_DTYPE)


def _row_bytes(part: np.ndarray, *, canonical_numbers: bool) -> Iterable[bytes]:
    """Each row of ``part`` as bytes, canonical as the module docstring says."""
    if part.dtype.kind in "US":
        for row in part.reshape(len(part), -1):
            yield "\x1f".join(str(v) for v in row.tolist()).encode() if part.dtype.kind == "U" else b"\x1f".join(row.tolist())
        return
    if part.dtype.kind == "O":  # never stored (no pickles), but a caller may hash before storing
        for row in part.reshape(len(part), -1):
            yield json.dumps([to_jsonable(v) for v in row.tolist()], sort_keys=True).encode()
        return
    if canonical_numbers and part.dtype.kind in "biuf":
        flat = part.reshape(len(part), -1).astype(np.float64) + 0.0  # + 0.0: -0.0 becomes 0.0
        flat[np.isnan(flat)] = np.nan
        yield from (row.tobytes() for row in flat)
        return
    rows = np.ascontiguousarray(part).reshape(len(part), -1)
    step = max(1, _BLOCK_BYTES // max(1, rows.shape[1] * rows.dtype.itemsize))
    for start in range(0, len(rows), step):
        block = rows[start:start + step]
        if block.dtype.kind == "f":
            block = block + block.dtype.type(0)  # -0.0 and 0.0 are one value
        for row in block:
            yield row.tobytes()


def _digest_records(records: Any) -> np.ndarray:
    return np.array([hashlib.blake2b(json.dumps(to_jsonable(r), sort_keys=True, allow_nan=True).encode(),
                                     digest_size=DIGEST_BYTES).digest() for r in records],
                    dtype=DIGEST_DTYPE)
