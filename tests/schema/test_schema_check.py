"""check_data: what it accepts, how it normalises, and how it names bad data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from ease_jupyter.errors import DataError
from ease_jupyter.schema import CheckedData, check_data, parse
from ease_jupyter.schema.check import MAX_DEPTH, check_inputs

IMAGE = parse("input: [8,8,3] output: [3]")
GRAY = parse("input: [8,8,1] output: [3]")
FLAT = parse("input: [4] output: [1]")
MULTI_OUT = parse("input: [4] output: [2,2]")
NAMED = parse("{input: {[img :: Tensor[2,2], meta :: Tensor[3]], []}, output: [2]}")
UNNAMED2 = parse("{input: {[Tensor[2], Tensor[3]], []}, output: [2]}")
SERIES = parse("{input: {[Tensor[2]], [next]}, output: [2]}")
SCALAR_SERIES = parse("{input: {[Tensor[1]], [next]}, output: [2]}")
TRANSLATE = parse("{input: {[Tensor[2]], [next]}, output: {[Tensor[3]], [next]}}")
TREE = parse("{input: {[Tensor[3]], [left, right]}, output: [2]}")
RICH_CHAIN = parse("{input: {[Tensor[2], w :: Tensor[1]], [next]}, output: [2]}")


def rejects(program, X, y=None) -> DataError:
    with pytest.raises(DataError) as info:
        check_data(program, X, y)
    return info.value


def chain(*steps, key=0, field="next"):
    """A chain record, root first."""
    node = None
    for step in reversed(steps):
        node = {key: step, field: node}
    return node


# -- plain tensors --------------------------------------------------------------


def test_numpy_is_copied_to_read_only_float32():
    X = np.arange(5 * 8 * 8 * 3, dtype=np.float64).reshape(5, 8, 8, 3)
    data = check_data(IMAGE, X, [0, 1, 2, 1, 0])
    assert isinstance(data, CheckedData) and data.n == 5
    assert data.X.dtype == np.float32 and data.X.shape == (5, 8, 8, 3)
    np.testing.assert_array_equal(data.X, X.astype(np.float32))
    assert not data.X.flags.writeable and not data.y.flags.writeable
    X[0, 0, 0, 0] = 99.0  # the checked copy does not follow the caller's array
    assert data.X[0, 0, 0, 0] == 0.0
    assert data.y.dtype == np.int64
    np.testing.assert_array_equal(data.y, [0, 1, 2, 1, 0])


def test_checked_data_is_frozen():
    data = check_data(FLAT, np.zeros((2, 4)), [1.0, 2.0])
    with pytest.raises(AttributeError):
        data.n = 3


def test_torch_tensors_with_grad_and_bfloat16():
    X = torch.randn(4, 8, 8, 3, requires_grad=True)
    data = check_data(IMAGE, X, torch.tensor([0, 2, 1, 2]))
    np.testing.assert_allclose(data.X, X.detach().numpy())
    np.testing.assert_array_equal(data.y, [0, 2, 1, 2])
    half = check_data(FLAT, torch.ones(3, 4, dtype=torch.bfloat16), torch.tensor([1.5, 2.5, 3.5]))
    assert half.X.dtype == np.float32 and float(half.X.sum()) == 12.0
    np.testing.assert_allclose(half.y[:, 0], [1.5, 2.5, 3.5])


def test_pandas_dataframe_rows_are_examples():
    df = pd.DataFrame({"a": [1, 2, 3], "b": [4.0, 5.0, 6.0], "c": [True, False, True], "d": np.arange(3, dtype=np.int8)})
    data = check_data(FLAT, df, pd.Series([0.5, 1.5, 2.5]))
    np.testing.assert_array_equal(data.X, [[1, 4, 1, 0], [2, 5, 0, 1], [3, 6, 1, 2]])
    assert data.y.shape == (3, 1)  # a scalar output per example is accepted as (n,)
    labels = check_data(IMAGE, np.zeros((3, 8, 8, 3)), pd.Series([2, 0, 1]))
    np.testing.assert_array_equal(labels.y, [2, 0, 1])


def test_pandas_series_of_array_cells():
    X = pd.Series([np.full(4, i, dtype=np.float64) for i in range(3)])
    data = check_data(FLAT, X, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(data.X[:, 0], [0, 1, 2])


def test_python_lists_and_bools():
    data = check_data(FLAT, [[1, 2, 3, 4], [True, False, 0.5, -1]], [3, 4])
    np.testing.assert_array_equal(data.X, [[1, 2, 3, 4], [1, 0, 0.5, -1]])
    np.testing.assert_array_equal(data.y, [[3], [4]])


def test_missing_trailing_channel_of_size_one():
    data = check_data(GRAY, np.ones((2, 8, 8)), [0, 1])
    assert data.X.shape == (2, 8, 8, 1)
    full = check_data(GRAY, np.ones((2, 8, 8, 1)), [0, 1])
    np.testing.assert_array_equal(full.X, data.X)


def test_regression_outputs_keep_their_shape():
    data = check_data(MULTI_OUT, np.zeros((3, 4)), np.arange(12).reshape(3, 2, 2))
    assert data.y.dtype == np.float32 and data.y.shape == (3, 2, 2)


def test_check_inputs_has_no_outputs():
    data = check_inputs(IMAGE, np.zeros((2, 8, 8, 3)))
    assert data.y is None and data.n == 2
    assert check_data(IMAGE, np.zeros((2, 8, 8, 3))).y is None


# -- classification labels ------------------------------------------------------


@pytest.mark.parametrize(
    "y",
    [
        [2, 0, 1, 1],
        np.array([2.0, 0.0, 1.0, 1.0]),
        np.array([[2], [0], [1], [1]]),
        np.eye(3)[[2, 0, 1, 1]],
        np.eye(3, dtype=bool)[[2, 0, 1, 1]],
        torch.nn.functional.one_hot(torch.tensor([2, 0, 1, 1]), 3),
        pd.DataFrame(np.eye(3)[[2, 0, 1, 1]]),
        np.array([2, 0, 1, 1], dtype=np.uint8),
    ],
    ids=["list", "whole floats", "column", "one-hot", "one-hot bool", "torch one-hot", "dataframe one-hot", "uint8"],
)
def test_labels_are_class_indices(y):
    data = check_data(IMAGE, np.zeros((4, 8, 8, 3)), y)
    assert data.y.dtype == np.int64
    np.testing.assert_array_equal(data.y, [2, 0, 1, 1])


def test_bool_labels_for_two_classes():
    binary = parse("input: [2] output: [2]")
    np.testing.assert_array_equal(check_data(binary, np.zeros((3, 2)), [True, False, True]).y, [1, 0, 1])


def test_labels_for_a_named_output_tensor():
    program = parse("{input: [2], output: {[label :: Tensor[4]], []}}")
    np.testing.assert_array_equal(check_data(program, np.zeros((2, 2)), {"label": [3, 1]}).y, [3, 1])


@pytest.mark.parametrize(
    "y, field, found, expected",
    [
        ([0, 1, 3, 5], "y[2]", "the label 3 (2 labels out of range in y)", "a class index in [0, 3)"),
        ([0, -1, 2, 1], "y[1]", "the label -1", "[0, 3)"),
        ([0.0, 1.0, 2.0, 3.0], "y[3]", "the label 3", "[0, 3)"),
        ([0, 1.5, 2, 1], "y[1]", "the non-integer label 1.5", "a whole-number class index"),
        ([0, np.nan, 2, np.inf], "y[1]", "2 NaN or inf values in y", "finite numbers"),
        (np.array([[1, 0, 0], [0.2, 0.8, 0], [0, 0, 1], [1, 0, 0]]), "y[1]", "the row [0.2, 0.8, 0. ]", "one-hot row of length 3"),
        (np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [1, 0, 0]]), "y[2]", "the row [1., 1., 0.]", "exactly one 1"),
        (np.array([[1, 0, 0], [0, 0, 0], [0, 0, 1], [1, 0, 0]]), "y[1]", "the row [0., 0., 0.]", "exactly one 1"),
        (np.zeros((4, 5)), "y", "shape (4, 5)", "class indices of shape (4,) or one-hot rows of shape (4, 3)"),
        (["cat", "dog", "cat", "dog"], "y[0]", "a string 'cat'", "numbers"),
        ([0, 1, 2], "y", "3 examples", "4, one per example of X"),
        (np.array(1), "y", "a single number", "one entry per example"),
    ],
)
def test_bad_labels(y, field, found, expected):
    err = rejects(IMAGE, np.zeros((4, 8, 8, 3)), y)
    assert err.field == field
    assert found in err.found
    assert expected in err.expected


# -- bad plain tensors ------------------------------------------------------------


def test_wrong_shape_says_what_was_expected():
    err = rejects(IMAGE, np.zeros((5, 8, 8)), [0] * 5)
    assert err.field == "X"
    assert err.found == "shape (5, 8, 8)"
    assert "shape (n, 8, 8, 3)" in err.expected and "n the number of examples" in err.expected


def test_no_flattening_convenience():
    err = rejects(IMAGE, np.zeros((5, 192)), [0] * 5)
    assert (err.field, err.found) == ("X", "shape (5, 192)")


def test_single_example_gets_a_hint():
    err = rejects(IMAGE, np.zeros((8, 8, 3)))
    assert "single example" in err.expected and "X[None]" in err.expected


def test_trailing_channel_hint_is_shown():
    err = rejects(GRAY, np.zeros((2, 8, 7)), [0, 1])
    assert "(n, 8, 8, 1) or (n, 8, 8)" in err.expected


def test_nan_and_inf_are_counted_with_the_first_index():
    X = np.zeros((6, 8, 8, 3))
    X[3, 2, 1, 0] = np.nan
    X[5, 0, 0, 0] = np.inf
    X[4, 1, 1, 1] = -np.inf
    err = rejects(IMAGE, X, [0] * 6)
    assert err.field == "X[3]"
    assert "3 NaN or inf values in X" in err.found and "position (2, 1, 0)" in err.found
    assert err.expected == "finite numbers"


def test_nan_in_regression_outputs():
    y = np.zeros((3, 1))
    y[2, 0] = np.nan
    err = rejects(FLAT, np.zeros((3, 4)), y)
    assert err.field == "y[2]" and "1 NaN or inf value in y" in err.found


def test_float64_beyond_float32_range():
    X = np.zeros((2, 4))
    X[1, 2] = 1e300
    err = rejects(FLAT, X, [0.0, 0.0])
    assert err.field == "X[1]" and "too large for float32" in err.found


@pytest.mark.parametrize(
    "X, field, found",
    [
        (np.array([["1", "2", "3", "d"]]), "X[0]", "a string '1' at position (0,)"),
        (np.ones((1, 4), dtype=np.complex64), "X", "complex numbers"),
        (np.array([[np.datetime64("2020-01-01")] * 4]), "X", "dates"),
        ([[1, 2, None, 4]], "X[0]", "None at position (2,)"),
        ([[1, 2, 3, 4], [1, 2, "x", 4]], "X[1]", "a string 'x' at position (2,)"),
        ([[1, 2, 3, 4], [1, 2, 3]], "X[1]", "shape (3,)"),
        ([[1, 2, 3, 4], None], "X[1]", "None"),
        ([[1, 2, 3, 4], [1, 2, 3, complex(1, 2)]], "X", "complex numbers (dtype complex128)"),
        (pd.DataFrame({"a": ["x", "y"], "b": [1, 2], "c": [1, 2], "d": [1, 2]}), "X[0]", "a string 'x'"),
        (pd.DataFrame({"a": pd.array([1, None], dtype="Int64"), "b": [1, 2], "c": [1, 2], "d": [1, 2]}), "X[1]", "1 NaN or inf value"),
        ("1,2,3,4", "X", "a string"),
        (None, "X", "None"),
        (7.0, "X", "a single number"),
    ],
    ids=["str", "complex", "datetime", "None", "str-in-list", "ragged", "None-row", "complex-in-list", "df-str", "df-NA", "text", "none", "scalar"],
)
def test_bad_element_types(X, field, found):
    err = rejects(FLAT, X)
    assert err.field == field
    assert found in err.found


def test_mismatched_lengths():
    err = rejects(FLAT, np.zeros((5, 4)), np.zeros(4))
    assert (err.field, err.found, err.expected) == ("y", "4 examples", "5, one per example of X")


@pytest.mark.parametrize("X", [np.zeros((0, 4)), [], torch.zeros(0, 4), pd.DataFrame(np.zeros((0, 4)))])
def test_empty_data(X):
    err = rejects(FLAT, X, [])
    assert (err.field, err.found, err.expected) == ("X", "0 examples", "at least one example")


def test_program_must_be_a_program():
    with pytest.raises(TypeError, match="Program"):
        check_data("input: [4] output: [1]", np.zeros((1, 4)))


def test_data_error_is_a_value_error():
    with pytest.raises(ValueError):
        check_data(FLAT, np.zeros((1, 3)))


# -- several tensors --------------------------------------------------------------


def test_named_tensors_as_dict_tuple_records_and_dataframe():
    img, meta = np.arange(16.0).reshape(4, 2, 2), np.arange(12.0).reshape(4, 3)
    by_name = check_data(NAMED, {"meta": meta, "img": img}, [0, 1, 0, 1])
    assert isinstance(by_name.X, tuple) and len(by_name.X) == 2
    np.testing.assert_array_equal(by_name.X[0], img)  # in the program's field order
    np.testing.assert_array_equal(by_name.X[1], meta)
    by_position = check_data(NAMED, (img, meta), [0, 1, 0, 1])
    records = check_data(NAMED, [{"img": img[i], "meta": meta[i]} for i in range(4)], [0, 1, 0, 1])
    for other in (by_position, records):
        for a, b in zip(other.X, by_name.X):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == np.float32


def test_unnamed_tensors_keyed_by_position():
    a, b = np.zeros((2, 2)), np.ones((2, 3))
    for X in ({0: a, 1: b}, {"0": a, "1": b}, [a, b], [{0: a[i], "1": b[i]} for i in range(2)]):
        data = check_data(UNNAMED2, X, [0, 1])
        np.testing.assert_array_equal(data.X[1], b)


def test_dataframe_columns_as_named_scalar_tensors():
    program = parse("{input: {[age :: Tensor[1], height :: Tensor[1]], []}, output: [1]}")
    df = pd.DataFrame({"height": [1.8, 1.6], "age": [30, 40]})
    data = check_data(program, df, [1.0, 2.0])
    np.testing.assert_allclose(data.X[0][:, 0], [30, 40])
    np.testing.assert_allclose(data.X[1][:, 0], [1.8, 1.6])


def test_single_tensor_as_dict_or_records():
    X = np.arange(8.0).reshape(2, 4)
    np.testing.assert_array_equal(check_data(FLAT, {0: X}, [0.0, 1.0]).X, X)
    named = parse("{input: {[v :: Tensor[4]], []}, output: [1]}")
    np.testing.assert_array_equal(check_data(named, {"v": X}, [0.0, 1.0]).X, X)
    np.testing.assert_array_equal(check_data(named, [{"v": X[0]}, {"v": X[1]}], [0.0, 1.0]).X, X)


@pytest.mark.parametrize(
    "X, field, found, expected",
    [
        ({"img": np.zeros((4, 2, 2))}, "X.meta", "no such key", "meta :: Tensor[3]"),
        ({"img": np.zeros((4, 2, 2)), "meta": np.zeros((4, 3)), "extra": 1}, "X", "unknown key 'extra'", "'img' -> img :: Tensor[2,2]"),
        ({"img": np.zeros((4, 2, 2)), "meta": np.zeros((3, 3))}, "X[:].meta", "3 examples", "4, like X[:].img"),
        ({"img": np.zeros((4, 2, 2)), "meta": np.zeros((4, 4))}, "X[:].meta", "shape (4, 4)", "shape (n, 3)"),
        ((np.zeros((4, 2, 2)),), "X", "a tuple of 1 arrays", "2 arrays, one per tensor field"),
        (np.zeros((4, 7)), "X", "a ndarray", "a tuple of 2 arrays"),
        ([{"img": np.zeros((2, 2)), "meta": np.zeros(3)}, {"img": np.zeros((2, 2))}], "X[1].meta", "no such key", "Tensor[3]"),
        ([{"img": np.zeros((2, 2)), "meta": [0, np.inf, 0]}], "X[0].meta", "1 NaN or inf value", "finite"),
    ],
)
def test_bad_multi_tensor_data(X, field, found, expected):
    err = rejects(NAMED, X, [0, 1, 0, 1])
    assert err.field == field
    assert found in err.found
    assert expected in err.expected


def test_nan_in_a_column_names_the_example_and_field():
    meta = np.zeros((4, 3))
    meta[2, 1] = np.nan
    err = rejects(NAMED, {"img": np.zeros((4, 2, 2)), "meta": meta}, [0, 1, 0, 1])
    assert err.field == "X[2].meta" and "position (1,)" in err.found


# -- chains (time series) -----------------------------------------------------------


def test_chain_array_form():
    X = np.arange(2 * 5 * 2, dtype=np.int32).reshape(2, 5, 2)
    data = check_data(SERIES, X, [0, 1])
    assert data.X.dtype == np.float32 and data.X.shape == (2, 5, 2)
    np.testing.assert_array_equal(data.X, X)


def test_chain_records_of_equal_length_are_stacked():
    X = [chain([1, 2], [3, 4], [5, 6]), chain([7, 8], [9, 10], [11, 12])]
    data = check_data(SERIES, X, [0, 1])
    assert data.X.shape == (2, 3, 2)
    np.testing.assert_array_equal(data.X[1], [[7, 8], [9, 10], [11, 12]])
    assert not data.X.flags.writeable


def test_chains_of_different_lengths_stay_a_list():
    X = [chain([1, 2], [3, 4]), chain([5, 6]), np.array([[0, 0], [1, 1], [2, 2]])]
    data = check_data(SERIES, X, [0, 1, 1])
    assert isinstance(data.X, list) and [c.shape for c in data.X] == [(2, 2), (1, 2), (3, 2)]
    assert all(c.dtype == np.float32 and not c.flags.writeable for c in data.X)
    np.testing.assert_array_equal(data.X[0], [[1, 2], [3, 4]])


def test_chain_record_conveniences():
    # a missing recursive field ends the chain, JSON string keys work,
    # and scalars stand for Tensor[1]
    X = [{"0": 0.5, "next": {0: 1.5}}, {0: [2.5], "next": {"0": [3.5], "next": None}}]
    data = check_data(SCALAR_SERIES, X, [0, 1])
    assert data.X.shape == (2, 2, 1)
    np.testing.assert_array_equal(data.X[:, :, 0], [[0.5, 1.5], [2.5, 3.5]])
    assert check_data(SCALAR_SERIES, np.zeros((3, 4)), [0, 1, 0]).X.shape == (3, 4, 1)


def test_chains_may_share_tails_across_examples():
    tail = chain([5, 6])
    X = [{0: [1, 2], "next": tail}, {0: [3, 4], "next": tail}]
    data = check_data(SERIES, X, [0, 1])
    np.testing.assert_array_equal(data.X[:, 1], [[5, 6], [5, 6]])


def test_torch_leaves_in_records():
    X = [chain(torch.tensor([1.0, 2.0]), torch.tensor([3, 4]))]
    np.testing.assert_array_equal(check_data(SERIES, X, [1]).X, [[[1, 2], [3, 4]]])


def test_time_series_translation_outputs():
    X = [chain([1, 2], [3, 4])]
    y = [chain([1, 2, 3], [4, 5, 6])]
    data = check_data(TRANSLATE, X, y)
    assert data.y.shape == (1, 2, 3) and data.y.dtype == np.float32
    err = rejects(TRANSLATE, X, [chain([1, 2, 3]), chain([1, 2, 3])])
    assert (err.field, err.found) == ("y", "2 examples")
    err = rejects(TRANSLATE, X, [chain([1, 2, 3], [4, 5])])
    assert err.field == "y[0].next[0]" and err.found == "shape (2,)"


def test_deep_chain_within_the_limit_needs_no_recursion():
    deep = chain(*([[0.0, 1.0]] * MAX_DEPTH))
    data = check_data(SERIES, [deep], [1])
    assert data.X.shape == (1, MAX_DEPTH, 2)


def test_too_deep_chain():
    too_deep = chain(*([[0.0, 1.0]] * (MAX_DEPTH + 1)))
    err = rejects(SERIES, [too_deep], [1])
    assert err.field == f"X[0](.next*{MAX_DEPTH})"
    assert f"deeper than {MAX_DEPTH}" in err.found
    err = rejects(SERIES, np.zeros((1, MAX_DEPTH + 1, 2)), [1])
    assert err.field == "X" and f"at most {MAX_DEPTH}" in err.expected


def test_cycle_is_rejected():
    a = {0: [1, 2]}
    b = {0: [3, 4], "next": a}
    a["next"] = b
    err = rejects(SERIES, [chain([0, 0]), a], [0, 1])
    assert err.field == "X[1].next.next"
    assert "already used" in err.found and "no reuse" in err.expected


def test_self_loop_is_rejected():
    a = {0: [1, 2]}
    a["next"] = a
    assert rejects(SERIES, [a], [0]).field == "X[0].next"


@pytest.mark.parametrize(
    "X, field, found",
    [
        ([chain([1, 2], [3, 4], [5, 6]), chain([1, 2], [3, 4], [5, 6, 7])], "X[1].next.next[0]", "shape (3,)"),
        ([chain([1, 2]), {0: [1, 2], "next": [3, 4]}], "X[1].next", "a list of length 2"),
        ([chain([1, 2]), {0: [1, 2], "nxt": None}], "X[1]", "unknown key 'nxt'"),
        ([chain([1, 2]), {"next": None}], "X[1][0]", "no such key"),
        ([{0: [1, 2], "0": [1, 2]}], "X[0][0]", "both keys 0 and '0'"),
        ([{True: [1, 2]}], "X[0]", "unknown key True"),
        ([chain([1, 2], [np.nan, 2])], "X[0].next[0]", "1 NaN or inf value"),
        ([chain([1, 2], ["a", 2])], "X[0].next[0]", "a string 'a' at position (0,)"),
        ([chain([1, 2]), None], "X[1]", "None"),
        ([np.zeros((0, 2))], "X[0]", "a chain of 0 steps"),
        ([np.zeros((3, 3))], "X[0]", "shape (3, 3)"),
        (np.zeros((2, 3)), "X", "shape (2, 3)"),
        (np.zeros((2, 0, 2)), "X", "a chain of 0 steps"),
        ({0: [1, 2], "next": None}, "X", "a single record"),
        ([], "X", "0 examples"),
    ],
)
def test_bad_chains(X, field, found):
    err = rejects(SERIES, X)
    assert err.field == field
    assert found in err.found


def test_record_errors_list_the_expected_keys():
    err = rejects(SERIES, [{0: [1, 2], "prev": None}])
    assert err.expected == "keys 0 -> Tensor[2], 'next' -> a record or None"


def test_nan_inside_an_array_chain_names_example_and_step():
    X = np.zeros((3, 4, 2))
    X[2, 3, 1] = np.nan
    err = rejects(SERIES, X, [0, 1, 0])
    assert err.field == "X[2]" and "position (3, 1)" in err.found


# -- trees and other recursive types -----------------------------------------------


def leaf(*v):
    return {0: list(v)}


def test_trees_are_normalised_records():
    X = [{"0": [1, 2, 3], "left": leaf(4, 5, 6), "right": {0: np.array([7, 8, 9]), "left": leaf(1, 1, 1), "right": None}}]
    data = check_data(TREE, X, [1])
    (root,) = data.X
    assert set(root) == {0, "left", "right"}
    assert root[0].dtype == np.float32 and not root[0].flags.writeable
    np.testing.assert_array_equal(root["left"][0], [4, 5, 6])
    assert root["left"]["left"] is None and root["left"]["right"] is None
    np.testing.assert_array_equal(root["right"]["left"][0], [1, 1, 1])
    assert root["right"]["right"] is None
    assert X[0]["right"]["right"] is None and "0" in X[0]  # the caller's data is untouched


def test_tree_subtrees_shared_between_examples_are_fine():
    shared = leaf(1, 2, 3)
    data = check_data(TREE, [{0: [0, 0, 0], "left": shared}, {0: [1, 1, 1], "right": shared}], [0, 1])
    np.testing.assert_array_equal(data.X[1]["right"][0], [1, 2, 3])


def test_shared_subtree_within_one_example_is_rejected():
    shared = leaf(1, 2, 3)
    err = rejects(TREE, [{0: [0, 0, 0], "left": shared, "right": shared}], [0])
    assert err.field == "X[0].right" and "shared sub-record" in err.found


def test_tree_errors_come_in_reading_order():
    X = [{0: [0, 0, 0], "left": {0: [1, 2]}, "right": {0: [np.nan, 0, 0]}}]
    assert rejects(TREE, X, [0]).field == "X[0].left[0]"


def test_tree_must_be_a_list_of_records():
    err = rejects(TREE, np.zeros((2, 3)), [0, 1])
    assert err.field == "X" and "a list of records" in err.expected
    err = rejects(TREE, leaf(1, 2, 3), [0])
    assert err.found == "a single record"


def test_deep_tree_is_rejected_without_recursion_error():
    node = None
    for _ in range(MAX_DEPTH + 5):
        node = {0: [0, 0, 0], "left": node, "right": leaf(1, 1, 1)}
    err = rejects(TREE, [node], [0])
    assert err.field == f"X[0](.left*{MAX_DEPTH})"


def test_multi_tensor_chain_is_kept_as_records():
    X = [{0: [1, 2], "w": 0.5, "next": {0: [3, 4], "w": [1.5]}}]
    data = check_data(RICH_CHAIN, X, [1])
    (root,) = data.X
    np.testing.assert_array_equal(root["w"], [0.5])
    np.testing.assert_array_equal(root["next"][0], [3, 4])
    assert root["next"]["next"] is None
    err = rejects(RICH_CHAIN, [{0: [1, 2], "next": None}], [1])
    assert err.field == "X[0].w" and "no such key" in err.found


def test_labels_are_checked_against_the_number_of_trees():
    err = rejects(TREE, [leaf(1, 2, 3)], [0, 1])
    assert (err.field, err.found) == ("y", "2 examples")
    err = rejects(TREE, [leaf(1, 2, 3)], [2])
    assert err.field == "y[0]" and "[0, 2)" in err.expected
