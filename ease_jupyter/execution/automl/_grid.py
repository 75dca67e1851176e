"""One-shot procedures: grid search, random search, ease.ml's learning-rate grid."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ._core import ProcedureBase, check_int, check_model, check_real, check_seed
from ._space import SearchSpace, _check_keys, _values, expand_grid
from .base import ProcedureArgumentError, TrialResult, TrialSpec


class FixedConfigs(ProcedureBase):
    """Trains a fixed list of configs for ``epochs`` epochs each, all at once.

    Cerebro §4.2: "Grid/random search is a one-shot instance of this
    template": every trial starts at epoch 0 and the decision at epoch
    ``epochs`` stops them all and finishes. Nothing is stopped early and
    nothing is added.
    """

    def __init__(self, model: str, configs: Sequence[Mapping[str, Any]], epochs: int, *, id_prefix: str = "t"):
        super().__init__(model=check_model(model), id_prefix=id_prefix)
        self._budget = check_int("epochs", epochs, minimum=1)
        if not configs:
            raise ProcedureArgumentError("configs", "an empty list", "at least one config")
        self._configs = [dict(c) for c in configs]

    @property
    def configs(self) -> list[dict[str, Any]]:
        """The configs, in trial order (a copy)."""
        return [dict(c) for c in self._configs]

    @property
    def epochs(self) -> int:
        return self._budget

    def _initial_trials(self) -> list[TrialSpec]:
        return [self._new_trial(c) for c in self._configs]

    def _decide(self, results: Mapping[str, TrialResult]):
        return [tid for tid, r in results.items() if r.epoch >= self._budget], ()


class GridSearch(FixedConfigs):
    """Grid search: every combination of ``grid``, trained ``epochs`` epochs.

    Cerebro §4.2 (grid search is the one-shot case of the AutoML template).
    Trials are numbered in :func:`expand_grid` order: keys in the mapping's
    order, the last key varying fastest. Ids are ``f"{id_prefix}{i}"``.

    Args:
        model: the model (template) name every trial trains.
        grid: parameter name -> non-empty list/tuple/range of distinct values.
        epochs: epochs each config trains (>= 1).
        id_prefix: prefix of the trial ids.

    Raises:
        ProcedureArgumentError: an empty grid or value list, duplicate
            values, epochs < 1, an empty model name.

    >>> g = GridSearch("mlp", {"lr": [0.1, 0.01], "depth": [2, 3]}, epochs=5)
    >>> [(s.id, dict(s.params)) for s in g.start()][:2]
    [('t0', {'lr': 0.1, 'depth': 2}), ('t1', {'lr': 0.1, 'depth': 3})]
    """

    def __init__(self, model: str, grid: Mapping[str, Sequence[Any]], epochs: int, *, id_prefix: str = "t"):
        check_model(model)
        super().__init__(model, expand_grid(grid, field="grid"), epochs, id_prefix=id_prefix)


class RandomSearch(FixedConfigs):
    """Random search (Bergstra & Bengio, JMLR 13, 2012): ``n_trials`` configs
    drawn from ``space`` with a seeded generator, trained ``epochs`` epochs.

    Cerebro §4.2 (one-shot case of the AutoML template). The configs are drawn
    when the procedure is built, so :attr:`configs` shows them before
    ``start()``; the same seed always gives the same configs.

    Args:
        model: the model name every trial trains.
        space: a :class:`SearchSpace` or a mapping in its format: lists for
            categorical values, ``(low, high, "log"|"uniform")`` for reals.
        n_trials: number of configs (>= 1).
        epochs: epochs each config trains (>= 1).
        seed: seed of the generator (>= 0).

    Raises:
        ProcedureArgumentError: a malformed space, n_trials < 1, epochs < 1.
    """

    def __init__(
        self,
        model: str,
        space: Mapping[str, Any] | SearchSpace,
        n_trials: int,
        epochs: int,
        seed: int = 0,
        *,
        id_prefix: str = "t",
    ):
        check_model(model)
        sampler = space if isinstance(space, SearchSpace) else SearchSpace(space)
        n = check_int("n_trials", n_trials, minimum=1)
        rng = np.random.default_rng(check_seed(seed))
        super().__init__(model, [sampler.sample(rng) for _ in range(n)], epochs, id_prefix=id_prefix)


class LearningRateGrid(FixedConfigs):
    """ease.ml's hyperparameter tuning of the picked model (pvldb §3.1,
    "Discussion: Hyperparameter Tuning"): whenever the model-selection
    subsystem trains a model, it tries the learning rates {0.1, 0.01, 0.001}.

    ease.ml ran each rate on its own 8 GPUs; the paper calls that design "not
    optimal" and suggests fusing tuning into model selection. Here the rates
    are the configs of *one* MOP workload (Cerebro §4.2), sharing the
    workers and the data partitions. One trial per rate, in the given order.

    Args:
        model: the picked model.
        lrs: the learning rates (distinct, finite, > 0).
        epochs: epochs each rate trains (>= 1), keyword-only.
        param: name of the learning-rate parameter in ``params``.
        base_params: other fixed parameters every trial gets.

    Raises:
        ProcedureArgumentError: no rates, a rate <= 0 or repeated,
            ``base_params`` that already sets ``param``, epochs < 1.
    """

    def __init__(
        self,
        model: str,
        lrs: Sequence[float] = (0.1, 0.01, 0.001),
        *,
        epochs: int,
        param: str = "lr",
        base_params: Mapping[str, Any] | None = None,
        id_prefix: str = "t",
    ):
        check_model(model)
        if not isinstance(param, str) or not param:
            raise ProcedureArgumentError("param", repr(param), "a non-empty parameter name")
        base = {}
        if base_params is not None:
            if base_params:
                _check_keys("base_params", base_params, "values")
            elif not isinstance(base_params, Mapping):
                raise ProcedureArgumentError("base_params", type(base_params).__name__, "a mapping")
            if param in base_params:
                raise ProcedureArgumentError(f"base_params[{param!r}]", "a value", f"no {param!r}: the grid sets it")
            base = dict(base_params)
        rates = _values("lrs", lrs, "a non-empty list or tuple of distinct learning rates")
        for i, lr in enumerate(rates):
            check_real(f"lrs[{i}]", lr, expected="a finite learning rate > 0", ok=lambda v: v > 0)
        super().__init__(model, [{**base, param: lr} for lr in rates], epochs, id_prefix=id_prefix)
