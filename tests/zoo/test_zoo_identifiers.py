"""Identifier columns in a table's preprocessing (zoo.preprocess): a
categorical column whose values are nearly all distinct is left out of the
features when the pipeline is fitted, on the rows it is fitted on; the
fitted pipeline still takes the column (unseen ids included), stays
scikit-learn's own ColumnTransformer once exported, and importing the
module loads no scikit-learn."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from ease_jupyter.schema.table import Column, ColumnKind, TableSchema
from ease_jupyter.zoo import preprocess
from ease_jupyter.zoo.preprocess import (IDENTIFIER_MIN_DISTINCT, identifier_columns, preprocessor,
                                         table_pipeline)


def samples(n: int, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """A number that decides the class, a site (3 categories) and a sample id per row."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    frame = pd.DataFrame({"x": x, "site": rng.choice(["north", "south", "east"], n).astype(object),
                          "sample_id": np.array([f"S{i:05d}" for i in range(n)], dtype=object)})
    return frame, np.where(x > 0, "pos", "neg")


SCHEMA = TableSchema((Column("x", ColumnKind.NUMERIC), Column("site", ColumnKind.CATEGORICAL),
                      Column("sample_id", ColumnKind.CATEGORICAL)), "y", ("neg", "pos"))


def test_a_column_of_nearly_all_distinct_values_is_an_identifier():
    n = 200
    frame = pd.DataFrame({
        "ids": [f"id{i}" for i in range(n)],
        "mostly": [f"v{i}" if i % 10 else "same" for i in range(n)],  # 181 distinct in 200: above 90%
        "halves": [f"v{i % 100}" for i in range(n)],                   # 100 distinct in 200: a category
        "sparse": [f"id{i}" if i % 3 == 0 else None for i in range(n)],  # 67 present, all distinct
        "few": [f"id{i}" if i < IDENTIFIER_MIN_DISTINCT - 1 else None for i in range(n)],  # under the floor
    })
    assert identifier_columns(frame, list(frame.columns)) == ["ids", "mostly", "sparse"]


def test_the_fit_leaves_identifiers_to_the_dropped_remainder_and_takes_unseen_ids():
    from sklearn.linear_model import LogisticRegression

    frame, y = samples(3000)
    before = preprocessor(SCHEMA)
    width = before.fit_transform(frame, y).shape[1]
    assert width == 4  # x, and the three sites: not one column per sample id (3,004 with them)
    assert before.transformers_[-1] == ("remainder", "drop", ["sample_id"])
    assert before.named_transformers_["categorical"]["one_hot"].categories_[0].tolist() == ["east", "north", "south"]
    model = table_pipeline(SCHEMA, LogisticRegression()).fit(frame, y)
    unseen = frame.head(3).assign(sample_id=["never-seen", None, "S00001"])
    np.testing.assert_array_equal(model.predict(unseen), model.predict(frame.head(3)))


def test_the_parameters_stay_as_built_so_clone_and_get_params_see_them():
    from sklearn.base import clone

    frame, y = samples(300)
    fitted = preprocessor(SCHEMA).fit(frame, y)
    assert fitted.get_params()["transformers"][1][2] == ["site", "sample_id"]
    assert clone(fitted).transformers[1][2] == ["site", "sample_id"]


def test_a_small_table_or_one_of_identifiers_only_keeps_its_columns():
    frame, y = samples(IDENTIFIER_MIN_DISTINCT - 1)  # every id distinct, but fewer than the floor
    fitted = preprocessor(SCHEMA).fit(frame, y)
    assert {name: columns for name, _, columns in fitted.transformers_}["categorical"] == ["site", "sample_id"]
    only_ids = TableSchema((Column("sample_id", ColumnKind.CATEGORICAL),), "y", ("neg", "pos"))
    frame, y = samples(300)
    fitted = preprocessor(only_ids).fit(frame[["sample_id"]], y)  # nothing else to learn from: kept
    assert fitted.named_transformers_["categorical"]["one_hot"].categories_[0].size == 300


def test_the_fitted_transformer_exports_as_scikit_learns_own():
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression

    from ease_jupyter.service.export import plain_sklearn

    frame, y = samples(300)
    model = table_pipeline(SCHEMA, LogisticRegression()).fit(frame, y)
    plain = plain_sklearn(model)
    assert type(plain["preprocess"]) is ColumnTransformer
    assert plain["preprocess"].transformers_[-1] == ("remainder", "drop", ["sample_id"])
    np.testing.assert_array_equal(plain.predict(frame), model.predict(frame))
    again = pickle.loads(pickle.dumps(model))  # ours, by name: the service stores it so
    assert type(again["preprocess"]) is preprocess.IdentifierFreeColumnTransformer


@pytest.mark.parametrize("module", ["ease_jupyter.zoo.preprocess", "ease_jupyter.tabular"])
def test_importing_the_preprocessing_loads_no_scikit_learn(module):
    code = f"import sys, {module}; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]
