"""Simulator metrics on tiny matrices whose answers are known by hand."""

import numpy as np
import pytest

from ease_jupyter.selection import (LEVELS, ModelPrior, oracle_schedule, run_episode, simulate, summarise,
                                    time_to_loss)
from ease_jupyter.selection.simulator import curve_on_grid


Q = np.array([[0.9, 0.5], [0.6, 0.8]])
C = np.array([[2.0, 1.0], [1.0, 4.0]])


def prior2():
    return ModelPrior.from_arrays([0.6, 0.6], 0.01 * np.eye(2))


def test_oracle_order_by_loss_drop_per_cost():
    # user 0: best 0.9 at cost 2 (0.45 per second); user 1: best 0.8 at cost 4 (0.2)
    assert oracle_schedule(Q, C) == [(0, 0), (1, 1)]
    assert oracle_schedule(Q, None) == [(0, 0), (1, 1)]
    assert oracle_schedule(Q, C, weights=np.array([1.0, 3.0])) == [(1, 1), (0, 0)]


def test_oracle_best_episode_metrics_by_hand():
    ep = run_episode("oracle_best", Q, C, prior2(), budget=8.0)
    # loss: 0.85 until t=2, then 0.4 until t=6, then 0
    np.testing.assert_allclose(ep.times, [0, 2, 6])
    np.testing.assert_allclose(ep.losses, [0.85, 0.4, 0.0])
    assert time_to_loss(ep, 0.5) == 2.0 and time_to_loss(ep, 0.01) == 6.0
    grid = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(curve_on_grid(ep, grid), [0.85, 0.4, 0.4, 0.0, 0.0])
    summ = summarise([ep], grid, levels=(0.5, 0.01, 0.001))
    assert summ["auc"] == pytest.approx((0.85 * 2 + 0.4 * 4) / 8)
    assert summ["time_to_loss"] == {"0.5": 2.0, "0.01": 6.0, "0.001": 6.0}
    # a run that ends after the budget does not count
    short = run_episode("oracle_best", Q, C, prior2(), budget=5.0)
    assert time_to_loss(short, 0.01) is None


def test_mean_and_worst_over_repetitions_by_hand():
    e1 = run_episode("oracle_best", Q, C, prior2(), budget=8.0)
    e2 = run_episode("oracle_best", Q[::-1], C[::-1], prior2(), budget=8.0)  # same times, users swapped
    e3 = run_episode("oracle_best", Q, C, prior2(), budget=5.0)  # never reaches 0.01
    s = summarise([e1, e2], np.linspace(0, 1, 5), levels=(0.5,))
    assert s["time_to_loss"]["0.5"] == 2.0 and s["worst_time_to_loss"]["0.5"] == 2.0
    s = summarise([e1, e3], np.linspace(0, 1, 5), levels=(0.01,))
    assert s["time_to_loss"]["0.01"] is None and s["reached"]["0.01"] == 0.5
    assert s["time_to_loss_censored"]["0.01"] == pytest.approx((6.0 + 5.0) / 2)


def test_oracle_is_the_cheapest_selection_at_every_level_by_hand():
    # runs (cost -> loss): (1,0) 1 -> 0.55; (0,1)+(1,0) 2 -> 0.3; (0,0)+(1,0) 3 -> 0.1; (0,0)+(1,1) 6 -> 0
    ep = run_episode("oracle", Q, C, prior2(), budget=8.0, levels=(0.3, 0.1, 0.0))
    np.testing.assert_allclose(ep.times, [0, 1, 2, 3, 6])
    np.testing.assert_allclose(ep.losses, [0.85, 0.55, 0.3, 0.1, 0.0])
    assert ep.info["oracle_lower_bound"] is True
    rep = ep.info["oracle_levels"]
    assert rep["0.1"]["time"] == pytest.approx(3.0) and rep["0"]["time"] == pytest.approx(6.0)
    assert all(r["exact"] and r["gap"] >= 0 for r in rep.values())
    # W workers: the finished runs cost at most W x the elapsed time
    ep2 = run_episode("oracle", Q, C, prior2(), budget=8.0, levels=(0.1,), n_workers=2)
    assert time_to_loss(ep2, 0.1) == pytest.approx(1.5)
    # oracle_best (each user's best model, Smith's order) needs 6 to reach 0.1: not a bound
    assert time_to_loss(run_episode("oracle_best", Q, C, prior2(), budget=8.0), 0.1) == 6.0


