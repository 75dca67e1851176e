"""Replay selection policies on a users x models quality (and cost) matrix,
following ease.ml's protocol (pvldb §6.2-6.3, arXiv App. A).

Protocol, per repetition:

1. Split the users at random into ``n_test`` test users and a "training set"
   of the rest. The GP kernel is computed from the training users' qualities
   (App. A); the test users are the tenants being served.
2. Each policy serves the test users until the budget is spent. The budget is
   ``budget`` x the total cost of all (test user, model) runs (cost-aware
   mode; pvldb §6.2 uses 10 %), or ``budget`` x their number (cost-oblivious
   mode, where time is counted in runs).
3. After every finished run we record the average accuracy loss of the test
   users, ``l_T = 1/n sum_i (a*_i - a_i,T)`` (App. A, Eq. 2-3), where ``a*_i`` is
   the user's best accuracy over all models and ``a_i,T`` her best so far
   (0 before her first model: an unserved user carries her full regret, as in
   the FCFS example of §5.1).

All policies see the same splits, so comparisons between them are paired.

Metrics (all exact, computed on the step function of each repetition):

* ``time_to_loss[level]``: the mean over repetitions of the first time the
  average loss is <= level; ``None`` unless every repetition gets there
  within its budget (``reached`` gives the share that did, and
  ``time_to_loss_censored`` the mean when misses count as the budget, a lower
  bound). The levels include 0.1, where the paper's plots start (ours start
  near 0.8 because an unserved user counts 0).
* ``time_from_0.1[level]``: the same for the time from the first loss <= 0.1
  to the first loss <= level (pvldb §6.2 reads its headline ratio this way).
* ``per_rep``: each repetition's time to each level (``None``: missed) and
  its budget, so that ratios can be given with bootstrap intervals over
  repetitions (``stats.ratio_of_means``).
* ``worst_time_to_loss[level]``: the time at which the worst-case loss over
  repetitions (pvldb §6.2's second measure) reaches the level, i.e. the max
  over repetitions of their times.
* ``time_to_loss_mean_curve[level]``: where the mean loss curve (the curve
  the paper plots) first reaches the level, in time units (fraction of the
  budget x the mean budget). Defined even when a few repetitions miss the
  level; the benchmark's ratios use it.
* ``auc``: the area under the mean loss curve over the budget, with time
  measured as a fraction of the budget (so it is the time-averaged loss).
* ``curves`` / ``worst_curves``: the mean / worst-case loss on ``grid``, a
  common grid of fractions of each repetition's budget (the paper's "% of
  Total Cost" / "% of Runs" axis).

References (policy names handled here, not by the :class:`Selector`):

* ``oracle``: a true lower bound on the time to reach each level, the
  cheapest set of runs that reaches it (exact, ``scipy.optimize.milp``), over
  the number of workers W (``oracle.lower_bound_curve``; the greedy's gap to
  the optimum is reported as ``oracle_gap``). With arrivals or departures the
  bound does not hold and the loss-per-cost greedy schedule is run instead
  (``oracle_lower_bound`` is then False).
* ``oracle_best``: pvldb §6.2's ORACLE, each user's single best model in
  Smith's order (``baselines.oracle_schedule``); not a bound.
* ``oracle_greedy``: the run-by-run greedy by loss drop per unit cost, with
  every run paid for; not a bound.

The name ``default`` runs the rule the service uses by default
(:func:`default_policy`).

This module is pure: no files, no printing. Pass ``map_fn`` to spread
repetitions over processes and ``progress`` to be told when one is done.
"""

from __future__ import annotations

import contextlib
import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .baselines import POLICIES, oracle_schedule, policy_spec
from .gp import ModelPrior
from .oracle import lower_bound_curve
from .selector import Selector

__all__ = ["LEVELS", "ORACLES", "Episode", "run_episode", "simulate", "summarise", "time_to_loss", "curve_on_grid",
           "validate_matrices", "default_policy", "resolve_policy", "check_policy"]

