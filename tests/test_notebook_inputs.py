"""What a notebook hands the client, before any service: pandas frames of
any numeric dtype become float arrays, object arrays that are not numbers
are a DataError naming X or y, table schemas refuse duplicate columns and
name a missing label, ``%easeml`` words lose their quotes, and a
shape hint never scrambles an image."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from IPython.core.magic_arguments import parse_argstring

from ease_jupyter import tabular
from ease_jupyter.client import Client
from ease_jupyter.errors import DataError
from ease_jupyter.magics import EaseMLMagics, unquote
from ease_jupyter.magics.errors import hint
from ease_jupyter.service.arrays import decode

TENSOR_INFO = {"program": "{input: {[Tensor[3]], []}, output: {[Tensor[2]], []}}", "table": None}


def offline_client() -> Client:
    # Arrays this small go inline: encoding them sends nothing.
    return Client("http://127.0.0.1:9", "token", register=False)


@pytest.mark.parametrize("column", [
    [True, False, True, False],
    pd.array([1, None, 3, 4], dtype="Int64"),
    pd.array([1.0, None, 3.0, 4.0], dtype="Float64"),
    pd.array([True, None, False, True], dtype="boolean"),
    pd.Series([1.5, None, 3.0, 4.0], dtype="float64[pyarrow]"),
    pd.Series([True, None, False, True], dtype="bool[pyarrow]"),
])
def test_a_frame_of_booleans_nullable_or_pyarrow_numbers_goes_as_float64(column):
    frame = pd.DataFrame({"a": column, "b": [0.5, 1.5, 2.5, 3.5], "c": [1.0, 2.0, 3.0, 4.0]})
    X, _ = tabular.feed_parts(frame, [0, 1, 0, 1], TENSOR_INFO, lambda a: a)
    assert X.dtype == np.float64 and X.shape == (4, 3)
    expected = pd.Series(column).astype("float64").to_numpy()  # NA as NaN
    np.testing.assert_array_equal(X[:, 0], expected)
    np.testing.assert_array_equal(decode("X", offline_client()._array(X)), X)  # .npy without pickles
    inputs = tabular.inputs_for(frame, TENSOR_INFO, lambda a: a)
    assert inputs.dtype == np.float64 and inputs.shape == (4, 3)


@pytest.mark.parametrize("labels", [
    pd.Series([0, 1, 0, 1], dtype=object),
    pd.Series([0, 1, 0, 1], dtype="Int64"),
    pd.Series([0, 1, 0, 1], dtype="int64[pyarrow]"),
    np.array([0, 1, 0, 1], dtype=object),
])
def test_numeric_labels_of_any_dtype_go_as_numbers(labels):
    if isinstance(labels, pd.Series):  # "numbers as arrays": a numeric array already, not objects
        assert tabular.labels_wire(labels).dtype.kind in "iuf"
    wire = offline_client()._array(tabular.labels_wire(labels), "y")
    sent = decode("y", wire)
    assert sent.dtype.kind in "iuf"
    np.testing.assert_array_equal(sent, [0, 1, 0, 1])


def test_an_object_array_of_numbers_is_sent_as_numbers():
    sent = decode("X", offline_client()._array(np.array([[1, 2.5, True]] * 2, dtype=object)))
    np.testing.assert_array_equal(sent, [[1.0, 2.5, 1.0]] * 2)


@pytest.mark.parametrize("field, array, where", [
    ("X", np.array([[1.0, "two", 3.0]], dtype=object), "X[0]"),
    ("X", pd.DataFrame({"a": [1.0, 2.0], "s": ["x", "y"]}), "X[0]"),
    ("y", np.array([0, None, 1], dtype=object), "y[1]"),
])
def test_an_object_array_that_is_not_numbers_is_a_data_error_naming_it(field, array, where):
    if isinstance(array, pd.DataFrame):
        array, _ = tabular.feed_parts(array, [0, 1], TENSOR_INFO, lambda a: a)
    with pytest.raises(DataError) as caught:
        offline_client()._array(array, field)
    assert caught.value.field == where and "numbers" in caught.value.expected


def test_a_schema_from_a_frame_with_a_column_name_used_twice_is_refused_by_name():
    twice = pd.DataFrame([[1, 2, "a"], [3, 4, "b"]], columns=["a", "a", "y"])
    with pytest.raises(DataError) as caught:
        tabular.infer_schema(twice, "y")
    assert caught.value.field == "like['a']" and caught.value.found == "a column name used twice"
    target_twice = pd.DataFrame([[1, "a", "b"], [3, "b", "a"]], columns=["a", "y", "y"])
    with pytest.raises(DataError, match="used twice"):
        tabular.infer_schema(target_twice, "y")


@pytest.mark.parametrize("missing", [pd.array([1, None, 2], dtype="Int64"), pd.array(["a", None, "b"], dtype="string")])
def test_a_missing_nullable_label_is_a_missing_label(missing):
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": missing})
    with pytest.raises(DataError) as caught:
        tabular.infer_schema(frame, "y")
    assert caught.value.field == "like['y'][1]" and caught.value.found == "a missing label"


def args(line: str):
    return unquote(parse_argstring(EaseMLMagics.easeml, line))


def test_magic_words_lose_one_level_of_quotes():
    task = args("""task 'penguins' --from df --target "penguin species" --program 'input: [4] output: [3]'""")
    assert (task.name, task.like, task.target, task.program) == ("penguins", "df", "penguin species",
                                                                  "input: [4] output: [3]")
    assert args('export p "my model.onnx" --format "onnx"').values == ["my model.onnx"]
    assert args("export p 'my model.onnx'").format is None
    assert args('export p "my model.onnx" --format "onnx"').format == "onnx"
    assert args("task p --target species").target == "species"  # unquoted words as they are
    assert args('task p --target "it\'s"').target == "it's"


def test_a_quoted_expression_is_the_text_inside_it():
    # feed, infer and model evaluate their values, --from too: a quoted one is a path, taken literally.
    line = args(r"""feed p "data/my file.csv" y""")
    assert [eval(v, {}, {"y": 1}) for v in line.values] == ["data/my file.csv", 1]
    assert eval(args(r"infer p 'C:\new\t.csv'").values[0]) == r"C:\new\t.csv"
    assert eval(args("task p --from 'penguins.csv' --target species").like) == "penguins.csv"
    assert args("task p --from df --target species").like == "df"


@pytest.mark.parametrize("found, expected, tip", [
    ("(4, 3, 32, 32)", "(n, 32, 32, 3)", "transpose it: X.transpose(0, 2, 3, 1)"),  # channels first, HWC task
    ("(4, 32, 32, 3)", "(n, 3, 32, 32)", "transpose it: X.transpose(0, 3, 1, 2)"),
    ("(4, 1, 28, 28)", "(n, 28, 28, 1)", "transpose it: X.transpose(0, 2, 3, 1)"),
    ("(100, 784)", "(n, 28, 28, 1)", "reshape it: X.reshape(-1, 28, 28, 1)"),    # flat rows
    ("(100, 28, 28)", "(n, 28, 28, 1)", "reshape it: X.reshape(-1, 28, 28, 1)"),  # an axis of size 1 to add
    ("(100, 28, 28, 1)", "(n, 28, 28)", "reshape it: X.reshape(-1, 28, 28)"),     # or to drop
    ("(4, 16, 49)", "(n, 28, 28)", None),  # the same numbers, neither flat nor reordered
    ("(6, 5)", "(n, 4)", None),
])
def test_a_shape_hint_transposes_reordered_dims_and_reshapes_flat_rows_or_size_one_axes(found, expected, tip):
    error = DataError("X", f"shape {found}", f"shape {expected} with n the number of examples")
    assert hint(error) == tip
    pixels = np.arange(4 * 3 * 32 * 32).reshape(4, 3, 32, 32)
    if tip and tip.startswith("transpose") and found == "(4, 3, 32, 32)":
        moved = eval(tip.split(": ", 1)[1], {"X": pixels})
        assert moved.shape == (4, 32, 32, 3) and (moved[:, 5, 7, :] == pixels[:, :, 5, 7]).all()
