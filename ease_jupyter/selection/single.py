"""Single-tenant GP-UCB: ease.ml Algorithm 1 and its cost-aware twist (pvldb §4.1)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .gp import ModelPrior, UserGP
from .ucb import beta_t, cost_scale, ucb_scores

__all__ = ["GPUCB"]


class GPUCB:
    """One user choosing among K models with (cost-aware) GP-UCB.

    Algorithm 1: ``a_t = argmax_k mu_{t-1}(k) + sqrt(beta_t) sigma_{t-1}(k)``;
    with ``costs`` it is §4.1's ``mu + sqrt(beta_t / c_k) sigma`` (costs
    normalised by their maximum ``c*``, see :func:`~ease_jupyter.selection.beta_t`).

    Parameters
    ----------
    prior : ModelPrior
    costs : sequence of float, optional
        Cost per model; None is the cost-oblivious algorithm.
    delta : float, default 0.1
    schedule : {"alg1", "theorem"}, default "alg1"
        ``"alg1"``: ``beta_t = log(K t^2 / delta)``, Algorithm 1 line 3 (the
        algorithm as listed); ``"theorem"``: Theorem 1's larger schedule.
    exclude_tried : bool, default True
        Never suggest a model already observed (training the same model on the
        same data again teaches nothing); False is the textbook bandit.

    Examples
    --------
    >>> import numpy as np
    >>> prior = ModelPrior.from_arrays([0.5, 0.5, 0.5], np.eye(3) * 0.01)
    >>> algo = GPUCB(prior, costs=[1.0, 1.0, 0.25])
    >>> algo.suggest()  # equal beliefs: the cheapest model has the largest bonus
    2
    """

    def __init__(self, prior: ModelPrior, costs: Sequence[float] | None = None, *, delta: float = 0.1,
                 schedule: str = "alg1", exclude_tried: bool = True):
        self.gp = UserGP(prior)
        self.costs = None if costs is None else np.asarray(costs, dtype=float)
        if self.costs is not None and self.costs.shape != (prior.n_models,):
            raise ValueError(f"costs: found {self.costs.shape}, expected ({prior.n_models},)")
        self.delta, self.schedule, self.exclude_tried = delta, schedule, exclude_tried
        self.t = 0

    def scores(self) -> np.ndarray:
        """The (cost-aware) UCB of every model at the next step ``t``."""
        b = beta_t(self.t + 1, self.gp.n_models, delta=self.delta, schedule=self.schedule)
        return ucb_scores(self.gp.mean_, self.gp.std_, b, cost_scale(self.costs))

    def suggest(self) -> int | None:
        """The next model to train (line 4), or None if all were tried."""
        sc = self.scores()
        if self.exclude_tried and self.gp.X_obs_:
            sc[np.asarray(self.gp.X_obs_)] = -np.inf
        if not np.isfinite(sc).any():
            return None
        return int(np.argmax(sc))

    def observe(self, k: int, y: float) -> None:
        """Lines 5-7: condition the GP on ``y`` for model ``k``."""
        self.gp.observe(int(k), float(y))
        self.t += 1

    def best(self) -> tuple[int, float] | None:
        if not self.gp.y_obs_:
            return None
        j = int(np.argmax(self.gp.y_obs_))
        return self.gp.X_obs_[j], self.gp.y_obs_[j]
