"""A user's whole path, through ``Client`` and the service: declare a task,
feed, refine, let the service train, ask for the best model, infer, read the
provenance (pvldb §3.1-3.2; ACAI §3.2, §4.4).

Feeds and refines make immutable, linked dataset versions; bad input is
refused naming the field, and stores nothing; tasks are per user and keep
their schema. The data tests share one service per store backend (memory and
SQLite); each cancels its tasks when it ends, so that their training does not
compete with the next test's. The end-to-end test has a service of its own, so
that every job on it is its task's.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.datasets import load_digits

from ease_jupyter import datasets
from ease_jupyter.errors import AlreadyExistsError, DataError, NotFoundError, ProgramSyntaxError
from ease_jupyter.jobspec import SklearnGrid
from ease_jupyter.service.candidates import task_candidates
from ease_jupyter.zoo import Engine

from .conftest import Running, serving, start


@pytest.fixture(scope="module")
def digits():
    bunch = load_digits()
    order = np.random.default_rng(0).permutation(len(bunch.target))
    X, y = bunch.data[order].astype(np.float32), bunch.target[order]
    return X[:1500], y[:1500], X[1500:], y[1500:]


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def service(request, tmp_path_factory):
    with serving(tmp_path_factory.mktemp(request.param), "alice", "bob", torch=False,
                 db_url="memory://" if request.param == "memory" else None) as running:
        yield running


_names = itertools.count()


class Tasks:
    """Creates tasks with fresh names for one test, and cancels them afterwards."""

    def __init__(self, running: Running):
        self.running = running
        self.alice = running.client("alice")
        self.bob = running.client("bob")
        self.made: list = []

    def name(self) -> str:
        return f"task-{next(_names)}"

    def new(self, **schema):
        """A new task of alice's (``input``/``output`` shapes or a ``program``)."""
        task = self.alice.task(self.name(), **schema)
        self.made.append(task)
        return task


@pytest.fixture
def tasks(service):
    made = Tasks(service)
    yield made
    for task in made.made:
        task.cancel()


def _snapshot(task) -> list:
    """Every version of the task and the example ids each holds."""
    return [(v, task.data(v["number"])[0].tolist()) for v in task.versions()]


def test_feeds_and_refines_make_immutable_linked_versions(tasks, digits):
    X, y, *_ = digits
    task = tasks.new(input=[64], output=[10])
    v1 = task.feed(X[:100], y[:100])
    assert (v1["number"], v1["kind"], v1["parent_id"], v1["n_examples"]) == (1, "feed", None, 100)
    v1_ids, v1_X, v1_y = task.data(1)
    v2 = task.feed(X[100:150], y[100:150])
    assert (v2["number"], v2["parent_id"], v2["n_examples"]) == (2, v1["id"], 150)
    v3 = task.refine(drop=[0, 5, 120])
    assert (v3["kind"], v3["parent_id"], v3["n_examples"]) == ("refine", v2["id"], 147)
    v4 = task.refine(keep=[5])
    assert (v4["parent_id"], v4["n_examples"]) == (v3["id"], 148)
    assert [v["id"] for v in task.versions()] == [v1["id"], v2["id"], v3["id"], v4["id"]]

    # Old versions still read back exactly as they were written.
    again_ids, again_X, again_y = task.data(1)
    np.testing.assert_array_equal(again_ids, v1_ids)
    np.testing.assert_array_equal(again_X, v1_X)
    np.testing.assert_array_equal(again_y, v1_y)
    np.testing.assert_array_equal(v1_X, X[:100])
    v3_ids, v3_X, v3_y = task.data(3)
    assert not {0, 5, 120} & set(v3_ids.tolist())
    np.testing.assert_array_equal(v3_X, np.delete(X[:150], [0, 5, 120], axis=0))
    np.testing.assert_array_equal(v3_y, np.delete(y[:150], [0, 5, 120]))
    assert 5 in task.data(4)[0] and 5 in task.data()[0]
    toggles = {(t.example_id, t.active) for t in tasks.running.service.store.list_toggles(v3["id"])}
    assert toggles == {(0, False), (5, False), (120, False)}

    backward = task.provenance()["edges"]  # from the latest version back to the first feed
    def node(n):
        return n and (n["kind"], n["id"])

    assert [(e["kind"], node(e["src"]), node(e["dst"])) for e in backward] == [
        ("feed", None, ("dataset", v1["id"])),
        ("feed", ("dataset", v1["id"]), ("dataset", v2["id"])),
        ("refine", ("dataset", v2["id"]), ("dataset", v3["id"])),
        ("refine", ("dataset", v3["id"]), ("dataset", v4["id"])),
    ]


