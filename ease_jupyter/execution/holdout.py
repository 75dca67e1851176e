"""Train/validation split decided by each example's content.

An example's side is a function of a key, not of its position. The service
passes content keys (``LoadedData.split_keys``: a hash of the stored input
row, ``execution.row_keys``), so

* copies of one input row always land on the same side: feeding rows again
  cannot leak training examples into validation and inflate its score;
* a row keeps its side in every version (after a refine, a later feed), so
  scores measured on two versions of a task are comparable.

(Seneca §II splits 80/20 automatically; we make the split a function of the
row for the same reason ease.ml keeps versions immutable.) Any integer keys
work, e.g. example ids where no content is at hand.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing constant


def validation_mask(keys: np.ndarray, fraction: float = 0.2, seed: int = 0) -> np.ndarray:
    """True for the examples held out for validation (about ``fraction`` of them).

    Examples with equal keys are always on the same side. With two or more
    distinct keys there is at least one training and one validation
    example; with one distinct key only (every row the same), one example
    is moved over by its position, the one case where equal keys straddle.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction: found {fraction}, expected a number in (0, 1)")
    keys = np.asarray(keys).astype(np.uint64, copy=False)
    with np.errstate(over="ignore"):
        mixed = (keys + np.uint64(seed) + np.uint64(1)) * _GOLDEN
    unit = (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    mask = unit < fraction
    if keys.size >= 2 and (mask.all() or not mask.any()):
        # Tiny data can land on one side: move the rows of one key over whole.
        if unit.min() < unit.max():
            mask = unit == unit.min() if not mask.any() else unit < unit.max()
        else:
            mask = np.zeros(keys.size, dtype=bool)
            mask[0] = True
    return mask
