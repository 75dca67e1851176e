"""PartitionMap, the one record of which worker holds which partition, and
the split into partitions (Cerebro §3.1, §5.5-5.6)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ease_jupyter.errors import EaseMLError, NotFoundError
from ease_jupyter.execution.mop.partitions import TRAIN, VAL, PartitionMap, partition, split_validation


def two_kinds(p: int = 3) -> PartitionMap:
    return PartitionMap({TRAIN: range(p), VAL: range(p)})


def test_a_new_map_holds_nothing_and_every_partition_is_an_orphan():
    m = two_kinds(3)
    assert m.kinds == (TRAIN, VAL) and m.partitions(TRAIN) == (0, 1, 2)
    assert m.holders(TRAIN, 0) == frozenset()
    assert m.orphans() == {TRAIN: [0, 1, 2], VAL: [0, 1, 2]}
    assert m.under_replicated(TRAIN, 1) == [0, 1, 2]


def test_place_records_an_engine_placement_and_availability_reads_it_back():
    m = two_kinds(3)
    m.place(TRAIN, {"w0": {0, 2}, "w1": {1, 2}, "w2": set()})
    assert m.holders(TRAIN, 2) == {"w0", "w1"} and m.holders(TRAIN, 0) == {"w0"}
    assert m.availability(TRAIN, ["w0", "w1", "w2"]) == {"w0": {0, 2}, "w1": {1, 2}, "w2": set()}
    # a holder that is not among the workers asked about is left out; an unknown worker holds nothing
    assert m.availability(TRAIN, ["w1", "w9"]) == {"w1": {1, 2}, "w9": set()}
    assert m.held_by(TRAIN, "w0") == {0, 2} and m.held_by(VAL, "w0") == set()
    assert m.orphans() == {VAL: [0, 1, 2]}  # only the kinds that have orphans
    assert m.under_replicated(TRAIN, 2) == [0, 1]


def test_a_lost_worker_holds_nothing_of_any_kind():
    m = two_kinds(2)
    m.place(TRAIN, {"w0": {0}, "w1": {1}})
    m.place(VAL, {"w0": {0, 1}, "w1": {1}})
    m.remove_worker("w0")
    assert m.held_by(TRAIN, "w0") == set() and m.held_by(VAL, "w0") == set()
    assert m.orphans() == {TRAIN: [0], VAL: [0]}
    assert m.holders(VAL, 1) == {"w1"}


def test_move_discard_and_add():
    m = two_kinds(2)
    m.place(TRAIN, {"w0": {0, 1}})
    m.move(TRAIN, 1, "w0", "w1")
    assert m.holders(TRAIN, 1) == {"w1"} and m.holders(TRAIN, 0) == {"w0"}
    m.discard(TRAIN, 0, "w0")
    m.discard(TRAIN, 0, "w0")  # discarding again is no error
    assert m.orphans() == {TRAIN: [0], VAL: [0, 1]}
    m.add(TRAIN, 0, "w2")
    assert m.holders(TRAIN, 0) == {"w2"}


def test_holders_is_a_copy():
    m = two_kinds(1)
    m.add(TRAIN, 0, "w0")
    held = m.holders(TRAIN, 0)
    with pytest.raises(AttributeError):
        held.add("w1")  # frozen: a caller cannot change the map behind its back
    av = m.availability(TRAIN, ["w0"])
    av["w0"].add(7)
    assert m.held_by(TRAIN, "w0") == {0}


def test_unknown_kinds_and_partitions_name_the_field():
    m = two_kinds(2)
    with pytest.raises(NotFoundError, match=r"kind: found 'test'.*\['train', 'val'\]"):
        m.holders("test", 0)
    with pytest.raises(NotFoundError, match=r"partition: found 5 of kind 'train'.*\[0, 1\]"):
        m.add(TRAIN, 5, "w0")
    with pytest.raises(NotFoundError, match="partition: found 9"):
        m.place(VAL, {"w0": {9}})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "discard", "move", "remove"]), st.sampled_from([TRAIN, VAL]),
                          st.integers(0, 2), st.sampled_from(["a", "b", "c"]), st.sampled_from(["a", "b", "c"]))))
def test_the_map_agrees_with_a_set_of_copies_after_any_sequence_of_changes(ops):
    m = two_kinds(3)
    copies: set[tuple[str, int, str]] = set()  # (kind, partition, worker): the reference model
    for op, kind, pid, w, other in ops:
        if op == "add":
            m.add(kind, pid, w)
            copies.add((kind, pid, w))
        elif op == "discard":
            m.discard(kind, pid, w)
            copies.discard((kind, pid, w))
        elif op == "move":
            m.move(kind, pid, w, other)
            copies.discard((kind, pid, w))
            copies.add((kind, pid, other))
        else:
            m.remove_worker(w)
            copies = {c for c in copies if c[2] != w}
    for kind in (TRAIN, VAL):
        for pid in range(3):
            assert m.holders(kind, pid) == {w for k, p, w in copies if (k, p) == (kind, pid)}
        assert m.availability(kind, "abc") == {w: {p for k, p, x in copies if k == kind and x == w} for w in "abc"}
        assert m.under_replicated(kind, 2) == [p for p in range(3) if len(m.holders(kind, p)) < 2]
    assert m.orphans() == {k: ps for k in (TRAIN, VAL)
                           if (ps := [p for p in range(3) if not any(c[:2] == (k, p) for c in copies)])}


# -- the split ------------------------------------------------------------------------------------


def test_partition_shuffles_once_and_cuts_every_example_into_exactly_one_partition():
    X = np.arange(20).reshape(10, 2)
    y = np.arange(10)
    val = (np.arange(8).reshape(4, 2) + 100, np.arange(4) + 100)
    parts = partition((X, y), val, 3, seed=5)
    train_y = np.concatenate([parts[TRAIN][i][1] for i in range(3)])
    assert sorted(train_y) == list(range(10)) and list(train_y) != list(range(10))  # shuffled, none lost
    assert [len(parts[TRAIN][i][1]) for i in range(3)] == [4, 3, 3]
    for i in range(3):  # rows stay with their labels
        Xi, yi = parts[TRAIN][i]
        assert (Xi[:, 0] == 2 * yi).all()
    assert [list(parts[VAL][i][1]) for i in range(3)] == [[100, 101], [102], [103]]  # validation keeps its order
    again = partition((X, y), val, 3, seed=5)
    assert all((again[TRAIN][i][1] == parts[TRAIN][i][1]).all() for i in range(3))


def test_split_validation_holds_out_by_id_or_takes_what_is_given():
    X, y = np.zeros((50, 2)), np.arange(50)
    (_, yt), (_, yv) = split_validation(X, y, seed=0)
    assert len(yt) + len(yv) == 50 and 0 < len(yv) < 25 and not set(yt) & set(yv)
    _, (_, yv2) = split_validation(X, y, seed=0)
    assert list(yv2) == list(yv)  # stable
    given_val = (np.ones((3, 2)), np.array([7, 8, 9]))
    (_, yt), (_, yv) = split_validation(X, y, validation=given_val)
    assert len(yt) == 50 and list(yv) == [7, 8, 9]
    with pytest.raises(EaseMLError, match="y: found 49 labels"):
        split_validation(X, y[:49])
    with pytest.raises(EaseMLError, match="example_ids: found 3 ids"):
        split_validation(X, y, example_ids=[1, 2, 3])
    with pytest.raises(EaseMLError, match="X: found 1 training examples"):
        split_validation(X[:1], y[:1], validation=given_val)


# -- the runner's map and the engine's data agree ------------------------------------------------


@pytest.mark.parametrize("replication", [1, 2])
def test_the_runners_map_follows_the_engine_through_a_lost_worker_and_its_repair(replication):
    from sklearn.datasets import load_digits

    from ease_jupyter.execution.automl import GridSearch
    from ease_jupyter.execution.engine import LocalEngine
    from ease_jupyter.execution.mop.runner import MOPRunner
    from ease_jupyter.zoo.templates import TorchBuilder

    d = load_digits()
    X, y = d.images[:300].astype(np.float32) / 16.0, d.target[:300]
    with LocalEngine(3) as engine:
        killed: list[str] = []
        checked: list[int] = []

        def kill(rec):
            if not killed and rec.kind == "train":
                killed.append(next(w for w in engine.workers() if w != rec.worker))
                engine.kill_worker(killed[0])

        def agree(m):
            # At an epoch's end the runner has taken in the loss and the replacement.
            pm = runner.partition_map
            for kind in (TRAIN, VAL):
                for pid in pm.partitions(kind):
                    assert pm.holders(kind, pid) == engine.holders(f"{kind}-{pid}"), (kind, pid)
                    assert killed[0] not in pm.holders(kind, pid)
                assert not pm.under_replicated(kind, replication)
            checked.append(m.mop_epoch)

        runner = MOPRunner(engine, GridSearch("lenet", {"lr": [0.1, 0.03, 0.01]}, epochs=2),
                           {"lenet": TorchBuilder("lenet", "LeNet", ((8, 8), 10))}, X, y,
                           n_partitions=3, replication=replication, on_unit=kill, on_metrics=agree)
        res = runner.run()
    assert killed and any("worker lost" in f for f in res.faults) and set(checked) == {0, 1}
