"""scikit-learn candidates for flat features."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ease_jupyter.zoo import Engine, Workload, candidates

from .conftest import program


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)


def test_classifiers_fit_digits_well_above_chance(digits):
    Xtr, Xte, ytr, yte = digits
    cands = candidates(program([(64,)], [(10,)]))
    assert {c.engine for c in cands} == {Engine.SKLEARN}
    for c in cands:
        cfg = c.configs[len(c.configs) // 2]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning of capped iterations
            model = c.build(cfg).fit(Xtr, ytr)
        acc = model.score(Xte, yte)
        assert acc > 0.85, (cfg.key, acc)  # chance is 0.1


def test_every_config_builds_a_distinct_estimator():
    for c in candidates(program([(64,)], [(10,)])):
        params = [repr(c.build(cfg)) for cfg in c.configs]
        assert len(set(params)) == len(params), c.name


def test_regressors_fit_a_linear_signal():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    y = 3.0 * X[:, 0] - 2.0 * X[:, 1] + 100.0 + 0.1 * rng.normal(size=400)
    cands = candidates(program([(5,)], [(1,)]))
    assert all(c.workload is Workload.FLAT_REGRESSION for c in cands)
    for c in cands:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = c.build(c.configs[0]).fit(X[:300], y[:300])
        r2 = model.score(X[300:], y[300:])
        assert r2 > 0.6, (c.name, r2)


def test_multi_output_regression():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 4))
    Y = np.stack([X[:, 0], -X[:, 1], X[:, 2] + X[:, 3]], axis=1)
    # Tensor[3] would be 3 classes; Tensor[3, 1] is a 3-value regression target
    for c in candidates(program([(4,)], [(3, 1)])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pred = c.build(c.configs[0]).fit(X[:150], Y[:150]).predict(X[150:])
        assert pred.shape == (50, 3), c.name
