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
"""

from __future__ import annotations

import numpy as np

from .ucb import expected_improvement

__all__ = ["ACCURACY_CAP", "variance_scale", "capped_expected_improvement", "gain_per_second"]

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
