"""The local end-to-end path (issue 2, item 5) and its bad-input guarantees."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from ease_jupyter.errors import AlreadyExistsError, DataError, NotFoundError, ProgramSyntaxError
from ease_jupyter.local import LocalWorkspace
from ease_jupyter.store import EdgeKind, JobStatus, NodeKind, VersionKind
from ease_jupyter.training import sklearn_candidates


@pytest.fixture(params=["memory", "sqlite"])
def workspace(request, tmp_path):
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'easeml.sqlite'}"
    ws = LocalWorkspace.open(url=url, data_dir=tmp_path / "data", user="alice")
    yield ws
    ws.store.close()


@pytest.fixture(scope="module")
def digits():
    bunch = load_digits()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(bunch.target))
    X, y = bunch.data[order].astype(np.float32), bunch.target[order]
    return X[:1500], y[:1500], X[1500:], y[1500:]


def test_digits_end_to_end_trains_every_config_and_infers(workspace, digits):
    X, y, X_test, y_test = digits
    task = workspace.task("digits", input=[64], output=[10])
    version = task.feed(X, y)
    assert (version.number, version.kind, version.n_examples) == (1, VersionKind.FEED, 1500)

    jobs = task.train()
    expected = [(c.name, c.configs[i].options) for c in sklearn_candidates(task.record) for i in range(len(c.configs))]
    assert [(j.model, dict(j.config)) for j in jobs] == expected
    families = {c.name: c.family for c in sklearn_candidates(task.record)}
    assert {"logistic regression", "RBF SVM", "random forest", "gradient boosting", "k nearest neighbours",
            "multi-layer perceptron"} <= {families[j.model] for j in jobs}
    assert all(j.status is JobStatus.SUCCEEDED for j in jobs)
    for job in jobs:
        metrics = {m.name: m.value for m in workspace.store.list_metrics(job.id)}
        assert metrics["val_score"] == pytest.approx(job.accuracy)
        assert metrics["fit_seconds"] > 0

    best = task.best()
    top = max(jobs, key=lambda j: (j.accuracy, -j.id))
    assert (best["model"], best["config"], best["accuracy"]) == (top.model, dict(top.config), top.accuracy)
    assert best["dataset_version"] == 1
    predicted = task.infer(X_test)
    assert predicted.shape == (len(X_test),) and predicted.dtype.kind == "i"
    assert np.mean(predicted == y_test) > 0.9

    # Training adds a dataset -> model edge per job to the provenance DAG.
    forward = task.provenance(task.versions()[0], direction="forward")
    trained = {e.dst.id for e in forward if e.kind is EdgeKind.TRAIN}
    assert trained == {j.id for j in jobs} and all(
        e.dst.kind is NodeKind.MODEL for e in forward if e.kind is EdgeKind.TRAIN
    )


def test_feeds_and_refines_make_immutable_linked_versions(workspace, digits):
    X, y, *_ = digits
    task = workspace.task("digits", input=[64], output=[10])
    v1 = task.feed(X[:100], y[:100])
    v1_data = task.data(v1)
    v2 = task.feed(X[100:150], y[100:150])
    assert (v2.number, v2.parent_id, v2.n_examples) == (2, v1.id, 150)
    v3 = task.refine(drop=[0, 5, 120])
    assert (v3.kind, v3.parent_id, v3.n_examples) == (VersionKind.REFINE, v2.id, 147)
    v4 = task.refine(keep=[5])
    assert v4.n_examples == 148

    # Old versions still read back exactly as they were written.
    again = task.data(v1)
    np.testing.assert_array_equal(again.X, v1_data.X)
    np.testing.assert_array_equal(again.y, v1_data.y)
    v3_data = task.data(v3)
    assert not {0, 5, 120} & set(v3_data.example_ids.tolist())
    np.testing.assert_array_equal(v3_data.X, np.delete(X[:150], [0, 5, 120], axis=0))
    assert 5 in task.data(v4).example_ids
    toggles = {(t.example_id, t.active) for t in workspace.store.list_toggles(v3.id)}
    assert toggles == {(0, False), (5, False), (120, False)}

    backward = task.provenance(v4)
    assert [(e.kind, e.src and e.src.id, e.dst.id) for e in backward] == [
        (EdgeKind.REFINE, v3.id, v4.id),
        (EdgeKind.REFINE, v2.id, v3.id),
        (EdgeKind.FEED, v1.id, v2.id),
        (EdgeKind.FEED, None, v1.id),
    ]


def _snapshot(workspace, task):
    versions = workspace.store.list_dataset_versions(task.record.id)
    return versions, [task.data(v).example_ids.tolist() for v in versions]


BAD_FEEDS = {
    "wrong shape": (lambda X, y: (X[:, :60], y), "X"),
    "wrong dtype": (lambda X, y: (X.astype(str), y), "X"),
    "nan": (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 7, np.nan, X), y), "X"),
    "inf": (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 9, np.inf, X), y), "X"),
    "mismatched lengths": (lambda X, y: (X, y[:-1]), None),
    "empty": (lambda X, y: (X[:0], y[:0]), None),
    "label out of range": (lambda X, y: (X, np.where(np.arange(len(y)) == 3, 10, y)), "y"),
    "negative label": (lambda X, y: (X, np.where(np.arange(len(y)) == 3, -1, y)), "y"),
}


@pytest.mark.parametrize("case", sorted(BAD_FEEDS))
def test_bad_feed_is_rejected_with_field_and_loses_nothing(workspace, digits, case):
    X, y, *_ = digits
    task = workspace.task("digits", input=[64], output=[10])
    task.feed(X[:50], y[:50])
    before = _snapshot(workspace, task)
    make, field = BAD_FEEDS[case]
    bad_X, bad_y = make(X[50:80].copy(), y[50:80].copy())
    with pytest.raises(DataError) as error:
        task.feed(bad_X, bad_y)
    if field is not None:
        assert error.value.field.startswith(field)
    assert error.value.expected and error.value.found
    assert _snapshot(workspace, task) == before


@pytest.mark.parametrize(
    "kwargs",
    [{"drop": [10_000]}, {"keep": [-1]}, {"drop": [1], "keep": [1]}, {}, {"drop": list(range(50))}],
    ids=["unknown id", "negative id", "keep and drop", "nothing", "drop all"],
)
def test_bad_refine_is_rejected_and_loses_nothing(workspace, digits, kwargs):
    X, y, *_ = digits
    task = workspace.task("digits", input=[64], output=[10])
    task.feed(X[:50], y[:50])
    before = _snapshot(workspace, task)
    with pytest.raises(DataError):
        task.refine(**kwargs)
    assert _snapshot(workspace, task) == before


def test_malformed_program_and_unknown_task(workspace):
    with pytest.raises(ProgramSyntaxError) as error:
        workspace.task("t", program="{input: {[Tensor[64,]], []}, output: {[Tensor[2]], []}}")
    assert error.value.line == 1 and error.value.expected
    assert workspace.store.list_tasks(workspace.user.id) == ()
    with pytest.raises(NotFoundError):
        workspace.task("never-created")


def test_tasks_are_per_user_and_schema_is_fixed(workspace, digits):
    X, y, *_ = digits
    alice = workspace.task("shared-name", input=[64], output=[10])
    alice.feed(X[:20], y[:20])
    bob = workspace.as_user("bob")
    with pytest.raises(NotFoundError):
        bob.task("shared-name")
    bobs = bob.task("shared-name", program="input: [4] output: [2]")
    assert bobs.record.id != alice.record.id and bobs.versions() == ()
    with pytest.raises(AlreadyExistsError):
        workspace.task("shared-name", input=[32], output=[10])


def test_infer_before_training_and_with_wrong_shape(workspace, digits):
    X, y, *_ = digits
    task = workspace.task("digits", input=[64], output=[10])
    with pytest.raises(NotFoundError):
        task.infer(X[:3])
    task.feed(X[:200], y[:200])
    task.train(only=["knn"])
    with pytest.raises(DataError):
        task.infer(X[:3, :10])
    assert task.infer(X[:3]).shape == (3,)


def test_time_series_trees_and_named_tensors_round_trip_through_versions(workspace):
    rng = np.random.default_rng(1)
    series = workspace.task("series", program="{input: {[Tensor[3]], [next]}, output: {[Tensor[2]], []}}")
    chains = rng.normal(size=(6, 5, 3)).astype(np.float32)
    series.feed(chains, [0, 1, 0, 1, 1, 0])
    series.feed(chains[:2] + 1, [1, 1])
    loaded = series.data()
    np.testing.assert_array_equal(loaded.X, np.concatenate([chains, chains[:2] + 1]))
    assert loaded.y.tolist() == [0, 1, 0, 1, 1, 0, 1, 1]

    trees = workspace.task("trees", program="{input: {[Tensor[2]], [left, right]}, output: {[Tensor[3]], []}}")
    leaf = lambda v: {0: [v, -v], "left": None, "right": None}  # noqa: E731
    records = [{0: [1.0, 2.0], "left": leaf(3.0), "right": None}, {0: [0.5, 0.5], "left": leaf(1.0), "right": leaf(2.0)}]
    trees.feed(records, [2, 0])
    trees.refine(drop=[0])
    (only,) = trees.data().X
    assert only[0].tolist() == [0.5, 0.5] and only[0].dtype == np.float32
    assert only["right"][0].tolist() == [2.0, -2.0] and only["right"]["left"] is None

    named = workspace.task("named", program="{input: {[img :: Tensor[2,2,1], meta :: Tensor[3]], []}, output: {[Tensor[2]], []}}")
    imgs, meta = rng.normal(size=(4, 2, 2, 1)), rng.normal(size=(4, 3))
    named.feed({"img": imgs, "meta": meta}, [0, 1, 1, 0])
    named.refine(drop=[1])
    X_img, X_meta = named.data().X
    np.testing.assert_allclose(X_img, imgs[[0, 2, 3]].astype(np.float32))
    np.testing.assert_allclose(X_meta, meta[[0, 2, 3]].astype(np.float32))
