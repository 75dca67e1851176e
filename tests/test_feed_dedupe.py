"""Feeding rows again is idempotent, and the validation split follows row
content: feeding the same rows twice neither doubles the examples nor
changes the validation score; appending copies on purpose doubles them, but
no row straddles training and validation (datasets.py, execution/holdout.py,
execution/row_keys.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier

from ease_jupyter import datasets
from ease_jupyter.errors import DataError
from ease_jupyter.execution.engine import make_engine
from ease_jupyter.execution.holdout import validation_mask
from ease_jupyter.execution.row_keys import input_digests, row_digests, split_keys
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.runner import evaluate_grid
from ease_jupyter.store import InMemoryStore, MemoryBlobStore


@pytest.fixture
def task():
    store, blobs = InMemoryStore(), MemoryBlobStore()
    owner = store.create_user("ada", None)
    return store, blobs, store.create_task(owner.id, "blobs", format_program(program_from_shapes([4], [3])))


@pytest.fixture(scope="module")
def rows():
    """60 rows of 3 noisy classes: a 1-NN scores well below 1.0 on held-out rows."""
    rng = np.random.default_rng(7)
    y = rng.integers(0, 3, 60)
    X = (rng.normal(size=(60, 4)) + y[:, None] * 0.3).astype("float32")
    return X, y


@pytest.fixture(scope="module")
def engine():
    engine = make_engine("local", n_workers=1, torch_threads=None)
    yield engine
    engine.close()


def one_nn_score(store, blobs, version, engine) -> tuple[float, int]:
    """The service's own grid evaluation (its split) of a 1-NN: (validation accuracy, validation size)."""
    data = datasets.load(store, blobs, version)
    result = evaluate_grid(KNeighborsClassifier(), {"n_neighbors": [1]}, data, True, engine)
    return result.best_score, int(validation_mask(data.split_keys).sum())


def straddling(data) -> int:
    """How many input rows have copies on both sides of the split."""
    held = validation_mask(data.split_keys)
    digests = input_digests(data.X)
    return len(set(digests[held].tolist()) & set(digests[~held].tolist()))


def test_feeding_the_same_rows_again_adds_nothing_and_keeps_the_score(task, rows, engine):
    store, blobs, t = task
    X, y = rows
    first = datasets.feed_rows(store, blobs, t, X, y)
    assert (first.created, first.new, first.duplicates, first.version.n_examples) == (True, 60, 0, 60)
    score = one_nn_score(store, blobs, first.version, engine)
    stored = sorted(b.digest for b in blobs.iter_blobs())

    again = datasets.feed_rows(store, blobs, t, X, y)

    assert (again.created, again.new, again.duplicates) == (False, 0, 60)
    assert again.version == first.version and len(store.list_dataset_versions(t.id)) == 1
    assert sorted(b.digest for b in blobs.iter_blobs()) == stored
    assert one_nn_score(store, blobs, store.latest_dataset_version(t.id), engine) == score
    assert 0 < score[0] < 1.0, score


def test_an_overlapping_feed_adds_only_the_new_rows(task, rows):
    store, blobs, t = task
    X, y = rows
    datasets.feed(store, blobs, t, X[:40], y[:40])
    result = datasets.feed_rows(store, blobs, t, X[30:], y[30:])
    assert (result.created, result.new, result.duplicates) == (True, 20, 10)
    data = datasets.load(store, blobs, result.version)
    assert result.version.n_examples == 60 and np.array_equal(data.X, X) and np.array_equal(data.y, y)
    # The same input with another label is another row (a corrected label, say).
    relabelled = datasets.feed_rows(store, blobs, t, X[:1], (y[:1] + 1) % 3)
    assert (relabelled.new, relabelled.duplicates, relabelled.version.n_examples) == (1, 0, 61)
    # ... and it lands on its twin's side of the split.
    data = datasets.load(store, blobs, relabelled.version)
    held = validation_mask(data.split_keys)
    assert held[0] == held[-1] and straddling(data) == 0


def test_append_doubles_the_examples_but_no_row_straddles_and_the_score_stays(task, rows, engine):
    store, blobs, t = task
    X, y = rows
    first = datasets.feed(store, blobs, t, X, y)
    score, n_val = one_nn_score(store, blobs, first, engine)

    appended = datasets.feed_rows(store, blobs, t, X, y, mode="append")

    assert (appended.created, appended.new, appended.duplicates, appended.version.n_examples) == (True, 0, 60, 120)
    data = datasets.load(store, blobs, appended.version)
    assert straddling(data) == 0
    # Split by example id instead, copies would straddle: the leak this split removes.
    by_id = validation_mask(data.example_ids)
    digests = input_digests(data.X)
    assert set(digests[by_id].tolist()) & set(digests[~by_id].tolist())
    # Each held-out row is there twice and a 1-NN finds the same neighbour: the same score.
    assert one_nn_score(store, blobs, appended.version, engine) == (score, 2 * n_val)


