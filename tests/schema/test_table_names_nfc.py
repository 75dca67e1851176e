"""Column names in Unicode NFC: a header written on macOS (NFD, "o" and a
combining umlaut) and one written elsewhere (NFC) name one column. A schema
stored before names were NFC keeps its spelling (its fitted pipelines select
columns by it) and takes tables in either spelling."""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest

from ease_jupyter.errors import DataError
from ease_jupyter.schema.table import Column, ColumnKind, TableColumn, TableData, TableSchema

NFC = unicodedata.normalize("NFC", "größe")
NFD = unicodedata.normalize("NFD", "größe")
TARGET_NFC = unicodedata.normalize("NFC", "Qualität")
TARGET_NFD = unicodedata.normalize("NFD", "Qualität")


def setup_module() -> None:
    assert NFC != NFD and TARGET_NFC != TARGET_NFD


def schema_dict(*names: str, target: str = "y") -> dict:
    return {"columns": [{"name": n, "kind": "numeric"} for n in names], "target": target, "classes": ["a", "b"]}


def numbers(name: str, values=(1.0, 2.0, 3.0)) -> TableColumn:
    return TableColumn.of(name, "number", np.array(values))


# ---------------------------------------------------------------- declared schemas


def test_a_declared_schemas_names_and_target_are_nfc():
    schema = TableSchema((Column(NFD, ColumnKind.NUMERIC),), TARGET_NFD, ("a", "b"))
    assert schema.names == (NFC,) and schema.target == TARGET_NFC
    parsed = TableSchema.from_dict(schema_dict(NFD, target=TARGET_NFD))
    assert parsed.names == (NFC,) and parsed.target == TARGET_NFC
    assert parsed.to_dict()["columns"][0]["name"] == NFC
    assert TableSchema.from_json(json.dumps(schema_dict(NFD))) == TableSchema.from_dict(schema_dict(NFC))


def test_two_columns_alike_in_nfc_are_refused_as_one_name_used_twice():
    with pytest.raises(DataError) as info:
        TableSchema.from_dict(schema_dict(NFC, "x", NFD))
    assert info.value.field == "table.columns[2].name"
    assert "column 0" in info.value.found and "Unicode spelling" in info.value.found
    assert "used once" in info.value.expected


def test_a_column_named_like_the_target_in_another_spelling_is_refused():
    with pytest.raises(DataError) as info:
        TableSchema.from_dict(schema_dict(TARGET_NFD, target=TARGET_NFC))
    assert info.value.field == "table.columns[0].name" and "target" in info.value.expected


# ---------------------------------------------------------------- fed tables


def test_a_tables_column_names_are_nfc():
    table = TableData.of({NFD: numbers(NFD), "x": numbers("x")})
    assert list(table.columns) == [NFC, "x"]


def test_a_table_with_two_spellings_of_one_name_is_refused():
    with pytest.raises(DataError) as info:
        TableData.of({NFC: numbers(NFC), NFD: numbers(NFD)})
    assert info.value.field == f"X[{NFC!r}]"
    assert "used twice" in info.value.found and info.value.expected == "unique column names"


@pytest.mark.parametrize("declared", [NFC, NFD])
@pytest.mark.parametrize("fed", [NFC, NFD])
def test_a_table_in_either_spelling_fits_a_schema_in_either(declared, fed):
    schema = TableSchema.from_dict(schema_dict(declared, "x"))
    table = TableData.of({"x": numbers("x", (4.0, 5.0, 6.0)), fed: numbers(fed)})
    schema.check(table)
    stored = schema.stored_arrays(table)
    np.testing.assert_array_equal(stored[0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(stored[1], [4.0, 5.0, 6.0])


# ---------------------------------------------------------------- stored schemas


def stored_nfd() -> TableSchema:
    return TableSchema.from_json(json.dumps(
        {"columns": [{"name": NFD, "kind": "numeric"}, {"name": "town", "kind": "categorical"}],
         "target": TARGET_NFD, "classes": ["a", "b"]}), stored=True)


def test_a_stored_schema_keeps_its_spelling_and_equals_its_declaration_in_nfc():
    schema = stored_nfd()
    assert schema.names == (NFD, "town") and schema.target == TARGET_NFD
    assert schema.to_dict()["columns"][0]["name"] == NFD
    declared = TableSchema((Column(NFC, ColumnKind.NUMERIC), Column("town", ColumnKind.CATEGORICAL)),
                           TARGET_NFC, ("a", "b"))
    assert schema == declared and hash(schema) == hash(declared)  # opening the task again is no conflict
    assert schema != TableSchema.from_dict(schema_dict(NFC, "town", target=TARGET_NFC))  # other kinds


def test_the_service_reads_a_stored_schema_as_stored():
    from ease_jupyter.service.task_schema import TABLE_TAG, schema_in

    text = json.dumps({"columns": [{"name": NFD, "kind": "numeric"}], "target": "y", "classes": ["a", "b"]})
    assert schema_in({TABLE_TAG: text}).names == (NFD,)


@pytest.mark.parametrize("fed", [NFC, NFD])
def test_a_pipeline_fitted_on_a_stored_nfd_schema_predicts_on_tables_fed_in_either_spelling(fed):
    """Stored arrays are positional, in schema order; the pipeline's columns
    are the stored names (to_frame), whichever spelling a feed used."""
    pytest.importorskip("sklearn")
    from sklearn.linear_model import LogisticRegression

    from ease_jupyter.zoo.preprocess import table_pipeline, to_frame

    schema = stored_nfd()
    size = np.array([0.1, 0.2, 3.0, 3.1, 0.0, 2.9])
    towns = np.array(["Bern", "Bern", "Zug", "Zug", "Bern", "Zug"])
    y = np.array([0, 0, 1, 1, 0, 1])
    fitted_on = schema.stored_arrays(TableData.of({NFD: numbers(NFD, size),
                                                   "town": TableColumn.of("town", "string", towns)}))
    model = table_pipeline(schema, LogisticRegression()).fit(to_frame(schema, fitted_on), y)
    later = schema.stored_arrays(TableData.of({"town": TableColumn.of("town", "string", towns),
                                               fed: numbers(fed, size)}))
    frame = to_frame(schema, later)
    assert list(frame.columns) == [NFD, "town"]
    np.testing.assert_array_equal(model.predict(frame), y)


def test_a_stored_schema_with_two_spellings_still_reads_and_refuses_feeds_clearly():
    schema = TableSchema.from_dict(schema_dict(NFC, NFD), stored=True)
    assert schema.names == (NFC, NFD)
    with pytest.raises(DataError) as info:
        schema.check(TableData.of({NFC: numbers(NFC)}))
    assert info.value.field == f"X[{NFC!r}]" and "two Unicode spellings" in info.value.found