def test_oracle_never_slower_than_any_policy():
    rng = np.random.default_rng(7)
    q = np.clip(rng.uniform(0.5, 0.9, (16, 1)) + 0.1 * rng.standard_normal((16, 8)), 0, 1)
    c = rng.uniform(0.05, 1.0, (16, 8))
    pols = ["oracle", "oracle_best", "oracle_greedy", "round_robin", "spearmint", "hybrid", "random"]
    doc = simulate(q, c, policies=pols, reps=3, n_test=5, seed=2, budget=0.6)
    per = {p: doc["policies"][p]["per_rep"]["time_to_loss"] for p in pols}
    for lv in per["oracle"]:
        for r, t_or in enumerate(per["oracle"][lv]):
            assert t_or is not None
            for p in pols[1:]:
                t = per[p][lv][r]
                assert t is None or t >= t_or - 1e-9, (p, lv, r)
    gap = doc["policies"]["oracle"]["oracle_gap"]
    assert set(gap) == set(per["oracle"]) and all(g["mean"] >= 0 and g["exact"] == 1.0 for g in gap.values())


def test_oracle_with_arrivals_falls_back_to_a_schedule_and_says_so():
    ep = run_episode("oracle", Q, C, prior2(), budget=20.0, arrivals=np.array([0.0, 10.0]))
    assert ep.info["oracle_lower_bound"] is False and ep.losses[-1] == 0.0


def test_time_from_0_1_and_per_rep_times_by_hand():
    e1 = run_episode("oracle_best", Q, C, prior2(), budget=8.0)  # 0.85 -> 0.4 at 2 -> 0 at 6
    e2 = run_episode("oracle", Q, C, prior2(), budget=8.0, levels=(0.3, 0.1, 0.0))  # 0.1 at 3, 0 at 6
    s = summarise([e1, e2], np.linspace(0, 1, 5), levels=(0.1, 0.05))
    assert s["per_rep"]["time_to_loss"]["0.1"] == [6.0, 3.0]
    assert s["per_rep"]["budget"] == [8.0, 8.0]
    assert s["time_from_0.1"]["0.05"] == pytest.approx(((6 - 6) + (6 - 3)) / 2)
    assert "0.1" not in s["time_from_0.1"]


def test_default_runs_the_services_default_rule():
    from ease_jupyter.selection.simulator import default_policy

    rng = np.random.default_rng(4)
    q = np.clip(rng.uniform(0.5, 0.9, (8, 1)) + 0.1 * rng.standard_normal((8, 5)), 0, 1)
    c = rng.uniform(0.1, 1.0, (8, 5))
    name = default_policy()
    doc = simulate(q, c, policies=["default", name], reps=2, n_test=3, seed=1, grid_points=11)
    assert doc["settings"]["default_policy"] == name
    assert doc["curves"]["default"] == doc["curves"][name]


def test_cost_oblivious_time_is_runs():
    ep = run_episode("oracle_best", Q, C, prior2(), budget=2.0, cost_aware=False)
    np.testing.assert_allclose(ep.times, [0, 1, 2])


def test_round_robin_episode_by_hand():
    # independent arms, equal prior, cost-oblivious: each user takes model 0 first (ties: first)
    ep = run_episode("round_robin", Q, None, prior2(), budget=4.0, cost_aware=False, record_picks=True)
    assert ep.picks[:2] == [(0, 0), (1, 0)]
    np.testing.assert_allclose(ep.losses[:3], [0.85, 0.4, 0.1])  # (0.9-0.9 + 0.8-0.6) / 2


def test_parallel_workers_never_repeat_a_pair_and_use_wall_clock():
    rng = np.random.default_rng(0)
    q = rng.uniform(0.3, 0.9, (4, 5))
    c = rng.uniform(0.5, 1.5, (4, 5))
    prior = ModelPrior(random_state=0).fit(rng.uniform(0.3, 0.9, (10, 5)))
    ep = run_episode("hybrid", q, c, prior, budget=c.sum() / 2, n_workers=2, record_picks=True, arms="untried")
    assert len(ep.picks) == len(set(ep.picks)) == 20
    assert ep.times[-1] <= c.sum() / 2 + 1e-9 and ep.times[-1] >= c.sum() / 2 / 2 * 0.9


