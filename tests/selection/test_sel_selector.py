"""The Selector facade: ask/tell, parallel picks, users coming and going, weights, state."""

import json
import math

import numpy as np
import pytest

from ease_jupyter.selection import ModelPrior, Selector

from .helpers import pairs


def make(policy="hybrid", n_users=3, k=6, seed=0, **kw):
    rng = np.random.default_rng(seed)
    hist = np.clip(rng.uniform(0.5, 0.9, (15, 1)) + 0.1 * rng.standard_normal((15, k)), 0, 1)
    sel = Selector([f"m{j}" for j in range(k)], history=hist, policy=policy, random_state=seed, **kw)
    for i in range(n_users):
        sel.add_user(f"u{i}", costs=list(rng.uniform(0.5, 2.0, k)))
    return sel


def drive(sel, truth, steps, workers=1):
    seq = []
    for _ in range(steps):
        picks = pairs(sel.next_picks(workers))
        if not picks:
            break
        for u, m in picks:
            sel.observe(u, m, truth[(u, m)])
        seq.extend(picks)
    return seq


def truth_for(sel, seed=1):
    rng = np.random.default_rng(seed)
    return {(u, m): float(rng.uniform(0.3, 0.95)) for u in sel.users for m in sel.model_names}


@pytest.mark.parametrize("policy", ["hybrid", "greedy", "round_robin", "random", "spearmint", "most_cited",
                                    "most_recent", "fixed_order"])
def test_every_pair_is_tried_once_then_nothing_is_left(policy):
    sel = make(policy, arms="untried")
    seq = drive(sel, truth_for(sel), 100)
    assert len(seq) == len(set(seq)) == 3 * 6
    assert sel.next_picks(4) == []


@pytest.mark.parametrize("policy", ["hybrid", "greedy", "round_robin", "random"])
def test_paper_gp_ucb_retrains_and_never_runs_dry(policy):
    """arms="all" (the default; pvldb Alg. 1 line 4, Alg. 2 line 10): argmax over all K arms, so
    once a user's best UCB is a trained model she is given it again; there is always a pick."""
    sel = make(policy)
    seq = drive(sel, truth_for(sel), 60)
    assert len(seq) == 60 and len(set(seq)) < 60
    assert len(sel.next_picks(3)) == 3


def test_parallel_picks_are_distinct_and_spread_over_users():
    sel = make("hybrid", n_users=4)
    picks = pairs(sel.next_picks(4))
    assert len(set(picks)) == 4
    assert {u for u, _ in picks} == {"u0", "u1", "u2", "u3"}
    assert sorted(sel.pending()) == sorted(picks)
    again = pairs(sel.next_picks(4))
    assert not set(again) & set(picks)


def test_hallucination_lowers_the_variance_of_a_busy_user():
    sel = make("greedy", n_users=1)
    (u, m), = pairs(sel.next_picks(1))
    before = sel.stats(u)["gap"]
    sel2 = make("greedy", n_users=1, hallucinate=False)
    sel2.next_picks(1)
    assert before < sel2.stats(u)["gap"]


def test_cancel_makes_a_pair_available_again():
    sel = make("round_robin", n_users=1)
    (u, m), = pairs(sel.next_picks(1))
    sel.cancel(u, m)
    assert sel.pending() == []
    assert (u, m) in pairs(sel.next_picks(1))
    with pytest.raises(KeyError):
        sel.cancel(u, "m5" if m != "m5" else "m4")


def test_bad_input_names_the_field():
    sel = make()
    with pytest.raises(KeyError, match="unknown user"):
        sel.observe("nobody", "m0", 0.5)
    with pytest.raises(KeyError, match="not a candidate"):
        sel.observe("u0", "m99", 0.5)
    with pytest.raises(ValueError, match="quality"):
        sel.observe("u0", "m0", float("nan"))
    with pytest.raises(ValueError, match="already registered"):
        sel.add_user("u0")
    with pytest.raises(ValueError, match="costs"):
        sel.add_user("x", costs=[1, 1, 1, 0, 1, 1])
    with pytest.raises(KeyError, match="unknown model"):
        sel.add_user("y", models=["m0", "zz"])
    with pytest.raises(ValueError, match="weight"):
        sel.add_user("z", weight=0)
    with pytest.raises(ValueError, match="policy"):
        Selector(["a"], policy="nope")
    with pytest.raises(ValueError, match="oracle"):
        Selector(["a"], policy="oracle")
    with pytest.raises(ValueError, match="n_workers"):
        sel.next_picks(-1)


