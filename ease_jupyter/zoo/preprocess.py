"""Tabular preprocessing as the first step of every candidate's pipeline.

A table task's candidates are scikit-learn estimators behind one
``ColumnTransformer`` that encodes the columns the way its schema
(``schema.table``) says:

* numeric and boolean columns: mean imputation, then standard scaling;
* categorical columns: most-frequent imputation, then one-hot encoding
  (a category not seen in training encodes as all zeros);
* free-text columns: missing text is the empty document, then a TF-IDF
  vector of at most ``TEXT_FEATURES`` words. A word is a run of two or
  more characters other than ASCII spaces, punctuation and control
  characters (``TEXT_TOKEN_PATTERN``), after ASCII letters are lowercased
  (``ascii_lowercase``; other letters keep their case). Both rules have
  exact ONNX equivalents (onnxruntime's ``StringNormalizer`` in the "C"
  locale and its RE2 ``Tokenizer``), so an exported ONNX model splits and
  folds text as the scikit-learn pipeline does. scikit-learn's defaults
  (Python's Unicode ``str.lower`` and ``\\b\\w\\w+\\b``) have none: RE2's
  ``\\w`` and ``\\b`` are ASCII-only and onnxruntime's Unicode lowercasing
  follows the machine's locale, so "CAFÉ" or "İ" would split or fold
  differently.

A categorical or text column's first step makes every missing value NaN
(``missing_as_nan``): the stored rows carry NaN, but a DataFrame given to
an exported pipeline may carry None (or ``pd.NA``), which the imputers,
looking for NaN, would take for a category or a document.

The whole ``Pipeline([("preprocess", ...), ("model", estimator)])`` is
fitted on the training rows only (the grid fits it on the training side of
the split), so no statistic of a validation row leaks into a model, and the
stored model takes a pandas DataFrame with the original column names. Only
scikit-learn (and numpy) classes appear in the preprocessing, so the fitted
pipeline loads with scikit-learn alone.

scikit-learn and pandas are imported when a pipeline or frame is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ease_jupyter.schema.table import ColumnKind, TableSchema

__all__ = ["TEXT_FEATURES", "TEXT_TOKEN_PATTERN", "ascii_lowercase", "missing_as_nan", "preprocessor",
           "table_pipeline", "to_frame", "TableBuilder"]

TEXT_FEATURES = 1000  # words of a text column's TF-IDF vocabulary
# Two or more characters, none of them an ASCII control, space, punctuation or
# symbol character (every non-ASCII character counts as part of a word).
TEXT_TOKEN_PATTERN = r"[^\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]{2,}"


def ascii_lowercase() -> Any:
    """A text column's preprocessor: ``str.translate`` of A-Z to a-z, a
    picklable standard-library callable (the exported pipeline loads with
    scikit-learn alone)."""
    import operator
    import string

    return operator.methodcaller("translate", str.maketrans(string.ascii_uppercase, string.ascii_lowercase))


def as_objects() -> Any:
    """A string column group's first step's function: ``DataFrame.astype(object)``,
    so that a pandas "string" column's ``pd.NA`` becomes a value ``missing_as_nan``
    can replace (``fillna`` leaves it in a "string" column). Picklable, from the
    standard library, as ``missing_as_nan``."""
    import operator

    return operator.methodcaller("astype", object)


def missing_as_nan() -> Any:
    """A string column group's first step's function: ``DataFrame.fillna(nan)``,
    so None and ``pd.NA`` are missing as NaN is (a picklable standard-library
    callable: the exported pipeline loads without ease_jupyter). Stored rows
    already carry NaN, so training sees the same values with or without it."""
    import operator

    return operator.methodcaller("fillna", float("nan"))


def preprocessor(schema: TableSchema) -> Any:
    """The unfitted ``ColumnTransformer`` of ``schema``'s columns (dense output)."""
    import numpy as np
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler

    kinds = schema.kinds()
    numeric = [n for n, k in kinds.items() if k in (ColumnKind.NUMERIC, ColumnKind.BOOLEAN)]
    categorical = [n for n, k in kinds.items() if k is ColumnKind.CATEGORICAL]
    steps: list[tuple[str, Any, Any]] = []
    if numeric:
        # keep_empty_features: a column missing in every training row still
        # has its place, so the fitted width does not depend on the data.
        steps.append(("numeric", Pipeline([("impute", SimpleImputer(strategy="mean", keep_empty_features=True)),
                                           ("scale", StandardScaler())]), numeric))
    if categorical:
        steps.append(("categorical", Pipeline([
            ("objects", FunctionTransformer(as_objects(), feature_names_out="one-to-one")),
            ("missing", FunctionTransformer(missing_as_nan(), feature_names_out="one-to-one")),
            ("impute", SimpleImputer(strategy="most_frequent", keep_empty_features=True)),
            ("one_hot", OneHotEncoder(handle_unknown="ignore")),
        ]), categorical))
    for name, kind in kinds.items():
        if kind is ColumnKind.TEXT:
            # TF-IDF takes one string per row: fill missing text, then flatten the (n, 1) column.
            steps.append((f"text_{len(steps)}", Pipeline([
                ("objects", FunctionTransformer(as_objects(), feature_names_out="one-to-one")),
                ("missing", FunctionTransformer(missing_as_nan(), feature_names_out="one-to-one")),
                ("impute", SimpleImputer(strategy="constant", fill_value="", keep_empty_features=True)),
                ("flatten", FunctionTransformer(np.ravel)),
                ("tfidf", TfidfVectorizer(max_features=TEXT_FEATURES, lowercase=False,
                                          preprocessor=ascii_lowercase(), token_pattern=TEXT_TOKEN_PATTERN)),
            ]), [name]))
    return ColumnTransformer(steps, remainder="drop", sparse_threshold=0.0)


def table_pipeline(schema: TableSchema, estimator: Any) -> Any:
    """``Pipeline([("preprocess", preprocessor(schema)), ("model", estimator)])``."""
    from sklearn.pipeline import Pipeline

    return Pipeline([("preprocess", preprocessor(schema)), ("model", estimator)])


def to_frame(schema: TableSchema, arrays: Sequence[Any]) -> Any:
    """A table task's stored column arrays as the DataFrame its pipelines take."""
    import pandas as pd

    return pd.DataFrame(schema.columns_of(arrays), columns=list(schema.names))


@dataclass(frozen=True)
class TableBuilder:
    """A candidate's ``build`` for a table task: the candidate's own
    estimator for ``config``, behind ``schema``'s preprocessing. ``option``
    is the inner builder's (the grid tunes it)."""

    schema: TableSchema
    inner: Callable[[Any], Any]
    # The grid's other options belong to the estimator, the pipeline's "model" step.
    params_prefix = "model__"

    @property
    def option(self) -> str | None:
        return getattr(self.inner, "option", None)

    def __call__(self, config: Any) -> Any:
        return table_pipeline(self.schema, self.inner(config))
