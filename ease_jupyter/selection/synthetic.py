"""The synthetic quality/cost generator of ease.ml (arXiv:1708.07308 App. B; pvldb §6.1).

The quality of model j for user i is

    x_ij = b_i + alpha * m_ij + u_ij + eps_ij,   clipped to [0, 1],

* ``b_i ~ N(mu_b, sigma_b^2)``: the user's baseline quality, from her
  *baseline group* (App. B.1.1; the paper uses two groups, an easy one at
  mu_b = 0.75 and a hard one at 0.25);
* ``m_i ~ N(0, Sigma_M)``, drawn for each user, with
  ``Sigma_M[j, j'] = exp(-(f_j - f_j')^2 / sigma_M^2)`` and hidden model
  features ``f_j ~ U(0, 1)`` (App. B.1.2): sigma_M sets how strongly models
  are correlated, alpha the weight of that correlated part (§6.1);
* ``u_j ~ N(0, Sigma_U)``, drawn for each model over the users, with hidden
  user features (App. B.1.3), off by default (the SYN sets of Figure 8 do not
  use it);
* ``eps_ij ~ N(0, sigma_W^2)`` i.i.d. white noise (App. B.1.4), 0 by default.

Costs are i.i.d. uniform, as the paper does for every data set without real
costs ("we generate synthetic costs from the uniform distribution U(0, 1)").
We draw them from U(cost_low, 1) with ``cost_low = 0.01`` so that the
cost-aware bonus sqrt(c*/c) stays bounded (by 10).

``syn_dataset(sigma_m, alpha)`` gives the SYN(sigma_M, alpha) data sets of
Figure 8: 200 users (100 per baseline group) x 100 models. The paper does not
state sigma_b; we use 0.1.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["make_synthetic", "syn_dataset", "SYN_FIGURE8"]

#: The four (sigma_M, alpha) pairs of Figure 8.
SYN_FIGURE8: tuple[tuple[float, float], ...] = ((0.01, 0.1), (0.01, 1.0), (0.5, 0.1), (0.5, 1.0))


def _mvn(rng: np.random.Generator, cov: np.ndarray, size: int) -> np.ndarray:
    """``size`` draws of N(0, cov) via the symmetric square root (cov may be
    numerically singular when correlations are strong)."""
    w, v = np.linalg.eigh(cov)
    root = v * np.sqrt(np.clip(w, 0.0, None))
    return rng.standard_normal((size, cov.shape[0])) @ root.T


def _rbf_cov(f: np.ndarray, sigma: float) -> np.ndarray:
    return np.exp(-((f[:, None] - f[None, :]) ** 2) / (sigma ** 2))


def make_synthetic(*, n_models: int = 100, sigma_m: float = 0.5, alpha: float = 1.0,
                   baseline_groups: Sequence[tuple[float, float]] = ((0.75, 0.1), (0.25, 0.1)),
                   users_per_group: int | Sequence[int] = 100, sigma_u: float | None = None,
                   sigma_w: float = 0.0, cost_low: float = 0.01, cost_high: float = 1.0,
                   random_state: int | np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Generate a (quality, cost) pair of users x models matrices (App. B).

    Args:
        n_models: M.
        sigma_m: sigma_M, the length scale of model correlation (> 0).
        alpha: weight of the correlated model part.
        baseline_groups: ``(mu_b, sigma_b)`` per baseline group.
        users_per_group: users in each baseline group (p_U), an int for all or one per group.
        sigma_u: sigma_U of the user-correlation term, None to leave it out.
        sigma_w: standard deviation of the white noise.
        cost_low, cost_high: costs are U(cost_low, cost_high).
        random_state: seed or Generator.

    Returns:
        ``(quality, cost)``, both (n_users, n_models); users are shuffled so
        the groups are interleaved.
    """
    if sigma_m <= 0:
        raise ValueError(f"sigma_m: found {sigma_m!r}, expected a number > 0")
    if n_models < 1:
        raise ValueError(f"n_models: found {n_models!r}, expected >= 1")
    if not 0 < cost_low <= cost_high:
        raise ValueError("costs: expected 0 < cost_low <= cost_high")
    rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
    groups = list(baseline_groups)
    per = [int(users_per_group)] * len(groups) if np.isscalar(users_per_group) else [int(x) for x in users_per_group]
    if len(per) != len(groups):
        raise ValueError("users_per_group: expected one count per baseline group")
    b = np.concatenate([rng.normal(mu, sd, size=n) for (mu, sd), n in zip(groups, per)])
    n_users = b.size
    f = rng.uniform(0.0, 1.0, n_models)
    m = _mvn(rng, _rbf_cov(f, sigma_m), n_users)  # one draw per user (pvldb §6.1)
    x = b[:, None] + alpha * m
    if sigma_u is not None:
        g = rng.uniform(0.0, 1.0, n_users)
        x = x + _mvn(rng, _rbf_cov(g, sigma_u), n_models).T  # one draw per model over the users
    if sigma_w > 0:
        x = x + rng.normal(0.0, sigma_w, size=x.shape)
    quality = np.clip(x, 0.0, 1.0)
    cost = rng.uniform(cost_low, cost_high, size=quality.shape)
    perm = rng.permutation(n_users)
    return quality[perm], cost[perm]


def syn_dataset(sigma_m: float, alpha: float, *, random_state: int | None = 0,
                **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """SYN(sigma_M, alpha) of Figure 8: 200 users x 100 models."""
    return make_synthetic(sigma_m=sigma_m, alpha=alpha, random_state=random_state, **kwargs)
