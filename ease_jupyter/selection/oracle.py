"""Clairvoyant references for the time to reach a loss level.

The simulator's loss after a set ``S`` of finished runs is the weighted average

    L(S) = sum_i w_i (a*_i - b_i(S)) / sum_i w_i,   b_i(S) = max(0, max_{(i,j) in S} q_ij)

(arXiv App. A, Eq. 2-3; an unserved user counts ``b_i = 0``). Only each user's
best finished model counts, so the cheapest set of runs with ``L(S) <= level``
picks at most one model per user: a multiple-choice covering knapsack,

    min sum_ij c_ij x_ij   s.t.   sum_j x_ij <= 1 (each user i),
                                  sum_ij w_i q_ij x_ij >= sum_i w_i a*_i - level sum_i w_i,
                                  x_ij in {0, 1},

which :func:`min_cost_selection` solves exactly with ``scipy.optimize.milp``
(HiGHS). Its optimum ``OPT(level)`` bounds every schedule from below:

* one worker: at the first time ``T`` a schedule's loss is ``<= level``, the
  runs it has finished reach the level and cost ``T`` in total (runs are done
  one after another), so ``T >= OPT(level)``;
* ``W`` workers: the finished runs cost at most ``W * T`` (each worker has
  been busy for at most ``T``), so ``T >= OPT(level) / W``. This bound is not
  always attainable: a single run cannot be split over workers.

:func:`greedy_selection` is the fast heuristic the issue names: it adds the
(user, model) switch with the largest drop of the average loss per unit of
cost until the level is reached (and, at each step, checks whether the
cheapest single switch that completes the cover is cheaper). Its cost is an
upper bound on ``OPT``; the simulator reports its relative gap to the exact
optimum.

This is beyond the paper: pvldb §6.2's ORACLE trains each user's single best
model, which is not a lower bound when a cheap model is almost as good as the
best one (``baselines.oracle_schedule``, the ``oracle_best`` policy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Selection", "OracleCurve", "selection_loss", "min_cost_selection", "greedy_selection", "greedy_path",
           "lower_bound_curve"]

# HiGHS accepts a constraint violated by up to its feasibility tolerance (1e-7). A selection that falls
# short of the level by that much is solved again with this much slack above the right-hand side.
_SLACK = 1e-7


@dataclass(frozen=True)
class Selection:
    """At most one model per user: what a clairvoyant runs to reach a loss level.

    ``cost`` is the summed cost of ``pairs``; ``loss`` the average loss once
    they have all finished. ``exact`` is True when ``cost`` is the proven
    optimum; ``bound`` is a proven lower bound on the optimum (equal to
    ``cost`` when exact, the solver's dual bound when the time limit cut the
    search, and ``nan`` for a heuristic).
    """

    pairs: tuple[tuple[int, int], ...]
    cost: float
    loss: float
    exact: bool
    bound: float


def _arrays(quality, cost, weights):
    q = np.asarray(quality, dtype=float)
    if q.ndim != 2:
        raise ValueError(f"quality: found shape {q.shape}, expected users x models")
    c = np.ones_like(q) if cost is None else np.asarray(cost, dtype=float)
    if c.shape != q.shape:
        raise ValueError(f"cost: found shape {c.shape}, expected the quality matrix's shape {q.shape}")
    w = np.ones(q.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (q.shape[0],) or np.any(w <= 0):
        raise ValueError(f"weights: expected {q.shape[0]} values > 0")
    avail = ~np.isnan(q)
    if np.any(c[avail] <= 0) or not np.all(np.isfinite(c[avail])):
        raise ValueError("cost: values must be finite and > 0 where quality is present")
    return q, c, w, avail


def _required_gain(q, w, level: float) -> float:
    """``sum_i w_i b_i`` needed for ``L <= level``."""
    if not level >= 0:
        raise ValueError(f"level: found {level!r}, expected a loss >= 0")
    a_star = np.nanmax(np.where(np.isnan(q), -np.inf, q), axis=1)
    a_star = np.where(np.isfinite(a_star), a_star, 0.0)
    return float(np.dot(w, a_star) - level * w.sum())


def selection_loss(quality, pairs, weights=None) -> float:
    """The average loss (weighted) once the runs ``pairs`` have finished."""
    q = np.asarray(quality, dtype=float)
    w = np.ones(q.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    a_star = np.where(np.all(np.isnan(q), axis=1), 0.0, np.nanmax(np.where(np.isnan(q), -np.inf, q), axis=1))
    best = np.zeros(q.shape[0])
    for i, j in pairs:
        best[i] = max(best[i], q[i, j])
    return float(np.dot(w, a_star - best) / w.sum())


def min_cost_selection(quality, cost=None, weights=None, *, level: float, time_limit: float = 30.0) -> Selection:
    """The cheapest set of runs whose average loss is ``<= level`` (exact, ``scipy.optimize.milp``).

    Args:
        quality: users x models accuracy (NaN: not a candidate).
        cost: users x models cost (None: every run costs 1).
        weights: per-user weights of the average loss (None: 1).
        level: the loss level to reach.
        time_limit: seconds HiGHS may search; if it stops early the
            incumbent is returned with ``exact=False`` and the solver's dual
            bound in ``bound`` (still a valid lower bound).

    Returns:
        A :class:`Selection`.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    q, c, w, avail = _arrays(quality, cost, weights)
    need = _required_gain(q, w, level)
    if need <= 0:
        return Selection((), 0.0, selection_loss(q, (), w), True, 0.0)
    ii, jj = np.nonzero(avail)
    gain = w[ii] * q[ii, jj]
    full = float(np.dot(w, np.nanmax(np.where(avail, q, -np.inf), axis=1).clip(0)))
    one_per_user = csr_matrix((np.ones(ii.size), (ii, np.arange(ii.size))), shape=(q.shape[0], ii.size))
    # Costs in units of the largest: HiGHS takes about 1e20 for infinite, so
    # costs in nanoseconds (or any unit) would else break it; the choice is
    # the same in any unit, the total and the bound are given back in c's.
    scale = float(c[ii, jj].max()) if ii.size else 1.0
    unit_cost = c[ii, jj] / scale

    def solve(rhs: float):
        res = milp(unit_cost, integrality=np.ones(ii.size), bounds=Bounds(0, 1),
                   constraints=[LinearConstraint(one_per_user, 0, 1), LinearConstraint(gain[None, :], rhs, np.inf)],
                   options={"time_limit": float(time_limit)})
        if res.x is None:
            raise RuntimeError(f"milp found no selection reaching loss {level:g}: {res.message}")
        return res, np.flatnonzero(res.x > 0.5)

    res, chosen = solve(need)
    if gain[chosen].sum() < need - 1e-12:  # within HiGHS's tolerance but short of the level
        res, chosen = solve(min(need + _SLACK, full))
    chosen = np.flatnonzero(res.x > 0.5)
    pairs = tuple(sorted((int(ii[k]), int(jj[k])) for k in chosen))
    total = float(c[ii[chosen], jj[chosen]].sum())
    exact = res.status == 0
    bound = total if exact else float(getattr(res, "mip_dual_bound", np.nan)) * scale
    return Selection(pairs, total, selection_loss(q, pairs, w), exact, bound)


