"""User pickers against hand-computed cases (ease.ml §5: FCFS example, Algorithm 2, §5.4)."""

import math

import numpy as np
import pytest

from ease_jupyter.selection import (Greedy, Hybrid, ModelPrior, PickState, RandomPicker, RoundRobin, Selector,
                                    UserPicker)

from .helpers import pairs


def state(sigma_bar, gap, n_obs=None, eligible=None, busy=None, weight=None, total_best=0.0, seed=0):
    n = len(sigma_bar)
    return PickState(eligible=np.ones(n, bool) if eligible is None else np.asarray(eligible),
                     n_obs=np.ones(n, int) if n_obs is None else np.asarray(n_obs),
                     busy=np.zeros(n, bool) if busy is None else np.asarray(busy),
                     sigma_bar=np.asarray(sigma_bar, float), gap=np.asarray(gap, float),
                     weight=np.ones(n) if weight is None else np.asarray(weight, float),
                     total_best=total_best, rng=np.random.default_rng(seed))


class FCFS(UserPicker):
    """First come, first served: the earliest user with anything left."""

    def pick_user(self, st):
        idx = np.flatnonzero(st.eligible)
        return int(idx[0]) if idx.size else None


def _cumulative_regret(picker_cls, rounds=2):
    # pvldb §5.1: U1 = {M1: 90, M2: 95, M3: 100}, U2 = {M1: 70, M2: 95, M3: 100}
    q = {"U1": [90, 95, 100], "U2": [70, 95, 100]}
    prior = ModelPrior.from_arrays([0.5] * 3, 0.01 * np.eye(3))
    sel = Selector(["M1", "M2", "M3"], prior=prior, policy="fixed_order", model_order=["M1", "M2", "M3"])
    if picker_cls is not None:
        sel.picker = picker_cls()
    for u in q:
        sel.add_user(u)
    best = {"U1": 0, "U2": 0}
    total = 0
    for _ in range(rounds):
        (u, m), = pairs(sel.next_picks(1))
        y = q[u][int(m[1]) - 1]
        sel.observe(u, m, y / 100)
        best[u] = max(best[u], y)
        total += sum(100 - b for b in best.values())
    return total


def test_fcfs_example_of_the_paper():
    assert _cumulative_regret(FCFS) == 215  # U1 twice: (10 + 100) + (5 + 100)
    assert _cumulative_regret(None) == 150  # round robin: (10 + 100) + (10 + 30)


def test_round_robin_cycles_and_skips_ineligible_users():
    rr = RoundRobin()
    st = state([0] * 3, [0] * 3)
    order = []
    for _ in range(6):
        s = rr.pick_user(st)
        rr.on_pick(st, s)
        order.append(s)
    assert order == [0, 1, 2, 0, 1, 2]
    st.eligible[1] = False
    order = []
    for _ in range(4):
        s = rr.pick_user(st)
        rr.on_pick(st, s)
        order.append(s)
    assert order == [0, 2, 0, 2]


def test_weighted_round_robin_serves_in_proportion():
    rr = RoundRobin(weighted=True)
    st = state([0, 0], [0, 0], weight=[2.0, 1.0])
    picks = []
    for _ in range(9):
        s = rr.pick_user(st)
        rr.on_pick(st, s)
        picks.append(s)
    assert picks.count(0) == 6 and picks.count(1) == 3


def test_random_picker_is_deterministic_under_a_seed():
    a = [RandomPicker().pick_user(state([0] * 5, [0] * 5, seed=7)) for _ in range(3)]
    st1, st2 = state([0] * 5, [0] * 5, seed=7), state([0] * 5, [0] * 5, seed=7)
    p = RandomPicker()
    assert [p.pick_user(st1) for _ in range(20)] == [p.pick_user(st2) for _ in range(20)]
    assert len(set(a)) == 1


def test_greedy_candidate_set_and_pick_rule_by_hand():
    # mean sigma_bar = (0.1 + 0.3 + 0.2 + 0.5) / 4 = 0.275 -> V = {1, 3}
    st = state(sigma_bar=[0.1, 0.3, 0.2, 0.5], gap=[0.9, 0.2, 0.8, 0.4])
    g = Greedy()
    np.testing.assert_array_equal(g.candidate_set(st), [False, True, False, True])
    # user 0 has the largest gap but is not a candidate; among V the rule takes user 3
    assert g.pick_user(st) == 3
    assert g.last_candidates_ == frozenset({1, 3})


def test_greedy_serves_every_user_once_first():
    st = state(sigma_bar=[0.9, 0.1, 0.1], gap=[0.9, 0.1, 0.1], n_obs=[3, 0, 0], busy=[False, True, False])
    assert Greedy().pick_user(st) == 2  # user 1 is already being served
    st.n_obs[2] = 1
    assert Greedy().pick_user(st) == 0


