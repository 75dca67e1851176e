"""The typed table schema (schema.table): JSON round trip, the check of fed
columns, the stored arrays, and class names."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter.errors import DataError
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.schema.table import (Column, ColumnKind, TableColumn, TableData, TableSchema, class_indices,
                                       sorted_names)

SCHEMA = TableSchema(
    (Column("bill", ColumnKind.NUMERIC), Column("adult", ColumnKind.BOOLEAN),
     Column("island", ColumnKind.CATEGORICAL), Column("notes", ColumnKind.TEXT)),
    target="species", classes=("Adelie", "Gentoo"))


def table(**columns: TableColumn) -> TableData:
    return TableData.of(columns)


def good() -> TableData:
    return table(
        bill=TableColumn.of("bill", "number", np.array([1.5, np.nan, 3.0])),
        adult=TableColumn.of("adult", "bool", np.array([1.0, 0.0, np.nan])),
        island=TableColumn.of("island", "string", np.array(["Dream", "", "Biscoe"]), np.array([False, True, False])),
        notes=TableColumn.of("notes", "string", np.array(["a long note here", "short", ""]),
                             np.array([False, False, True])))


def test_json_round_trip_keeps_every_field():
    assert TableSchema.from_json(SCHEMA.to_json()) == SCHEMA
    regression = TableSchema((Column("x", ColumnKind.NUMERIC),), target="y")
    assert TableSchema.from_json(regression.to_json()) == regression
    assert regression.classes is None


def test_the_program_is_flat_columns_in_classes_out():
    assert format_program(SCHEMA.program()) == format_program(program_from_shapes([4], [2]))
    assert SCHEMA.program().num_classes == 2
    assert TableSchema((Column("x", ColumnKind.NUMERIC),), target="y").program().num_classes is None


@pytest.mark.parametrize("data, field", [
    ({"columns": [{"name": "a", "kind": "colour"}], "target": "y"}, "table.columns[0].kind"),
    ({"columns": [{"name": "", "kind": "numeric"}], "target": "y"}, "table.columns[0].name"),
    ({"columns": [{"name": "y", "kind": "numeric"}], "target": "y"}, "table.columns[0].name"),
    ({"columns": [], "target": "y"}, "table.columns"),
    ({"columns": [{"name": "a", "kind": "numeric"}], "target": "y", "classes": ["only"]}, "table.classes"),
    ({"columns": [{"name": "a", "kind": "numeric"}], "target": 3}, "table.target"),
])
def test_a_bad_schema_names_its_field(data, field):
    with pytest.raises(DataError) as info:
        TableSchema.from_dict(data)
    assert info.value.field == field


def test_a_missing_column_is_named_with_what_was_expected():
    data = good()
    columns = dict(data.columns)
    del columns["island"]
    with pytest.raises(DataError) as info:
        SCHEMA.check(TableData.of(columns))
    assert info.value.field == "X['island']"
    assert info.value.found == "no such column" and "categorical" in info.value.expected


def test_a_column_of_another_type_is_named():
    columns = dict(good().columns)
    columns["bill"] = TableColumn.of("bill", "string", np.array(["x", "y", "z"]))
    with pytest.raises(DataError) as info:
        SCHEMA.check(TableData.of(columns))
    assert info.value.field == "X['bill']"
    assert "strings" in info.value.found and "numeric" in info.value.expected


def test_an_extra_column_is_refused():
    columns = dict(good().columns)
    columns["colour"] = TableColumn.of("colour", "number", np.array([1.0, 2.0, 3.0]))
    with pytest.raises(DataError) as info:
        SCHEMA.check(TableData.of(columns))
    assert info.value.field == "X['colour']"


def test_a_column_missing_in_every_row_fits_any_kind():
    columns = dict(good().columns)
    columns["island"] = TableColumn.of("island", "number", np.full(3, np.nan))
    arrays = SCHEMA.stored_arrays(TableData.of(columns))
    assert SCHEMA.columns_of(arrays)["island"].tolist() == [pytest.approx(np.nan, nan_ok=True)] * 3


def test_stored_arrays_need_no_pickles_and_give_the_values_back():
    import io

    arrays = SCHEMA.stored_arrays(good())
    buffer = io.BytesIO()
    np.savez(buffer, *arrays)  # what the blob store keeps
    with np.load(io.BytesIO(buffer.getvalue()), allow_pickle=False) as archive:
        back = tuple(archive[f"arr_{i}"] for i in range(len(archive.files)))
    columns = SCHEMA.columns_of(back)
    assert columns["bill"][0] == 1.5 and np.isnan(columns["bill"][1])
    assert columns["adult"][:2].tolist() == [1.0, 0.0] and np.isnan(columns["adult"][2])
    assert columns["island"][0] == "Dream" and columns["island"][2] == "Biscoe"
    assert isinstance(columns["island"][1], float) and np.isnan(columns["island"][1])  # missing, not ""
    assert columns["notes"][1] == "short" and np.isnan(columns["notes"][2])


@pytest.mark.parametrize("type_, values, field", [
    ("bool", np.array([0.0, 2.0]), "X['c'][1]"),
    ("number", np.array([1.0, np.inf]), "X['c'][1]"),
    ("number", np.array(["a", "b"]), "X['c']"),
    ("date", np.array([1.0]), "X['c'].type"),
])
def test_bad_column_values_are_named(type_, values, field):
    with pytest.raises(DataError) as info:
        TableColumn.of("c", type_, values)
    assert info.value.field == field


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(DataError) as info:
        TableData.of({"a": TableColumn.of("a", "number", np.ones(3)), "b": TableColumn.of("b", "number", np.ones(2))})
    assert info.value.field == "X['b']"


# ---------------------------------------------------------------- class names


def test_the_first_labels_make_the_class_list_sorted():
    indices, names = class_indices(None, np.array(["b", "a", "c", "a"]), 3)
    assert names == ("a", "b", "c")
    assert indices.tolist() == [1, 0, 2, 0]


def test_later_labels_map_with_the_known_list():
    indices, names = class_indices(("x", "y"), ["y", "y", "x"], 2)
    assert names == ("x", "y") and indices.tolist() == [1, 1, 0]


def test_new_names_are_added_while_the_task_has_room():
    indices, names = class_indices(("b",), ["c", "a", "b"], 3)
    assert names == ("b", "a", "c")  # old indices stay; new names sorted after
    assert indices.tolist() == [2, 1, 0]


def test_an_unknown_label_of_a_full_list_names_y_and_the_classes():
    with pytest.raises(DataError) as info:
        class_indices(("Adelie", "Gentoo"), ["Gentoo", "Chinstrap"], 2)
    assert info.value.field == "y[1]"
    assert "Chinstrap" in info.value.found and "Adelie" in info.value.expected and "Gentoo" in info.value.expected


def test_more_labels_than_declared_classes_are_refused():
    with pytest.raises(DataError) as info:
        class_indices(None, ["a", "b", "c"], 2)
    assert info.value.field == "y" and "3 distinct" in info.value.found


def test_a_missing_label_is_named():
    with pytest.raises(DataError) as info:
        class_indices(None, np.array(["a", None, "b"], dtype=object), 2)
    assert info.value.field == "y[1]" and "missing" in info.value.found


def test_any_scalar_labels_are_names_and_whole_floats_are_ints():
    indices, names = class_indices((3, 5, 7), np.array([7.0, 3.0]), 3)
    assert indices.tolist() == [2, 0]
    assert sorted_names([True, "x", 2, False]) == (False, True, 2, "x")
