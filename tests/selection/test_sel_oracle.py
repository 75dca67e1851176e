"""The clairvoyant lower bound: exact optimum (milp) against brute force, the greedy against the optimum."""

import itertools

import numpy as np
import pytest

from ease_jupyter.selection.oracle import (greedy_selection, lower_bound_curve, min_cost_selection,
                                           selection_loss)


def brute_force(q, c, w, level):
    """The cheapest selection (at most one model per user) with loss <= level, by enumeration."""
    n, k = q.shape
    best = np.inf
    for choice in itertools.product(range(-1, k), repeat=n):
        pairs = [(i, j) for i, j in enumerate(choice) if j >= 0]
        if any(np.isnan(q[i, j]) for i, j in pairs):
            continue
        if selection_loss(q, pairs, w) <= level + 1e-12:
            best = min(best, sum(c[i, j] for i, j in pairs))
    return best


def random_instance(rng, n=3, k=3):
    q = rng.uniform(0.3, 1.0, (n, k))
    q[rng.random((n, k)) < 0.15] = np.nan
    q[:, 0] = np.nan_to_num(q[:, 0], nan=0.6)  # every user keeps a candidate
    return q, rng.uniform(0.05, 1.0, (n, k)), rng.choice([1.0, 2.0], n)


@pytest.mark.parametrize("seed", range(6))
def test_milp_is_the_exact_optimum_and_greedy_never_beats_it(seed):
    rng = np.random.default_rng(seed)
    for _ in range(8):
        q, c, w = random_instance(rng)
        for level in (0.3, 0.15, 0.05, 0.0):
            opt = min_cost_selection(q, c, w, level=level)
            gr = greedy_selection(q, c, w, level=level)
            assert opt.exact and opt.cost == pytest.approx(brute_force(q, c, w, level), abs=1e-12)
            assert opt.loss <= level + 1e-12 and gr.loss <= level + 1e-12
            assert gr.cost >= opt.cost - 1e-12
            assert len({i for i, _ in opt.pairs}) == len(opt.pairs)  # one model per user


def test_reported_gap_is_greedy_over_optimum():
    rng = np.random.default_rng(11)
    gaps = []
    for _ in range(20):
        q, c, w = random_instance(rng, n=4, k=4)
        levels = (0.2, 0.05, 0.0)
        curve = lower_bound_curve(q, c, w, levels=levels, n_workers=2)
        for lv in levels:
            opt = min_cost_selection(q, c, w, level=lv)
            gr = greedy_selection(q, c, w, level=lv)
            r = curve.levels[f"{lv:g}"]
            assert r["time"] == pytest.approx(opt.cost / 2) and r["greedy_time"] == pytest.approx(gr.cost / 2)
            assert r["gap"] == pytest.approx(gr.cost / opt.cost - 1 if opt.cost > 0 else 0.0)
            # the curve first reaches the level exactly at OPT / W
            hit = curve.times[np.flatnonzero(curve.losses <= lv + 1e-12)[0]]
            assert hit == pytest.approx(opt.cost / 2)
            gaps.append(r["gap"])
    assert min(gaps) >= 0 and max(gaps) > 0  # the greedy is not always optimal: the check has teeth


def test_greedy_is_loss_reduction_per_cost_by_hand():
    # a* = (0.9, 0.8). User 0: a 0.5 model at cost 1 (0.5 per unit cost) or a 0.9 model at cost 3 (0.3);
    # user 1: a 0.8 model at cost 8 (0.1).
    q = np.array([[0.5, 0.9], [0.8, np.nan]])
    c = np.array([[1.0, 3.0], [8.0, 1.0]])
    # loss 0.4 needs a summed quality of 0.9: user 0's 0.9 model alone, cost 3
    g = greedy_selection(q, c, level=0.4)
    assert g.pairs == ((0, 1),) and g.cost == 3.0 and g.loss == pytest.approx(0.4)
    assert min_cost_selection(q, c, level=0.4).cost == 3.0
    # loss 0.39 needs 0.92. By loss drop per cost the greedy takes (0,0), switches user 0 to her 0.9 model
    # (+0.4 for +2) and then needs user 1: cost 11. Completing after the first step with user 1 instead
    # costs 9, the optimum: the completion check finds it.
    g = greedy_selection(q, c, level=0.39)
    assert g.pairs == ((0, 0), (1, 0)) and g.cost == 9.0
    assert min_cost_selection(q, c, level=0.39).cost == 9.0


def test_curve_is_monotone_and_starts_at_the_unserved_loss():
    rng = np.random.default_rng(3)
    q = np.clip(rng.uniform(0.5, 0.9, (6, 1)) + 0.1 * rng.standard_normal((6, 12)), 0, 1)
    c = rng.uniform(0.05, 1.0, (6, 12))
    curve = lower_bound_curve(q, c, levels=(0.1, 0.02, 0.0))
    assert curve.times[0] == 0.0 and curve.losses[0] == pytest.approx(q.max(axis=1).mean())
    assert np.all(np.diff(curve.times) > 0) and np.all(np.diff(curve.losses) < 0)
    assert curve.losses[-1] == pytest.approx(0.0, abs=1e-12)


def test_bad_inputs_name_the_field():
    q = np.array([[0.5, 0.9]])
    with pytest.raises(ValueError, match="level"):
        min_cost_selection(q, level=-0.1)
    with pytest.raises(ValueError, match="cost"):
        greedy_selection(q, np.array([[1.0, 0.0]]), level=0.1)
    with pytest.raises(ValueError, match="weights"):
        lower_bound_curve(q, weights=np.array([1.0, 2.0]), levels=(0.1,))
