"""Placement and repair: the partitions stay where units can reach them while
workers come and go (Cerebro §5.5-5.6).

Each partition is placed on ``replication`` workers at the start and never
broadcast (§5.5). A lost worker leaves the schedulers; partitions left with
fewer than ``replication`` live copies are placed again on the next worker
that joins (a Dask nanny restarts a killed worker within a second), or,
after ``repair_grace`` seconds, on an idle live worker. At an epoch
boundary, partitions move from the most loaded workers to workers that hold
none of that kind, so that every worker has work again (elasticity, §5.6).

:class:`Placement` changes the :class:`PartitionMap` and the engine together
and tells the attached schedulers, which keep their own availability maps,
fed only from here.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from ease_jupyter.errors import EaseMLError
from ease_jupyter.execution.engine.base import Engine, EngineError, partition_key
from ease_jupyter.execution.mop.partitions import KINDS, PartitionMap
from ease_jupyter.execution.mop.results import RunnerError
from ease_jupyter.execution.mop.scheduler import MOPScheduler, Unit

__all__ = ["AUTO_REPLICATION", "FULL_REPLICATION_BYTES", "FaultLog", "Placement", "copies_everywhere",
           "resolve_replication"]

#: ``replication="auto"``: every worker holds every partition while the
#: run's data (training and validation) is at most ``FULL_REPLICATION_BYTES``.
AUTO_REPLICATION = "auto"
FULL_REPLICATION_BYTES = 64 * 2**20


def copies_everywhere(replication: int | str, data_bytes: int) -> bool:
    """Whether every live worker, at the start and joining later, holds every
    partition: ``"auto"`` with at most :data:`FULL_REPLICATION_BYTES` of data."""
    return replication == AUTO_REPLICATION and data_bytes <= FULL_REPLICATION_BYTES


def resolve_replication(replication: int | str, data_bytes: int, workers: int) -> int:
    """The copies of each partition a run places on ``workers`` live workers.

    An integer is checked and kept (Cerebro §5.5). ``"auto"`` goes beyond
    the paper: with one copy (§3.1's layout), a config whose unit ends waits
    for the one worker that holds its next partition, often busy with a
    config of similar length, so paired configs move at the pace of the
    slower; with a copy on every worker it runs at once on its own worker.
    Small data make the copies cheap, so ``"auto"`` copies to every worker
    up to :data:`FULL_REPLICATION_BYTES` of data and keeps one copy above.

    Raises:
        EaseMLError: ``replication`` is neither ``"auto"`` nor an integer in
            [1, ``workers``].
    """
    if replication == AUTO_REPLICATION:
        return workers if copies_everywhere(replication, data_bytes) else 1
    if isinstance(replication, bool) or not isinstance(replication, int) or not 1 <= replication <= workers:
        raise EaseMLError(f"replication: found {replication!r}, expected {AUTO_REPLICATION!r} or an integer in "
                          f"[1, {workers}] (the live workers)")
    return replication


class FaultLog:
    """The faults of one run and what was done about them, each line stamped
    with the seconds since the run started (``RunResult.faults``)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.entries: list[str] = []

    def note(self, what: str, now: float | None = None) -> None:
        self.entries.append(f"{(time.monotonic() if now is None else now) - self.t0:.2f}s {what}")


class Placement:
    """Where one run's partitions live, kept at ``replication`` copies.

    Args:
        engine: holds the data.
        parts: kind -> partition id -> the partition's data.
        replication: copies of each partition (§5.5).
        repair_grace: seconds to wait for a new worker before re-placing a
            lost partition on a live one.
        worker_wait: seconds to wait for any worker when none is left.
        faults: where faults and repairs are noted.
        forget: ``forget(scheduler, unit)`` is called for each unit that a
            lost worker had in flight in ``scheduler`` (the runner cancels
            it; the scheduler has already put it back in Q).
        namespace: prefixes the run's data keys on the engine, so that
            several runs can place partitions on the same workers.
        everywhere: every live worker holds every partition, a worker that
            joins later too (``copies_everywhere``); nothing is rebalanced.
    """

    def __init__(
        self,
        engine: Engine,
        parts: Mapping[str, Mapping[int, Any]],
        *,
        replication: int,
        repair_grace: float,
        worker_wait: float,
        faults: FaultLog,
        forget: Callable[[MOPScheduler, Unit], None],
        namespace: str = "",
        everywhere: bool = False,
    ):
        self.engine = engine
        self.namespace = namespace
        self.parts = parts
        self.replication = replication
        self.everywhere = everywhere
        self.repair_grace = repair_grace
        self.worker_wait = worker_wait
        self.faults = faults
        self.map = PartitionMap({k: parts[k] for k in KINDS})
        self.live: set[str] = set()
        self._forget = forget
        self._schedulers: dict[str, MOPScheduler] = {}
        self._orphaned_since: float | None = None

    def key(self, kind: str, pid: int) -> str:
        """The engine's key of partition ``pid`` of ``kind`` in this run."""
        return partition_key(self.namespace + kind, pid)

    # -- start and end ------------------------------------------------------------------------------
    def place_all(self, workers: Sequence[str]) -> None:
        """Spread every partition over ``workers`` (the live ones at the start)."""
        self.live = set(workers)
        for kind in KINDS:
            av = self.engine.place_partitions(self.parts[kind], replication=self.replication,
                                              prefix=self.namespace + kind, workers=workers)
            self.map.place(kind, av)

    def drop_all(self) -> None:
        """Forget every partition on every worker (the run ended)."""
        for kind in KINDS:
            for pid in self.parts[kind]:
                self.engine.drop(self.key(kind, pid))

    # -- schedulers ---------------------------------------------------------------------------------
    def attach(self, kind: str, sched: MOPScheduler) -> None:
        """``sched`` runs units on partitions of ``kind``: tell it of worker changes from now on."""
        self._schedulers[kind] = sched

    def detach(self, kind: str) -> None:
        self._schedulers.pop(kind, None)

    def availability(self, kind: str) -> dict[str, set[int]]:
        """Each live worker -> the partitions of ``kind`` it holds."""
        return self.map.availability(kind, self.live)

    # -- workers ------------------------------------------------------------------------------------
    def worker_added(self, worker: str) -> None:
        """A new worker: give it copies of the under-replicated partitions
        (of every partition when ``everywhere``), then let the schedulers use it."""
        self.live.add(worker)
        self.faults.note(f"worker added {worker}")
        for kind in KINDS:
            wanted = self.map.partitions(kind) if self.everywhere else self.map.under_replicated(kind, self.replication)
            short = [p for p in wanted if worker not in self.map.holders(kind, p)]
            for pid in short:
                if not self._place(kind, pid, worker):
                    return
                self.map.add(kind, pid, worker)
        for kind, sched in list(self._schedulers.items()):  # the validation scheduler, if any, too
            if worker not in sched.workers:
                sched.add_worker(worker, self.availability(kind)[worker])
        self._orphaned_since = None if not self.map.orphans() else self._orphaned_since

    def worker_lost(self, worker: str, reason: str) -> None:
        """A worker left: it holds nothing now, and its units in flight go back to Q."""
        self.faults.note(f"worker lost {worker} ({reason})")
        self.live.discard(worker)
        self.map.remove_worker(worker)
        for sched in list(self._schedulers.values()):
            if worker in sched.workers:
                for unit in sched.remove_worker(worker):
                    self._forget(sched, unit)
        if self.map.orphans() and self._orphaned_since is None:
            self._orphaned_since = time.monotonic()

    def retire(self, worker: str, reason: str) -> None:
        """A live worker leaves the run (set aside for GPU workers, or its
        device failed): drop the run's copies there, then as :meth:`worker_lost`."""
        for kind in KINDS:
            for pid in sorted(self.map.held_by(kind, worker)):
                self.engine.drop(self.key(kind, pid), [worker])
        self.worker_lost(worker, reason)

    def _place(self, kind: str, pid: int, worker: str) -> bool:
        """Copy a partition to ``worker``; False (and the worker counts as lost)
        if it left again before its data arrived."""
        try:
            self.engine.place(self.key(kind, pid), self.parts[kind][pid], [worker])
        except EngineError as error:
            self.faults.note(str(error))
            self.worker_lost(worker, "left while its data was placed")
            return False
        return True

    def _give(self, worker: str, kind: str, pids: set[int]) -> None:
        """Place partitions of ``kind`` on a live, idle worker and tell the scheduler."""
        for pid in sorted(pids):
            self.engine.place(self.key(kind, pid), self.parts[kind][pid], [worker])
            self.map.add(kind, pid, worker)
        sched = self._schedulers.get(kind)
        if sched is not None:
            if worker in sched.workers:
                lost = sched.remove_worker(worker)  # an idle worker: nothing in flight
                assert not lost, "re-placing onto a busy worker"
            sched.add_worker(worker, self.availability(kind)[worker])

    # -- repair -------------------------------------------------------------------------------------
    def needs_repair(self) -> bool:
        """Some partition has no live holder."""
        return bool(self.map.orphans())

    def repair(self, busy: set[str]) -> None:
        """Re-place partitions that no live worker holds on idle live workers
        (not in ``busy``), once no new worker arrived within
        ``repair_grace`` seconds.

        Raises:
            RunnerError: no worker at all for ``worker_wait`` seconds.
        """
        orphans = self.map.orphans()
        if not orphans:
            self._orphaned_since = None
            return
        now = time.monotonic()
        if self._orphaned_since is None:
            self._orphaned_since = now
        if not self.live:
            if now - self._orphaned_since > self.worker_wait:
                raise RunnerError(f"workers: found none for {self.worker_wait:.0f} s, expected at least one live worker")
            return
        if now - self._orphaned_since < self.repair_grace:
            return
        idle = sorted(self.live - busy)
        if not idle:
            return
        for kind, pids in orphans.items():
            for pid in pids:
                load = {w: len(self.map.held_by(kind, w)) for w in idle}
                target = min(idle, key=lambda w: (load[w], w))
                self.faults.note(f"re-placed {kind} partition {pid} on {target}", now)
                self._give(target, kind, {pid})
        self._orphaned_since = None

    def rebalance(self) -> None:
        """At an epoch boundary (every worker idle): move partitions from the
        most loaded workers to workers that hold none of that kind, e.g. a
        replacement that joined after its predecessor's partitions had been
        re-placed, so that every worker has work again (elasticity, §5.6).
        With copies everywhere no worker is short of work: nothing moves."""
        if self.everywhere:
            return
        for kind in KINDS:
            while True:
                av = self.availability(kind)
                empty = sorted(w for w, ps in av.items() if not ps)
                donor = max(sorted(av), key=lambda w: len(av[w]), default=None)
                if not empty or donor is None or len(av[donor]) < 2:
                    break
                pid, target = max(av[donor]), empty[0]
                if not self._place(kind, pid, target):
                    continue
                self.engine.drop(self.key(kind, pid), [donor])
                self.map.move(kind, pid, donor, target)
                self.faults.note(f"moved {kind} partition {pid} from {donor} to {target}")
                sched = self._schedulers.get(kind)  # at a boundary: the training scheduler only
                if sched is not None:
                    after = self.availability(kind)
                    for w in (donor, target):
                        if w in sched.workers:
                            sched.remove_worker(w)
                        sched.add_worker(w, after[w])
