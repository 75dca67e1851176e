"""Tabular preprocessing as the first step of every candidate's pipeline.

A table task's candidates are scikit-learn estimators behind one
``ColumnTransformer`` that encodes the columns the way its schema
(``schema.table``) says:

* numeric and boolean columns: mean imputation, then standard scaling;
* categorical columns: most-frequent imputation, then one-hot encoding
  (a category not seen in training encodes as all zeros), except
  identifiers (below);
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

Identifiers. A categorical column whose values are nearly all distinct
(``identifier_columns``: sample ids, file names) is left out of the
features when the pipeline is fitted: one-hot, it would be one column per
training row (3,000 rows made a dense 3,000 x 3,000 matrix, 72 MB, per
pipeline), and no column of it says anything about a row not seen in
training. The decision is the fit's, on the rows it fits on, because the
schema has no kind for it and the candidate is built before any row is
read: ``IdentifierFreeColumnTransformer`` is a ``ColumnTransformer`` whose
``fit`` moves such columns from its categorical group to its remainder,
which drops them. The fitted transformer still takes the column (an unseen
id at ``infer`` is no error), and its ``transformers_`` name it under
``remainder``; it keeps ``ColumnTransformer``'s constructor and overrides
only ``fit_transform``, so an export writes it as a plain
``ColumnTransformer`` with that fitted state, and its ONNX graph keeps the
column as an input it does not read. A table whose features are all
identifiers keeps them (there is nothing else to learn from).
``OneHotEncoder(max_categories=...)`` or ``min_frequency`` would bound the
width too, but the category they group infrequent values into has no ONNX
form that onnxruntime accepts for unseen values.

The whole ``Pipeline([("preprocess", ...), ("model", estimator)])`` is
fitted on the training rows only (the grid fits it on the training side of
the split), so no statistic of a validation row leaks into a model, and the
stored model takes a pandas DataFrame with the original column names. Only
scikit-learn (and numpy) classes appear in the preprocessing, besides the
``ColumnTransformer`` subclass above, which an export writes as its
parent, so the exported pipeline loads with scikit-learn alone.

Exported as a file (``exported``), the fitted pipeline gets two more steps,
so that it takes the DataFrame its owner has as ``task.infer`` does, not
only the rows the client sends: ``names`` (column names as text, as the
client sends them: a headerless CSV's columns 0, 1, ... are the schema's
"0", "1", ...) and, first in each categorical or text column group,
``category_text``, the client's own spelling of a value as a category
(8000 and 8000.0 are "8000"), so that numbers reach the one-hot encoder as
the text it was fitted on. Both are made of pandas' and the standard
library's functions, so the file still loads with scikit-learn alone; the
service's own pipelines have neither (the rows they get are already so).

scikit-learn and pandas are imported when a pipeline or frame is built
(``IdentifierFreeColumnTransformer`` is made then, on first use).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ease_jupyter.schema.table import ColumnKind, TableSchema

__all__ = ["IDENTIFIER_MIN_DISTINCT", "IDENTIFIER_SHARE", "TEXT_FEATURES", "TEXT_TOKEN_PATTERN",
           "IdentifierFreeColumnTransformer", "ascii_lowercase", "category_text", "exported", "identifier_columns",
           "identifiers_left_out", "missing_as_nan", "names_as_text", "preprocessor", "table_pipeline", "to_frame",
           "TableBuilder"]

TEXT_FEATURES = 1000  # words of a text column's TF-IDF vocabulary
# Two or more characters, none of them an ASCII control, space, punctuation or
# symbol character (every non-ASCII character counts as part of a word).
TEXT_TOKEN_PATTERN = r"[^\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]{2,}"
# A categorical column is an identifier when its distinct values are at least
# this share of its present (non-missing) values, and at least this many: below
# the floor, its one-hot columns cost little, and a small table's categories
# may all differ by chance.
IDENTIFIER_SHARE = 0.9
IDENTIFIER_MIN_DISTINCT = 50
CATEGORICAL = "categorical"  # the preprocessor's group of categorical columns


def identifier_columns(frame: Any, names: Sequence[str]) -> list[str]:
    """The columns among ``names`` of a pandas DataFrame whose values are
    nearly all distinct (``IDENTIFIER_SHARE``, ``IDENTIFIER_MIN_DISTINCT``):
    ids and file names, one value per row, which a model cannot learn from."""
    out = []
    for name in names:
        present = frame[name].dropna()
        distinct = present.nunique()
        if distinct >= IDENTIFIER_MIN_DISTINCT and distinct >= IDENTIFIER_SHARE * len(present):
            out.append(name)
    return out


def identifiers_left_out(frame: Any, categorical: Sequence[str], n_features: int) -> list[str]:
    """The identifier columns among the ``categorical`` ones that a fit on
    ``frame`` leaves out: all of them, unless they are all of the table's
    ``n_features`` feature columns (then none: nothing else would be left)."""
    identifiers = identifier_columns(frame, categorical)
    return identifiers if len(identifiers) < n_features else []


def _without_identifiers(transformers: Sequence[Any], X: Any) -> list[Any] | None:
    """``transformers`` (a ColumnTransformer's groups) with the identifier
    columns of ``X`` out of the categorical group (a group left with no
    column goes too); None when none is left out."""
    groups = [list(group) for group in transformers]
    categorical = next((group for group in groups if group[0] == CATEGORICAL), None)
    if categorical is None or not hasattr(X, "columns"):
        return None
    n_features = sum(len(group[2]) for group in groups)
    left_out = set(identifiers_left_out(X, list(categorical[2]), n_features))
    if not left_out:
        return None
    categorical[2] = [c for c in categorical[2] if c not in left_out]
    return [tuple(group) for group in groups if len(group[2])]


def _identifier_free_class() -> type:
    """``IdentifierFreeColumnTransformer``, made (once) when first needed, so
    that importing this module loads no scikit-learn. Pickled by name, as a
    class of this module (``__getattr__`` below makes it on unpickling)."""
    made = globals().get("IdentifierFreeColumnTransformer")
    if made is not None:
        return made
    from sklearn.compose import ColumnTransformer

    class IdentifierFreeColumnTransformer(ColumnTransformer):
        """A ``ColumnTransformer`` whose fit leaves identifier columns out of
        its categorical group (``identifier_columns`` of the rows it fits
        on): they fall to the remainder, which drops them."""

        def fit_transform(self, X: Any, y: Any = None, **params: Any) -> Any:
            # The groups without identifiers are the ones fitted; the
            # parameter is given back as it was, so that get_params and
            # clone see the constructor's value.
            kept = _without_identifiers(self.transformers, X)
            if kept is None:
                return super().fit_transform(X, y, **params)
            given, self.transformers = self.transformers, kept
            try:
                return super().fit_transform(X, y, **params)
            finally:
                self.transformers = given

    IdentifierFreeColumnTransformer.__module__ = __name__
    IdentifierFreeColumnTransformer.__qualname__ = "IdentifierFreeColumnTransformer"
    globals()["IdentifierFreeColumnTransformer"] = IdentifierFreeColumnTransformer
    return IdentifierFreeColumnTransformer


def __getattr__(name: str) -> Any:
    if name == "IdentifierFreeColumnTransformer":
        return _identifier_free_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def category_text() -> Any:
    """A function of a DataFrame: the frame (of objects) with every present
    value as the text that stands for it as a category (missing values stay
    missing):

    * a whole float (8000.0, ``np.float32(8000)``): its integer's digits,
      "8000", as the int 8000 has them, so a number is one category whether
      it comes from an int, a float (pandas makes an int column with a
      missing value float) or a ``category`` column;
    * any other value: ``str(value)`` (text as it is, "0.5", "True").

    The client sends every categorical or text column so
    (``tabular.column_wire``), and an exported pipeline does the same to the
    frame it is given (``exported``). Made of pandas' and the standard
    library's functions only, which pickle by name, so an exported file
    loads without ease_jupyter; a column whose values are all text (every
    column of the rows the service stores) costs one look (``infer_dtype``)."""
    import functools
    import operator

    import pandas as pd
    from pandas.api.types import infer_dtype, is_float

    call = operator.methodcaller

    def then(*steps: Any) -> Any:
        """steps[-1](... steps[0](frame)): ``reduce`` over ``pipe``, picklable where a lambda is not."""
        return functools.partial(functools.reduce, pd.DataFrame.pipe, steps)

    def each(function: Any, **options: Any) -> Any:
        """``function`` of every value (``Series.map``, in every pandas since 2.0)."""
        return call("apply", call("map", function, **options))

    def columns(test: str) -> Any:
        """The frame's columns whose values are all text (test "eq") or not ("ne")."""
        names = then(call("apply", infer_dtype, skipna=True), call(test, "string"), call("__getitem__", call("copy")),
                     operator.attrgetter("index"))
        return call("__getitem__", names)

    floats = then(call("where", each(is_float)), call("astype", float))  # the floats, NaN elsewhere
    whole = then(call("mod", 1), call("eq", 0))  # of floats: whole and finite
    as_integers = then(floats, call("where", whole), each(functools.partial(operator.mod, "%d"), na_action="ignore"))
    numbers = then(call("mask", then(floats, whole), as_integers), each(str, na_action="ignore"))
    # Text columns are kept as they are (their missing values NaN); the others go value by value.
    return then(call("astype", object), call("where", then(columns("eq"), call("notna")), then(columns("ne"), numbers)))


def names_as_text() -> Any:
    """An exported table pipeline's first step's function:
    ``DataFrame.rename(columns=str)``, so that columns named 0, 1, ...
    (``pd.read_csv(path, header=None)``) are found under the names the task
    gives them, "0", "1", ..., as the client sends them."""
    import operator

    return operator.methodcaller("rename", columns=str)


def exported(model: Any) -> Any:
    """A fitted table pipeline (``table_pipeline``'s) as an export writes it:
    its fitted steps as they are, behind a ``names_as_text`` step and with a
    ``category_text`` step first in each categorical or text column group,
    so that it takes the DataFrame its owner has (int column names, numbers
    in a categorical column) as ``task.infer`` does. ``model`` itself is left
    as it is; anything but such a pipeline is returned unchanged."""
    import copy

    import pandas as pd
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer

    steps = getattr(model, "steps", None)
    if not (isinstance(model, Pipeline) and steps and steps[0][0] == "preprocess"
            and hasattr(steps[0][1], "transformers_") and hasattr(steps[0][1], "feature_names_in_")):
        return model

    def step(function: Any, columns: Any, fitted: bool) -> Any:
        made = FunctionTransformer(function, feature_names_out="one-to-one")
        # fitted on no rows: it learns nothing but the column names, which get_feature_names_out reads
        return made.fit(pd.DataFrame(columns=[str(c) for c in columns])) if fitted else made

    def with_text(groups: Sequence[Any], fitted: bool) -> list[Any]:
        out = []
        for name, group, columns in groups:
            if isinstance(group, Pipeline) and (name == CATEGORICAL or name.startswith("text_")):
                group = Pipeline([("category_text", step(category_text(), columns, fitted)), *group.steps])
            out.append((name, group, columns))
        return out

    preprocess = copy.copy(steps[0][1])
    preprocess.transformers = with_text(preprocess.transformers, fitted=False)
    preprocess.transformers_ = with_text(preprocess.transformers_, fitted=True)
    out = copy.copy(model)
    out.steps = [("names", step(names_as_text(), preprocess.feature_names_in_, fitted=True)),
                 ("preprocess", preprocess), *steps[1:]]
    return out


def preprocessor(schema: TableSchema) -> Any:
    """The unfitted ``IdentifierFreeColumnTransformer`` of ``schema``'s columns (dense output)."""
    import numpy as np
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
        steps.append((CATEGORICAL, Pipeline([
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
    return _identifier_free_class()(steps, remainder="drop", sparse_threshold=0.0)


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
