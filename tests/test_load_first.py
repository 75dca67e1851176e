"""``datasets.load_first``: the first active examples of a version, read
from its first feed chunks only (what a torch export traces on), the same
rows ``load`` gives first."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.errors import StoreCorruptError
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.store import InMemoryStore, MemoryBlobStore


def _fed(feeds: int, rows: int, seed: int = 0):
    """(store, blobs, task) of a task fed ``feeds`` times ``rows`` rows, each feed a chunk."""
    store, blobs = InMemoryStore(), MemoryBlobStore()
    owner = store.create_user("ada", None)
    task = store.create_task(owner.id, "t", format_program(program_from_shapes([2], [3])))
    rng = np.random.default_rng(seed)
    for _ in range(feeds):
        datasets.feed(store, blobs, task, rng.normal(size=(rows, 2)).astype("float32"), rng.integers(0, 3, rows),
                      mode="append")
    return store, blobs, task


@pytest.fixture
def fed():
    """A version from four feeds of 10 rows each, with rows 3 and 12 refined away."""
    store, blobs, task = _fed(4, 10)
    return store, blobs, datasets.refine(store, blobs, task, drop=[3, 12])


def test_the_first_rows_are_the_first_rows_load_gives(fed):
    store, blobs, version = fed
    whole = datasets.load(store, blobs, version)
    for rows, expected in ((1, 9), (9, 9), (10, 18), (25, 28), (1000, 38)):  # whole chunks, in order
        first = datasets.load_first(store, blobs, version, rows)
        assert len(first.y) == expected
        np.testing.assert_array_equal(first.example_ids, whole.example_ids[:expected])
        np.testing.assert_array_equal(first.X, whole.X[:expected])
        np.testing.assert_array_equal(first.y, whole.y[:expected])
        np.testing.assert_array_equal(first.split_keys, whole.split_keys[:expected])


def test_chunks_past_the_rows_asked_for_are_not_read(fed):
    store, blobs, version = fed
    last = store.list_chunks(version.task_id, up_to_version=version.id)[-1]
    blobs.delete(last.x_blob)
    with pytest.raises(StoreCorruptError):
        datasets.load(store, blobs, version)
    assert len(datasets.load_first(store, blobs, version, 20).y) == 28  # three chunks of 9, 9 and 10 rows


def test_a_torch_export_reads_its_example_rows_from_the_first_chunks_only():
    from types import SimpleNamespace

    from ease_jupyter.service import export

    store, blobs, task = _fed(4, export.READ_ROWS // 2 + 1, seed=1)
    version = store.list_dataset_versions(task.id)[-1]
    blobs.delete(store.list_chunks(task.id, up_to_version=version.id)[-1].x_blob)  # a chunk it need not read
    rows = export.task_rows(store, blobs, SimpleNamespace(dataset_version_id=version.id))
    assert rows is not None and len(rows) == 2 * export.EXAMPLE_ROWS
