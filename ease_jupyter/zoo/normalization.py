"""The image normalisation family of ease.ml's template augmentation (pvldb §3.1).

    f_k(x) = -x^(2k) + x^k  =  x^k (1 - x^k),   x in [0, 1]

For image "recovery" tasks ease.ml augments one template into several
candidates, one per k. On [0, 1] every f_k starts and ends at 0
(f_k(0) = f_k(1) = 0) and peaks at 1/4 where x^k = 1/2, i.e. at
x = 2^(-1/k): it stretches the dark end of the range (slope k x^(k-1) near 0
for k = 1) and folds values above 2^(-1/k) back down. A larger k moves the
fold point towards 1 (0.5, 0.71, 0.79 for k = 1, 2, 3), so fewer bright
pixels are folded.

Why the inverse is never needed
-------------------------------
f_k is not monotone on [0, 1] (x and a brighter x' can map to the same
value), so it has no inverse. The recovery nets therefore apply f_k only to
their *input*, as a fixed, parameter-free first layer, and predict the target
in one affine [0, 1] scaling of the target range that is shared by every k
(see ``nets.RecoveryNet``). Validation losses of the configs with different k
are thus measured in the same space, so selection can compare them directly,
and ``infer`` returns outputs in the user's units with no inverse of f_k.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np

from ease_jupyter.errors import EaseMLError

#: The k of f_k that template augmentation tries (pvldb §3.1).
NORMALIZATION_KS: tuple[int, ...] = (1, 2, 3)

T = TypeVar("T")


def fk_normalize(x: T, k: int) -> T:
    """Apply ``f_k(x) = -x^(2k) + x^k`` elementwise.

    Args:
        x: values already scaled to ``[0, 1]`` (a float, numpy array or torch
            tensor; the result has the same type).
        k: a positive integer.

    Returns:
        ``f_k(x)``, in ``[0, 1/4]`` for inputs in ``[0, 1]``.

    Raises:
        EaseMLError: if ``k`` is not a positive integer.

    >>> fk_normalize(0.5, 1)
    0.25
    >>> round(fk_normalize(2 ** -0.5, 2), 12)
    0.25
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise EaseMLError(f"normalisation k: found {k!r}, expected a positive integer")
    xk: Any = x**k
    return xk - xk * xk


def fk_peak(k: int) -> float:
    """Where f_k reaches its maximum 1/4 on [0, 1]: x = 2^(-1/k)."""
    return float(2.0 ** (-1.0 / k))


def scale_unit(x: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """Affinely scale ``x`` to ``[0, 1]`` by ``(x - lo) / (hi - lo)``, clipped.

    ``lo``/``hi`` default to the array's own min and max; a constant array
    maps to zeros.
    """
    x = np.asarray(x, dtype=np.float64)
    lo = float(np.min(x)) if lo is None else float(lo)
    hi = float(np.max(x)) if hi is None else float(hi)
    span = hi - lo
    if span <= 0:
        return np.zeros_like(x)
    return np.clip((x - lo) / span, 0.0, 1.0)