LEVELS: tuple[float, ...] = (0.1, 0.05, 0.02, 0.01)
#: the clairvoyant references, run by the simulator itself (they know every quality and cost)
ORACLES: tuple[str, ...] = ("oracle", "oracle_best", "oracle_greedy")
_FROM = 0.1  # the paper's plots start near this loss
_EPS = 1e-12


def default_policy() -> str:
    """The rule the service uses by default: the package's ``DEFAULT_POLICY`` where it
    exports one, else the :class:`Selector`'s default ``policy``."""
    import importlib
    import inspect

    name = getattr(importlib.import_module(__package__), "DEFAULT_POLICY", None)
    return str(name) if name is not None else str(inspect.signature(Selector).parameters["policy"].default)


def resolve_policy(name: str) -> str:
    """The policy a name runs: ``default`` becomes :func:`default_policy`, other names stay."""
    return default_policy() if name == "default" else name


def check_policy(name: str) -> str:
    """Resolve ``name`` (``default``, an oracle or a name from ``baselines.POLICIES``);
    raises ValueError naming the known policies."""
    base = resolve_policy(name)
    if base in ORACLES:
        return base
    try:
        policy_spec(base)
    except ValueError:
        known = ", ".join(dict.fromkeys(["default", *POLICIES, *ORACLES]))
        raise ValueError(f"policy: found {name!r}, expected one of {known}") from None
    return base