def test_users_join_and_leave():
    sel = make("hybrid", n_users=2)
    truth = truth_for(sel)
    drive(sel, truth, 4)
    sel.add_user("late", models=["m1", "m2"], costs={"m1": 1.0})
    picks = pairs(sel.next_picks(1))
    assert picks[0][0] == "late"  # a newcomer is served first (Algorithm 2, lines 1-4)
    dropped = sel.remove_user("late")
    assert dropped == picks
    assert "late" not in sel.users
    assert all(p.user != "late" for p in sel.next_picks(3))


def test_weights_shift_service():
    sel = make("round_robin", n_users=2, k=12)
    sel.set_weight("u0", 3.0)
    seq = drive(sel, truth_for(sel), 8)
    served = [u for u, _ in seq]
    assert served.count("u0") == 6 and served.count("u1") == 2


def test_deterministic_under_a_seed():
    a, b = make("random", seed=4), make("random", seed=4)
    ta = truth_for(a)
    assert drive(a, ta, 12) == drive(b, ta, 12)


def test_state_round_trips_through_json():
    sel = make("hybrid", n_users=3)
    truth = truth_for(sel)
    drive(sel, truth, 5)
    sel.next_picks(2)  # leave two pending
    sel.remove_user("u1")
    d = json.loads(json.dumps(sel.to_dict()))
    back = Selector.from_dict(d)
    assert back.users == sel.users and sorted(back.pending()) == sorted(sel.pending())
    for u in sel.users:
        np.testing.assert_allclose(back.posterior(u)["m0"], sel.posterior(u)["m0"], atol=1e-12)
        assert back.best(u) == sel.best(u)
    for u, m in list(sel.pending()):
        sel.observe(u, m, truth[(u, m)])
        back.observe(u, m, truth[(u, m)])
    assert drive(sel, truth, 6) == drive(back, truth, 6)


def test_no_history_uses_the_descriptor_prior_and_refits():
    sel = Selector(["a", "b", "c", "d"], descriptors=np.array([[0.0], [0.1], [2.0], [2.1]]), random_state=0)
    assert sel.prior.source_ == "descriptors" and sel.refit_every_doubling
    sel.add_user("x")
    truth = {("x", "a"): 0.9, ("x", "b"): 0.85, ("x", "c"): 0.4, ("x", "d"): 0.45}
    seq = drive(sel, truth, 4)
    assert len(seq) == 4 and sel.best("x") == ("a", 0.9)


def test_cost_awareness_prefers_cheap_models_at_equal_belief():
    prior = ModelPrior.from_arrays([0.5] * 3, 0.01 * np.eye(3))
    sel = Selector(["a", "b", "c"], prior=prior)
    sel.add_user("x", costs={"a": 10.0, "b": 1.0, "c": 5.0})
    assert pairs(sel.next_picks(1)) == [("x", "b")]
    obl = Selector(["a", "b", "c"], prior=prior, cost_aware=False)
    obl.add_user("x", costs={"a": 10.0, "b": 1.0, "c": 5.0})
    assert pairs(obl.next_picks(1)) == [("x", "a")]  # ties broken by catalogue order


def test_last_decision_explains_initial_greedy_and_round_robin_phases():
    hist = np.array([[0.9, 0.6, 0.7], [0.8, 0.5, 0.7], [0.7, 0.4, 0.6], [0.95, 0.5, 0.8]])
    sel = Selector(["a", "b", "c"], history=hist, policy="hybrid", s=1, random_state=0)
    sel.add_user("alice")
    sel.add_user("bob")
    assert sel.last_decision is None
    (pick,) = sel.next_picks(1)
    d = sel.last_decision
    assert d == pick.explain()
    assert (d["user"], d["model"]) == (pick.user, pick.model) and d["phase"] == "initial" and d["candidates"] is None
    sel.observe(pick.user, pick.model, quality=0.8)
    (pick,) = sel.next_picks(1)
    sel.observe(pick.user, pick.model, quality=0.7)
    (pick,) = sel.next_picks(1)
    d = sel.last_decision
    assert d == pick.explain() and pick.phase == "greedy"
    assert d["phase"] == "greedy"
    # the served user is the candidate of V_t with the largest gap (Alg. 2 line 8)
    assert d["user"] in d["candidates"]
    assert d["candidates"][d["user"]] == max(d["candidates"].values())
    stats = {u: sel.stats(u)["sigma_bar"] for u in ("alice", "bob")}
    mean = np.mean(list(stats.values()))
    assert set(d["candidates"]) == {u for u, sb in stats.items() if sb >= mean - 1e-12}

    rr = Selector(["a", "b", "c"], history=hist, policy="round_robin", random_state=0)
    rr.add_user("alice")
    rr.next_picks(1)
    assert rr.last_decision["phase"] == "round_robin" and rr.last_decision["candidates"] is None