def test_hybrid_switches_after_s_frozen_steps():
    h = Hybrid(s=3)
    st = state(sigma_bar=[0.5, 0.1, 0.4], gap=[0.3, 0.9, 0.2], total_best=1.0)
    picks = [h.pick_user(st) for _ in range(3)]
    assert picks == [0, 0, 0] and h.mode == "greedy" and h.stall == 2
    # a drop of the regret (total_best rises) resets the count
    st.total_best = 1.5
    assert h.pick_user(st) == 0 and h.stall == 0
    for _ in range(2):
        assert h.pick_user(st) == 0
    assert h.mode == "greedy" and h.stall == 2
    s = h.pick_user(st)  # third frozen step: switch to round robin
    assert h.mode == "round_robin" and h.switched_at_ == 7
    order = [s]
    h.on_pick(st, s)
    for _ in range(5):
        s = h.pick_user(st)
        h.on_pick(st, s)
        order.append(s)
    assert order == [0, 1, 2, 0, 1, 2]


def test_hybrid_counts_only_when_the_candidate_set_is_unchanged():
    h = Hybrid(s=2)
    st = state(sigma_bar=[0.5, 0.1, 0.4], gap=[0.3, 0.9, 0.2])
    h.pick_user(st)
    h.pick_user(st)
    assert h.stall == 1
    st.sigma_bar[:] = [0.1, 0.5, 0.1]  # V changes to {1}
    h.pick_user(st)
    assert h.stall == 0 and h.mode == "greedy"


def test_hybrid_rearms_when_users_change():
    h = Hybrid(s=1)
    st = state(sigma_bar=[0.5, 0.1], gap=[0.3, 0.9])
    h.pick_user(st)
    h.pick_user(st)
    assert h.mode == "round_robin"
    h.on_membership_change()
    assert h.mode == "greedy"
    plain = Hybrid(s=1, rearm_on_change=False)
    plain.pick_user(st)
    plain.pick_user(st)
    plain.on_membership_change()
    assert plain.mode == "round_robin"


@pytest.mark.parametrize("arms", ["all", "untried"])
def test_greedy_line6_recurrence_through_the_selector(arms):
    """sigma_bar = min(B_{t-1}(a), min previous y + sigma_bar) - y (Algorithm 2, line 6)."""
    prior = ModelPrior.from_arrays([0.5, 0.5], 0.01 * np.eye(2), alpha=1e-8)
    sel = Selector(["m0", "m1"], prior=prior, policy="greedy", cost_aware=False, arms=arms)
    sel.add_user("a")
    sel.add_user("b")
    # the default schedule is Algorithm 2 line 9: beta = log(K t^2 / delta); K=2, t=1, delta=0.1
    beta1 = math.log(2 * 1 / 0.1)
    B1 = 0.5 + math.sqrt(beta1) * 0.1
    assert pairs(sel.next_picks(1)) == [("a", "m0")]  # lines 1-4: everyone once, in order
    sel.observe("a", "m0", 0.3)
    st = sel.stats("a")
    assert st["e_bar"] == pytest.approx(B1) and st["sigma_bar"] == pytest.approx(B1 - 0.3)
    assert pairs(sel.next_picks(1)) == [("b", "m0")]
    sel.observe("b", "m0", 0.8)
    # a: m1 untouched (mean 0.5, std 0.1), t=2; b: best 0.8 -> a's gap is larger and both are in V?
    sa, sb = sel.stats("a"), sel.stats("b")
    beta2 = math.log(2 * 4 / 0.1)
    assert sa["gap"] == pytest.approx(0.5 + math.sqrt(beta2) * 0.1 - 0.3, abs=1e-6)
    if arms == "untried":
        assert sb["gap"] == pytest.approx(0.5 + math.sqrt(beta2) * 0.1 - 0.8, abs=1e-6)
    else:  # over all arms b's highest UCB is her trained m0: posterior mean 0.8, std ~ sqrt(alpha)
        sd = math.sqrt(0.01 * 1e-8 / (0.01 + 1e-8))
        mu = 0.5 + 0.3 * 0.01 / (0.01 + 1e-8)
        assert sb["gap"] == pytest.approx(mu + math.sqrt(beta2) * sd - 0.8, rel=1e-6)
    # sigma_bar: a = B1 - 0.3 > b = B1 - 0.8, so V = {a}
    assert pairs(sel.next_picks(1)) == [("a", "m1")]
    B2 = 0.5 + math.sqrt(beta2) * 0.1
    sel.observe("a", "m1", 0.4)
    st = sel.stats("a")
    assert st["e_bar"] == pytest.approx(min(B1, B2)) and st["sigma_bar"] == pytest.approx(min(B1, B2) - 0.4)