def _with(array: np.ndarray, index: int, value) -> np.ndarray:
    out = array.astype(np.result_type(array, np.asarray(value)))
    out.flat[index] = value
    return out


BAD_FEEDS = {
    "wrong shape": (lambda X, y: (X[:, :60], y), "X"),
    "wrong dtype": (lambda X, y: (X.astype(str), y), "X"),
    "nan": (lambda X, y: (_with(X, 7, np.nan), y), "X"),
    "inf": (lambda X, y: (_with(X, 9, np.inf), y), "X"),
    "mismatched lengths": (lambda X, y: (X, y[:-1]), "y"),
    "empty": (lambda X, y: (X[:0], y[:0]), "X"),
    "label out of range": (lambda X, y: (X, _with(y, 3, 10)), "y"),
    "negative label": (lambda X, y: (X, _with(y, 3, -1)), "y"),
}


@pytest.mark.parametrize("case", sorted(BAD_FEEDS))
def test_bad_feed_is_rejected_with_field_and_loses_nothing(tasks, digits, case):
    X, y, *_ = digits
    task = tasks.new(input=[64], output=[10])
    task.feed(X[:50], y[:50])
    before = _snapshot(task)
    make, field = BAD_FEEDS[case]
    bad_X, bad_y = make(X[50:80].copy(), y[50:80].copy())
    with pytest.raises(DataError) as error:
        task.feed(bad_X, bad_y)
    assert error.value.field.startswith(field)
    assert error.value.expected and error.value.found
    assert _snapshot(task) == before


@pytest.mark.parametrize(
    "kwargs, field",
    [({"drop": [10_000]}, "drop"), ({"keep": [-1]}, "keep"), ({"drop": [1], "keep": [1]}, "keep/drop"),
     ({}, "keep/drop"), ({"drop": list(range(50))}, "drop")],
    ids=["unknown id", "negative id", "keep and drop", "nothing", "drop all"],
)
def test_bad_refine_is_rejected_and_loses_nothing(tasks, digits, kwargs, field):
    X, y, *_ = digits
    task = tasks.new(input=[64], output=[10])
    task.feed(X[:50], y[:50])
    before = _snapshot(task)
    with pytest.raises(DataError) as error:
        task.refine(**kwargs)
    assert error.value.field == field and error.value.expected
    assert _snapshot(task) == before


def test_malformed_program_and_unknown_task(tasks):
    name = tasks.name()
    with pytest.raises(ProgramSyntaxError) as error:
        tasks.alice.task(name, program="{input: {[Tensor[64,]], []}, output: {[Tensor[2]], []}}")
    assert error.value.line == 1 and error.value.expected
    assert name not in [t.name for t in tasks.alice.tasks()]
    with pytest.raises(NotFoundError):
        tasks.alice.task(name)
    with pytest.raises(NotFoundError):
        tasks.alice.task("never-created")


def test_tasks_are_per_user_and_schema_is_fixed(tasks, digits):
    X, y, *_ = digits
    alice = tasks.new(input=[64], output=[10])
    alice.feed(X[:20], y[:20])
    with pytest.raises(NotFoundError):
        tasks.bob.task(alice.name)
    bobs = tasks.bob.task(alice.name, program="input: [4] output: [2]")
    tasks.made.append(bobs)
    assert bobs.info["id"] != alice.info["id"] and bobs.versions() == []
    with pytest.raises(AlreadyExistsError):
        tasks.alice.task(alice.name, input=[32], output=[10])
    # The same schema again opens the task, data and all.
    assert tasks.alice.task(alice.name, input=[64], output=[10]).versions()[0]["n_examples"] == 20


def test_infer_before_training_and_with_wrong_shape(tasks, digits):
    X, y, *_ = digits
    task = tasks.new(input=[64], output=[10])
    with pytest.raises(NotFoundError):
        task.infer(X[:3])
    task.feed(X[:200], y[:200])
    assert task.wait(timeout=300)
    with pytest.raises(DataError) as error:
        task.infer(X[:3, :10])
    assert error.value.field == "X"
    predicted = task.infer(X[:3])
    assert predicted.shape == (3,) and predicted.dtype.kind == "i"


