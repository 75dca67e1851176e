"""SharedPoolScheduler: several MOP workloads on one pool of workers.

The Cerebro §3.1 invariants per workload, one unit per worker across
workloads, joins and leaves between units, faults and restart recovery per
workload (§5.6), and the stride-scheduling fairness among owners."""

from __future__ import annotations

import random
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ease_jupyter.errors import AlreadyExistsError, InvalidStateError, NotFoundError
from ease_jupyter.execution.mop import Assignment, MOPScheduler, SharedPoolScheduler, Unit

from .conftest import assert_queues_cover_the_epoch, assert_same_output_under_hash_seeds


# -- helpers -------------------------------------------------------------------
def ring(workers: int, replication: int = 1) -> dict[str, list[int]]:
    return {f"w{j}": [(j + k) % workers for k in range(replication)] for j in range(workers)}


def everywhere(workers: int, partitions: int) -> dict[str, list[int]]:
    return {f"w{j}": list(range(partitions)) for j in range(workers)}


def drive(pool: SharedPoolScheduler, rng: random.Random, until=None) -> list[Assignment]:
    """Complete in-flight units in a random order until every active
    workload's epoch is done (or ``until()``); returns the assignments made."""
    made = []
    while not all(pool.workload(n).epoch_done() for n in pool.workloads):
        made += pool.schedule()
        if until is not None and until():
            break
        running = sorted(pool.running.values())
        assert running, f"stuck: {pool.stuck_workloads()}"
        a = running[rng.randrange(len(running))]
        pool.complete(a.workload, a.unit, a.worker)
    return made


def assert_pool_invariants(pool: SharedPoolScheduler) -> None:
    """Per workload, the §3.1 invariants and Q / Q' / done bookkeeping (§5.6);
    across workloads, one unit per worker."""
    live = set(pool.workers)
    running = pool.running
    assert set(running) <= live
    assert set(pool.idle_workers) == live - set(running), "a worker both idle and busy, or neither"
    flights = {}
    for name in pool.workloads:
        view = pool.workload(name)
        assert set(view.workers) == live, "every workload knows every live worker"
        flight = view.in_flight
        configs = [u.config for u in flight]
        assert len(configs) == len(set(configs)), "model training isolation"
        for unit, worker in flight.items():
            assert unit.partition in view.workers[worker], "unit on a worker that lacks its partition"
            assert unit.epoch == view.epoch
            flights[worker] = flights.get(worker, []) + [Assignment(name, unit, worker)]
        assert_queues_cover_the_epoch(view, flight)
    assert all(len(v) == 1 for v in flights.values()), f"a worker runs several units: {flights}"
    assert {w: v[0] for w, v in flights.items()} == dict(running), "pool and workloads disagree on Q'"


def ready_units(view, worker: str | None = None) -> list[Unit]:
    """Alg. 1 Line 10 with §5.5, brute force (no replay): units of Q whose
    config is idle and, given a worker, whose partition it holds."""
    busy = {u.config for u in view.in_flight}
    return [u for u in view.pending if u.config not in busy and (worker is None or u.partition in view.workers[worker])]


def assert_complete_epoch(view, epoch: int, configs) -> None:
    """Completeness (§3.1): each config visited every partition exactly once."""
    for c in configs:
        assert sorted(view.visit_log[(c, epoch)]) == list(view.partitions), (c, epoch)


# -- MOPScheduler's per-worker methods, which the pool drives --------------------------
def test_ready_count_and_schedule_worker_follow_alg1_line10():
    sched = MOPScheduler(["a", "b"], {"w0": [0], "w1": [0, 1], "w2": []}, seed=0)
    assert sched.ready_count() == 4  # every unit of Q: both configs idle
    assert [sched.ready_count(w) for w in ("w0", "w1", "w2")] == [2, 4, 0]
    assert sched.schedule_worker("w2") is None and "w2" in sched.idle_workers
    unit = sched.schedule_worker("w0")
    assert unit.partition == 0 and sched.in_flight == {unit: "w0"}
    other = "b" if unit.config == "a" else "a"
    assert sched.ready_count() == 2 and sched.ready_count("w1") == 2  # the busy config's units left
    assert sched.ready_count("w0") == 1  # busy or not, what could run there
    with pytest.raises(InvalidStateError, match="expected an idle worker"):
        sched.schedule_worker("w0")
    with pytest.raises(NotFoundError, match="'nope'"):
        sched.schedule_worker("nope")
    with pytest.raises(NotFoundError, match="'nope'"):
        sched.ready_count("nope")
    second = sched.schedule_worker("w1")
    assert second.config == other and sched.ready_count() == 0 and sched.ready_count("w1") == 0


