"""String columns cost their own size, on the wire and at rest: a numpy
unicode array pads every value to the longest one (4 bytes a character), so
one long note in a column of short labels would make every row as large.
On the wire and in the blob store a 1-d string array is its values' UTF-8
bytes and offsets (service/arrays.py, datasets.py); it reads back as the
same strings, rows keep the content digests they had (dedupe, the
validation split), and blobs stored as unicode ``.npy`` entries still read."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pandas as pd
import pytest

from ease_jupyter import datasets, row_identity, tabular
from ease_jupyter.client import Client
from ease_jupyter.errors import DataError
from ease_jupyter.execution.row_keys import input_digests
from ease_jupyter.schema.table import TableColumn, TableData
from ease_jupyter.service import arrays, task_schema
from ease_jupyter.store import InMemoryStore, MemoryBlobStore

N = 1_000
LONG = "x" * 2_000


def notes() -> np.ndarray:
    """N short labels and one of 2,000 characters: as unicode, 8 MB; as UTF-8, about 6 KB."""
    values = np.array(["red", "green", "blue", "grün", "日本", ""] * (N // 6) + ["red"] * (N % 6), dtype=object)
    values[17] = LONG
    return values.astype(str)


def table() -> pd.DataFrame:
    return pd.DataFrame({"note": notes(), "size": np.arange(N, dtype=float), "y": ["a", "b"] * (N // 2)})


def wire_bytes(value) -> int:
    return len(json.dumps(value))


def offline_client() -> Client:
    return Client("http://127.0.0.1:9", "token", register=False)  # everything here goes inline


def test_a_string_array_goes_as_its_utf8_and_comes_back_the_same():
    values = notes()
    padded = len(arrays.to_npy_bytes(values))
    assert padded > N * len(LONG) * 4  # what a unicode .npy costs: every row as long as the longest
    for sent in (arrays.encode(values), offline_client()._array(values)):
        assert set(sent) == {"strings"}
        utf8 = sum(len(v.encode()) for v in values.tolist())
        assert wire_bytes(sent) < (utf8 + 4 * (N + 1) + 1_000) * 4 / 3  # base64 of the bytes and uint32 offsets
        back = arrays.decode("X", json.loads(json.dumps(sent)))
        assert back.dtype.kind == "U" and back.tolist() == values.tolist()
    empty = arrays.decode("X", arrays.encode(np.array([], dtype=str)))
    assert empty.dtype.kind == "U" and empty.shape == (0,)


def test_a_unicode_npy_from_an_older_client_is_still_taken():
    old = {"npy_b64": base64.b64encode(arrays.to_npy_bytes(np.array(["a", "bb"]))).decode()}
    assert arrays.decode("X", old).tolist() == ["a", "bb"]


def _column(values, missing=None) -> dict:
    return {"table": [{"name": "c", "type": "string", "values": values,
                       "missing": arrays.encode(np.zeros(2, bool) if missing is None else missing)}]}


@pytest.mark.parametrize("strings, field", [
    ({"utf8": arrays.encode(np.frombuffer(b"\xff\xfeok", np.uint8)), "offsets": arrays.encode(np.array([0, 2, 4]))},
     "X['c'][0]"),
    ({"utf8": arrays.encode(np.frombuffer(b"abc", np.uint8)), "offsets": arrays.encode(np.array([0, 2, 5]))},
     "X['c'].offsets"),
    ({"utf8": arrays.encode(np.frombuffer(b"abc", np.uint8)), "offsets": arrays.encode(np.array([0, 2, 1, 3]))},
     "X['c'].offsets"),
    ({"utf8": arrays.encode(np.array([97, 98])), "offsets": arrays.encode(np.array([0, 1, 2]))}, "X['c'].utf8"),
    ({"utf8": [97, 98], "offsets": arrays.encode(np.array([0, 1, 2]))}, "X['c'].utf8"),
    ({"utf8": arrays.encode(np.frombuffer(b"ab", np.uint8))}, "X['c'].offsets"),
])
def test_string_parts_that_do_not_fit_are_named(strings, field):
    with pytest.raises(DataError) as caught:
        arrays.decode("X", _column({"strings": strings}))
    assert caught.value.field == field


def test_a_lone_surrogate_is_named_before_anything_is_sent():
    with pytest.raises(DataError) as caught:
        offline_client()._array(np.array(["ok", "bad\ud800"]), "X['c']")
    assert caught.value.field == "X['c'][1]"


# ---------------------------------------------------------------- at rest


def _table_tasks(store: InMemoryStore, *names: str) -> list:
    """Table tasks of one user, declared like ``table()``."""
    schema = tabular.infer_schema(table(), "y", kinds={"note": "categorical"})
    owner = store.create_user("ada", None)
    tasks = [store.create_task(owner.id, name, str(schema.program())) for name in names]
    for task in tasks:
        task_schema.store_table_schema(store, task, schema)
    return tasks


def _feed(store, blobs, task, frame: pd.DataFrame, mode: str = datasets.DEDUPE) -> datasets.FeedResult:
    """A feed as the service stores it: the table's columns, checked (the wire is tested above)."""
    X, y = tabular.feed_parts(frame, None, {"table": task_schema.table_schema(store, task).to_dict()},
                              lambda array: array)
    table = TableData.of({c["name"]: TableColumn.of(c["name"], c["type"], c["values"], c.get("missing"))
                          for c in X["table"]})
    prepared = task_schema.prepare_feed(store, task, table, y)
    prepared.commit()
    return datasets.feed_rows(store, blobs, task, prepared.X, prepared.y, mode=mode)