def test_time_series_trees_and_named_tensors_round_trip_through_versions(tasks):
    """Fed through the client (chains as arrays, trees and named fields as
    JSON), stored by the service, read back by ``datasets.load`` (the API
    returns X only for single-tensor inputs)."""
    store, blobs = tasks.running.service.store, tasks.running.service.blobs

    def loaded(task):
        return datasets.load(store, blobs, store.latest_dataset_version(task.info["id"]))

    rng = np.random.default_rng(1)
    series = tasks.new(program="{input: {[Tensor[3]], [next]}, output: {[Tensor[2]], []}}")
    chains = rng.normal(size=(6, 5, 3)).astype(np.float32)
    series.feed(chains, [0, 1, 0, 1, 1, 0])
    series.feed(chains[:2] + 1, [1, 1])
    _, X, y = series.data()
    np.testing.assert_array_equal(X, np.concatenate([chains, chains[:2] + 1]))
    assert y.tolist() == [0, 1, 0, 1, 1, 0, 1, 1]

    trees = tasks.new(program="{input: {[Tensor[2]], [left, right]}, output: {[Tensor[3]], []}}")
    def leaf(v):
        return {0: [v, -v], "left": None, "right": None}

    records = [{0: [1.0, 2.0], "left": leaf(3.0), "right": None}, {0: [0.5, 0.5], "left": leaf(1.0), "right": leaf(2.0)}]
    trees.feed(records, [2, 0])
    assert trees.refine(drop=[0])["n_examples"] == 1
    (only,) = loaded(trees).X
    assert only[0].tolist() == [0.5, 0.5] and only[0].dtype == np.float32
    assert only["left"][0].tolist() == [1.0, -1.0] and only["left"]["left"] is None
    assert only["right"][0].tolist() == [2.0, -2.0] and only["right"]["right"] is None
    assert trees.data()[2].tolist() == [0]

    named = tasks.new(program="{input: {[img :: Tensor[2,2,1], meta :: Tensor[3]], []}, output: {[Tensor[2]], []}}")
    imgs, meta = rng.normal(size=(4, 2, 2, 1)), rng.normal(size=(4, 3))
    named.feed([{"img": imgs[i], "meta": meta[i]} for i in range(2)], [0, 1])  # records
    named.feed([imgs[2:], meta[2:]], [1, 0])  # one array per field, in the program's order
    named.refine(drop=[1])
    X_img, X_meta = loaded(named).X
    np.testing.assert_allclose(X_img, imgs[[0, 2, 3]].astype(np.float32))
    np.testing.assert_allclose(X_meta, meta[[0, 2, 3]].astype(np.float32))
    assert named.data()[2].tolist() == [0, 1, 0]


def test_digits_end_to_end_trains_every_candidate_and_infers(tmp_path, digits):
    X, y, X_test, y_test = digits
    running = start(tmp_path, torch=False)
    try:
        running.user("alice")
        task = running.client("alice").task("digits", input=[64], output=[10])
        version = task.feed(X, y)
        assert (version["number"], version["kind"], version["n_examples"]) == (1, "feed", 1500)
        assert task.wait(timeout=600)

        # One job per scikit-learn candidate, each evaluating the candidate's whole grid.
        candidates = {name: c for name, c in task_candidates(running.service.store.get_task(task.info["id"])).items()
                      if c.engine is Engine.SKLEARN}
        jobs = task.jobs()
        assert sorted(j["model"] for j in jobs) == sorted(candidates)
        assert {j["model"]: j["config"] for j in jobs} == {n: SklearnGrid.of(c).config() for n, c in candidates.items()}
        assert {"logistic regression", "RBF SVM", "random forest", "gradient boosting", "k nearest neighbours",
                "multi-layer perceptron"} <= {candidates[j["model"]].family for j in jobs}
        assert all(j["status"] == "succeeded" and j["dataset_version"] == 1 for j in jobs)
        for row in task.history():
            (metrics,) = row["metrics"]
            assert metrics["val_score"] == pytest.approx(row["accuracy"])
            assert metrics["fit_seconds"] > 0

        best = task.best()
        top = max(jobs, key=lambda j: (j["accuracy"], -j["id"]))
        assert (best["job_id"], best["model"], best["config"], best["accuracy"]) == (
            top["id"], top["model"], top["config"], top["accuracy"])
        assert best["dataset_version"] == 1
        predicted = task.infer(X_test)
        assert predicted.shape == (len(X_test),) and predicted.dtype.kind == "i"
        assert np.mean(predicted == y_test) > 0.9

        # Training adds a dataset -> model edge per job to the provenance DAG.
        forward = task.provenance(direction="forward")["edges"]
        trained = [e for e in forward if e["kind"] == "train"]
        assert sorted(e["dst"]["id"] for e in trained) == sorted(j["id"] for j in jobs)
        assert all(e["dst"]["kind"] == "model" and e["src"] == {"kind": "dataset", "id": version["id"]}
                   for e in trained)
    finally:
        running.thread.stop()

