"""The acquisition of the default rule: calibrated, capped expected improvement per second.

Beyond the paper. ease.ml's chooser is cost-aware GP-UCB (pvldb §4.1,
``mu + sqrt(beta_t c*/c_k) sigma``) and its user picker GREEDY/HYBRID ranks
users by "highest UCB - best so far" (§5.3-5.4). On real matrices the
exploration bonus ``sqrt(beta c*/c_k) sigma`` of the chosen arm is about one
accuracy unit while the loss left to remove is 0.01-0.1, so both decisions
end up buying "the cheapest uncertain model" whatever its mean. Expected
improvement decays with the distance of the mean below the best so far, so
per second it prices exactly what a run is expected to remove from the
user's loss. Two corrections make it comparable across users:

* **variance scale** (:func:`variance_scale`): one kernel amplitude fits
  every user badly (easy tasks vary little between models, hard ones a
  lot). The GP's own one-step-ahead residuals ``z = (y - mu_prev) /
  sqrt(var_prev + alpha)`` are standard normal when the prior is right;
  ``s = (2 + sum z^2) / (2 + n)`` is their mean square shrunk towards 1 (a
  conjugate inverse-gamma update with two pseudo-observations), and
  ``sqrt(s) sigma`` is the user's calibrated standard deviation;
* **cap** (:func:`capped_expected_improvement`): accuracy cannot exceed
  ``U = 1``, so the improvement over ``b`` is at most ``U - b``. Plain EI
  keeps a positive value for a user already at accuracy 1.0; the capped one
  is exactly 0 there.

A user's *first* pick is chosen differently (:func:`first_pick`). Before her
first result ``b = 0`` and every reasonable model "improves" by about its whole
mean, so EI per second buys her cheapest model; when that one is not close to
her best, the run that finds it is paid on top. The first pick is instead the
model most likely to be near her best per second, ``p_k / c_k`` with ``p_k``
the prior probability that model k is within ``delta`` of her best
(:meth:`~ease_jupyter.selection.gp.ModelPrior.near_best_probability`): looking
in decreasing ``p_k / c_k`` order minimises the expected cost of finding an
object hidden in box k with probability ``p_k`` (the classical search problem;
Blackwell, see Ross 1983, *Introduction to Stochastic Dynamic Programming*,
ch. III). ``delta`` is two standard deviations of a run's own noise
(:func:`near_best_margin`): models closer than that to the best cannot be told
from it.
"""

from __future__ import annotations

import numpy as np

from .ucb import expected_improvement

__all__ = ["ACCURACY_CAP", "variance_scale", "capped_expected_improvement", "gain_per_second", "near_best_margin",
           "first_pick"]

#: ``U``: no model can be more accurate than this.
ACCURACY_CAP = 1.0


def variance_scale(innovations: np.ndarray) -> float:
    """``s = (2 + sum z^2) / (2 + n)`` over a user's ``n`` standardised
    one-step-ahead residuals ``z`` (1 before her first observation).

    >>> variance_scale([])
    1.0
    >>> variance_scale([2.0, 0.0])  # (2 + 4) / (2 + 2)
    1.5
    """
    z = np.asarray(innovations, dtype=float)
    return float((2.0 + np.dot(z, z)) / (2.0 + z.size))


def capped_expected_improvement(mean: np.ndarray, std: np.ndarray, best: float,
                                cap: float = ACCURACY_CAP) -> np.ndarray:
    """``E[min(max(f - best, 0), cap - best)]`` for ``f ~ N(mean, std^2)``:
    ``EI(mean, std, best) - EI(mean, std, cap)``, and 0 when ``best >= cap``.

    >>> float(capped_expected_improvement(np.array([0.5]), np.array([1e-9]), 0.2)[0])  # no noise: f - best
    0.3
    >>> float(capped_expected_improvement(np.array([2.0]), np.array([1e-9]), 0.2)[0])  # at most cap - best
    0.8
    """
    mean = np.asarray(mean, dtype=float)
    if best >= cap:
        return np.zeros_like(mean)
    ei = expected_improvement(mean, std, best) - expected_improvement(mean, std, cap)
    return np.clip(ei, 0.0, cap - best)


