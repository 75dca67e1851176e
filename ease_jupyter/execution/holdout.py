"""Train/validation split that stays stable across dataset versions.

Each example's side is decided by a hash of its id, not by its position, so an
example that survives a refine keeps its side, and scores measured on two
versions of a task are comparable. (Seneca §II splits 80/20 automatically; we
make the split a function of the example id for the same reason ease.ml keeps
versions immutable.)
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing constant


def validation_mask(example_ids: np.ndarray, fraction: float = 0.2, seed: int = 0) -> np.ndarray:
    """True for the examples held out for validation (about ``fraction`` of them).

    Guarantees at least one training and one validation example when there are
    two or more examples.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction: found {fraction}, expected a number in (0, 1)")
    ids = np.asarray(example_ids, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mixed = (ids + np.uint64(seed) + np.uint64(1)) * _GOLDEN
    unit = (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    mask = unit < fraction
    if ids.size >= 2 and (mask.all() or not mask.any()):
        # Tiny data can land on one side; force one example over by its rank.
        mask = np.zeros(ids.size, dtype=bool)
        mask[np.argmin(unit)] = True
    return mask
