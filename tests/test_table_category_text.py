"""How a table's values are spelled, read and named on the notebook side,
without a service: one text per category whatever the column's dtype
(``zoo.preprocess.category_text``, which the client and an exported model
share), an exported pipeline that takes the DataFrame its owner has
(numbers in a categorical column, int column names), ``Decimal`` as numbers,
dates, times, periods and intervals refused by name, and a headerless CSV's
columns named by their labels as text."""

from __future__ import annotations

import datetime
import decimal
import math
import pickle

import numpy as np
import pandas as pd
import pytest

from ease_jupyter import tabular
from ease_jupyter.errors import DataError
from ease_jupyter.schema.table import ColumnKind, TableColumn, TableData
from ease_jupyter.zoo.preprocess import category_text, exported, table_pipeline, to_frame


def identity(array):
    return array


def spelled(value):
    """The rule, written out: a whole float as its integer's digits, any other
    value as its str, missing as None."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return str(int(value))
    return str(value)


VALUES = [8000, 8000.0, np.float32(8000), np.float64(8000.0), np.int64(8000), 0.5, np.float32(0.1), 1e-7, 1e20, 1e300,
          -0.0, -3.0, float("inf"), True, np.True_, "8000.0", "1.0", "abc", "Zürich", "", decimal.Decimal("1.50"),
          2**70 + 1, None, np.nan, pd.NA]


def test_category_text_spells_every_value_by_one_rule():
    frame = pd.DataFrame({"mixed": pd.Series(VALUES, dtype=object),
                          "backwards": pd.Series(VALUES[::-1], dtype=object),
                          "text": pd.Series((["a", None, "b c"] * 9)[:len(VALUES)], dtype=object),
                          "floats": pd.Series(([8000.0, 0.5, np.nan, 1e20] * 7)[:len(VALUES)])})
    out = category_text()(frame)
    assert list(out.columns) == list(frame.columns) and len(out) == len(frame)
    for name in frame.columns:
        for value, text in zip(frame[name].tolist(), out[name].tolist()):
            want = spelled(value)
            assert (pd.isna(text) if want is None else text == want), (name, value, text)
    assert out.loc[0, "mixed"] == "8000" and out.loc[5, "mixed"] == "0.5" and out.loc[13, "mixed"] == "True"
    assert out.loc[16, "mixed"] == "1.0"  # text stays as written: only numbers are spelled


def _wire(values, kind=None):
    column = tabular.column_wire(pd.Series(values, name="c"), identity, "X['c']", kind)
    texts = column["values"].tolist()
    return column["type"], [None if m else t for t, m in zip(texts, column["missing"].tolist())]


def test_one_category_has_one_spelling_whatever_the_dtype():
    dose = [0.5, 1.0, 2.0, np.nan]
    want = ("string", ["0.5", "1", "2", None])
    assert _wire(pd.Categorical(dose)) == want  # a category column of floats
    assert _wire(pd.Series(dose), ColumnKind.CATEGORICAL) == want  # plain floats declared categorical
    assert _wire(pd.Series([0.5, 1.0, 2.0, None], dtype=object), ColumnKind.CATEGORICAL) == want
    assert _wire(pd.Series([0.5, 1.0, "2", None], dtype=object)) == want  # numbers beside text
    zips = ("string", ["8000", "8001"])
    for form in ([8000, 8001], [8000.0, 8001.0], pd.Categorical([8000, 8001]), pd.Categorical([8000.0, 8001.0]),
                 pd.array([8000, 8001], dtype="Int64"), pd.Series([8000, "8001"], dtype=object)):
        assert _wire(form, ColumnKind.CATEGORICAL) == zips, form
    assert _wire([True, False, None], ColumnKind.CATEGORICAL) == ("string", ["True", "False", None])
    assert _wire(["1.0", "v1.0", None]) == ("string", ["1.0", "v1.0", None])  # text as it is


def test_category_text_and_an_exported_pipeline_pickle_without_ease_jupyter():
    from ease_jupyter.service.export import plain_pickle

    assert b"ease_jupyter" not in pickle.dumps(category_text())
    pipeline, stored, user, _ = _fitted()
    data, needs_cloudpickle = plain_pickle(exported(pipeline))
    assert not needs_cloudpickle and b"ease_jupyter" not in data
    again = pickle.loads(data)
    np.testing.assert_array_equal(again.predict(user), pipeline.predict(stored))


def _grades(n: int = 240, seed: int = 0) -> pd.DataFrame:
    """A table whose class follows its categories, numbers all: a column
    named 0 (a headerless CSV's), a category column of ints, int zip codes,
    float doses (a missing one)."""
    rng = np.random.default_rng(seed)
    grade, zips, dose = rng.integers(1, 4, n), rng.choice([8000, 8001], n), rng.choice([0.5, 1.0, 2.0], n)
    frame = pd.DataFrame({0: rng.normal(size=n), "grade": pd.Categorical(grade), "zip": zips, "dose": dose,
                          "y": np.where((grade == 2) * 1 + (zips == 8001) + (dose == 1.0) >= 2, "good", "bad")})
    frame.loc[3, "dose"] = np.nan
    return frame


def _decoded(wire) -> TableData:
    columns = {c["name"]: TableColumn.of(c["name"], c["type"], c["values"], c.get("missing")) for c in wire["table"]}
    return TableData.of(columns)


def _fitted():
    """(the pipeline fitted on the rows as the service stores them, those
    rows, the owner's own features, her labels)."""
    from sklearn.linear_model import LogisticRegression

    frame = _grades()
    schema = tabular.infer_schema(frame, "y", kinds={"zip": "categorical", "dose": "categorical"})
    X, y = tabular.split_target(frame, None, "y")
    wire = tabular.table_wire(X, identity, table=schema.to_dict())
    stored = to_frame(schema, schema.stored_arrays(_decoded(wire)))
    assert stored["zip"].iloc[0] in ("8000", "8001") and set(stored["dose"].dropna()) == {"0.5", "1", "2"}
    pipeline = table_pipeline(schema, LogisticRegression(C=100.0, max_iter=1000)).fit(stored, y.to_numpy())
    return pipeline, stored, frame.drop(columns="y"), y.to_numpy()


def test_an_exported_pipeline_takes_the_dataframe_its_owner_has():
    pipeline, stored, user, y = _fitted()
    served = pipeline.predict(stored)  # what task.infer answers: the client sends the rows so
    assert np.mean(served == y) == 1.0
    out = exported(pipeline)
    np.testing.assert_array_equal(out.predict(user), served)  # int column name, numbers in categorical columns
    np.testing.assert_array_equal(out.predict(stored), served)  # and the rows as the client sends them
    assert [name for name, _ in pipeline.steps] == ["preprocess", "model"]  # the service's own is left as it was
    assert [name for name, _ in out.steps] == ["names", "preprocess", "model"]
    categorical = out.named_steps["preprocess"].named_transformers_["categorical"]
    assert [name for name, _ in categorical.steps][0] == "category_text"
    assert list(out[:-1].get_feature_names_out())[:2] == ["numeric__0", "categorical__grade_1"]


@pytest.mark.parametrize("values, what", [
    ([datetime.date(2024, 1, d) for d in range(1, 7)], "dates (datetime.date)"),
    ([datetime.datetime(2024, 1, d, 8) for d in range(1, 7)], "dates (datetime.datetime)"),
    ([pd.Timestamp(2024, 1, d) for d in range(1, 7)], "dates (pandas.Timestamp)"),
    ([datetime.time(h) for h in range(6)], "times of day"),
    ([datetime.timedelta(hours=h) for h in range(6)], "durations"),
    (pd.PeriodIndex(["2024-01", None, "2024-03", "2024-04", "2024-05", "2024-06"], freq="M"), "periods"),
    (pd.arrays.IntervalArray.from_tuples([(0, 1), None, (2, 3), (3, 4), (4, 5), (5, 6)]), "intervals"),
])
def test_dates_times_periods_and_intervals_are_refused_by_name(values, what):
    if isinstance(values, list):  # objects, as pd.read_sql or a list of them gives them (not datetime64)
        values = pd.Series(values[:2] + [None] + values[3:], dtype=object)
    frame = pd.DataFrame({"x": np.arange(6.0), "when": values, "y": ["a", "b"] * 3})
    with pytest.raises(DataError) as info:
        tabular.infer_schema(frame, "y")
    assert info.value.field == "like['when']" and what in info.value.found and "convert" in info.value.expected
    schema = tabular.infer_schema(frame.drop(columns="when"), "y")
    with pytest.raises(DataError) as info:
        tabular.table_wire(frame.drop(columns="y"), identity, table=schema.to_dict())
    assert info.value.field == "X['when']"


def test_decimals_are_numbers_and_a_category_column_keeps_its_categories():
    prices = [decimal.Decimal(f"{v}.25") for v in range(6)]
    frame = pd.DataFrame({"price": prices, "bin": pd.cut(np.arange(6.0), [-1, 2, 6]), "y": ["a", "b"] * 3})
    frame.loc[1, "price"] = None
    schema = tabular.infer_schema(frame, "y")
    assert schema.kinds() == {"price": ColumnKind.NUMERIC, "bin": ColumnKind.CATEGORICAL}
    price, bins = tabular.table_wire(frame.drop(columns="y"), identity, table=schema.to_dict())["table"]
    assert price["type"] == "number" and price["values"][0] == 0.25 and np.isnan(price["values"][1])
    assert bins["values"].tolist()[:4] == ["(-1, 2]", "(-1, 2]", "(-1, 2]", "(2, 6]"]  # pd.cut's bins as text
    assert tabular.labels_wire(pd.Series(prices[:2])) == ["0.25", "1.25"]  # labels keep their rules


def test_a_headerless_csvs_columns_are_named_by_their_labels_as_text(tmp_path):
    path = tmp_path / "iris.csv"
    path.write_text("5.1,3.5,1,setosa\n6.2,2.9,2,virginica\n4.9,3.0,1,setosa\n6.7,3.1,2,virginica\n")
    frame = pd.read_csv(path, header=None)
    assert list(frame.columns) == [0, 1, 2, 3]
    for target in (3, "3", np.int64(3)):
        schema = tabular.infer_schema(frame, target, kinds={2: "categorical"})
        assert schema.target == "3" and schema.classes == ("setosa", "virginica")
        assert schema.kinds() == {"0": ColumnKind.NUMERIC, "1": ColumnKind.NUMERIC, "2": ColumnKind.CATEGORICAL}
    assert tabular.infer_schema(frame, 3, kinds={"2": "categorical"}) == schema
    with pytest.raises(DataError) as info:
        tabular.infer_schema(frame, 7)
    assert info.value.field == "target" and info.value.found == "7" and "['0', '1', '2', '3']" in info.value.expected
    info_ = {"table": schema.to_dict()}
    X, y = tabular.feed_parts(frame, None, info_, identity)
    assert [c["name"] for c in X["table"]] == ["0", "1", "2"] and y == ["setosa", "virginica", "setosa", "virginica"]
    assert X["table"][2]["values"].tolist() == ["1", "2", "1", "2"]
    inputs = tabular.inputs_for(frame, info_, identity)  # the rows as fed: the target column is left out
    assert [c["name"] for c in inputs["table"]] == ["0", "1", "2"]
    assert list(frame.columns) == [0, 1, 2, 3]  # her frame keeps its names