def test_each_pick_of_one_call_carries_its_own_explanation():
    """next_picks(n) makes its picks one after another (each pending before the
    next): every pick explains itself as next_picks(1) asked n times would,
    so a caller that launches several picks keeps each one's reason."""
    hist = np.random.default_rng(1).uniform(size=(20, 6))

    def fresh():
        sel = Selector([f"m{j}" for j in range(6)], history=hist, policy="hybrid", random_state=3)
        for u in range(4):
            sel.add_user(f"u{u}", costs=list(np.random.default_rng(u).uniform(0.5, 3.0, 6)))
        return sel

    batch, single = fresh(), fresh()
    for _ in range(5):
        picks = batch.next_picks(3)
        one_by_one = []
        for _ in range(3):
            (pick,) = single.next_picks(1)
            one_by_one.append((pick, single.last_decision))
        assert picks == [p for p, _ in one_by_one]
        assert [p.explain() for p in picks] == [d for _, d in one_by_one]
        assert batch.last_decision == picks[-1].explain()
        assert len({p.decision for p in picks}) == 3  # not the last pick's reason three times
        for sel, done in ((batch, picks), (single, [p for p, _ in one_by_one])):
            for p in done:
                sel.observe(p.user, p.model, 0.5 + 0.1 * int(p.model[1:]) / 6)
    assert any(p.phase == "greedy" and p.candidates for p in picks)
    with pytest.raises(AttributeError):  # frozen: a later pick cannot rewrite an earlier one's reason
        picks[0].phase = "round_robin"


def _cost_prior():
    return ModelPrior.from_arrays([0.5, 0.55, 0.5], 0.01 * np.eye(3))


def test_cost_units_do_not_change_the_picks():
    """pvldb §4.1 normalises execution time and Theorems 1-3 put c* = max c_ik in beta_t, so
    sqrt(beta_t / c_k) is unit-free: the same costs in ms or in hours give the same picks."""
    rng = np.random.default_rng(3)
    costs = {u: rng.uniform(0.1, 2.0, 3) for u in ("x", "y")}
    truth = {(u, m): float(rng.uniform(0.3, 0.9)) for u in costs for m in "abc"}
    seqs = []
    for unit in (1.0, 1e3, 1e-4):
        sel = Selector(list("abc"), prior=_cost_prior(), policy="hybrid")
        for u, c in costs.items():
            sel.add_user(u, costs=list(c * unit))
        seqs.append(drive(sel, truth, 5))
    assert seqs[0] == seqs[1] == seqs[2]


def test_cost_normalisation_global_is_the_papers_and_user_is_per_user():
    """``c*`` is the largest cost over all users (Theorems 2-3: c* = max_{i,k} c_ik) by default;
    ``cost_norm="user"`` (beyond the paper) uses each user's own largest cost."""
    def gap(norm):
        sel = Selector(list("abc"), prior=_cost_prior(), cost_norm=norm)
        sel.add_user("fast", costs=[1.0, 2.0, 4.0])
        sel.add_user("slow", costs=[10.0, 20.0, 40.0])
        return sel.stats("fast")["gap"], sel.stats("slow")["gap"], sel.stats("fast")["beta"]

    f, s, beta = gap("global")  # c* = 40 for both users
    assert f == pytest.approx(0.5 + math.sqrt(beta * 40.0 / 1.0) * 0.1)
    assert s == pytest.approx(0.5 + math.sqrt(beta * 40.0 / 10.0) * 0.1)
    f, s, beta = gap("user")  # c* = 4 for "fast", 40 for "slow": the same scale for both
    assert f == pytest.approx(0.5 + math.sqrt(beta * 4.0 / 1.0) * 0.1) == pytest.approx(s)
    with pytest.raises(ValueError, match="cost_norm"):
        Selector(list("abc"), prior=_cost_prior(), cost_norm="median")
    sel = Selector(list("abc"), prior=_cost_prior(), cost_norm="user")
    assert Selector.from_dict(json.loads(json.dumps(sel.to_dict()))).cost_norm == "user"
    old = sel.to_dict()
    del old["config"]["cost_norm"]  # states saved before the option existed: the paper's
    assert Selector.from_dict(old).cost_norm == "global"