def test_ready_count_under_replay_counts_only_the_next_logged_unit():
    sched = MOPScheduler(["a"], {"w0": [0, 1, 2]}, seed=0, visit_order={("a", 0): [2, 0, 1]})
    assert sched.ready_count() == 1 and sched.schedule_worker("w0") == Unit("a", 2, 0)


# -- sharing the workers -------------------------------------------------------
def test_two_workloads_fill_the_pool_one_unit_per_worker():
    pool = SharedPoolScheduler(["w0", "w1", "w2", "w3"], seed=0)
    pool.add_workload("small", ["a"], ring(4), owner="alice")  # alone it would use one worker
    pool.add_workload("big", ["x", "y", "z"], ring(4), owner="bob")
    assigned = pool.schedule()
    assert sorted(a.worker for a in assigned) == ["w0", "w1", "w2", "w3"]
    assert {a.workload for a in assigned} == {"small", "big"}
    assert pool.schedule() == [] and pool.idle_workers == ()
    assert_pool_invariants(pool)
    drive(pool, random.Random(0))
    for name, configs in (("small", ["a"]), ("big", ["x", "y", "z"])):
        assert_complete_epoch(pool.workload(name), 0, configs)
    assert dict(pool.units_completed) == {"small": 4, "big": 12}


def test_a_workload_that_cannot_use_its_share_leaves_it_to_the_others():
    # Work conservation: "one" has one config, so at most one worker; "many" takes the rest.
    pool = SharedPoolScheduler([f"w{j}" for j in range(4)], seed=1)
    pool.add_workload("one", ["a"], everywhere(4, 2), owner="alice")
    pool.add_workload("many", [f"c{i}" for i in range(8)], everywhere(4, 2), owner="bob")
    assigned = pool.schedule()
    assert len(assigned) == 4
    assert sorted(a.workload for a in assigned) == ["many", "many", "many", "one"]


def test_workloads_keep_their_own_partitions_and_placement():
    # "img" is split in 2 partitions held by w0 / w1; "tab" in 3 held by w1 / w2.
    pool = SharedPoolScheduler(["w0", "w1", "w2"], seed=3)
    pool.add_workload("img", ["a", "b"], {"w0": [0], "w1": [1]}, owner="u")
    pool.add_workload("tab", ["x"], {"w1": [0, 1], "w2": [2]}, owner="v")
    assert pool.workload("img").workers["w2"] == frozenset()
    made = drive(pool, random.Random(2))
    for a in made:
        assert a.unit.partition in pool.workload(a.workload).workers[a.worker]
    assert not any(a.workload == "img" and a.worker == "w2" for a in made)
    assert_complete_epoch(pool.workload("img"), 0, ["a", "b"])
    assert_complete_epoch(pool.workload("tab"), 0, ["x"])


