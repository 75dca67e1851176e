"""What a user's fitted scikit-learn model does after training, run in a
child process of ``user_sandbox`` (``service/own_model_calls.py`` sends the
calls): ``predict`` for ``infer``, ``predict_proba`` and ``classes_`` for
the suspicion scores, and the conversion of ``export``.

Each function takes the model's stored bytes (the job's artifact, a
cloudpickle) and loads them here, in the child, so that her classes'
``__setstate__`` runs where it can be killed too. The child keeps the last
model it loaded: a request's several calls load it once.

Imports only the standard library at import time: a child starts with it
and ``user_sandbox`` alone.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

_LOADED: dict[str, Any] = {}  # digest -> the model: the last one loaded in this child


def load_fitted(data: bytes) -> Any:
    """The fitted model from its stored bytes (loaded once per child)."""
    import cloudpickle  # noqa: F401 - a model holding classes pickled by value needs it to load

    digest = hashlib.sha256(data).hexdigest()
    if digest not in _LOADED:
        _LOADED.clear()
        _LOADED[digest] = pickle.loads(data)
    return _LOADED[digest]


def _rows(X: Any) -> Any:
    """A table task's DataFrame as it is; an array task's examples flattened."""
    return X.reshape(len(X), -1) if hasattr(X, "reshape") and not hasattr(X, "columns") else X


def fitted_predict(data: bytes, X: Any) -> Any:
    return load_fitted(data).predict(_rows(X))


def fitted_proba(data: bytes, X: Any) -> Any:
    """``predict_proba``'s rows, or an empty array where the model has none
    (scikit-learn answers AttributeError for a method a model lacks, e.g. SVC's)."""
    import numpy as np

    try:
        return load_fitted(data).predict_proba(_rows(X))
    except AttributeError:
        return np.zeros((0,))


def fitted_classes(data: bytes, n_columns: int) -> Any:
    """The class of each ``predict_proba`` column (``classes_``; 0..n-1 where it has none)."""
    import numpy as np

    return np.asarray(getattr(load_fitted(data), "classes_", np.arange(n_columns)))


def fitted_export(data: bytes, fmt: str, inputs: Any, classification: bool) -> Any:
    """``export.sklearn_artifact`` of the model; a ``DataError`` (a format
    this model cannot take) comes back as a value, to be raised as it is."""
    from .errors import DataError
    from .service.export import _with_onnx_outputs, sklearn_artifact

    try:
        return _with_onnx_outputs(sklearn_artifact(load_fitted(data), fmt, inputs, classification))
    except DataError as error:
        return error