def test_hybrid_ei_is_hybrids_user_picker_with_ei_per_cost_models():
    """Beyond the paper: HYBRID's users (GREEDY's candidate set and UCB gap, then round robin),
    with SPEARMINT*'s model chooser (EI per unit cost among untried models)."""
    from ease_jupyter.selection.ucb import expected_improvement

    hist = np.array([[0.9, 0.6, 0.7, 0.5], [0.8, 0.5, 0.7, 0.6], [0.7, 0.4, 0.6, 0.5], [0.95, 0.5, 0.8, 0.4],
                     [0.85, 0.55, 0.75, 0.45]])
    costs = {"u0": [4.0, 1.0, 2.0, 0.5], "u1": [1.0, 1.0, 3.0, 2.0], "u2": [2.0, 2.0, 2.0, 2.0]}
    sel = Selector(list("abcd"), history=hist, policy="hybrid_ei", random_state=0)
    for u, c in costs.items():
        sel.add_user(u, costs=c)
    assert sel.mode == "greedy" and sel.picker.name == "hybrid"
    rng = np.random.default_rng(0)
    truth = {(u, m): float(rng.uniform(0.4, 0.9)) for u in costs for m in "abcd"}
    tried = {u: set() for u in costs}
    phases = []
    for _ in range(7):
        post = {u: sel.posterior(u) for u in costs}
        st = {u: sel.stats(u) for u in costs}
        picks = pairs(sel.next_picks(1))
        if not picks:
            break
        (u, m), = picks
        d = sel.last_decision
        phases.append(d["phase"])
        if d["phase"] == "greedy":  # Algorithm 2 line 8: the largest "highest UCB - best so far" in V_t
            assert d["candidates"][u] == max(d["candidates"].values())
            for v, g in d["candidates"].items():
                assert g == pytest.approx(st[v]["gap"])
        mean = np.array([post[u][k][0] for k in "abcd"])
        std = np.array([post[u][k][1] for k in "abcd"])
        best = st[u]["best"][1] if st[u]["best"] else 0.0
        score = expected_improvement(mean, std, best) / np.asarray(costs[u])
        score[["abcd".index(k) for k in tried[u]]] = -np.inf
        assert m not in tried[u] and score["abcd".index(m)] == pytest.approx(score.max())
        tried[u].add(m)
        sel.observe(u, m, truth[(u, m)])
    assert phases[:3] == ["initial"] * 3 and "greedy" in phases


def test_set_costs_replaces_the_named_estimates_and_steers_cost_aware_picks():
    names = [f"m{j}" for j in range(6)]
    sel = Selector(names, history=np.full((10, 6), 0.7), policy="greedy", random_state=0)
    sel.add_user("u", costs=[1.0] * 6)
    sel.set_costs("u", {"m4": 0.01, "m5": 3.0})
    assert sel.to_dict()["users"][0]["cost"] == [1.0, 1.0, 1.0, 1.0, 0.01, 3.0]
    assert pairs(sel.next_picks(1)) == [("u", "m4")]  # equal priors: the cheapest arm's bonus is largest
    with pytest.raises(KeyError, match="unknown models"):
        sel.set_costs("u", {"nope": 1.0})
    with pytest.raises(ValueError, match="finite and > 0"):
        sel.set_costs("u", {"m1": 0.0})
    with pytest.raises(KeyError, match="unknown user"):
        sel.set_costs("v", {"m1": 1.0})


@pytest.mark.parametrize("seed", range(4))
def test_c_star_follows_arrivals_departures_and_new_costs(seed):
    """c* (the largest cost of any active user) is kept incrementally; after any
    sequence of arrivals, departures, reprices and own models, every user's gain
    per second (which scales with c*/c) equals a fresh selector's with the same
    users and costs."""
    rng = np.random.default_rng(seed)
    names = [f"m{j}" for j in range(5)]
    prior = ModelPrior(prior_mean=0.6, kernel=None).fit(np.clip(rng.uniform(0.4, 0.9, (12, 5)), 0, 1))
    sel = Selector(names, prior=prior)
    costs: dict[str, dict[str, float]] = {}
    for step in range(60):
        action = rng.choice(["add", "reprice", "remove", "own"], p=[0.35, 0.35, 0.2, 0.1])
        if action == "add" or not costs:
            user = f"u{step}"
            costs[user] = dict(zip(names, map(float, rng.uniform(0.1, 3.0, 5) ** 2)))
            sel.add_user(user, costs=costs[user])
        elif action == "reprice":
            user = str(rng.choice(sorted(costs)))
            model = str(rng.choice(sorted(costs[user])))
            costs[user][model] = float(rng.uniform(0.05, 12.0))
            sel.set_costs(user, {model: costs[user][model]})
        elif action == "remove":
            user = str(rng.choice(sorted(costs)))
            sel.remove_user(user)
            del costs[user]
        else:
            user = str(rng.choice(sorted(costs)))
            own = f"own{step}"
            costs[user][own] = float(rng.uniform(0.05, 12.0))
            sel.add_models(user, [own], costs={own: costs[user][own]})
        if costs:
            fresh = Selector(names, prior=prior)
            for user, cost in costs.items():
                fresh.add_user(user, own=[m for m in cost if m not in names], costs=cost)
            for user in costs:
                assert sel.stats(user)["gain_per_second"] == pytest.approx(fresh.stats(user)["gain_per_second"]), \
                    (step, action, user)