@dataclass
class Episode:
    """One policy on one split: the loss after each event.

    ``times[0] = 0`` with ``losses[0]`` the loss before any run; ``times`` are
    non-decreasing and ``losses[j]`` holds from ``times[j]`` on.
    """

    times: np.ndarray
    losses: np.ndarray
    budget: float
    n_runs: int = 0
    picks: list[tuple[int, int]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def validate_matrices(quality: np.ndarray, cost: np.ndarray | None, n_test: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Check shapes and ranges; returns float arrays. Raises ValueError naming the problem."""
    q = np.asarray(quality, dtype=float)
    if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] == 0:
        raise ValueError(f"quality: found shape {q.shape}, expected a non-empty users x models matrix")
    finite = q[~np.isnan(q)]
    if finite.size == 0:
        raise ValueError("quality: every value is missing")
    if not np.all(np.isfinite(finite)) or finite.min() < 0 or finite.max() > 1:
        raise ValueError("quality: values must lie in [0, 1] (accuracy); NaN marks a missing cell")
    if np.all(np.isnan(q), axis=1).any():
        i = int(np.flatnonzero(np.all(np.isnan(q), axis=1))[0])
        raise ValueError(f"quality: user row {i} has no value at all")
    if q.shape[0] < n_test + 1:
        raise ValueError(f"quality: found {q.shape[0]} users, expected at least test users + 1 = {n_test + 1}")
    c = None
    if cost is not None:
        c = np.asarray(cost, dtype=float)
        if c.shape != q.shape:
            raise ValueError(f"cost: found shape {c.shape}, expected the quality matrix's shape {q.shape}")
        need = ~np.isnan(q)
        if np.isnan(c[need]).any():
            raise ValueError("cost: missing where quality is present")
        if not np.all(np.isfinite(c[need])) or np.any(c[need] <= 0):
            raise ValueError("cost: values must be finite and > 0 (seconds)")
    return q, c


def _seed(seed: int, *parts: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFF, *[int(p) for p in parts]])


def _policy_id(name: str) -> int:
    names = list(POLICIES)
    return names.index(name) if name in names else 1000 + sum(map(ord, name))


def run_episode(policy: str, quality: np.ndarray, cost: np.ndarray | None, prior: ModelPrior, *,
                budget: float, cost_aware: bool = True, n_workers: int = 1, seed: int | np.random.SeedSequence = 0,
                weights: np.ndarray | None = None, use_weights: bool = True, arrivals: np.ndarray | None = None,
                departures: np.ndarray | None = None, hallucinate: bool = True, rearm_on_change: bool = True,
                s: int = 10, delta: float = 0.1, beta_schedule: str = "alg1", beta_scale: float = 1.0,
                arms: str = "all", cost_norm: str = "global", model_order: Sequence[int] | None = None,
                record_picks: bool = False, levels: Sequence[float] = LEVELS,
                policy_cost_aware: bool | None = None, refit_every_doubling: bool = False) -> Episode:
    """Run one policy on the test users until ``budget`` (time units) is spent.

    Args:
        policy: ``default``, an oracle (``ORACLES``) or a name from ``baselines.POLICIES``.
        quality: test users x models (NaN: not a candidate for that user).
        cost: test users x models cost; None means every run costs 1.
        prior: the GP prior fitted on the training users.
        budget: wall-clock budget (cumulative cost with one worker; runs in
            cost-oblivious mode, where ``cost`` is ignored for time and policy).
        n_workers: W workers running picks concurrently.
        weights: per-user weights of the objective (None: all 1). The loss is
            the weighted average; ``use_weights`` tells the policy about them.
        arrivals / departures: per-user times at which users join / leave
            (None: all present throughout). Only present users count in the loss.
        hallucinate, rearm_on_change, s, delta, beta_schedule, arms, cost_norm: see :class:`Selector`.
            With ``arms="all"`` (the paper's GP-UCB) a model already trained
            can be picked again: the re-run costs its cost again and returns
            the same quality (the matrix is deterministic), so the loss does
            not change.
        record_picks: keep the (user, model) sequence in ``Episode.picks``.
        levels: the loss levels at which ``oracle`` is exact (its lower bound
            is computed for each; see :func:`oracle.lower_bound_curve`).
        refit_every_doubling: refit each test user's kernel hyperparameters from her own
            observations at 3, 6, 12, ... of them (beyond the paper; see :class:`Selector`).
            Off by default: the paper fits the kernel once, on the training users.
        policy_cost_aware: override what the policy is told (None: ``cost_aware``);
            False with ``cost_aware`` is the lesion study of pvldb Fig. 12 (left):
            time is cost, but GP-UCB ignores it.
    """
    q = np.asarray(quality, dtype=float)
    n, K = q.shape
    time_cost = np.ones_like(q) if (cost is None or not cost_aware) else np.asarray(cost, dtype=float)
    avail = ~np.isnan(q)
    a_star = np.nanmax(q, axis=1)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    arr = np.zeros(n) if arrivals is None else np.asarray(arrivals, dtype=float)
    dep = np.full(n, np.inf) if departures is None else np.asarray(departures, dtype=float)
    best = np.zeros(n)
    present = np.zeros(n, bool)
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)

    def loss() -> float:
        if not present.any():
            return 0.0
        ww = w[present]
        return float(np.dot(ww, a_star[present] - best[present]) / ww.sum())

    policy = check_policy(policy)
    names = [str(j) for j in range(K)]
    sel = None
    order: list[tuple[int, int]] = []
    started_oracle: set[int] = set()
    tried = np.zeros_like(avail)
    info: dict[str, Any] = {}
    picker = policy if policy in ORACLES else policy_spec(policy)[0]
    if picker == "oracle":
        if arrivals is None and departures is None:
            curve = lower_bound_curve(q, time_cost, w, levels=levels, n_workers=int(n_workers))
            keep = curve.times <= budget
            return Episode(curve.times[keep], curve.losses[keep], float(budget), 0, [],
                           {"oracle_levels": curve.levels, "oracle_lower_bound": True})
        picker, info["oracle_lower_bound"] = "oracle_greedy", False  # users come and go: no bound
    if picker == "oracle_best":
        order = oracle_schedule(q, time_cost if cost_aware else None, w)
    elif picker == "oracle_greedy":
        pass
    else:
        pca = cost_aware if policy_cost_aware is None else policy_cost_aware
        sel = Selector(names, prior=prior, policy=policy, cost_aware=pca and cost is not None,
                       delta=delta, beta_schedule=beta_schedule, beta_scale=beta_scale, s=s, hallucinate=hallucinate,
                       arms=arms, cost_norm=cost_norm, weighted=use_weights, rearm_on_change=rearm_on_change,
                       model_order=None if model_order is None else [str(m) for m in model_order],
                       refit_every_doubling=refit_every_doubling, random_state=int(ss.generate_state(1)[0]))

    def join(i: int) -> None:
        present[i] = True
        if sel is not None:
            full = avail[i].all()
            sel.add_user(str(i), models=None if full else [names[j] for j in np.flatnonzero(avail[i])],
                         costs=None if cost is None else (time_cost[i] if full else time_cost[i, avail[i]]),
                         weight=float(w[i]))

    events: list[tuple[float, int, str, int, int]] = []  # (time, seq, kind, user, model)
    seq = 0
    for i in range(n):
        if arr[i] <= 0:
            join(i)
        else:
            heapq.heappush(events, (float(arr[i]), seq, "arrive", i, -1)); seq += 1
        if np.isfinite(dep[i]):
            heapq.heappush(events, (float(dep[i]), seq, "leave", i, -1)); seq += 1

    times, losses = [0.0], [loss()]
    picks: list[tuple[int, int]] = []
    running: dict[tuple[int, int], int] = {}  # (user, model) -> seq of its finish event
    free = int(n_workers)
    t = 0.0
    n_runs = 0
    while True:
        if free > 0 and t < budget:
            if sel is not None:
                new = [(int(p.user), int(p.model)) for p in sel.next_picks(free)]
            elif picker == "oracle_greedy":
                new = []
                known = best.copy()  # the oracle knows what running picks will return
                for (i, j) in running:
                    known[i] = max(known[i], q[i, j])
                for _ in range(free):
                    gain = np.where(avail & ~tried & present[:, None],
                                    w[:, None] * np.maximum(np.nan_to_num(q, nan=0.0) - known[:, None], 0.0), 0.0)
                    dens = np.divide(gain, time_cost, out=np.zeros_like(gain), where=gain > 0)
                    i, j = np.unravel_index(int(np.argmax(dens)), dens.shape)
                    if not dens[i, j] > 0:
                        break
                    new.append((int(i), int(j)))
                    tried[i, j] = True
                    known[i] = max(known[i], q[i, j])
            else:
                new = []
                for i, j in order:
                    if len(new) >= free:
                        break
                    if i in started_oracle or not present[i]:
                        continue
                    new.append((i, j))
                    started_oracle.add(i)
            for i, j in new:
                heapq.heappush(events, (t + float(time_cost[i, j]), seq, "finish", i, j))
                running[(i, j)] = seq
                seq += 1
                free -= 1
                if record_picks:
                    picks.append((i, j))
        if not events:
            break
        te, sq, kind, i, j = heapq.heappop(events)
        if te > budget:
            break
        t = te
        if kind == "finish":
            if running.get((i, j)) != sq:  # cancelled (user left)
                continue
            del running[(i, j)]
            free += 1
            n_runs += 1
            if sel is not None:
                sel.observe(str(i), str(j), float(q[i, j]))
            best[i] = max(best[i], float(q[i, j]))
        elif kind == "arrive":
            join(i)
        elif kind == "leave":
            present[i] = False
            if sel is not None:
                for u, m in sel.remove_user(str(i)):
                    running.pop((int(u), int(m)), None)
                    free += 1
            else:
                for key in [k for k in running if k[0] == i]:
                    running.pop(key)
                    free += 1
        times.append(t)
        losses.append(loss())
    if sel is not None and hasattr(sel.picker, "switched_at_"):
        info["switched_at"] = sel.picker.switched_at_
    return Episode(np.asarray(times), np.asarray(losses), float(budget), n_runs, picks, info)


def curve_on_grid(ep: Episode, grid: np.ndarray) -> np.ndarray:
    """The loss at each grid point (fractions of the episode's budget)."""
    idx = np.searchsorted(ep.times, grid * ep.budget, side="right") - 1
    return ep.losses[np.maximum(idx, 0)]


def time_to_loss(ep: Episode, level: float) -> float | None:
    """First time the loss is <= level within the budget, else None."""
    hit = np.flatnonzero(ep.losses <= level + _EPS)
    if hit.size == 0:
        return None
    t = float(ep.times[hit[0]])
    return t if t <= ep.budget else None


def _auc(ep: Episode) -> float:
    """Integral of the step function over [0, budget] divided by the budget."""
    t = np.append(np.minimum(ep.times, ep.budget), ep.budget)
    return float(np.sum(np.diff(t) * ep.losses) / ep.budget) if ep.budget > 0 else float(ep.losses[0])


def _mean_curve_hits(episodes: Sequence[Episode], levels: Sequence[float]) -> dict[str, float | None]:
    """Where the mean loss curve (mean over repetitions at the same fraction of
    each one's budget: the curve the paper plots) first reaches each level,
    exactly, converted to time with the mean budget. None if never."""
    fr = np.unique(np.concatenate([np.minimum(ep.times / ep.budget, 1.0) for ep in episodes] + [np.zeros(1)]))
    mean = np.mean([curve_on_grid(ep, fr) for ep in episodes], axis=0)
    mb = float(np.mean([ep.budget for ep in episodes]))
    out: dict[str, float | None] = {}
    for lv in levels:
        hit = np.flatnonzero(mean <= lv + _EPS)
        out[f"{lv:g}"] = float(fr[hit[0]] * mb) if hit.size else None
    return out


def summarise(episodes: Sequence[Episode], grid: np.ndarray, levels: Sequence[float] = LEVELS) -> dict[str, Any]:
    """Aggregate the repetitions of one policy (see the module docstring)."""
    curves = np.stack([curve_on_grid(ep, grid) for ep in episodes])
    out: dict[str, Any] = {"time_to_loss": {}, "worst_time_to_loss": {}, "reached": {},
                           "time_to_loss_censored": {}, f"time_from_{_FROM:g}": {},
                           "per_rep": {"time_to_loss": {}, "budget": [float(ep.budget) for ep in episodes]}}
    per_level = {}
    for lv in levels:
        key = f"{lv:g}"
        hits = [time_to_loss(ep, lv) for ep in episodes]
        per_level[lv] = hits
        ok = [h for h in hits if h is not None]
        all_ok = len(ok) == len(hits)
        out["time_to_loss"][key] = float(np.mean(ok)) if all_ok else None
        out["worst_time_to_loss"][key] = float(np.max(ok)) if all_ok else None
        out["reached"][key] = len(ok) / len(hits)
        out["time_to_loss_censored"][key] = float(np.mean([h if h is not None else ep.budget
                                                           for h, ep in zip(hits, episodes)]))
        out["per_rep"]["time_to_loss"][key] = hits
    start = per_level.get(_FROM, [time_to_loss(ep, _FROM) for ep in episodes])
    for lv in levels:
        if lv < _FROM:
            d = [None if a is None or b is None else b - a for a, b in zip(start, per_level[lv])]
            out[f"time_from_{_FROM:g}"][f"{lv:g}"] = None if None in d else float(np.mean(d))
    out["time_to_loss_mean_curve"] = _mean_curve_hits(episodes, levels)
    out["auc"] = float(np.mean([_auc(ep) for ep in episodes]))
    out["curve"] = curves.mean(axis=0)
    out["worst_curve"] = curves.max(axis=0)
    out["mean_budget"] = float(np.mean([ep.budget for ep in episodes]))
    out["mean_runs"] = float(np.mean([ep.n_runs for ep in episodes]))
    sw = [ep.info.get("switched_at") for ep in episodes if "switched_at" in ep.info]
    if sw:
        out["hybrid_switched"] = sum(x is not None for x in sw) / len(sw)
    bound = [ep.info["oracle_lower_bound"] for ep in episodes if "oracle_lower_bound" in ep.info]
    if bound:
        out["oracle_lower_bound"] = all(bound)
    reports = [ep.info["oracle_levels"] for ep in episodes if "oracle_levels" in ep.info]
    if reports:  # the greedy's cost over the exact optimum, minus 1, over repetitions
        out["oracle_gap"] = {key: {"mean": float(np.mean([r[key]["gap"] for r in reports])),
                                   "max": float(np.max([r[key]["gap"] for r in reports])),
                                   "exact": sum(bool(r[key]["exact"]) for r in reports) / len(reports)}
                             for key in reports[0]}
    return out


def _blas_single_thread():
    """Small dense algebra (K <= ~1000) is fastest on one BLAS thread, and
    multi-threaded OpenBLAS can be 10x slower on a busy 2-core machine."""
    try:
        from threadpoolctl import threadpool_limits  # a scikit-learn dependency
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _one_rep(args: tuple) -> dict[str, Episode]:
    with _blas_single_thread():
        return _one_rep_inner(args)


def _one_rep_inner(args: tuple) -> dict[str, Episode]:
    (rep, q, c, policies, n_test, budget, cost_aware, seed, opts) = args
    levels = opts.get("levels", LEVELS)
    rng = np.random.default_rng(_seed(seed, rep))
    perm = rng.permutation(q.shape[0])
    test, train = np.sort(perm[:n_test]), perm[n_test:]
    prior = ModelPrior(random_state=int(rng.integers(2**31 - 1))).fit(q[train])
    qt = q[test]
    ct = None if c is None else c[test]
    avail = ~np.isnan(qt)
    if cost_aware and ct is not None:
        total = float(np.sum(ct[avail]))
    else:
        total = float(avail.sum())
    n_workers = int(opts.get("n_workers", 1))
    wall_budget = budget * total / n_workers
    weights = None
    if opts.get("weight_choices"):
        weights = rng.choice(np.asarray(opts["weight_choices"], dtype=float), size=n_test)
    arrivals = departures = None
    if opts.get("arrival_spread"):
        arrivals = rng.uniform(0.0, opts["arrival_spread"] * wall_budget, size=n_test)
        arrivals[np.argmin(arrivals)] = 0.0
        if opts.get("stay"):
            departures = arrivals + opts["stay"] * wall_budget
    out = {}
    for name in policies:
        base = resolve_policy(name.split("@")[0])  # "hybrid@plain" style variants share the base policy
        variant = opts.get("variants", {}).get(name, {})
        ep = run_episode(base, qt, ct, prior, budget=wall_budget, cost_aware=cost_aware, n_workers=n_workers,
                         seed=_seed(seed, rep, _policy_id(base)), weights=weights, arrivals=arrivals,
                         departures=departures, levels=levels,
                         **{k: v for k, v in {**opts.get("episode", {}), **variant}.items()})
        out[name] = ep
    return out


def simulate(quality: np.ndarray, cost: np.ndarray | None = None, *,
             policies: Sequence[str] = ("hybrid", "greedy", "round_robin", "random", "spearmint", "oracle"),
             reps: int = 50, budget: float = 0.1, n_test: int = 10, seed: int = 0, cost_aware: bool = True,
             levels: Sequence[float] = LEVELS, grid_points: int = 101, n_workers: int = 1,
             weight_choices: Sequence[float] | None = None, use_weights: bool = True,
             arrival_spread: float | None = None, stay: float | None = None,
             variants: Mapping[str, Mapping[str, Any]] | None = None,
             episode_options: Mapping[str, Any] | None = None,
             map_fn: Callable[[Callable, Iterable], Iterable] = map,
             progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run the ease.ml protocol and return the ``easeml simulate`` JSON document.

    Args:
        quality: users x models accuracy in [0, 1] (NaN: missing).
        cost: users x models cost in seconds, or None (every run costs 1;
            then cost-aware and cost-oblivious coincide).
        policies: names from ``baselines.POLICIES``, ``ORACLES`` or ``default``
            (the service's default rule, :func:`default_policy`); ``name@tag`` runs the
            policy ``name`` with the options ``variants[name@tag]`` (e.g.
            ``{"hybrid@no_halluc": {"hallucinate": False}}``).
        reps: repetitions (random splits); the paper uses 50.
        budget: fraction of the test users' total cost (or runs) to spend.
        n_test: test users per split (10 in the paper).
        seed: master seed; results are a deterministic function of it.
        cost_aware: time is cumulative cost and policies see costs; else time
            is runs and every cost is 1.
        levels: loss levels for ``time_to_loss``.
        grid_points: points of the common grid over [0, 1] x budget.
        n_workers: W workers (beyond the paper); the wall-clock budget is
            the compute budget / W.
        weight_choices: draw each test user's weight from these (beyond the paper).
        use_weights: whether the policies are told the weights.
        arrival_spread: users arrive at U(0, spread x budget) (one at 0).
        stay: with ``arrival_spread``, each user leaves ``stay x budget`` after arriving.
        episode_options: extra keyword arguments for :func:`run_episode`.
        map_fn: a ``map``-like callable to run repetitions (e.g. a process pool's).
        progress: called with the repetition index as each one finishes.

    Returns:
        ``{"policies": {name: {"time_to_loss", "worst_time_to_loss", "auc", ...}},
        "grid": [...], "curves": {name: [...]}, "worst_curves": {...}, "settings": {...}}``.
    """
    q, c = validate_matrices(quality, cost, n_test)
    for p in policies:
        check_policy(p.split("@")[0])
    if reps < 1:
        raise ValueError(f"reps: found {reps!r}, expected >= 1")
    if not 0 < budget <= 1:
        raise ValueError(f"budget: found {budget!r}, expected a fraction in (0, 1]")
    if n_test < 1:
        raise ValueError(f"n_test: found {n_test!r}, expected >= 1")
    cost_aware = bool(cost_aware and c is not None)
    opts = {"n_workers": n_workers, "levels": tuple(levels), "weight_choices": list(weight_choices) if weight_choices else None,
            "arrival_spread": arrival_spread, "stay": stay, "variants": dict(variants or {}),
            "episode": {"use_weights": use_weights, **dict(episode_options or {})}}
    jobs = [(r, q, c, list(policies), n_test, budget, cost_aware, seed, opts) for r in range(reps)]
    per_rep: list[dict[str, Episode]] = []
    for r, res in enumerate(map_fn(_one_rep, jobs)):
        per_rep.append(res)
        if progress is not None:
            progress(r)
    grid = np.linspace(0.0, 1.0, grid_points)
    doc: dict[str, Any] = {"policies": {}, "grid": grid.tolist(), "curves": {}, "worst_curves": {}}
    for name in policies:
        summ = summarise([res[name] for res in per_rep], grid, levels)
        doc["curves"][name] = summ.pop("curve").tolist()
        doc["worst_curves"][name] = summ.pop("worst_curve").tolist()
        doc["policies"][name] = summ
    doc["settings"] = {"reps": reps, "budget": budget, "n_test": n_test, "seed": seed, "cost_aware": cost_aware,
                       "n_users": int(q.shape[0]), "n_models": int(q.shape[1]), "n_workers": n_workers,
                       "levels": list(levels), "default_policy": default_policy(),
                       "time_unit": "seconds (cumulative cost)" if cost_aware else "runs",
                       "grid_unit": "fraction of each repetition's budget"}
    return doc
