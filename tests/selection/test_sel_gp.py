"""The GP layer: rank-one updates equal a refit, the likelihood equals scikit-learn's."""

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor

from ease_jupyter.selection import ModelPrior, UserGP, impute_history
from ease_jupyter.selection.gp import default_kernel, fit_kernel, log_marginal_likelihood

from .conftest import random_spd_prior


def test_rank_one_updates_match_refit_from_scratch(rng):
    prior = random_spd_prior(rng, k=10)
    gp = UserGP(prior)
    for k in [3, 7, 0, 3, 9, 5]:  # includes a repeated model (a noisy re-measurement)
        gp.observe(k, float(rng.uniform(0.3, 0.9)))
        mean, var = gp.posterior_from_scratch()
        np.testing.assert_allclose(gp.mean_, mean, atol=1e-10)
        np.testing.assert_allclose(gp.var_, var, atol=1e-10)
    S = np.asarray(gp.X_obs_)
    kss = prior.cov_[np.ix_(S, S)] + prior.alpha * np.eye(len(S))
    np.testing.assert_allclose(gp.L_, np.linalg.cholesky(kss), atol=1e-12)


def test_user_subset_indexes_the_catalogue(rng):
    prior = random_spd_prior(rng, k=8)
    models = [6, 1, 4]
    gp = UserGP(prior, models)
    gp.observe(0, 0.7)  # local 0 = catalogue model 6
    full = UserGP(prior)
    full.observe(6, 0.7)
    np.testing.assert_allclose(gp.mean_, full.mean_[models], atol=1e-12)
    np.testing.assert_allclose(gp.var_, full.var_[models], atol=1e-12)


def test_hallucinated_variance_equals_conditioning_on_any_value(rng):
    prior = random_spd_prior(rng, k=7)
    gp = UserGP(prior)
    gp.observe(2, 0.6)
    hv = gp.hallucinated_var([4, 0])
    other = UserGP(prior)
    other.observe(2, 0.6)
    other.observe(4, 123.0)  # the variance does not depend on the value
    other.observe(0, -5.0)
    np.testing.assert_allclose(hv, other.var_, atol=1e-10)
    np.testing.assert_allclose(gp.mean_, other.mean_[:0].sum() + gp.mean_)  # the real state is untouched
    assert gp.n_obs == 1


def test_log_marginal_likelihood_equals_sklearn(rng):
    X = rng.random((15, 4))
    Y = rng.random((15, 3)) - 0.5
    kernel = default_kernel(0.01, 0.02, 0.7, 0.003)
    ref = GaussianProcessRegressor(kernel, alpha=1e-4, optimizer=None).fit(X, Y)
    for theta in (kernel.theta, kernel.theta - 0.4):
        v_ref, g_ref = ref.log_marginal_likelihood(theta, eval_gradient=True)
        v, g = log_marginal_likelihood(kernel, X, Y, 1e-4, theta, eval_gradient=True)
        assert v == pytest.approx(v_ref, rel=1e-10)
        np.testing.assert_allclose(g, g_ref, rtol=1e-7, atol=1e-8)


def test_fit_kernel_improves_the_likelihood(rng):
    X = rng.random((20, 3))
    Y = np.sin(3 * X[:, :1]) + 0.05 * rng.standard_normal((20, 2))
    k0 = default_kernel(0.01, 0.01, 1.0, 0.01)
    k1, lml = fit_kernel(k0, X, Y, alpha=1e-4, n_restarts=1, rng=np.random.default_rng(0))
    assert lml >= log_marginal_likelihood(k0, X, Y, 1e-4) - 1e-9
    assert lml == pytest.approx(log_marginal_likelihood(k1, X, Y, 1e-4))


def test_prior_from_history(small_prior):
    p = small_prior
    assert p.source_ == "history"
    assert p.cov_.shape == (6, 6) and p.mean_.shape == (6,)
    np.testing.assert_allclose(p.cov_, p.cov_.T)
    assert np.all(np.linalg.eigvalsh(p.cov_) > -1e-10)
    assert p.log_marginal_likelihood_value_ is not None


def test_prior_is_deterministic_under_a_seed(rng):
    hist = rng.uniform(0.4, 0.9, size=(15, 5))
    a = ModelPrior(random_state=3).fit(hist)
    b = ModelPrior(random_state=3).fit(hist)
    np.testing.assert_array_equal(a.cov_, b.cov_)
    np.testing.assert_array_equal(a.mean_, b.mean_)


def test_descriptor_fallback_and_independent_prior():
    desc = np.array([[1.0, 0.0], [1.1, 0.1], [5.0, 3.0]])
    p = ModelPrior().fit(None, descriptors=desc)
    assert p.source_ == "descriptors"
    # similar descriptors are more correlated than dissimilar ones
    assert p.cov_[0, 1] > p.cov_[0, 2]
    q = ModelPrior().fit(None, n_models=4)
    assert q.source_ == "independent" and q.cov_.shape == (4, 4)
    with pytest.raises(ValueError, match="n_models"):
        ModelPrior().fit(None)


def test_refit_from_own_observations_keeps_the_posterior_consistent():
    p = ModelPrior().fit(None, descriptors=np.arange(8, dtype=float)[:, None])
    gp = UserGP(p)
    for k, y in [(0, 0.5), (3, 0.7), (7, 0.9), (5, 0.8)]:
        gp.observe(k, y)
    gp.refit()
    mean, var = gp.posterior_from_scratch()
    np.testing.assert_allclose(gp.mean_, mean, atol=1e-9)
    np.testing.assert_allclose(gp.var_, var, atol=1e-9)


def test_impute_history_fills_missing_cells():
    h = np.array([[0.9, np.nan, 0.7], [0.8, 0.6, np.nan], [0.7, 0.5, 0.5]])
    out = impute_history(h)
    assert not np.isnan(out).any()
    assert out[0, 0] == 0.9 and 0 <= out[0, 1] <= 1