def test_ei_greedy_serves_unserved_users_then_the_largest_ei_per_cost():
    from ease_jupyter.selection import EIGreedy

    st = state(sigma_bar=[0, 0, 0], gap=[0.1, 0.5, 0.3], n_obs=[1, 1, 0])
    assert EIGreedy().pick_user(st) == 2
    st.n_obs[2] = 1
    assert EIGreedy().pick_user(st) == 1


def test_default_beta_is_algorithm2_line9_not_the_theorem_schedule():
    """pvldb Algorithm 2 line 9 (and Algorithm 1 line 3): beta^j_{t_j} = log(K^j t_j^2 / delta).
    The theorem schedule 2 log(pi^2 n K t^2 / 6 delta) is the proof's, not the algorithm's."""
    prior = ModelPrior.from_arrays([0.5] * 5, 0.01 * np.eye(5))
    sel = Selector([f"m{k}" for k in range(5)], prior=prior, policy="hybrid")
    for u in "abc":
        sel.add_user(u)
    (u, m), = pairs(sel.next_picks(1))
    sel.observe(u, m, 0.5)
    # t = n_obs + 1 = 2, K = 5
    assert sel.stats(u)["beta"] == pytest.approx(math.log(5 * 4 / 0.1))
    thm = Selector([f"m{k}" for k in range(5)], prior=prior, policy="hybrid", beta_schedule="theorem")
    thm.add_user("a")
    assert thm.stats("a")["beta"] == pytest.approx(2 * math.log(math.pi ** 2 * 1 * 5 * 1 / 0.6))


def _serve(policy, rounds):
    """Three users, four independent models. After everyone is served once,
    users a and b found 0.95 while c found 0.2: c has clearly more potential."""
    prior = ModelPrior.from_arrays([0.5] * 4, 0.04 * np.eye(4), alpha=1e-6)
    q = {"a": [0.95, 0.9, 0.9, 0.9], "b": [0.95, 0.9, 0.9, 0.9], "c": [0.2, 0.3, 0.4, 0.9]}
    sel = Selector(["m0", "m1", "m2", "m3"], prior=prior, policy=policy, cost_aware=False)
    for u in q:
        sel.add_user(u)
    users = []
    for _ in range(rounds):
        (u, m), = pairs(sel.next_picks(1))
        sel.observe(u, m, q[u][int(m[1])])
        users.append(u)
    return users


def test_greedy_serves_the_user_with_more_potential_round_robin_does_not():
    """Algorithm 2: after lines 1-4 (everyone once), V_t = {i : sigma_bar_i >= mean}
    holds only c (sigma_bar = B - y is largest for the lowest y), and line 8's
    rule (largest max-UCB minus best) agrees. GREEDY keeps serving c;
    ROUNDROBIN cycles a, b, c."""
    g = _serve("greedy", 6)
    rr = _serve("round_robin", 6)
    assert g[:3] == ["a", "b", "c"] and rr[:3] == ["a", "b", "c"]
    assert rr[3:] == ["a", "b", "c"]
    assert g[3:] == ["c", "c", "c"]
    assert _serve("hybrid", 6) == g  # HYBRID is GREEDY until its freeze test fires


def _converged_example(arms):
    """Three users, three independent models (prior mean 0.5, std 0.1, alpha 1e-8), cost-oblivious.

    Each user has trained m0. With K = 3 and delta = 0.1:
    t = 1: beta = log(30), B = 0.5 + sqrt(log 30) * 0.1 = 0.68439 (the UCB of m0 when it was played);
    t = 2: beta = log(120), UCB of an untried model = 0.5 + sqrt(log 120) * 0.1 = 0.71879.
    A: y = 0.75 -> sigma_bar = -0.06561; her best (m0) is above every untried UCB.
    B: y = 0.55 -> sigma_bar = +0.13439.   C: y = 1.00 -> sigma_bar = -0.31561.
    mean sigma_bar = -0.08228, so V_t = {A, B} (Algorithm 2 line 7).
    """
    prior = ModelPrior.from_arrays([0.5] * 3, 0.01 * np.eye(3), alpha=1e-8)
    sel = Selector(["m0", "m1", "m2"], prior=prior, policy="greedy", cost_aware=False, arms=arms)
    for u, y in (("A", 0.75), ("B", 0.55), ("C", 1.0)):
        sel.add_user(u)
        sel.observe(u, "m0", y)
    return sel