# -- fairness (stride scheduling over units) ------------------------------------
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_always_ready_workloads_get_their_weight_share_within_the_bound(data):
    """The docstring's bound: with every workload ready at each decision,
    after n units a workload of share s has between s*n - k*s and s*n + 1."""
    n_workers = data.draw(st.integers(1, 4), label="workers")
    owners = data.draw(st.lists(st.sampled_from(["ann", "bob", "cy"]), min_size=1, max_size=4), label="owners")
    weights = {o: data.draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]), label=f"weight {o}") for o in sorted(set(owners))}
    pool = SharedPoolScheduler([f"w{j}" for j in range(n_workers)], seed=data.draw(st.integers(0, 99)), weights=weights)
    n_units = 60
    for i, owner in enumerate(owners):
        # more configs than workers, every partition everywhere: always ready
        pool.add_workload(f"j{i}", [f"c{c}" for c in range(n_workers + 1 + n_units // 3)], everywhere(n_workers, 3),
                          owner=owner)
    shares, k = pool.shares(), len(owners)
    rng = random.Random(data.draw(st.integers(0, 99)))
    while True:
        for name in pool.workloads:  # the bound's premise: ready at each decision
            assert pool.workload(name).ready_count() > 0
        pool.schedule()
        n = sum(pool.units_started.values())
        for name, started in pool.units_started.items():
            s = shares[name]
            assert s * n - k * s - 1e-9 <= started <= s * n + 1 + 1e-9, (name, started, s, n)
        if n >= n_units:
            break
        a = sorted(pool.running.values())[rng.randrange(len(pool.running))]
        pool.complete(a.workload, a.unit, a.worker)


def test_equal_weights_share_units_within_one_over_a_long_run():
    pool = SharedPoolScheduler([f"w{j}" for j in range(3)], seed=4)
    for name in ("a", "b", "c"):
        pool.add_workload(name, [f"c{i}" for i in range(40)], everywhere(3, 4), owner=f"u-{name}")
    rng = random.Random(0)
    for _ in range(300):
        pool.schedule()
        counts = pool.units_started.values()
        assert max(counts) - min(counts) <= 1
        a = sorted(pool.running.values())[rng.randrange(3)]
        pool.complete(a.workload, a.unit, a.worker)


def test_users_share_the_pool_not_tasks():
    # alice runs two workloads, bob one: bob gets half the units, alice's get a quarter each.
    pool = SharedPoolScheduler(["w0", "w1"], seed=5)
    pool.add_workload("a1", [f"c{i}" for i in range(30)], everywhere(2, 2), owner="alice")
    pool.add_workload("a2", [f"c{i}" for i in range(30)], everywhere(2, 2), owner="alice")
    pool.add_workload("b1", [f"c{i}" for i in range(30)], everywhere(2, 2), owner="bob")
    assert pool.shares() == {"a1": 0.25, "a2": 0.25, "b1": 0.5}
    rng = random.Random(1)
    while sum(pool.units_started.values()) < 80:
        pool.schedule()
        a = sorted(pool.running.values())[rng.randrange(len(pool.running))]
        pool.complete(a.workload, a.unit, a.worker)
    started = pool.units_started
    assert abs(started["b1"] - 0.5 * sum(started.values())) <= 2
    assert abs(started["a1"] - started["a2"]) <= 2


def test_weights_scale_the_shares():
    pool = SharedPoolScheduler(["w0"], seed=0, weights={"heavy": 3})
    pool.add_workload("h", [f"c{i}" for i in range(50)], everywhere(1, 1), owner="heavy")
    pool.add_workload("l", [f"c{i}" for i in range(50)], everywhere(1, 1), owner="light")
    for _ in range(40):
        [a] = pool.schedule()
        pool.complete(a.workload, a.unit, a.worker)
    assert dict(pool.units_started) == {"h": 30, "l": 10}
    pool.set_weight("light", 3)  # from now on equal
    for _ in range(20):
        [a] = pool.schedule()
        pool.complete(a.workload, a.unit, a.worker)
    assert dict(pool.units_started) == {"h": 40, "l": 20}  # half each from then on


def test_a_small_workload_that_joins_late_runs_at_the_next_free_worker():
    pool = SharedPoolScheduler([f"w{j}" for j in range(4)], seed=6)
    pool.add_workload("large", [f"c{i}" for i in range(20)], ring(4), owner="alice")
    rng = random.Random(3)
    drive(pool, rng, until=lambda: sum(pool.units_completed.values()) >= 25)
    pool.add_workload("small", ["a", "b"], ring(4), owner="bob")
    a = sorted(pool.running.values())[0]
    pool.complete(a.workload, a.unit, a.worker)
    [first] = pool.schedule()
    assert first.workload == "small" and first.worker == a.worker
    # and the large workload goes on sharing: it is far from done
    assert len(pool.workload("large").pending) > 40


def test_a_workload_waiting_between_epochs_banks_no_credit():
    pool = SharedPoolScheduler(["w0", "w1"], seed=7)
    pool.add_workload("a", [f"c{i}" for i in range(4)], everywhere(2, 1), owner="ann")
    pool.add_workload("b", [f"c{i}" for i in range(60)], everywhere(2, 1), owner="bob")
    rng = random.Random(0)
    # a's epoch (4 units) ends; a's owner decides slowly while b runs on
    drive(pool, rng, until=lambda: pool.workload("a").epoch_done() and not any(
        x.workload == "a" for x in pool.running.values()))
    while pool.units_started["b"] < 40:
        pool.schedule()
        x = sorted(pool.running.values())[rng.randrange(len(pool.running))]
        pool.complete(x.workload, x.unit, x.worker)
    pool.next_epoch("a", [f"n{i}" for i in range(12)])
    before = dict(pool.units_started)
    for _ in range(12):
        pool.schedule()
        x = sorted(pool.running.values())[rng.randrange(len(pool.running))]
        pool.complete(x.workload, x.unit, x.worker)
    got = {n: pool.units_started[n] - before[n] for n in before}
    assert got["a"] <= got["b"] + 2, got  # not a run of a's units to "catch up"


def test_a_workload_that_joins_late_banks_no_credit():
    pool = SharedPoolScheduler(["w0", "w1"], seed=8)
    pool.add_workload("early", [f"c{i}" for i in range(40)], everywhere(2, 2), owner="ann")
    rng = random.Random(0)
    drive(pool, rng, until=lambda: pool.units_started["early"] >= 30)
    pool.add_workload("late", [f"c{i}" for i in range(40)], everywhere(2, 2), owner="bob")
    before = dict(pool.units_started)
    for _ in range(20):
        pool.schedule()
        x = sorted(pool.running.values())[rng.randrange(len(pool.running))]
        pool.complete(x.workload, x.unit, x.worker)
    pool.schedule()
    got = {n: pool.units_started[n] - before.get(n, 0) for n in pool.workloads}
    assert abs(got["late"] - got["early"]) <= 2, got  # shared from its arrival on, not 30 units to "catch up"


# -- leaving, faults, placement, recovery ----------------------------------------
def test_remove_workload_abandons_its_units_and_frees_their_workers():
    pool = SharedPoolScheduler(["w0", "w1", "w2"], seed=0)
    pool.add_workload("a", ["x", "y"], ring(3), owner="u")
    pool.add_workload("b", ["z"], ring(3), owner="v")
    pool.schedule()
    mine = sorted(a for a in pool.running.values() if a.workload == "a")
    assert pool.remove_workload("a") == mine
    assert set(pool.idle_workers) == {a.worker for a in mine}
    assert pool.workloads == ("b",)
    with pytest.raises(NotFoundError, match="'a': not active"):
        pool.complete("a", mine[0].unit, mine[0].worker)  # a late result: dropped by the engine
    assert_pool_invariants(pool)
    drive(pool, random.Random(0))
    assert_complete_epoch(pool.workload("b"), 0, ["z"])


def test_a_failed_worker_requeues_only_its_own_unit_in_its_own_workload():
    pool = SharedPoolScheduler(["w0", "w1", "w2"], seed=2)
    pool.add_workload("a", ["x", "y"], ring(3, 2), owner="u")
    pool.add_workload("b", ["z", "q"], ring(3, 2), owner="v")
    pool.schedule()
    victim = pool.running["w1"]
    others = {w: a for w, a in pool.running.items() if w != "w1"}
    assert pool.remove_worker("w1") == [victim]
    assert victim.unit in pool.workload(victim.workload).pending
    assert dict(pool.running) == others
    assert "w1" not in pool.workload("a").workers and "w1" not in pool.workload("b").workers
    drive(pool, random.Random(1))  # replication 2: every partition survives
    assert_complete_epoch(pool.workload("a"), 0, ["x", "y"])
    assert_complete_epoch(pool.workload("b"), 0, ["z", "q"])


def test_lost_holder_leaves_only_its_workload_stuck_until_a_worker_joins():
    pool = SharedPoolScheduler(["w0", "w1"], seed=0)
    pool.add_workload("norep", ["x"], ring(2), owner="u")
    pool.add_workload("rep", ["y"], ring(2, 2), owner="v")
    pool.remove_worker("w1")
    drive(pool, random.Random(0), until=lambda: not pool.running and pool.stuck_workloads())
    assert pool.stuck_workloads() == ("norep",)
    assert pool.workload("rep").epoch_done()
    pool.add_worker("w9", {"norep": [1]})
    assert pool.stuck_workloads() == ()
    drive(pool, random.Random(0))
    assert_complete_epoch(pool.workload("norep"), 0, ["x"])


def test_place_changes_one_workloads_holdings_on_a_worker():
    pool = SharedPoolScheduler(["w0", "w1"], seed=0)
    pool.add_workload("a", ["x", "y"], {"w0": [0], "w1": [1]}, owner="u")
    pool.add_workload("b", ["z"], {"w0": [0]}, owner="v")
    pool.place("w1", "b", [0])  # a replica of b's partition
    assert pool.workload("b").workers["w1"] == frozenset({0})
    assert pool.workload("a").workers["w1"] == frozenset({1})
    pool.schedule()
    busy = pool.running["w0"]
    with pytest.raises(InvalidStateError, match="expected it not to"):
        pool.place("w0", busy.workload, [0])
    with pytest.raises(ValueError, match=r"found \[5\]"):
        pool.place("w1", "a", [5])
    assert pool.workload("a").workers["w1"] == frozenset({1})  # unchanged by the refused call


def test_restart_recovery_per_workload():
    """A workload resumed after a crash: first_epoch, visit-order replay and
    mark_completed run only its unfinished units (§5.6), beside another workload."""
    configs = ["a", "b", "c"]
    alone = MOPScheduler(configs, ring(3), seed=4, first_epoch=2)
    while not alone.epoch_done():
        alone.schedule()
        alone.complete(*sorted(alone.in_flight.items())[0])
    log = {k: list(v) for k, v in alone.visit_log.items()}
    pool = SharedPoolScheduler(["w0", "w1", "w2"], seed=9)
    pool.add_workload("other", ["x", "y"], ring(3), owner="v")
    pool.add_workload("resumed", configs, ring(3), owner="u", visit_order=log, first_epoch=2)
    for c in configs:
        for p in log[(c, 2)][:2]:  # two of three units per config survived the crash
            pool.mark_completed("resumed", Unit(c, p, 2))
    made = drive(pool, random.Random(0))
    assert sorted(a.unit for a in made if a.workload == "resumed") == sorted(Unit(c, log[(c, 2)][2], 2) for c in configs)
    assert {k: list(v) for k, v in pool.workload("resumed").visit_log.items()} == log


def test_errors_name_what_is_wrong():
    pool = SharedPoolScheduler(["w0", "w1"], seed=0)
    pool.add_workload("a", ["x"], ring(2), owner="u")
    with pytest.raises(AlreadyExistsError, match="'a'"):
        pool.add_workload("a", ["x"], ring(2), owner="u")
    with pytest.raises(NotFoundError, match="'w7'"):
        pool.add_workload("b", ["x"], {"w7": [0]}, owner="u")
    with pytest.raises(ValueError, match="unit_cost"):
        pool.add_workload("b", ["x"], ring(2), owner="u", unit_cost=0)
    with pytest.raises(TypeError, match="owner"):
        pool.add_workload("b", ["x"], ring(2), owner="")
    with pytest.raises(ValueError, match="weight of 'u'"):
        pool.set_weight("u", -1)
    with pytest.raises(NotFoundError, match="'nope'"):
        pool.workload("nope")
    with pytest.raises(AlreadyExistsError, match="'w0'"):
        pool.add_worker("w0")
    with pytest.raises(NotFoundError, match="'zz'"):
        pool.add_worker("w2", {"zz": [0]})
    with pytest.raises(ValueError, match=r"found \[4\]"):
        pool.add_worker("w2", {"a": [4]})
    assert "w2" not in pool.workers and "w2" not in pool.workload("a").workers  # refused atomically
    [a] = pool.schedule()
    with pytest.raises(InvalidStateError):
        pool.complete("a", a.unit, "w1" if a.worker == "w0" else "w0")
    with pytest.raises(NotFoundError, match="'w5'"):
        pool.complete("a", a.unit, "w5")
    with pytest.raises(InvalidStateError, match="not in flight"):
        pool.requeue("a", Unit("x", 1 - a.unit.partition, 0))
    with pytest.raises(AttributeError, match="read-only"):
        pool.workload("a").schedule  # noqa: B018 - driving a workload behind the pool's back
    with pytest.raises(ValueError, match="duplicates"):
        SharedPoolScheduler(["w0", "w0"])


# -- determinism ---------------------------------------------------------------------
def _trace(seed: int) -> list[Assignment]:
    pool = SharedPoolScheduler([f"w{j}" for j in range(4)], seed=seed)
    pool.add_workload("a", [f"c{i}" for i in range(5)], ring(4, 2), owner="u")
    pool.add_workload("b", ["x", "y"], ring(4), owner="v")
    return drive(pool, random.Random(0))


def test_deterministic_under_a_seed():
    assert _trace(3) == _trace(3)
    assert _trace(3) != _trace(4)


def test_deterministic_across_hash_seeds():
    script = textwrap.dedent(
        """
        import random
        from ease_jupyter.execution.mop import SharedPoolScheduler
        pool = SharedPoolScheduler({f"node-{j}" for j in range(4)}, seed=11)   # a set: hash-ordered
        for t in ("img", "txt", "tab"):
            pool.add_workload(t, {f"{t}-{i}" for i in range(4)}, {f"node-{j}": {j, (j + 1) % 4} for j in range(4)},
                              owner=t[0])
        rng = random.Random(0)
        out = []
        while pool.workloads:
            out += pool.schedule()
            for n in [n for n in pool.workloads if pool.workload(n).epoch_done()]:
                pool.remove_workload(n)
            running = sorted(pool.running.values())
            if running:
                a = running[rng.randrange(len(running))]
                pool.complete(a.workload, a.unit, a.worker)
        print(out)
        """
    )
    assert_same_output_under_hash_seeds(script)


# -- random interleavings (hypothesis) ----------------------------------------
class SharedPoolMachine(RuleBasedStateMachine):
    """Workloads of random configs, partitions and placements join and leave;
    workers fail and join; units are scheduled, completed, requeued and
    marked completed; epochs advance; weights change. The invariants are
    checked after every step."""

    @initialize(data=st.data())
    def setup(self, data):
        n_workers = data.draw(st.integers(0, 4), label="workers")
        self.pool = SharedPoolScheduler([f"w{j}" for j in range(n_workers)], seed=data.draw(st.integers(0, 1000)))
        self.next_worker = n_workers
        self.next_load = 0
        self.n_parts: dict[str, int] = {}
        self.epoch_configs: dict[str, dict[int, list[str]]] = {}

    def _parts(self, data, name, label):
        n = self.n_parts[name]
        return sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n), label=label))

    @precondition(lambda self: len(self.pool.workloads) < 4)
    @rule(data=st.data())
    def add_workload(self, data):
        name = f"j{self.next_load}"
        self.next_load += 1
        self.n_parts[name] = n = data.draw(st.integers(1, 4), label="partitions")
        parts = st.sets(st.integers(0, n - 1), max_size=n)
        availability = {w: sorted(data.draw(parts, label=f"{name} on {w}")) for w in self.pool.workers}
        configs = sorted(data.draw(st.sets(st.sampled_from("abcdef"), max_size=5), label="configs"))
        first = data.draw(st.integers(0, 2), label="first_epoch")
        owner = data.draw(st.sampled_from(["ann", "bob", "cy"]), label="owner")
        idle = set(self.pool.idle_workers)
        self.pool.add_workload(name, configs, availability, owner=owner, partitions=range(n), first_epoch=first)
        self.epoch_configs[name] = {first: configs}
        assert set(self.pool.idle_workers) == idle  # joining takes no worker by itself

    @precondition(lambda self: self.pool.workloads)
    @rule(data=st.data())
    def remove_workload(self, data):
        name = data.draw(st.sampled_from(self.pool.workloads))
        mine = sorted(a for a in self.pool.running.values() if a.workload == name)
        others = {w: a for w, a in self.pool.running.items() if a.workload != name}
        assert self.pool.remove_workload(name) == mine
        assert dict(self.pool.running) == others
        assert all(a.worker in self.pool.idle_workers for a in mine)
        if mine:
            with pytest.raises(NotFoundError):
                self.pool.complete(name, mine[0].unit, mine[0].worker)
        del self.epoch_configs[name]

    @rule()
    def schedule(self):
        idle = set(self.pool.idle_workers)
        busy = {(a.workload, a.unit.config) for a in self.pool.running.values()}
        assigned = self.pool.schedule()
        for a in assigned:
            assert a.worker in idle and (a.workload, a.unit.config) not in busy
        assert len({a.worker for a in assigned}) == len(assigned)
        # Work conservation: no idle worker is left with a ready unit of any workload.
        for worker in self.pool.idle_workers:
            for name in self.pool.workloads:
                assert not ready_units(self.pool.workload(name), worker), (worker, name)

    @precondition(lambda self: self.pool.running)
    @rule(data=st.data())
    def complete(self, data):
        a = data.draw(st.sampled_from(sorted(self.pool.running.values())))
        self.pool.complete(a.workload, a.unit, a.worker)
        assert a.worker in self.pool.idle_workers
        with pytest.raises(InvalidStateError):
            self.pool.complete(a.workload, a.unit, a.worker)

    @precondition(lambda self: self.pool.running)
    @rule(data=st.data())
    def requeue(self, data):
        a = data.draw(st.sampled_from(sorted(self.pool.running.values())))
        self.pool.requeue(a.workload, a.unit)
        assert a.unit in self.pool.workload(a.workload).pending and a.worker in self.pool.idle_workers

    def _markable(self):
        out = []
        for name in self.pool.workloads:
            view = self.pool.workload(name)
            busy = {u.config for u in view.in_flight}
            out += [(name, u) for u in sorted(view.pending) if u.config not in busy]
        return out

    @precondition(lambda self: self._markable())
    @rule(data=st.data())
    def mark_completed(self, data):
        name, unit = data.draw(st.sampled_from(self._markable()))
        idle = self.pool.idle_workers
        self.pool.mark_completed(name, unit)
        view = self.pool.workload(name)
        assert unit in view.completed and self.pool.idle_workers == idle
        assert view.visit_log[(unit.config, unit.epoch)][-1] == unit.partition

    @precondition(lambda self: self.pool.workers)
    @rule(data=st.data())
    def remove_worker(self, data):
        worker = data.draw(st.sampled_from(self.pool.workers))
        running = self.pool.running.get(worker)
        lost = self.pool.remove_worker(worker)
        assert lost == ([] if running is None else [running])
        for a in lost:
            assert a.unit in self.pool.workload(a.workload).pending
        assert worker not in self.pool.workers

    @rule(data=st.data())
    def add_worker(self, data):
        name = f"w{self.next_worker}"
        self.next_worker += 1
        holdings = {n: self._parts(data, n, f"{name} holds of {n}") for n in self.pool.workloads}
        self.pool.add_worker(name, holdings)
        assert name in self.pool.idle_workers
        for n, parts in holdings.items():
            assert self.pool.workload(n).workers[name] == frozenset(parts)

    @precondition(lambda self: self.pool.workers and self.pool.workloads)
    @rule(data=st.data())
    def place(self, data):
        worker = data.draw(st.sampled_from(self.pool.workers))
        name = data.draw(st.sampled_from(self.pool.workloads))
        parts = self._parts(data, name, "placed")
        running = self.pool.running.get(worker)
        if running is not None and running.workload == name:
            with pytest.raises(InvalidStateError):
                self.pool.place(worker, name, parts)
            return
        self.pool.place(worker, name, parts)
        assert self.pool.workload(name).workers[worker] == frozenset(parts)

    @precondition(lambda self: any(self.pool.workload(n).epoch_done() for n in self.pool.workloads))
    @rule(data=st.data())
    def next_epoch(self, data):
        name = data.draw(st.sampled_from([n for n in self.pool.workloads if self.pool.workload(n).epoch_done()]))
        view = self.pool.workload(name)
        assert_complete_epoch(view, view.epoch, self.epoch_configs[name][view.epoch])
        configs = sorted(data.draw(st.sets(st.sampled_from("abcdefgh"), max_size=5)))
        self.pool.next_epoch(name, configs)
        self.epoch_configs[name][view.epoch] = configs

    @rule(owner=st.sampled_from(["ann", "bob", "cy"]), weight=st.sampled_from([0.5, 1, 4]))
    def set_weight(self, owner, weight):
        self.pool.set_weight(owner, weight)
        shares = self.pool.shares()
        assert not shares or abs(sum(shares.values()) - 1) < 1e-9

    @invariant()
    def invariants_hold(self):
        assert_pool_invariants(self.pool)
        for name in self.pool.workloads:  # stuck() against a brute-force reading of its definition
            view = self.pool.workload(name)
            pending, live = view.pending, view.workers
            runnable = any(u.partition in parts for u in pending for parts in live.values())
            assert view.stuck() == (bool(pending) and not view.in_flight and not runnable)
            assert name in self.pool.stuck_workloads() or not view.stuck()
            assert view.ready_count() == len(ready_units(view))
            for worker in self.pool.workers:
                assert view.ready_count(worker) == len(ready_units(view, worker))

    def teardown(self):
        # A worker holding everything joins: every workload's epoch must then complete.
        self.pool.add_worker("rescue", {n: range(self.n_parts[n]) for n in self.pool.workloads})
        drive(self.pool, random.Random(0))
        assert_pool_invariants(self.pool)
        for name, epochs in self.epoch_configs.items():
            for epoch, configs in epochs.items():
                assert_complete_epoch(self.pool.workload(name), epoch, configs)


TestSharedPoolMachine = SharedPoolMachine.TestCase
TestSharedPoolMachine.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