def gain_per_second(mean: np.ndarray, std: np.ndarray, innovations: np.ndarray, best: float | None,
                    cost_scale: np.ndarray | float = 1.0, weight: float = 1.0) -> np.ndarray:
    """The default rule's index ``r(k) = w EI_capped(mu, sqrt(s) sigma, b) c*/c_k``
    for every model (``b`` = 0 before the first observation). ``std`` should
    already account for running picks (GP-BUCB hallucination, ``parallel.py``)."""
    s = variance_scale(innovations)
    ei = capped_expected_improvement(mean, np.sqrt(s) * np.asarray(std, dtype=float),
                                     0.0 if best is None else float(best))
    return weight * ei * cost_scale


def near_best_margin(alpha: float) -> float:
    """``delta = 2 sqrt(alpha)``: two standard deviations of the observation noise (the GP's
    ``alpha``, a run's seed-to-seed variance), within which a model cannot be told from the best.

    >>> near_best_margin(1e-4)
    0.02
    """
    return 2.0 * float(np.sqrt(alpha))


def first_pick(near_best: np.ndarray, cost: np.ndarray | float, available: np.ndarray,
               n_draws: int | None = None, tie_break: np.ndarray | None = None) -> int | None:
    """The first model for a user with no result: ``argmax p_k / c_k`` over the available models,
    ``p_k`` the probability that model k is near her best; None when every available ``p_k`` is 0
    (the caller then keeps the gain-per-second rule).

    With ``n_draws`` (``p`` is a Monte Carlo estimate from that many draws), a model whose ``p / c``
    is below the largest by less than three standard errors of a difference of two estimates
    (``3 sqrt(2) se``) counts as tied with it: models the prior cannot tell apart are not ranked
    by sampling noise. Among the tied, the largest ``tie_break`` (the selector passes the
    gain per second ``r(k)``) is taken, else the cheapest; then the first.

    >>> p, c = np.array([0.1, 0.6, 0.3]), np.array([0.1, 2.0, 0.5])
    >>> first_pick(p, c, np.ones(3, bool))  # p/c = 1.0, 0.3, 0.6
    0
    >>> first_pick(p, 1.0, np.ones(3, bool))  # cost-oblivious: the likeliest
    1
    >>> first_pick(p, c, np.array([False, True, True]))
    2
    >>> first_pick(np.array([0.34, 0.33, 0.33]), 1.0, np.ones(3, bool), n_draws=1024)  # a tie: the first
    0
    >>> first_pick(np.array([0.34, 0.33, 0.33]), 1.0, np.ones(3, bool), n_draws=1024,
    ...            tie_break=np.array([0.2, 0.5, 0.4]))  # a tie: the largest gain per second
    1
    >>> first_pick(np.array([0.33, 0.34, 0.33]), np.array([2.0, 2.0, 1.9]), np.ones(3, bool), n_draws=1024)
    2
    >>> first_pick(np.zeros(3), c, np.ones(3, bool)) is None
    True
    """
    p = np.where(available, np.asarray(near_best, dtype=float), 0.0)
    if not p.max(initial=0.0) > 0.0:
        return None
    c = np.broadcast_to(np.asarray(cost, dtype=float), p.shape)
    score = np.where(available, p / c, -np.inf)
    if n_draws is None:
        return int(np.argmax(score))
    se = np.sqrt(p * (1.0 - p) / n_draws)
    tied = available & (score + 3.0 * np.sqrt(2.0) * se / c >= score.max())
    if tie_break is not None:
        return int(np.argmax(np.where(tied, tie_break, -np.inf)))
    return int(np.argmin(np.where(tied, c, np.inf)))  # argmin: the first of equal costs
