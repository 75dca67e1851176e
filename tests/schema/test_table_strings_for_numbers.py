"""Strings fed to a numeric column: the error names the first value that is
not a number, its row, and how to read such a CSV (thousands separators,
missing-value markers) or declare the column otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter.errors import DataError
from ease_jupyter.schema.table import Column, ColumnKind, TableColumn, TableData, TableSchema

SCHEMA = TableSchema((Column("income", ColumnKind.NUMERIC), Column("flag", ColumnKind.BOOLEAN)), "y", ("a", "b"))


def refused(values, missing=None, column: str = "income") -> DataError:
    strings = TableColumn.of(column, "string", np.array(values),
                             None if missing is None else np.array(missing))
    n = len(values)
    columns = {"income": TableColumn.of("income", "number", np.ones(n)),
               "flag": TableColumn.of("flag", "bool", np.zeros(n)), column: strings}
    with pytest.raises(DataError) as info:
        SCHEMA.check(TableData.of(columns))
    return info.value


def test_a_number_with_thousands_separators_is_named_with_its_row():
    error = refused(["12", "7", "", "12,345", "?"], [False, False, True, False, False])
    assert error.field == "X['income']"
    assert error.found == "a column of strings (row 3: '12,345')"
    assert "a numeric column" in error.expected and "thousands=','" in error.expected
    assert "categorical" in error.expected
    assert str(error).startswith("X['income']: found a column of strings (row 3: '12,345'), expected a numeric column")


def test_a_missing_value_marker_is_named_with_its_row():
    error = refused(["1.5", "?", "3"])
    assert error.found == "a column of strings (row 1: '?')"
    assert "na_values=['?']" in error.expected and "categorical" in error.expected


def test_a_long_value_is_cut_short():
    error = refused(["n/a " * 30, "1"])
    assert "row 0" in error.found and len(error.found) < 80


def test_strings_for_a_boolean_column_keep_the_short_message():
    error = refused(["True", "False", "True"], column="flag")
    assert (error.field, error.found, error.expected) == ("X['flag']", "a column of strings", "a boolean column")
