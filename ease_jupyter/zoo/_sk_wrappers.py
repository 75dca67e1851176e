"""scikit-learn estimators that run their BLAS/OpenMP loops on one thread.

HistGradientBoosting*, the kNN search (OpenMP) and the MLP (BLAS) parallelise
over all cores. On shared machines (several workers, or other users, on the same
cores) that oversubscribes badly: digits (1797 x 64) with 50 boosting rounds
took 2 s on one thread and 199 s with two OpenMP threads on two busy cores,
and the MLP 2 s against 13 s.
Selection runs many small fits side by side, so each fit gets one thread and
the parallelism comes from running configs concurrently.

The subclasses keep the parent's ``__init__`` (so ``get_params``/``clone``
work) and only wrap the public methods in ``threadpool_limits(1)``.
"""

from __future__ import annotations

from typing import Any

from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.pipeline import Pipeline
from threadpoolctl import threadpool_limits


class _SingleThreaded:
    """Mixin: run fit/predict/score/... with one BLAS/OpenMP thread."""

    def fit(self, *args: Any, **kwargs: Any) -> Any:
        with threadpool_limits(limits=1):
            return super().fit(*args, **kwargs)  # type: ignore[misc]

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        with threadpool_limits(limits=1):
            return super().predict(*args, **kwargs)  # type: ignore[misc]

    def score(self, *args: Any, **kwargs: Any) -> Any:
        with threadpool_limits(limits=1):
            return super().score(*args, **kwargs)  # type: ignore[misc]


class _SingleThreadedProba(_SingleThreaded):
    def predict_proba(self, *args: Any, **kwargs: Any) -> Any:
        with threadpool_limits(limits=1):
            return super().predict_proba(*args, **kwargs)  # type: ignore[misc]


class OneThreadHGBClassifier(_SingleThreadedProba, HistGradientBoostingClassifier):
    pass


class OneThreadHGBRegressor(_SingleThreaded, HistGradientBoostingRegressor):
    pass


class OneThreadPipeline(_SingleThreadedProba, Pipeline):
    """A Pipeline whose fit/predict run on one thread (BLAS and OpenMP)."""

    def decision_function(self, *args: Any, **kwargs: Any) -> Any:
        with threadpool_limits(limits=1):
            return super().decision_function(*args, **kwargs)
