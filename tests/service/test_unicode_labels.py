"""One label, one class, whatever Unicode form wrote it: macOS writes "café"
decomposed (NFD: "e" and a combining accent), most systems composed (NFC).
String labels and a table's string columns are taken in NFC where they
enter (``schema.table``), through the real service: training, the task's
class names and examples, the row digests of dedupe and infer's answers."""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pandas as pd
import pytest

from ease_jupyter.errors import NotFoundError
from ease_jupyter.schema.table import TableColumn, TableSchema, class_indices
from ease_jupyter.service.task_schema import CLASSES_TAG, names_in

from .conftest import until

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


def setup_module() -> None:
    assert NFC != NFD and len(NFD) == len(NFC) + 1


def blobs(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two well separated classes: class 0 near 0, class 1 near 3."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    return (rng.normal(size=(n, 4)) + 3.0 * y[:, None]).astype("float32"), y


def has_model(task) -> bool:
    try:
        task.best()
    except NotFoundError:
        return False
    return True


def test_nfd_and_nfc_spellings_of_a_label_are_one_class_trained_and_answered_in_nfc(svc):
    X, y = blobs()
    # class 0 is "café", half of its rows spelt NFD, half NFC
    labels = np.array([[NFD, NFC][i // 2 % 2] if c == 0 else "thé" for i, c in enumerate(y)], dtype=object)
    assert {NFD, NFC} <= set(labels)
    task = svc.client("alice").task("drinks", input=[4], output=[2])
    assert task.feed(X, labels)["n_examples"] == len(X)  # two classes, within the declared [2]
    assert task.refresh()["class_names"] == [NFC, "thé"]

    _, _, stored = task.data()
    np.testing.assert_array_equal(stored, y)  # both spellings stored as class 0

    assert until(lambda: has_model(task), timeout=120)
    assert task.best()["class_names"] == [NFC, "thé"]
    predicted = task.infer(X)
    assert set(predicted.tolist()) <= {NFC, "thé"} and NFD not in predicted.tolist()
    assert np.mean(predicted == np.where(y == 0, NFC, "thé")) > 0.9


def test_a_label_fed_only_in_nfd_is_named_in_nfc(svc):
    X, y = blobs(8)
    task = svc.client("alice").task("nfd_only", input=[4], output=[2])
    task.feed(X, np.where(y == 0, NFD, "thé"))
    assert task.refresh()["class_names"] == [NFC, "thé"]


def test_feeding_the_other_spelling_of_a_stored_row_is_a_duplicate(svc):
    X, y = blobs(10)
    task = svc.client("alice").task("dedupe", input=[4], output=[2])
    first = task.feed(X, np.where(y == 0, NFC, "thé"))
    assert first["new"] == 10
    again = task.feed(X, np.where(y == 0, NFD, "thé"))
    assert (again["new"], again["duplicates"], again["created"]) == (0, 10, False)
    assert len(task.versions()) == 1


def test_a_table_in_either_spelling_is_one_table(svc):
    """The target's class names and a categorical column's values alike."""
    def frame(form: str) -> pd.DataFrame:
        spell = lambda s: unicodedata.normalize(form, s)  # noqa: E731
        return pd.DataFrame({"x": [0.1, 0.2, 2.9, 3.1, 0.0, 3.3],
                             "town": [spell("Zürich"), "Bern", spell("Zürich"), "Bern", spell("Genève"), "Bern"],
                             "drink": [spell("café"), spell("café"), "thé", "thé", spell("café"), "thé"]})

    task = svc.client("alice").task("towns", like=frame("NFD"), target="drink")
    assert task.info["table"]["classes"] == [NFC, "thé"]
    assert task.feed(frame("NFC"))["new"] == 6
    again = task.feed(frame("NFD"))
    assert (again["new"], again["duplicates"]) == (0, 6)
    _, stored, labels = task.data()
    assert stored["town"].tolist() == frame("NFC")["town"].tolist()
    np.testing.assert_array_equal(labels, [0, 0, 1, 1, 0, 1])


# ---------------------------------------------------------------- where they enter


def test_labels_map_to_one_class_in_nfc():
    indices, names = class_indices(None, [NFD, NFC, "thé", NFD], 3)
    assert names == (NFC, "thé")
    np.testing.assert_array_equal(indices, [0, 0, 1, 0])


def test_a_string_column_is_taken_in_nfc_however_wide_nfc_makes_it():
    # U+0958 has no composed form in NFC: normalising it makes the value longer.
    column = TableColumn.of("town", "string", np.array([NFD, "Bern", "\u0958"]))
    assert column.values.tolist() == [NFC, "Bern", "\u0915\u093c"]
    ascii_only = np.array(["Bern", "Basel"])
    assert TableColumn.of("town", "string", ascii_only).values is ascii_only  # nothing to change, no copy


def test_a_declared_schemas_class_names_are_nfc():
    table = {"columns": [{"name": "x", "kind": "numeric"}], "target": "y", "classes": [NFD, "thé"]}
    assert TableSchema.from_dict(table).classes == (NFC, "thé")


def test_class_lists_stored_before_names_were_nfc_keep_their_indices():
    """Both spellings stored as two classes: the schema still reads, with its
    two classes; both read as NFC, and a label in either spelling takes the first."""
    table = {"columns": [{"name": "x", "kind": "numeric"}], "target": "y", "classes": [NFC, NFD, "thé"]}
    assert len(TableSchema.from_dict(table).classes) == 3
    names = names_in({CLASSES_TAG: json.dumps([NFD, NFC, "thé"])})
    assert names == [NFC, NFC, "thé"]
    indices, after = class_indices(names, [NFC, NFD, "thé"], 3)
    np.testing.assert_array_equal(indices, [0, 0, 2])
    assert list(after) == names


@pytest.mark.parametrize("stored", [[NFD, "thé"], [NFC, "thé"]])
def test_a_task_whose_stored_name_is_nfd_takes_either_spelling(svc, stored):
    X, y = blobs(6)
    task = svc.client("alice").task("old", input=[4], output=[2])
    record = svc.service.store.task_by_name(svc.service.store.user_by_name("alice").id, "old")
    svc.service.store.set_tag("task", record.id, CLASSES_TAG, json.dumps(stored))  # as a task fed before stored it
    task.feed(X, np.where(y == 0, NFD, "thé"))
    task.feed(X[:2] + 1, np.array([NFC, "thé"]))
    assert task.refresh()["class_names"] == [NFC, "thé"]
    _, _, labels = task.data()
    np.testing.assert_array_equal(labels, list(y) + [0, 1])
