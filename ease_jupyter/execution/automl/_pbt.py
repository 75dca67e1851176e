"""Population based training on MOP (Cerebro §4.2)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ._core import ProcedureBase, check_int, check_model, check_real, check_seed, ranked
from ._space import Categorical, Continuous, SearchSpace
from .base import ProcedureArgumentError, TrialResult, TrialSpec


class PBT(ProcedureBase):
    """Population based training (Jaderberg et al., "Population Based Training
    of Neural Networks", arXiv:1711.09846, 2017) as one MOP workload.

    Cerebro §4.2 lists PBT among the procedures that fit the per-epoch
    template: it both terminates configs and adds new ones at epoch
    boundaries. Here:

    * ``population`` trials are drawn from ``space`` and start together.
    * Every ``interval`` epochs (at boundaries ``interval, 2*interval, ...``
      before the last) the live trials are ranked by score. The bottom
      ``n = max(1, floor(quantile * population))`` are stopped and each is
      replaced by a new trial -- *exploit* by truncation selection: its
      ``init_from`` is a trial drawn uniformly from the top ``n``, whose
      weights it starts from; *explore* by perturbation: every continuous
      parameter of the parent's params is multiplied by a factor drawn from
      ``perturb`` (default 0.8 or 1.2, as in the paper) and clipped to the
      space's bounds; a categorical parameter is redrawn from the space with
      probability ``resample_probability`` (default 0: kept).
    * At boundary ``max_epochs`` every trial is stopped and the procedure
      finishes. All trials are in step (a replacement is made at the same
      boundary for everyone), so the population stays ``population`` live
      trials in every epoch.

    A replacement is a new trial with a new id ``f"{id_prefix}{i}"``; its
    epoch count starts at 0 under that id (see the protocol), and
    :attr:`parents` records where it came from. Ties in ranking are broken
    by trial order, NaN ranks last.

    Args:
        model: the model every trial trains.
        space: a :class:`SearchSpace` or a mapping in its format (the bounds
            of continuous parameters are needed to perturb them).
        population: N, the number of live trials (>= 2).
        interval: epochs between exploit/explore steps (>= 1).
        max_epochs: total epochs the population trains (>= 1).
        quantile: fraction replaced, in (0, 0.5].
        perturb: the factors continuous parameters are multiplied by (> 0).
        resample_probability: chance a categorical parameter is redrawn.
        seed: seeds sampling, parent choice and perturbation (>= 0).

    Raises:
        ProcedureArgumentError: population < 2, interval < 1, quantile
            outside (0, 0.5], a non-positive factor, a malformed space.
    """

    def __init__(
        self,
        model: str,
        space: Mapping[str, Any] | SearchSpace,
        *,
        population: int,
        interval: int,
        max_epochs: int,
        quantile: float = 0.25,
        perturb: Sequence[float] = (0.8, 1.2),
        resample_probability: float = 0.0,
        seed: int = 0,
        id_prefix: str = "t",
    ):
        super().__init__(model=check_model(model), id_prefix=id_prefix)
        self._space = space if isinstance(space, SearchSpace) else SearchSpace(space)
        self._n = check_int("population", population, minimum=2)
        self._interval = check_int("interval", interval, minimum=1)
        self._max_epochs = check_int("max_epochs", max_epochs, minimum=1)
        q = check_real("quantile", quantile, expected="a fraction in (0, 0.5]", ok=lambda v: 0 < v <= 0.5)
        self._n_replace = max(1, int(q * self._n))
        if isinstance(perturb, (str, bytes)) or not isinstance(perturb, (list, tuple)) or not perturb:
            raise ProcedureArgumentError("perturb", repr(perturb), "a non-empty list of factors > 0")
        self._factors = tuple(
            check_real(f"perturb[{i}]", f, expected="a finite factor > 0", ok=lambda v: v > 0)
            for i, f in enumerate(perturb)
        )
        self._resample = check_real(
            "resample_probability", resample_probability, expected="a probability in [0, 1]", ok=lambda v: 0 <= v <= 1
        )
        self._rng = np.random.default_rng(check_seed(seed))
        self._parents: dict[str, str] = {}
        self._params: dict[str, dict[str, Any]] = {}

    @property
    def n_replace(self) -> int:
        """How many trials are replaced at each exploit step."""
        return self._n_replace

    @property
    def parents(self) -> dict[str, str]:
        """Replacement trial -> the trial whose weights it started from."""
        return dict(self._parents)

    def _explore(self, params: Mapping[str, Any]) -> dict[str, Any]:
        new = dict(params)
        for key, dim in self._space.dimensions.items():
            if key not in new:
                continue
            if isinstance(dim, Continuous):
                factor = self._factors[int(self._rng.integers(len(self._factors)))]
                new[key] = dim.clip(float(new[key]) * factor)
            elif isinstance(dim, Categorical) and self._resample > 0 and self._rng.random() < self._resample:
                new[key] = dim.sample(self._rng)
        return new

    def _make(self, params: dict[str, Any], parent: str | None = None) -> TrialSpec:
        spec = self._new_trial(params, init_from=parent)
        self._params[spec.id] = params
        if parent is not None:
            self._parents[spec.id] = parent
        return spec

    def _initial_trials(self) -> list[TrialSpec]:
        return [self._make(self._space.sample(self._rng)) for _ in range(self._n)]

    def _decide(self, results: Mapping[str, TrialResult]):
        t = self.rounds
        if t >= self._max_epochs:
            return list(results), ()
        if t % self._interval:
            return (), ()
        order = ranked(results, {i: r.score for i, r in results.items()}, self._order)
        top, bottom = order[: self._n_replace], order[-self._n_replace :]
        add = []
        for _loser in bottom:
            parent = top[int(self._rng.integers(len(top)))]
            add.append(self._make(self._explore(self._params[parent]), parent))
        return bottom, add
