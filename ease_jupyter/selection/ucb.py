"""Acquisition functions: the GP-UCB exploration schedule and its cost-aware twist.

Pure functions over numpy arrays, in the spirit of Optuna's ``_gp/acqf.py``:
they never see a user, a store or a clock.

References
----------
ease.ml, arXiv:1708.07308 (full version), §3 / PVLDB 2018 §2.1 and §4.1:
Algorithm 1 (GP-UCB), the cost-aware rule
``a_t = argmax_k mu_{t-1}(k) + sqrt(beta_t / c_k) * sigma_{t-1}(k)``,
and the schedules of ``beta_t`` in Algorithm 1 (line 3) and Theorems 1-3.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr

__all__ = [
    "BETA_SCHEDULES",
    "beta_t",
    "cost_scale",
    "ucb_scores",
    "expected_improvement",
]

#: ``"alg1"`` (the default): ``beta_t = log(K t^2 / delta)``, the schedule the
#: algorithms run (pvldb Algorithm 1 line 3; Algorithm 2 line 9,
#: ``beta^j_{t_j} = log(K^j t_j^2 / delta)`` with ``t_j`` the user's own count).
#: ``"theorem"``: ``beta_t = 2 log(pi^2 n K t^2 / (6 delta))``, the schedule under
#: which Theorems 1-3 are proved (costs already divided by ``c*``, so the
#: paper's ``2 c*`` factor becomes 2). About 2.8x larger for K = 179, n = 10.
BETA_SCHEDULES = ("alg1", "theorem")


def beta_t(t: int | np.ndarray, n_arms: int | np.ndarray, *, delta: float = 0.1,
           n_users: int = 1, schedule: str = "alg1") -> float | np.ndarray:
    """The exploration weight ``beta_t`` of GP-UCB at a user's step ``t`` (1-based).

    Args:
        t: the user's own step count ``t_i`` (Algorithm 2 keeps one per user).
        n_arms: ``K``, the number of candidate models of that user.
        delta: the confidence parameter ``delta`` in (0, 1).
        n_users: ``n``; Theorems 2-3 put the number of tenants inside the log
            (union bound over users). 1 for the single-tenant case.
        schedule: one of :data:`BETA_SCHEDULES`.

    Returns:
        ``beta_t`` (a float, or an array when ``t``/``n_arms`` are arrays).

    The cost-aware theorems use ``beta_t = 2 c* log(pi^2 n K t^2 / 6 delta)``
    with the cost ``c_k`` in the denominator of ``sqrt(beta_t / c_k)``. We
    normalise costs by ``c*`` (pvldb §4.1: "we then normalize execution time
    across all users"), so ``sqrt(beta_t / c_k) = sqrt(2 log(...) * c*/c_k)``
    and the same formula serves the cost-oblivious case (all ``c_k = c* = 1``).
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta: found {delta!r}, expected a number in (0, 1)")
    t = np.asarray(t, dtype=float)
    k = np.asarray(n_arms, dtype=float)
    if np.any(t < 1) or np.any(k < 1):
        raise ValueError("t and n_arms must be >= 1")
    if schedule == "theorem":
        out = 2.0 * np.log(math.pi ** 2 * n_users * k * t ** 2 / (6.0 * delta))
    elif schedule == "alg1":
        out = np.log(k * t ** 2 / delta)
    else:
        raise ValueError(f"schedule: found {schedule!r}, expected one of {BETA_SCHEDULES}")
    out = np.maximum(out, 0.0)
    return float(out) if out.ndim == 0 else out


def cost_scale(costs: np.ndarray | None, c_star: float | None = None) -> np.ndarray | float:
    """``c*/c_k``: the factor under the square root of the cost-aware bonus.

    ``None`` (cost-oblivious) gives 1. ``c_star`` defaults to ``max(costs)``.
    """
    if costs is None:
        return 1.0
    costs = np.asarray(costs, dtype=float)
    if c_star is None:
        c_star = float(np.max(costs)) if costs.size else 1.0
    return c_star / costs


def ucb_scores(mean: np.ndarray, std: np.ndarray, beta: float, scale: np.ndarray | float = 1.0) -> np.ndarray:
    """``mu(k) + sqrt(beta * c*/c_k) * sigma(k)`` for every arm ``k``.

    With ``scale = 1`` this is line 4 of Algorithm 1; with ``scale = c*/c_k``
    it is the cost-aware twist of pvldb §4.1 ("everything being equal, the
    slower models have lower priority; a very large potential reward still
    makes an expensive arm worth a bet").
    """
    return mean + np.sqrt(beta * scale) * std


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float, xi: float = 0.0) -> np.ndarray:
    """GP-EI (Mockus; as in Spearmint, Snoek et al. 2012) for maximisation.

    ``EI = (mu - best - xi) Phi(z) + sigma phi(z)``, ``z = (mu - best - xi)/sigma``.
    Divided by the cost it is Spearmint's "EI per second", the SPEARMINT*
    baseline of pvldb §6.2.
    """
    mean = np.asarray(mean, dtype=float)
    std = np.maximum(np.asarray(std, dtype=float), 1e-12)
    imp = mean - best - xi
    z = imp / std
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return np.maximum(imp * ndtr(z) + std * pdf, 0.0)
