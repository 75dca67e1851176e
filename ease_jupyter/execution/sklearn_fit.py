"""Fit one scikit-learn config and score it on held-out examples.

This is the single-config step of Seneca-style grid evaluation (Seneca §II):
the caller supplies the train/validation split, and gets back the fitted model,
its validation score and the measured fit time, which later replaces the zoo's
cost estimate in cost-aware selection.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score, r2_score


@dataclass(frozen=True)
class FitResult:
    model: Any
    score: float  # accuracy for classification, R^2 clipped to [0, 1] otherwise
    train_score: float
    fit_seconds: float


def fit_and_score(
    estimator: Any,
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_val: np.ndarray,
    y_val: np.ndarray,
    *,
    classification: bool,
) -> FitResult:
    model = clone(estimator)
    X_train2, X_val2 = _flatten(X_train), _flatten(X_val)
    started = time.perf_counter()
    with warnings.catch_warnings():
        # The zoo caps iterations to bound cost; an unconverged fit is still a
        # valid candidate, and its validation score says how good it is.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X_train2, y_train)
    seconds = time.perf_counter() - started
    return FitResult(
        model=model,
        score=_score(model, X_val2, y_val, classification),
        train_score=_score(model, X_train2, y_train, classification),
        fit_seconds=seconds,
    )


def _flatten(X: Any) -> Any:
    """Tensors as flat feature vectors; a DataFrame (a table task's rows,
    for its preprocessing pipeline) as it is."""
    return X if type(X).__module__.startswith("pandas") else X.reshape(len(X), -1)


def _score(model: Any, X: np.ndarray, y: np.ndarray, classification: bool) -> float:
    predicted = model.predict(X)
    if classification:
        return float(accuracy_score(y, predicted))
    # GP observations are qualities in [0, 1]; a worse-than-mean regressor is 0.
    return float(np.clip(r2_score(y.reshape(len(y), -1), predicted.reshape(len(y), -1)), 0.0, 1.0))
