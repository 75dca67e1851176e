"""scikit-learn estimators for flat feature vectors (FLAT_CLASSIFICATION and
FLAT_REGRESSION).

Each spec names a model, its family kind (for the descriptor), its complexity
proxy (``ease_jupyter.zoo.cost``), a small grid of its key option (the
Seneca-style grid a config comes from) and a factory. Scale-sensitive models
are wrapped in a ``Pipeline`` with a ``StandardScaler``. Defaults are kept
small so that every model fits the digits data (1797 x 64) in about a second.

Targets: classifiers take class indices (n,); regressors take (n,) when the
output has one value and (n, m) for m > 1 values (the output tensor
flattened). Single-output regressors (SVR, gradient boosting) are wrapped in
``MultiOutputRegressor`` when m > 1. Regressors that assume unit-scale
targets also standardise y (``TransformedTargetRegressor``). Gradient
boosting and the scaled pipelines run on one BLAS/OpenMP thread (see
``_sk_wrappers``).

scikit-learn is imported only when a model is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from ease_jupyter.zoo import cost as _cost

FOREST_TREES = 100
BOOSTING_ITERS = 30
BOOSTING_LEAVES = 15


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    family: str
    kind: str  # one of cost.FAMILY_KINDS
    option: str  # the key option its configs vary
    grid: tuple[Any, ...]
    proxy: Callable[[int, int, int], float]  # fit cost on (n, d, k)
    factory: str  # function name in this module: factory(option_value, n_outputs) -> estimator


def _scaled(est: Any) -> Any:
    from sklearn.preprocessing import StandardScaler

    from ease_jupyter.zoo._sk_wrappers import OneThreadPipeline

    return OneThreadPipeline([("scale", StandardScaler()), ("model", est)])


def _scaled_xy(est: Any) -> Any:
    """Standardise the features and the target (SVR's epsilon, the MLP's
    initialisation and the ridge penalty all assume unit-scale targets)."""
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.preprocessing import StandardScaler

    return TransformedTargetRegressor(regressor=_scaled(est), transformer=StandardScaler())


def _multi(est: Any, n_outputs: int) -> Any:
    if n_outputs <= 1:
        return est
    from sklearn.multioutput import MultiOutputRegressor

    return MultiOutputRegressor(est)


# -- classifiers --------------------------------------------------------------


def make_logreg(C: float, n_outputs: int) -> Any:
    from sklearn.linear_model import LogisticRegression

    return _scaled(LogisticRegression(C=C, max_iter=300))


def make_svc(C: float, n_outputs: int) -> Any:
    from sklearn.svm import SVC

    return _scaled(SVC(C=C, kernel="rbf", gamma="scale"))


def make_rf_classifier(max_features: Any, n_outputs: int) -> Any:
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=FOREST_TREES, max_features=max_features, n_jobs=1, random_state=0)


def make_hgb_classifier(learning_rate: float, n_outputs: int) -> Any:
    from ease_jupyter.zoo._sk_wrappers import OneThreadHGBClassifier

    return OneThreadHGBClassifier(
        learning_rate=learning_rate, max_iter=BOOSTING_ITERS, max_leaf_nodes=BOOSTING_LEAVES, early_stopping=False, random_state=0
    )


def make_knn_classifier(n_neighbors: int, n_outputs: int) -> Any:
    from sklearn.neighbors import KNeighborsClassifier

    return _scaled(KNeighborsClassifier(n_neighbors=n_neighbors))


def make_mlp_classifier(alpha: float, n_outputs: int) -> Any:
    from sklearn.neural_network import MLPClassifier

    return _scaled(
        MLPClassifier(hidden_layer_sizes=(_cost.MLP_HIDDEN,), alpha=alpha, max_iter=_cost.MLP_EPOCHS, early_stopping=False, random_state=0)
    )


# -- regressors ----------------------------------------------------------------


def make_ridge(alpha: float, n_outputs: int) -> Any:
    from sklearn.linear_model import Ridge

    return _scaled_xy(Ridge(alpha=alpha))


def make_svr(C: float, n_outputs: int) -> Any:
    from sklearn.svm import SVR

    return _scaled_xy(_multi(SVR(C=C, kernel="rbf", gamma="scale"), n_outputs))


def make_rf_regressor(max_features: Any, n_outputs: int) -> Any:
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(n_estimators=FOREST_TREES, max_features=max_features, n_jobs=1, random_state=0)


def make_hgb_regressor(learning_rate: float, n_outputs: int) -> Any:
    from ease_jupyter.zoo._sk_wrappers import OneThreadHGBRegressor

    est = OneThreadHGBRegressor(
        learning_rate=learning_rate, max_iter=BOOSTING_ITERS, max_leaf_nodes=BOOSTING_LEAVES, early_stopping=False, random_state=0
    )
    return _multi(est, n_outputs)


def make_knn_regressor(n_neighbors: int, n_outputs: int) -> Any:
    from sklearn.neighbors import KNeighborsRegressor

    return _scaled_xy(KNeighborsRegressor(n_neighbors=n_neighbors))


def make_mlp_regressor(alpha: float, n_outputs: int) -> Any:
    from sklearn.neural_network import MLPRegressor

    return _scaled_xy(
        MLPRegressor(hidden_layer_sizes=(_cost.MLP_HIDDEN,), alpha=alpha, max_iter=_cost.MLP_EPOCHS, early_stopping=False, random_state=0)
    )


_forest = partial(_cost.forest_cost, trees=FOREST_TREES)
_boost = partial(_cost.boosting_cost, iters=BOOSTING_ITERS, leaves=BOOSTING_LEAVES)

CLASSIFIERS: tuple[EstimatorSpec, ...] = (
    EstimatorSpec("logreg", "logistic regression", "linear", "C", (0.1, 1.0, 10.0), _cost.linear_cost, "make_logreg"),
    EstimatorSpec("svm_rbf", "RBF SVM", "kernel", "C", (0.1, 1.0, 10.0), _cost.kernel_cost, "make_svc"),
    EstimatorSpec("random_forest", "random forest", "trees", "max_features", ("sqrt", 0.5), _forest, "make_rf_classifier"),
    EstimatorSpec("hist_gboost", "gradient boosting", "trees", "learning_rate", (0.1, 0.3), _boost, "make_hgb_classifier"),
    EstimatorSpec("knn", "k nearest neighbours", "neighbors", "n_neighbors", (3, 7, 15), _cost.neighbors_cost, "make_knn_classifier"),
    EstimatorSpec("mlp", "multi-layer perceptron", "mlp", "alpha", (1e-4, 1e-2), _cost.mlp_cost, "make_mlp_classifier"),
)

REGRESSORS: tuple[EstimatorSpec, ...] = (
    EstimatorSpec("ridge", "ridge regression", "linear", "alpha", (0.1, 1.0, 10.0), _cost.linear_cost, "make_ridge"),
    EstimatorSpec("svr_rbf", "RBF SVR", "kernel", "C", (0.1, 1.0, 10.0), partial(_cost.kernel_cost, regression=True), "make_svr"),
    EstimatorSpec("random_forest", "random forest", "trees", "max_features", (1.0, 0.5), _forest, "make_rf_regressor"),
    EstimatorSpec("hist_gboost", "gradient boosting", "trees", "learning_rate", (0.1, 0.3), _boost, "make_hgb_regressor"),
    EstimatorSpec("knn", "k nearest neighbours", "neighbors", "n_neighbors", (3, 7, 15), _cost.neighbors_cost, "make_knn_regressor"),
    EstimatorSpec("mlp", "multi-layer perceptron", "mlp", "alpha", (1e-4, 1e-2), _cost.mlp_cost, "make_mlp_regressor"),
)


@dataclass(frozen=True)
class EstimatorBuilder:
    """``Candidate.build`` of scikit-learn candidates: ``builder(config)``
    returns a fresh, unfitted estimator for ``config`` (a ``ModelConfig`` of
    model ``name``); the option defaults to the middle of the grid."""

    factory: str  # a make_* function of this module
    name: str
    option: str
    grid: tuple[Any, ...]
    n_outputs: int = 1

    def __call__(self, config: Any) -> Any:
        from ease_jupyter.errors import EaseMLError
        from ease_jupyter.zoo.base import ModelConfig

        if not isinstance(config, ModelConfig) or config.model != self.name:
            found = config.model if isinstance(config, ModelConfig) else type(config).__name__
            raise EaseMLError(f"config.model: found {found!r}, expected {self.name!r}")
        opts = config.options
        unknown = set(opts) - {self.option}
        if unknown:
            raise EaseMLError(f"config {config.key}: unknown option(s) {sorted(unknown)}, expected only {self.option!r}")
        value = opts.get(self.option, self.grid[len(self.grid) // 2])
        return globals()[self.factory](value, self.n_outputs)
