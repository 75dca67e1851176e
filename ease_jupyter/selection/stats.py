"""Uncertainty of the benchmark's ratios: bootstrap intervals over repetitions.

A ratio such as "round robin's mean time to loss 0.02 over the default's"
is the ratio of two means over the same (paired) repetitions: the same split
of users and the same kernel for both policies. Its 95 % interval comes from
the paired bootstrap (Efron & Tibshirani 1993, ch. 14, BCa), resampling
whole repetitions; the computation is ``scipy.stats.bootstrap``'s.

A repetition that misses the level within its budget counts the budget
(censored): its true time is larger, so a ratio with censored numerators is
a lower bound and one with censored denominators an upper bound. The
caller gets both shares and decides what a target may claim.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

__all__ = ["ratio_of_means", "censored_times", "verdict"]


def censored_times(times: Sequence[float | None], budgets: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """``(times, missed)``: each repetition's time, with a miss (None) counted as its budget."""
    if len(times) != len(budgets):
        raise ValueError(f"budgets: found {len(budgets)} values, expected one per time ({len(times)})")
    missed = np.array([t is None for t in times])
    return np.array([b if t is None else t for t, b in zip(times, budgets)], dtype=float), missed


def _ratio(a, b, axis=-1):
    return np.mean(a, axis=axis) / np.mean(b, axis=axis)


def ratio_of_means(num: Sequence[float], den: Sequence[float], *, confidence: float = 0.95,
                   n_resamples: int = 4000, random_state: int | np.random.Generator | None = 0) -> dict:
    """``mean(num) / mean(den)`` over paired repetitions, with its bootstrap interval.

    Args:
        num, den: one value per repetition, paired (same length, > 0 means).
        confidence: the interval's coverage.
        n_resamples: bootstrap resamples.
        random_state: seed of the resampling.

    Returns:
        ``{"value", "low", "high", "n"}``. BCa is used; where it is undefined
        (e.g. every pair gives the same ratio) the percentile interval is, and
        where that is degenerate too the interval is the point. The interval
        is widened to contain the point if it does not (conservative).
    """
    from scipy.stats import bootstrap

    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"num, den: found shapes {a.shape} and {b.shape}, expected two equal non-empty 1-d samples")
    if not b.mean() > 0:
        raise ValueError("den: expected a positive mean")
    value = float(a.mean() / b.mean())
    low = high = value
    if a.size > 1:
        for method in ("BCa", "percentile"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # scipy warns on degenerate (constant) resamples
                ci = bootstrap((a, b), _ratio, paired=True, vectorized=True, confidence_level=confidence,
                               n_resamples=n_resamples, method=method, random_state=random_state).confidence_interval
            if np.isfinite(ci.low) and np.isfinite(ci.high):
                low, high = float(ci.low), float(ci.high)
                break
    return {"value": value, "low": min(low, value), "high": max(high, value), "n": int(a.size)}


def verdict(interval: dict | None, target: float, *, at_least: bool = True, censored: float = 0.0,
            saturated: bool = False) -> str:
    """Whether a ratio target is met.

    Args:
        interval: ``{"value", "low", "high"}`` from :func:`ratio_of_means` (None: not measured).
        target: the ratio to clear.
        at_least: the target is ``ratio >= target`` (judged on the interval's
            low end) rather than ``ratio <= target`` (judged on its high end).
        censored: the share of repetitions in which the policy being judged
            missed the level. Its mean time then counts those repetitions'
            budgets and is only a lower bound on the true one, so a ratio
            that clears the target is ``"unresolved"``, not met.
        saturated: there is no room to gain (round robin is already near the
            lower bound); a miss is then reported as ``"saturated"``.

    Returns:
        ``"met"``, ``"unresolved"``, ``"missed"``, ``"saturated"`` or ``"n/a"``.
    """
    if interval is None:
        return "n/a"
    clears = interval["low"] >= target if at_least else interval["high"] <= target
    if clears:
        return "met" if censored == 0 else "unresolved"
    return "saturated" if saturated else "missed"