def _old_layout(X) -> bytes:
    """How a table's arrays were stored before: ``np.savez(*X)``, strings as unicode."""
    buffer = io.BytesIO()
    np.savez(buffer, *X)
    return buffer.getvalue()


@pytest.fixture
def fresh_digests(monkeypatch):
    """An empty digest cache: what a new process (a restarted service) starts with."""
    def clear() -> None:
        monkeypatch.setattr(row_identity, "_cache", row_identity._DigestCache(row_identity.CACHE_ROWS))

    clear()
    return clear


def test_a_string_column_is_stored_at_its_utf8_size_and_reads_back_the_same(fresh_digests):
    store, blobs = InMemoryStore(), MemoryBlobStore()
    task, = _table_tasks(store, "notes")
    fed = _feed(store, blobs, task, table())
    stored = fed.blob_sizes[fed.chunk.x_blob]
    utf8 = sum(len(v.encode()) for v in notes().tolist())
    assert stored < utf8 + 4 * (N + 1) + 8 * N + N + 4_000  # the strings, offsets, the number column, the mask
    assert stored == len(blobs.get_bytes(fed.chunk.x_blob))  # the quota counts what is stored
    fresh_digests()
    loaded = datasets.load(store, blobs, fed.version)
    assert loaded.X[0].dtype.kind == "U" and loaded.X[0].tolist() == notes().tolist()
    assert _feed(store, blobs, task, table()).new == 0  # read back, the rows are the rows fed


def test_rows_keep_their_identity_and_old_blobs_still_read(monkeypatch, fresh_digests):
    """A table stored before (unicode .npy entries) and one stored now hold
    the same rows: equal digests and split keys, and a feed of the same rows
    onto the old version adds none."""
    store, blobs = InMemoryStore(), MemoryBlobStore()
    new_task, old_task = _table_tasks(store, "now", "before")
    new = _feed(store, blobs, new_task, table())
    with monkeypatch.context() as patch:
        patch.setattr(datasets, "_input_bytes", _old_layout)
        old = _feed(store, blobs, old_task, table())
    assert new.chunk.x_blob != old.chunk.x_blob
    assert len(blobs.get_bytes(old.chunk.x_blob)) > 10 * len(blobs.get_bytes(new.chunk.x_blob))
    fresh_digests()
    loaded_new = datasets.load(store, blobs, new.version)
    loaded_old = datasets.load(store, blobs, old.version)
    for a, b in zip(loaded_new.X, loaded_old.X):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(loaded_new.split_keys, loaded_old.split_keys)
    np.testing.assert_array_equal(input_digests(loaded_new.X), input_digests(loaded_old.X))
    fresh_digests()
    again = _feed(store, blobs, old_task, table())
    assert (again.created, again.new, again.duplicates) == (False, 0, N)
    more = _feed(store, blobs, old_task, pd.concat([table(), table().assign(size=-1.0)]))
    assert (more.new, more.duplicates) == (N, N)
    both = datasets.load(store, blobs, more.version)  # an old chunk and a new one, one version
    assert both.X[0].tolist() == notes().tolist() * 2
