"""Property tests: random histories of feeds and refines against a tiny model,
and the JSON normalisation behind job configs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ease_jupyter.errors import NotFoundError, StaleParentError
from ease_jupyter.store import EdgeKind, InMemoryStore, Node, NodeKind, Store, VersionKind
from ease_jupyter.store._frozen import FrozenDict, freeze, thaw
from ease_jupyter.store._validate import normalize_json

from .helpers import feed, refine


@dataclass
class ModelTask:
    """What the store should hold for one task."""

    id: int
    versions: list[tuple[int, VersionKind, int | None]] = field(default_factory=list)  # (id, kind, parent id)
    chunk_sizes: list[int] = field(default_factory=list)
    examples_at: dict[int, int] = field(default_factory=dict)  # version id -> examples known then


class VersionHistory(RuleBasedStateMachine):
    """Feeds and refines on a few tasks; the store must agree with ``ModelTask``s."""

    make_store = staticmethod(InMemoryStore)

    def __init__(self) -> None:
        super().__init__()
        self.store: Store = self.make_store()
        self.owner = self.store.create_user("ada", "h")
        self.tasks: list[ModelTask] = []

    def teardown(self) -> None:
        self.store.close()

    @precondition(lambda self: len(self.tasks) < 3)
    @rule()
    def new_task(self) -> None:
        created = self.store.create_task(self.owner.id, f"task{len(self.tasks)}", "")
        self.tasks.append(ModelTask(created.id))

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), count=st.integers(1, 5))
    def feed(self, data: st.DataObject, count: int) -> None:
        task = data.draw(st.sampled_from(self.tasks))
        parent = task.versions[-1][0] if task.versions else None  # a version builds on the latest
        version = feed(self.store, task.id, count, parent_id=parent, seed=len(task.versions))
        task.versions.append((version.id, VersionKind.FEED, parent))
        task.chunk_sizes.append(count)
        task.examples_at[version.id] = sum(task.chunk_sizes)

    @precondition(lambda self: any(t.versions for t in self.tasks))
    @rule(data=st.data())
    def refine(self, data: st.DataObject) -> None:
        task = data.draw(st.sampled_from([t for t in self.tasks if t.versions]))
        parent = task.versions[-1][0]
        known = task.examples_at[parent]
        toggles = data.draw(st.dictionaries(st.integers(0, known - 1), st.booleans(), max_size=known))
        version = refine(self.store, task.id, parent, toggles)
        task.versions.append((version.id, VersionKind.REFINE, parent))
        task.examples_at[version.id] = known
        assert {(t.example_id, t.active) for t in self.store.list_toggles(version.id)} == set(toggles.items())

    @precondition(lambda self: any(len(t.versions) >= 2 for t in self.tasks))
    @rule(data=st.data(), refining=st.booleans())
    def build_on_a_stale_version(self, data: st.DataObject, refining: bool) -> None:
        """Refused, and nothing is stored (the invariants check the rest)."""
        task = data.draw(st.sampled_from([t for t in self.tasks if len(t.versions) >= 2]))
        stale = data.draw(st.sampled_from([v[0] for v in task.versions[:-1]] + ([] if refining else [None])))
        with pytest.raises(StaleParentError):
            if refining:
                refine(self.store, task.id, stale, {})
            else:
                feed(self.store, task.id, 1, parent_id=stale, seed="stale")

    @precondition(lambda self: sum(bool(t.versions) for t in self.tasks) >= 2)
    @rule(data=st.data())
    def refine_with_a_foreign_parent(self, data: st.DataObject) -> None:
        task, other = data.draw(st.permutations([t for t in self.tasks if t.versions]))[:2]
        with pytest.raises(NotFoundError):
            refine(self.store, task.id, other.versions[0][0], {})

    @invariant()
    def versions_match_the_model(self) -> None:
        for task in self.tasks:
            versions = self.store.list_dataset_versions(task.id)
            assert [v.number for v in versions] == list(range(1, len(task.versions) + 1))
            assert [(v.id, v.kind, v.parent_id) for v in versions] == task.versions

    @invariant()
    def examples_are_numbered_in_feed_order(self) -> None:
        for task in self.tasks:
            chunks = self.store.list_chunks(task.id)
            assert [c.count for c in chunks] == task.chunk_sizes
            starts = [sum(task.chunk_sizes[:i]) for i in range(len(task.chunk_sizes))]
            assert [c.first_example_id for c in chunks] == starts

    @invariant()
    def each_version_has_exactly_its_creation_edge(self) -> None:
        for task in self.tasks:
            for version_id, kind, parent in task.versions:
                (edge,) = self.store.edges_into(Node(NodeKind.DATASET, version_id))
                assert edge.kind is EdgeKind(kind.value)
                assert edge.src == (None if parent is None else Node(NodeKind.DATASET, parent))
            if task.versions:
                # The ancestry of the newest version is its chain of parents.
                parents = {vid: parent for vid, _, parent in task.versions}
                chain, node = [], task.versions[-1][0]
                while node is not None:
                    chain.append(node)
                    node = parents[node]
                lineage = self.store.lineage(Node(NodeKind.DATASET, task.versions[-1][0]))
                assert [e.dst.id for e in lineage] == chain


# Rules are drawn before their preconditions are checked, so early steps (one task, no versions)
# discard many draws: a health check about that draw rate, not about the properties.
RUN = settings(max_examples=25, stateful_step_count=15, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

TestMemoryHistory = VersionHistory.TestCase
TestMemoryHistory.settings = RUN


class SQLiteHistory(VersionHistory):
    @staticmethod
    def make_store() -> Store:
        from ease_jupyter.store.sql import SQLStore

        return SQLStore("sqlite://")


TestSQLiteHistory = SQLiteHistory.TestCase
TestSQLiteHistory.settings = settings(RUN, max_examples=10)  # each example migrates a new database


# -- JSON configs ----------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_configs_store_exactly_their_json(value) -> None:
    normal = normalize_json("config", value)
    assert normal == json.loads(json.dumps(value))
    frozen = freeze(normal)
    assert thaw(frozen) == normal
    assert json.loads(json.dumps(frozen)) == normal
    hash(frozen)


@given(st.dictionaries(st.text(), st.integers(), min_size=1))
def test_frozen_dicts_refuse_every_mutation(value) -> None:
    frozen = FrozenDict(value)
    key = next(iter(value))
    for mutate in (
        lambda: frozen.__setitem__(key, 1),
        lambda: frozen.__delitem__(key),
        lambda: frozen.update({}),
        lambda: frozen.pop(key),
        lambda: frozen.popitem(),
        lambda: frozen.setdefault(key, 1),
        frozen.clear,
    ):
        with pytest.raises(TypeError):
            mutate()
    assert frozen == value
    import copy
    import pickle

    assert copy.deepcopy(frozen) == frozen and type(copy.copy(frozen)) is FrozenDict
    assert pickle.loads(pickle.dumps(frozen)) == frozen