def _greedy_steps(q, c, w, avail):
    """States of the loss-per-cost greedy: ``(selected model per user (-1: none), gain, cost)``
    after 0, 1, 2, ... switches, ending when no switch raises any user's quality."""
    n = q.shape[0]
    sel = np.full(n, -1)
    cur_q, cur_c = np.zeros(n), np.zeros(n)
    qz = np.where(avail, q, -np.inf)
    while True:
        yield sel.copy(), float(np.dot(w, cur_q)), float(cur_c.sum())
        d_gain = w[:, None] * (qz - cur_q[:, None])
        d_cost = np.where(avail, c, 1.0) - cur_c[:, None]
        better = d_gain > 0
        if not better.any():
            return
        # a better model that is no dearer than the current one is a free switch: take it first
        free = better & (d_cost <= 0)
        if free.any():
            score = np.where(free, d_gain, -np.inf)
        else:
            score = np.where(better, d_gain / np.where(better, d_cost, 1.0), -np.inf)
        i, j = np.unravel_index(int(np.argmax(score)), score.shape)
        sel[i], cur_q[i], cur_c[i] = j, q[i, j], c[i, j]


def greedy_path(quality, cost=None, weights=None) -> list[tuple[float, float]]:
    """``(cost, loss)`` of every state of the loss-per-cost greedy, from no run to every user at her best."""
    q, c, w, avail = _arrays(quality, cost, weights)
    total = float(np.dot(w, np.nanmax(np.where(avail, q, -np.inf), axis=1).clip(0)))
    return [(cst, (total - g) / float(w.sum())) for _, g, cst in _greedy_steps(q, c, w, avail)]