def test_greedy_serves_the_user_who_has_not_converged_hand_computed():
    """pvldb Alg. 2 line 8 over all arms: A's highest UCB is her trained best model, so her gap is
    ~0 (she has converged) and GREEDY serves B, who gets her best untried model."""
    sel = _converged_example("all")
    B1 = 0.5 + math.sqrt(math.log(30)) * 0.1
    ucb_untried = 0.5 + math.sqrt(math.log(120)) * 0.1
    sd = math.sqrt(0.01 * 1e-8 / (0.01 + 1e-8))  # posterior std of a trained model
    sa, sb, sc = sel.stats("A"), sel.stats("B"), sel.stats("C")
    assert sa["sigma_bar"] == pytest.approx(B1 - 0.75) and sb["sigma_bar"] == pytest.approx(B1 - 0.55)
    assert sc["sigma_bar"] == pytest.approx(B1 - 1.0)
    mean = (3 * B1 - 2.3) / 3
    assert sa["sigma_bar"] >= mean and sb["sigma_bar"] >= mean and sc["sigma_bar"] < mean  # V_t = {A, B}
    assert ucb_untried < 0.75
    mu = 0.5 + 0.25 * 0.01 / (0.01 + 1e-8)  # posterior mean of A's m0
    assert sa["gap"] == pytest.approx(mu + math.sqrt(math.log(120)) * sd - 0.75, rel=1e-6)  # ~2e-4: converged
    assert sb["gap"] == pytest.approx(ucb_untried - 0.55, abs=1e-6)
    assert pairs(sel.next_picks(1)) == [("B", "m1")]
    # the previous behaviour ranks A by her untried models only: a negative gap, same decision here
    old = _converged_example("untried")
    assert old.stats("A")["gap"] == pytest.approx(ucb_untried - 0.75, abs=1e-6)
    assert pairs(old.next_picks(1)) == [("B", "m1")]


def test_a_converged_user_re_picks_her_best_model():
    """Alg. 1 line 4 takes the argmax over all K arms: when it is the trained best model, that
    model is trained again; her empirical gap (Alg. 2 line 6) then falls to ~0."""
    def only_a(arms):
        prior = ModelPrior.from_arrays([0.5] * 3, 0.01 * np.eye(3), alpha=1e-8)
        sel = Selector(["m0", "m1", "m2"], prior=prior, policy="greedy", cost_aware=False, arms=arms)
        sel.add_user("A")
        sel.observe("A", "m0", 0.75)
        return sel

    sel = only_a("all")
    assert pairs(sel.next_picks(1)) == [("A", "m0")]  # 0.75 + ~2e-4 > 0.71879, the untried models' UCB
    sel.observe("A", "m0", 0.75)
    st = sel.stats("A")
    # e = min(0.68439, B = 0.75 + ~2e-4) stays 0.68439 here: sigma_bar = e - y is unchanged by a re-run
    assert st["sigma_bar"] == pytest.approx(0.5 + math.sqrt(math.log(30)) * 0.1 - 0.75)
    assert st["gap"] < 1e-3
    assert pairs(only_a("untried").next_picks(1)) == [("A", "m1")]


def test_arms_is_validated_and_round_trips():
    prior = ModelPrior.from_arrays([0.5] * 2, 0.01 * np.eye(2))
    with pytest.raises(ValueError, match="arms"):
        Selector(["a", "b"], prior=prior, arms="some")
    sel = Selector(["a", "b"], prior=prior, arms="untried")
    assert Selector.from_dict(sel.to_dict()).arms == "untried"
    assert Selector(["a", "b"], prior=prior).arms == "all"  # the paper's Algorithm 1/2 is the default
    old = Selector(["a", "b"], prior=prior).to_dict()
    del old["config"]["arms"]  # a state saved before the option existed keeps its behaviour
    assert Selector.from_dict(old).arms == "untried"


def test_regret_greedy_serves_the_user_with_the_largest_expected_remaining_loss():
    """Beyond the paper (a measured negative result, see docs/selection.md): after everyone is
    served once, the user with the largest Monte Carlo E[max_k f(k) - best] goes next."""
    from ease_jupyter.selection import ModelPrior, Selector

    prior = ModelPrior.from_arrays([0.5, 0.5, 0.5], np.diag([0.04, 0.04, 0.0001]))
    sel = Selector(["a", "b", "c"], prior=prior, policy="regret_ei", random_state=0)
    sel.add_user("done", costs=[1.0, 1.0, 1.0])
    sel.add_user("open", costs=[1.0, 1.0, 1.0])
    first = pairs(sel.next_picks(2))
    assert sorted(u for u, _ in first) == ["done", "open"]
    for u, m in first:
        sel.observe(u, m, 0.9 if u == "done" else 0.3)
    # "open" is at 0.3 with two uncertain models (std 0.2 around 0.5) left; "done" at 0.9 has little to gain
    (u, _), = pairs(sel.next_picks(1))
    assert u == "open"
    g = sel._users["open"].gp
    cov = g.posterior_cov()
    np.testing.assert_allclose(np.diag(cov), g.var_, atol=1e-12)
