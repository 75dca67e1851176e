"""beta_t, the cost-aware score, EI and single-tenant GP-UCB against hand computations."""

import math

import numpy as np
import pytest

from ease_jupyter.selection import GPUCB, ModelPrior, beta_t, cost_scale, expected_improvement, ucb_scores


def test_beta_t_schedules_by_hand():
    # Theorem 1/3: 2 log(pi^2 n K t^2 / (6 delta)); Algorithm 1 line 3: log(K t^2 / delta)
    assert beta_t(3, 8, delta=0.1, schedule="theorem") == pytest.approx(2 * math.log(math.pi ** 2 * 8 * 9 / 0.6))
    assert beta_t(3, 8, delta=0.1, n_users=10, schedule="theorem") == pytest.approx(
        2 * math.log(math.pi ** 2 * 10 * 8 * 9 / 0.6))
    assert beta_t(2, 5, delta=0.5, schedule="alg1") == pytest.approx(math.log(5 * 4 / 0.5))
    # the default is the algorithm's schedule (Algorithm 1 line 3 / Algorithm 2 line 9)
    assert beta_t(2, 5, delta=0.5) == pytest.approx(math.log(5 * 4 / 0.5))
    assert beta_t(4, 5) > beta_t(3, 5)  # grows with t
    with pytest.raises(ValueError):
        beta_t(1, 5, delta=1.5)
    with pytest.raises(ValueError):
        beta_t(0, 5)


def test_cost_aware_score_by_hand():
    mean = np.array([0.5, 0.5, 0.6])
    std = np.array([0.1, 0.1, 0.0])
    costs = np.array([4.0, 1.0, 1.0])
    s = ucb_scores(mean, std, 9.0, cost_scale(costs))  # c* = 4: factors 1, 4, 4
    np.testing.assert_allclose(s, [0.5 + 3 * 0.1, 0.5 + 6 * 0.1, 0.6])
    assert cost_scale(None) == 1.0


def test_expected_improvement_by_hand():
    # at mean == best: EI = sigma * phi(0)
    assert expected_improvement(np.array([0.5]), np.array([0.2]), 0.5)[0] == pytest.approx(0.2 / math.sqrt(2 * math.pi))
    # far above the incumbent: EI ~ mean - best
    assert expected_improvement(np.array([0.9]), np.array([1e-6]), 0.5)[0] == pytest.approx(0.4)


def test_gp_ucb_single_tenant_hand_example():
    # Independent arms with prior N(0.5, 0.01): the first pick of the cost-aware
    # rule is the cheapest arm; after observing it low, GP-UCB moves on.
    prior = ModelPrior.from_arrays([0.5, 0.5, 0.5], 0.01 * np.eye(3), alpha=1e-6)
    algo = GPUCB(prior, costs=[1.0, 2.0, 0.5])
    assert algo.suggest() == 2
    algo.observe(2, 0.1)
    assert algo.gp.mean_[2] == pytest.approx(0.1, abs=1e-3)
    assert algo.suggest() == 0  # scale c*/c = 2 beats arm 1's 1
    algo.observe(0, 0.9)
    algo.observe(1, 0.3)
    assert algo.suggest() is None
    assert algo.best() == (0, 0.9)


def test_cost_oblivious_gp_ucb_prefers_the_larger_ucb():
    cov = np.array([[0.04, 0.0], [0.0, 0.01]])
    algo = GPUCB(ModelPrior.from_arrays([0.5, 0.6], cov))
    b = beta_t(1, 2)
    assert 0.5 + math.sqrt(b) * 0.2 > 0.6 + math.sqrt(b) * 0.1
    assert algo.suggest() == 0
