"""The client names a table's columns in Unicode NFC, as the service
matches them: a header written on macOS (NFD) feeds, infers and declares
a task whose names were written elsewhere (NFC), and the other way round."""

from __future__ import annotations

import unicodedata

import numpy as np
import pandas as pd

from ease_jupyter import tabular
from ease_jupyter.schema.table import TableSchema

NFC_ZIP, NFC_TARGET = "plz_größe", "Qualität"
NFD_ZIP, NFD_TARGET = (unicodedata.normalize("NFD", n) for n in (NFC_ZIP, NFC_TARGET))


def _encode(array):
    return np.asarray(array).tolist()


def _frame(zip_name, target_name):
    return pd.DataFrame({zip_name: [8000, 8001, 8000, 8002] * 3, "x": np.arange(12.0),
                         target_name: ["gut", "schlecht"] * 6})


def test_a_schema_declared_from_an_nfd_header_with_kinds_keyed_in_nfc():
    schema = tabular.infer_schema(_frame(NFD_ZIP, NFD_TARGET), NFC_TARGET, kinds={NFC_ZIP: "categorical"})
    assert schema.target == NFC_TARGET and schema.names == (NFC_ZIP, "x")
    assert schema.kinds()[NFC_ZIP].value == "categorical"


def test_a_feed_with_an_nfd_header_goes_as_the_task_declared_in_nfc():
    info = {"table": TableSchema.from_dict(tabular.infer_schema(
        _frame(NFC_ZIP, NFC_TARGET), NFC_TARGET, kinds={NFC_ZIP: "categorical"}).to_dict()).to_dict()}
    X, y = tabular.feed_parts(_frame(NFD_ZIP, NFD_TARGET), None, info, _encode)  # labels from her target column
    columns = {c["name"]: c for c in X["table"]}
    assert set(columns) == {NFC_ZIP, "x"}
    assert columns[NFC_ZIP]["type"] == "string" and columns[NFC_ZIP]["values"][:2] == ["8000", "8001"]
    assert list(y) == ["gut", "schlecht"] * 6
    rows = tabular.inputs_for(_frame(NFD_ZIP, NFD_TARGET), info, _encode)  # infer on rows as fed, labels and all
    assert [c["name"] for c in rows["table"]] == [NFC_ZIP, "x"]