def test_replace_makes_a_version_of_exactly_the_fed_rows(task, rows):
    store, blobs, t = task
    X, y = rows
    first = datasets.feed(store, blobs, t, X[:40], y[:40])
    replaced = datasets.feed_rows(store, blobs, t, X[30:], y[30:], mode="replace")
    assert (replaced.created, replaced.new, replaced.duplicates) == (True, 20, 10)
    data = datasets.load(store, blobs, replaced.version)
    assert replaced.version.n_examples == 30 and np.array_equal(data.X, X[30:])
    assert np.array_equal(datasets.load(store, blobs, first).X, X[:40])  # the old version is as it was
    same = datasets.feed_rows(store, blobs, t, X[30:][::-1], y[30:][::-1], mode="replace")  # same rows, reordered
    assert (same.created, same.version) == (False, replaced.version)


def test_a_row_keeps_its_side_in_every_version(task, rows):
    store, blobs, t = task
    X, y = rows
    v1 = datasets.feed(store, blobs, t, X[:30], y[:30])
    side = dict(zip(datasets.load(store, blobs, v1).example_ids.tolist(),
                    validation_mask(datasets.load(store, blobs, v1).split_keys).tolist()))
    datasets.feed(store, blobs, t, X[30:], y[30:])
    v3 = datasets.refine(store, blobs, t, drop=[0, 1, 2, 40])
    data = datasets.load(store, blobs, v3)
    later = dict(zip(data.example_ids.tolist(), validation_mask(data.split_keys).tolist()))
    assert all(later[i] == side[i] for i in later if i in side) and len(set(later) & set(side)) == 27


def test_an_unknown_mode_is_refused_and_stores_nothing(task, rows):
    store, blobs, t = task
    X, y = rows
    datasets.feed(store, blobs, t, X[:10], y[:10])
    stored = sorted(b.digest for b in blobs.iter_blobs())
    with pytest.raises(DataError, match="mode: found 'upsert', expected 'dedupe' or 'append' or 'replace'"):
        datasets.feed(store, blobs, t, X, y, mode="upsert")
    assert len(store.list_dataset_versions(t.id)) == 1 and sorted(b.digest for b in blobs.iter_blobs()) == stored


def test_row_identity_is_the_stored_content_of_every_input_form():
    # Table columns: a string column's numpy width and an int/float column's dtype do not matter.
    columns = (np.array(["adelie", "gentoo", "adelie"]), np.array([39, 46, 39]), np.array([np.nan, 1.5, np.nan]))
    same = (np.array(["adelie", "gentoo", "adelie"], dtype="<U20"), np.array([39.0, 46.0, 39.0]),
            np.array([np.nan, 1.5, np.nan]))
    digests = input_digests(columns)
    assert digests[0] == digests[2] and digests[0] != digests[1]
    assert np.array_equal(digests, input_digests(same))
    # Column boundaries count: ("ab", "c") is not ("a", "bc").
    assert input_digests((np.array(["ab"]), np.array(["c"])))[0] != input_digests((np.array(["a"]), np.array(["bc"])))[0]
    # JSON records: key order does not matter, values do.
    records = [{"a": 1, "b": [1.0, 2.0]}, {"b": [1.0, 2.0], "a": 1}, {"a": 1, "b": [1.0, 2.5]}]
    r = input_digests(records)
    assert r[0] == r[1] != r[2]
    # Tensors: -0.0 is 0.0; the label is part of a row's identity but not of its split key.
    t = input_digests(np.array([[0.0, 1.0], [-0.0, 1.0], [0.0, 2.0]], dtype="float32"))
    assert t[0] == t[1] != t[2]
    rows = row_digests(t, np.array([0, 1, 0]))
    assert rows[0] != rows[1] and split_keys(t)[0] == split_keys(t)[1]


def test_the_split_never_straddles_equal_keys_even_on_tiny_data():
    for keys in ([5, 5, 9], [5, 9, 9, 9], [1, 2]):
        mask = validation_mask(np.array(keys, dtype=np.uint64))
        assert mask.any() and not mask.all()
        for key in set(keys):
            assert len(set(mask[np.array(keys) == key].tolist())) == 1


def test_a_feed_given_an_old_state_starts_again_from_the_latest_version(task, rows):
    """``feed_rows(state=...)``: the caller's read is only a first attempt's;
    a version stored since then makes the feed retry from a fresh read."""
    store, blobs, t = task
    X, y = rows
    datasets.feed(store, blobs, t, X[:20], y[:20])
    old = store.feed_state(t.id)
    between = datasets.feed(store, blobs, t, X[20:40], y[20:40])
    result = datasets.feed_rows(store, blobs, t, X[40:], y[40:], state=old)
    assert result.created and result.version.parent_id == between.id
    assert result.version.n_examples == 60
