"""The randomized Model Hopper Parallelism scheduler (Cerebro §3.1, §5.3-5.6).

Pure Python: no Dask, no torch, no clock, no I/O. Randomness comes only from a
``random.Random(seed)``, and no decision depends on the iteration order of a
set of strings, so a run is deterministic under a seed whatever
``PYTHONHASHSEED`` is.

The scheduler never runs anything. An engine drives it::

    sched = MOPScheduler(["a", "b"], {"w0": [0], "w1": [1]}, seed=0)
    while not sched.epoch_done():
        for unit, worker in sched.schedule():   # Alg. 1
            ...submit unit to worker...
        ...wait for a result, then sched.complete(unit, worker)   # Alg. 2
        ...or, on a fault, sched.remove_worker(worker) / sched.requeue(unit)
        if sched.stuck(): raise ...             # no live worker holds what is left
    sched.next_epoch(surviving_configs)         # AutoML hook (§4.2)

Restart recovery (§5.6): a scheduler built with ``first_epoch=e`` starts at
epoch ``e``, and :meth:`mark_completed` takes a unit whose checkpoint
survived a crash out of Q without running it again.

Data structures. Q (``pending``) is kept per config; Q' (``in_flight``) maps a
unit to its worker. For each partition a "ready bag" holds the idle configs
that may run on it now, so one decision on worker ``w`` costs
O(|partitions held by w| + |partitions|), never O(|Q|).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

from ease_jupyter.errors import AlreadyExistsError, InvalidStateError, NotFoundError

__all__ = ["Unit", "MOPScheduler"]


@dataclass(frozen=True, order=True)
class Unit:
    """One config trained for one sub-epoch on one data partition (Cerebro §3.1)."""

    config: str
    partition: int
    epoch: int


class _Bag:
    """A set with O(1) add, discard and indexed access (for uniform picks).

    Order depends only on the sequence of operations, never on hashing.
    """

    __slots__ = ("items", "pos")

    def __init__(self) -> None:
        self.items: list[str] = []
        self.pos: dict[str, int] = {}

    def add(self, item: str) -> bool:
        """Add ``item``; True if it was not there."""
        if item in self.pos:
            return False
        self.pos[item] = len(self.items)
        self.items.append(item)
        return True

    def discard(self, item: str) -> bool:
        """Remove ``item``; True if it was there."""
        index = self.pos.pop(item, None)
        if index is None:
            return False
        last = self.items.pop()
        if index < len(self.items):  # swap-remove keeps the list dense
            self.items[index] = last
            self.pos[last] = index
        return True

    def __len__(self) -> int:
        return len(self.items)


def _check_partition(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field}: found {value!r}, expected an int partition id")
    return value


def _check_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{field}: found {value!r}, expected a non-empty str")
    return value


class MOPScheduler:
    """Assigns training units to idle workers, one epoch at a time.

    Invariants (Cerebro §3.1): completeness (every live config visits every
    partition exactly once per epoch), model training isolation (a config has
    at most one unit in flight), worker/partition exclusive access (a worker
    runs at most one unit, and only on a partition it holds), non-preemptive
    units (a unit leaves Q' only by ``complete``, ``requeue`` or its worker's
    failure).

    Args:
        configs: names of the configs live in epoch 0 (unique non-empty str).
        availability: worker name -> partitions it holds, the availability map
            of replica-aware scheduling (§5.5). A partition may be held by
            several workers (replication); a worker may hold none.
        seed: seeds the only source of randomness, a ``random.Random``.
        visit_order: a previous run's :attr:`visit_log`. For every
            ``(config, epoch)`` it lists, that config visits the partitions in
            exactly that order (reproducibility, §3.1); keys it lacks are free.
        partitions: the full partition set. Defaults to the union of
            ``availability``. A partition that no worker holds is allowed
            (a worker holding it may join later, §5.6); until then its units
            stay in Q and :meth:`stuck` reports it once nothing else can run.
        first_epoch: the number of the first epoch (a run resumed after a
            restart goes on with the epoch it was in, so that :class:`Unit`
            epochs, ``visit_order`` keys and :attr:`visit_log` keys keep
            their meaning).

    Raises:
        TypeError: a config, worker or partition of the wrong type.
        ValueError: duplicate configs, an empty partition set, a worker
            holding a partition outside ``partitions``, a ``visit_order``
            entry that is not a permutation of the partition set, or a
            negative ``first_epoch``.
    """

    def __init__(
        self,
        configs: Iterable[str],
        availability: Mapping[str, Iterable[int]],
        *,
        seed: int = 0,
        visit_order: Mapping[tuple[str, int], list[int]] | None = None,
        partitions: Iterable[int] | None = None,
        first_epoch: int = 0,
    ) -> None:
        """``availability`` maps each worker to the partitions it holds (§5.5).
        ``visit_order`` replays a previous run's ``visit_log``: each config
        visits partitions in exactly that order in each epoch."""
        self._rng = random.Random(seed)
        workers = {
            _check_name(w, "availability key"): frozenset(
                _check_partition(p, f"availability[{w!r}]") for p in parts
            )
            for w, parts in availability.items()
        }
        if partitions is None:
            universe = set().union(*workers.values()) if workers else set()
        else:
            universe = {_check_partition(p, "partitions") for p in partitions}
        if not universe:
            raise ValueError("partitions: found none, expected at least one partition (give partitions= or availability)")
        self._partitions: tuple[int, ...] = tuple(sorted(universe))

        self._order_in: dict[tuple[str, int], tuple[int, ...]] = {}
        for key, order in (visit_order or {}).items():
            order = tuple(order)
            if len(order) != len(universe) or set(order) != universe:
                raise ValueError(
                    f"visit_order[{key!r}]: found {list(order)}, expected a permutation of partitions {list(self._partitions)}"
                )
            self._order_in[key] = order

        # Workers and the availability map (§5.5). Dicts keep insertion order.
        self._workers: dict[str, frozenset[int]] = {}
        self._worker_parts: dict[str, tuple[int, ...]] = {}
        self._holders: dict[int, set[str]] = {p: set() for p in self._partitions}
        self._idle: dict[str, None] = {}
        self._running: dict[str, Unit] = {}
        for worker in sorted(workers):  # sorted: independent of the caller's order
            self.add_worker(worker, workers[worker])

        if isinstance(first_epoch, bool) or not isinstance(first_epoch, int) or first_epoch < 0:
            raise ValueError(f"first_epoch: found {first_epoch!r}, expected an int >= 0")
        self._epoch = first_epoch - 1  # _start_epoch counts it up
        self._log: dict[tuple[str, int], list[int]] = {}
        self._start_epoch(configs)

    # -- epoch set-up --------------------------------------------------------
    def _start_epoch(self, configs: Iterable[str]) -> None:
        names = [_check_name(c, "configs") for c in configs]
        if len(set(names)) != len(names):
            dupes = sorted({c for c in names if names.count(c) > 1})
            raise ValueError(f"configs: found duplicates {dupes}, expected unique names")
        self._epoch += 1
        self._configs: tuple[str, ...] = tuple(sorted(names))
        # Q, per config: partitions still to visit this epoch.
        self._pending: dict[str, set[int]] = {c: set(self._partitions) for c in self._configs}
        self._queued = len(self._configs) * len(self._partitions)  # |Q|, so checks are O(1)
        self._flight: dict[Unit, str] = {}  # Q'
        self._busy: dict[str, Unit] = {}  # config -> its unit in flight
        self._done: set[Unit] = set()
        self._replay: dict[str, tuple[int, ...]] = {}
        self._cursor: dict[str, int] = {}
        self._ready: dict[int, _Bag] = {p: _Bag() for p in self._partitions}
        self._n_ready = 0  # entries over all ready bags, so ready_count() is O(1)
        for c in self._configs:
            order = self._order_in.get((c, self._epoch))
            if order is not None:
                self._replay[c] = order
                self._cursor[c] = 0
            self._log[(c, self._epoch)] = []
            self._make_ready(c)

    def _candidates(self, config: str) -> Iterable[int]:
        """Partitions ``config`` may run on next: its logged next one under
        replay, otherwise every partition it still needs."""
        order = self._replay.get(config)
        if order is None:
            return self._pending[config]
        cursor = self._cursor[config]
        return (order[cursor],) if cursor < len(order) else ()

    def _make_ready(self, config: str) -> None:
        for p in self._candidates(config):
            self._n_ready += self._ready[p].add(config)

    def _unready(self, config: str) -> None:
        for p in self._candidates(config):
            self._n_ready -= self._ready[p].discard(config)

    # -- the scheduling loop (Alg. 1-2) ---------------------------------------
    def schedule(self) -> list[tuple[Unit, str]]:
        """Pair idle workers with random eligible units from Q; move them to Q'.

        Alg. 1 with the replica-aware Line 10 (§5.5): for each idle worker, in
        a random order, pick uniformly among the units whose config is idle
        and whose partition the worker holds (what shuffling Q and taking the
        first match does). Fault tolerance (§5.6): the chosen unit moves from
        Q to Q'. Idle workers with nothing eligible stay idle.

        Returns:
            The new ``(unit, worker)`` assignments, possibly empty.
        """
        idle = list(self._idle)
        self._rng.shuffle(idle)  # no worker is favoured for scarce configs
        assigned: list[tuple[Unit, str]] = []
        for worker in idle:
            unit = self._assign(worker)
            if unit is not None:
                assigned.append((unit, worker))
        return assigned

    def ready_count(self, worker: str | None = None) -> int:
        """How many units of Q are eligible on ``worker`` now (Alg. 1 Line 10
        with §5.5): their config is idle and the worker holds their partition.
        Without a worker: the units of Q whose config is idle (under replay,
        only each config's next logged unit), wherever their partition is.

        It ignores whether ``worker`` is busy, so a driver that shares the
        worker with other schedulers (:mod:`.shared_pool`) can ask before it
        decides. O(1) without a worker, else O(|partitions held by worker|).

        Raises:
            NotFoundError: ``worker`` is not a live worker.
        """
        if worker is None:
            return self._n_ready
        if worker not in self._workers:
            raise NotFoundError(f"worker {worker!r}: not a live worker (known: {list(self._workers)})")
        if not self._n_ready:
            return 0
        total = 0
        for p in self._worker_parts[worker]:
            total += len(self._ready[p].items)
        return total

    def schedule_worker(self, worker: str) -> Unit | None:
        """Alg. 1 for one idle worker: move a uniformly drawn eligible unit to Q'.

        :meth:`schedule` does this for every idle worker in a random order; a
        driver that decides which worker to fill itself calls this instead.

        Returns:
            The unit now in flight on ``worker``, or None if none is eligible.

        Raises:
            NotFoundError: ``worker`` is not a live worker.
            InvalidStateError: ``worker`` already runs a unit of this scheduler.
        """
        if worker not in self._workers:
            raise NotFoundError(f"worker {worker!r}: not a live worker (known: {list(self._workers)})")
        if worker not in self._idle:
            raise InvalidStateError(f"worker {worker!r}: runs {self._running[worker]}, expected an idle worker")
        return self._assign(worker)

    def _assign(self, worker: str) -> Unit | None:
        parts = self._worker_parts[worker]
        total = 0
        for p in parts:
            total += len(self._ready[p])
        if not total:
            return None
        pick = self._rng.randrange(total)
        for p in parts:
            bag = self._ready[p]
            if pick < len(bag):
                config = bag.items[pick]
                break
            pick -= len(bag)
        unit = Unit(config, p, self._epoch)
        self._unready(config)  # model training isolation: one unit in flight
        self._pending[config].discard(p)
        self._queued -= 1
        self._flight[unit] = worker
        self._busy[config] = unit
        self._running[worker] = unit
        del self._idle[worker]
        return unit

    def complete(self, unit: Unit, worker: str) -> None:
        """Alg. 2: the unit finished; its config and worker become idle.

        The partition is appended to the config's :attr:`visit_log` entry.

        Raises:
            NotFoundError: ``worker`` is not a live worker.
            InvalidStateError: ``unit`` is not in flight on ``worker`` (e.g. a
                late result of a unit already requeued: discard it).
        """
        if worker not in self._workers:
            raise NotFoundError(f"worker {worker!r}: not a live worker (known: {list(self._workers)})")
        owner = self._flight.get(unit)
        if owner != worker:
            where = "not in flight" if owner is None else f"in flight on worker {owner!r}"
            raise InvalidStateError(f"unit {unit}: {where}, expected in flight on worker {worker!r}")
        del self._flight[unit]
        del self._running[worker]
        del self._busy[unit.config]
        self._idle[worker] = None
        self._done.add(unit)
        self._log[(unit.config, unit.epoch)].append(unit.partition)
        if unit.config in self._replay:
            self._cursor[unit.config] += 1
        self._make_ready(unit.config)

    def mark_completed(self, unit: Unit) -> None:
        """Take a unit of Q as completed without running it (restart recovery).

        Its result is already known: the model state it produced was
        checkpointed before a crash, and Cerebro §5.6 restarts only the units
        that had not finished. The effect is that of ``schedule`` followed by
        :meth:`complete` of that unit, minus the worker: the unit leaves Q,
        its partition is appended to the config's :attr:`visit_log` entry and
        the config's next unit becomes eligible. Mark a config's units in the
        order it trained on them.

        Raises:
            InvalidStateError: ``unit.epoch`` is not the current epoch; the
                unit is not in Q (already completed, or in flight); its
                config has another unit in flight (model training
                isolation); or, under ``visit_order`` replay, its partition
                is not the config's next logged one.
            NotFoundError: ``unit.config`` is not live in this epoch, or
                ``unit.partition`` is not in the partition set.
        """
        config, partition = unit.config, unit.partition
        if unit.epoch != self._epoch:
            raise InvalidStateError(f"unit {unit}: of epoch {unit.epoch}, expected a unit of the current epoch {self._epoch}")
        if config not in self._pending:
            raise NotFoundError(f"unit {unit}: config {config!r} is not live in epoch {self._epoch} (live: {list(self._configs)})")
        if partition not in self._ready:
            raise NotFoundError(f"unit {unit}: partition {partition!r} is not one of {list(self._partitions)}")
        if partition not in self._pending[config]:
            where = "in flight" if self._flight.get(unit) is not None else "already completed"
            raise InvalidStateError(f"unit {unit}: {where}, expected a unit of Q")
        if config in self._busy:
            raise InvalidStateError(f"unit {unit}: config {config!r} has {self._busy[config]} in flight, expected it idle")
        order = self._replay.get(config)
        if order is not None and order[self._cursor[config]] != partition:
            raise InvalidStateError(
                f"unit {unit}: visit_order has partition {order[self._cursor[config]]} next for {config!r}, "
                f"expected {partition}"
            )
        self._unready(config)
        self._pending[config].discard(partition)
        self._queued -= 1
        self._done.add(unit)
        self._log[(config, self._epoch)].append(partition)
        if order is not None:
            self._cursor[config] += 1
        self._make_ready(config)

    def requeue(self, unit: Unit) -> None:
        """A unit timed out or its result was lost: Q' -> Q (§5.6).

        Its config and worker become idle; a later ``complete`` of the same
        assignment raises, so the engine must drop that stale result.

        Raises:
            InvalidStateError: ``unit`` is not in flight.
        """
        worker = self._flight.pop(unit, None)
        if worker is None:
            raise InvalidStateError(f"unit {unit}: not in flight, expected a unit of Q' to requeue")
        del self._running[worker]
        del self._busy[unit.config]
        self._idle[worker] = None
        self._pending[unit.config].add(unit.partition)
        self._queued += 1
        self._make_ready(unit.config)

    # -- faults and elasticity (§5.6) -----------------------------------------
    def remove_worker(self, worker: str) -> list[Unit]:
        """A worker failed or left: its in-flight units go back to Q; returned.

        Its partitions stay in the epoch: other replicas (§5.5) or a worker
        that joins later can run them; otherwise :meth:`stuck` reports it.

        Raises:
            NotFoundError: ``worker`` is not a live worker.
        """
        if worker not in self._workers:
            raise NotFoundError(f"worker {worker!r}: not a live worker (known: {list(self._workers)})")
        lost = []
        unit = self._running.get(worker)
        if unit is not None:
            self.requeue(unit)
            lost.append(unit)
        for p in self._workers.pop(worker):
            self._holders[p].discard(worker)
        del self._worker_parts[worker]
        del self._idle[worker]
        return lost

    def add_worker(self, worker: str, partitions: Iterable[int]) -> None:
        """A worker joined (between units) holding these partitions.

        It starts idle and gets work at the next :meth:`schedule` (elasticity,
        §5.6). A failed worker may rejoin under its old name.

        Raises:
            TypeError: a bad worker name or partition id.
            AlreadyExistsError: ``worker`` is already live.
            ValueError: a partition outside the scheduler's partition set.
        """
        _check_name(worker, "worker")
        if worker in self._workers:
            raise AlreadyExistsError(f"worker {worker!r}: already live, expected a new name")
        parts = frozenset(_check_partition(p, f"partitions of {worker!r}") for p in partitions)
        unknown = sorted(parts.difference(self._holders))
        if unknown:
            raise ValueError(
                f"partitions of {worker!r}: found {unknown}, expected a subset of {list(self._partitions)}"
            )
        self._workers[worker] = parts
        self._worker_parts[worker] = tuple(sorted(parts))
        for p in parts:
            self._holders[p].add(worker)
        self._idle[worker] = None

    # -- epochs and AutoML hooks (§4.2) ---------------------------------------
    @property
    def epoch(self) -> int:
        """The current epoch, 0-based (§4.2: one epoch per AutoML round)."""
        return self._epoch

    def epoch_done(self) -> bool:
        """Q and Q' are both empty for the current epoch."""
        return not self._flight and not self._queued

    def next_epoch(self, configs: Iterable[str] | None = None) -> None:
        """Start the next epoch, optionally with a new config set (stop some,
        add some, keep them), as AutoML procedures do at epoch boundaries.

        Args:
            configs: the live configs of the new epoch; ``None`` keeps them.

        Raises:
            InvalidStateError: the current epoch is not done.
        """
        if not self.epoch_done():
            raise InvalidStateError(
                f"next_epoch: epoch {self._epoch} has {self._queued} units in Q and {len(self._flight)} in Q', "
                "expected epoch_done() first"
            )
        self._start_epoch(self._configs if configs is None else configs)

    def stuck(self) -> bool:
        """Units remain in Q but no live worker holds their partitions.

        Precisely: Q is non-empty, Q' is empty (so every config is idle) and
        no unit of Q is eligible on any live worker. Under replay a unit is
        eligible only when its partition is the config's next logged one.
        """
        if self._flight or not self._queued:
            return False
        return not any(bag and self._holders[p] for p, bag in self._ready.items())

    @property
    def visit_log(self) -> Mapping[tuple[str, int], tuple[int, ...]]:
        """(config, epoch) -> partitions in the order the config trained on them."""
        return MappingProxyType({key: tuple(order) for key, order in self._log.items()})

    # -- read-only views (copies) ---------------------------------------------
    @property
    def configs(self) -> tuple[str, ...]:
        """The live configs of the current epoch (S of §3.1), sorted."""
        return self._configs

    @property
    def partitions(self) -> tuple[int, ...]:
        """The partition set (p of §3.1), sorted."""
        return self._partitions

    @property
    def workers(self) -> Mapping[str, frozenset[int]]:
        """Live worker -> partitions it holds (the current availability map, §5.5)."""
        return MappingProxyType(dict(self._workers))

    @property
    def idle_workers(self) -> tuple[str, ...]:
        """Live workers with no unit in flight (Alg. 1 ``worker_idle``)."""
        return tuple(self._idle)

    @property
    def pending(self) -> frozenset[Unit]:
        """Q (§5.6): units of the current epoch not yet started, or requeued. O(|Q|)."""
        return frozenset(Unit(c, p, self._epoch) for c, parts in self._pending.items() for p in parts)

    @property
    def in_flight(self) -> Mapping[Unit, str]:
        """Q' (§5.6): unit -> the worker running it."""
        return MappingProxyType(dict(self._flight))

    @property
    def completed(self) -> frozenset[Unit]:
        """Units of the current epoch that completed (Alg. 2 ran for them)."""
        return frozenset(self._done)

    def unheld_partitions(self) -> tuple[int, ...]:
        """Partitions still needed by Q that no live worker holds (why :meth:`stuck`)."""
        needed = set().union(*self._pending.values()) if self._pending else set()
        return tuple(sorted(p for p in needed if not self._holders[p]))