def test_arrivals_only_count_present_users():
    ep = run_episode("oracle_best", Q, C, prior2(), budget=20.0, arrivals=np.array([0.0, 10.0]))
    # only user 0 is present until t=10: loss 0.9 -> 0 at t=2; user 1 joins at 10 (loss 0.4 avg)
    np.testing.assert_allclose(ep.losses[:4], [0.9, 0.0, 0.4, 0.0])
    np.testing.assert_allclose(ep.times[:4], [0.0, 2.0, 10.0, 14.0])


def test_simulate_document_shape_and_determinism():
    rng = np.random.default_rng(1)
    q = np.clip(rng.uniform(0.5, 0.9, (8, 1)) + 0.1 * rng.standard_normal((8, 6)), 0, 1)
    c = rng.uniform(0.1, 1.0, (8, 6))
    kw = dict(policies=["hybrid", "round_robin", "oracle"], reps=2, n_test=3, seed=5, grid_points=11)
    a = simulate(q, c, **kw)
    b = simulate(q, c, **kw)
    assert a == b
    assert set(a) >= {"policies", "grid", "curves"}
    assert len(a["grid"]) == 11 and a["grid"][0] == 0.0 and a["grid"][-1] == 1.0
    for name in kw["policies"]:
        p = a["policies"][name]
        assert set(p["time_to_loss"]) == {f"{lv:g}" for lv in LEVELS}
        assert set(p["worst_time_to_loss"]) == set(p["time_to_loss"])
        assert isinstance(p["auc"], float)
        curve = a["curves"][name]
        assert len(curve) == 11 and all(x >= y - 1e-12 for x, y in zip(curve, curve[1:]))
    assert simulate(q, c, **{**kw, "seed": 6}) != a


def test_simulate_rejects_bad_matrices():
    q = np.full((5, 3), 0.5)
    with pytest.raises(ValueError, match="at least test users"):
        simulate(q, n_test=5, reps=1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        simulate(q * 3, n_test=2, reps=1)
    with pytest.raises(ValueError, match="shape"):
        simulate(q, np.ones((5, 2)), n_test=2, reps=1)
    with pytest.raises(ValueError, match="policy: found 'nope', expected one of default, .*oracle_best"):
        simulate(q, n_test=2, reps=1, policies=["nope"])


def test_mean_curve_crossing_by_hand():
    e1 = run_episode("oracle_best", Q, C, prior2(), budget=8.0)  # 0.85 -> 0.4 at 2/8 -> 0 at 6/8
    e2 = run_episode("oracle_best", Q, C, prior2(), budget=16.0)  # same times: 2/16 and 6/16 of its budget
    s = summarise([e1, e2], np.linspace(0, 1, 5), levels=(0.5, 0.3, 0.01))
    # mean curve: 0.85 until 1/8, 0.625 until 1/4, 0.4 until 3/8, 0.2 until 3/4, then 0; mean budget 12
    assert s["time_to_loss_mean_curve"] == {"0.5": pytest.approx(0.25 * 12), "0.3": pytest.approx(0.375 * 12),
                                            "0.01": pytest.approx(0.75 * 12)}


def test_a_retrained_model_costs_again_and_leaves_the_loss_unchanged():
    """With arms="all" (the paper's GP-UCB) a pick of a model already trained is re-run: the clock
    advances by its cost and it returns the same quality, so the loss does not move."""
    rng = np.random.default_rng(3)
    q = rng.uniform(0.3, 0.9, (2, 3))
    c = rng.uniform(0.5, 1.5, (2, 3))
    prior = ModelPrior.from_arrays([0.6] * 3, 0.01 * np.eye(3))
    ep = run_episode("round_robin", q, c, prior, budget=3 * c.sum(), record_picks=True)
    assert ep.n_runs > 6 and len(set(ep.picks)) <= 6
    seen = set()
    for k, (i, j) in enumerate(ep.picks[: len(ep.times) - 1]):
        assert ep.times[k + 1] - ep.times[k] == pytest.approx(c[i, j])
        if (i, j) in seen:
            assert ep.losses[k + 1] == ep.losses[k]
        seen.add((i, j))
    old = run_episode("round_robin", q, c, prior, budget=3 * c.sum(), record_picks=True, arms="untried")
    assert old.n_runs == 6 and len(set(old.picks)) == 6