def greedy_selection(quality, cost=None, weights=None, *, level: float) -> Selection:
    """Greedy by loss reduction per unit cost: a feasible selection, so its cost is ``>= OPT(level)``.

    Each step switches one user to the model with the largest ``w_i (q_ij - q_i,now) / (c_ij - c_i,now)``
    (a better and no dearer model first). Before each step the cheapest single switch that reaches the
    level on its own is also considered, and the cheaper of the two finished selections is returned
    (the usual guard against a greedy that overshoots with a last expensive step).
    """
    q, c, w, avail = _arrays(quality, cost, weights)
    need = _required_gain(q, w, level)
    best: tuple[float, np.ndarray] | None = None
    for sel, gain, cst in _greedy_steps(q, c, w, avail):
        if gain >= need - 1e-12:
            if best is None or cst < best[0]:
                best = (cst, sel)
            break
        cur_q = np.where(sel >= 0, q[np.arange(q.shape[0]), np.maximum(sel, 0)], 0.0)
        cur_c = np.where(sel >= 0, c[np.arange(q.shape[0]), np.maximum(sel, 0)], 0.0)
        completes = avail & (gain + w[:, None] * (np.where(avail, q, -np.inf) - cur_q[:, None]) >= need - 1e-12)
        if completes.any():
            total = np.where(completes, cst + c - cur_c[:, None], np.inf)
            i, j = np.unravel_index(int(np.argmin(total)), total.shape)
            if best is None or total[i, j] < best[0]:
                alt = sel.copy()
                alt[i] = j
                best = (float(total[i, j]), alt)
    if best is None:  # the level is below the smallest reachable loss (only with level < 0, refused above)
        raise RuntimeError(f"greedy: loss {level:g} cannot be reached")
    pairs = tuple((int(i), int(j)) for i, j in enumerate(best[1]) if j >= 0)
    return Selection(pairs, float(c[tuple(np.array(pairs).T)].sum()) if pairs else 0.0,
                     selection_loss(q, pairs, w), False, float("nan"))


@dataclass(frozen=True)
class OracleCurve:
    """The ``oracle`` policy's loss over time, and its per-level report.

    ``times[k]`` / ``losses[k]``: from ``times[k]`` on, some selection of runs
    with total cost ``<= W * times[k]`` has loss ``losses[k]`` (the best such
    selection known: the greedy's states and the exact optimum of each level).
    For every level in ``levels`` the curve's first time at or below the level
    is exactly ``OPT(level) / W``, a lower bound on every schedule's time (see
    the module docstring); where HiGHS stops at its time limit the level's
    point is its dual bound instead, still a lower bound. Between those levels
    the curve is an achievable reference, not a bound, and the time between two
    levels (say from 0.1 to 0.02) is a difference of bounds, not a bound. ``levels`` maps ``f"{level:g}"`` to
    ``{"time", "greedy_time", "gap", "exact"}``: the bound, the greedy's
    time, ``greedy / OPT - 1`` (0 when both are 0) and whether HiGHS proved
    optimality (if not, ``time`` is its dual bound).
    """

    times: np.ndarray
    losses: np.ndarray
    levels: dict[str, dict[str, float | bool]]


def lower_bound_curve(quality, cost=None, weights=None, *, levels, n_workers: int = 1,
                      time_limit: float = 30.0) -> OracleCurve:
    """The ``oracle`` policy of the simulator: see :class:`OracleCurve`."""
    q, c, w, _ = _arrays(quality, cost, weights)
    if n_workers < 1:
        raise ValueError(f"n_workers: found {n_workers!r}, expected >= 1")
    points = list(greedy_path(q, c, w))
    report: dict[str, dict[str, float | bool]] = {}
    for lv in levels:
        opt = min_cost_selection(q, c, w, level=float(lv), time_limit=time_limit)
        gr = greedy_selection(q, c, w, level=float(lv))
        bound = opt.cost if opt.exact else opt.bound
        points += [(opt.cost, opt.loss) if opt.exact else (bound, float(lv)), (gr.cost, gr.loss)]
        report[f"{lv:g}"] = {"time": bound / n_workers, "greedy_time": gr.cost / n_workers,
                             "gap": (gr.cost / bound - 1.0) if bound > 0 else 0.0, "exact": opt.exact}
    points.sort()
    times, losses = [0.0], [selection_loss(q, (), w)]
    for cst, ls in points:
        if ls < losses[-1] - 1e-15:
            if cst / n_workers == times[-1]:
                losses[-1] = ls
            else:
                times.append(cst / n_workers)
                losses.append(ls)
    return OracleCurve(np.asarray(times), np.asarray(losses), report)
