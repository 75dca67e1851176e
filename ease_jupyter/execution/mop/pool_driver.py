"""One driver per engine: the MOP workloads of several tasks on one pool of workers.

Cerebro (§3.1, §4.2) trains one model selection workload; its units are
(config, partition) pairs and nothing in the scheduling needs the configs to
belong to one task. :class:`PoolDriver` runs several
:class:`~ease_jupyter.execution.mop.runner.MOPRunner` workloads on one engine
at once. It is the one reader of the engine's event stream (an engine has
one), and draws the units of every active workload through one
:class:`SharedPoolScheduler` (one unit per worker at a time, per-owner
fairness, Alg. 1-2 per workload). Each workload keeps its own procedure,
partitions (placed under its own key namespace, replica-aware, §5.5), hop
store, callbacks, faults and resume state: the runner owns them and the
driver calls it between units (``MOPRunner``'s "driven by a pool" methods).

A workload is in the pool one phase at a time: its training epoch, then the
validation pass of that epoch (the same machinery over the validation
partitions), then, after ``procedure.epoch_end``, its next training epoch.
Each phase joins the pool afresh at a unit boundary, so time between phases
is not credit (``SharedPoolScheduler.add_workload``). Workloads join and
leave at unit boundaries too.

A phase may be *partial* (the runner's GPU sizing before training): it
ends once every unit that a live worker can run is done, since its units
are pinned to workers that may leave. Before a unit is submitted, its
workload may refuse the worker (``MOPRunner._pool_allows``: a trial sized
not to fit that worker's GPU); the unit goes back to Q and another worker
that holds its partition takes it, and the refused draw counts as a
dispatched unit in the pool's fairness.

Two ways to use it:

* ``PoolDriver(engine).run_alone(runner)`` runs one workload on the calling
  thread (``MOPRunner.run``: the single-workload case);
* ``PoolDriver.shared(engine).run(runner, owner=...)`` joins the
  process-wide driver of ``engine`` and blocks until the workload ends; the
  driver's thread runs while any workload is active. Several threads (a
  service's job slots) may do so at once.

Faults (§5.6): a lost worker leaves the pool once; each workload's
placement forgets it and re-places its partitions, and its unit in flight
(of whichever workload) goes back to that workload's Q. An error of one
workload (a unit that keeps failing, no worker left for its partitions, a
listener's ``StopRun``) fails that workload only. A workload with a deadline of its own
(``MOPRunner.deadline``) gives each unit no later engine deadline, so the
engine gives up on a unit that hangs then and replaces its worker; the
workload fails (``on_deadline``'s error) and its lost unit is not run again.
A workload with a time budget (``MOPRunner.time_budget``, a user's model's
time limit) is charged the time its units run, not the time they wait in Q
behind other owners' units: from each unit's submit to its end (done,
failed, lost or withdrawn), counting time with several of its units in
flight once (the union: the time her code is running), with the driver's
``clock``. Each unit gets at most the budget left as its engine deadline; a
unit lost with the budget spent fails the workload with ``on_deadline``'s
error as above (her code was running then), and a workload whose budget is
spent with no unit running fails with ``on_budget_spent``'s. A unit whose device failed
(``DeviceFailedError``) goes back to Q the same way and its worker leaves
the pool for good, as a lost one; a unit that ran out of device memory
(``DeviceOutOfMemoryError``) runs again with half its trial's batch size,
once per trial (``MOPRunner._pool_out_of_memory``), outside
``max_unit_retries``.

GPU workers (Cerebro §4.3 ran one worker per GPU, one unit at a time).
MOP units are torch units, so while the engine has workers that declare a
``GPU`` resource, only those are in the pool: the partitions live on them
and no unit goes to a CPU worker. The rules:

* a pool that starts with GPU workers sets the CPU workers aside;
* a GPU worker that joins a pool of CPU workers takes over: the CPU
  workers leave the pool (their units in flight go back to Q, their copies
  of the partitions are dropped) and the partitions are placed on it;
* a CPU worker that joins while GPU workers are in the pool is set aside;
* when the last GPU worker is lost (or its device failed) and none joins
  within the workloads' ``repair_grace``, the set-aside CPU workers join the
  pool and training goes on there, on the CPU, rather than wait;
* a pool with no GPU worker at all behaves as one without the rule.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from ease_jupyter.errors import DeviceFailedError, DeviceOutOfMemoryError
from ease_jupyter.execution.engine.base import (
    Engine,
    EngineError,
    UnitDone,
    UnitFailed,
    UnitLost,
    WorkerAdded,
    WorkerLost,
    gpu_workers,
)
from ease_jupyter.execution.mop.results import RunnerError
from ease_jupyter.execution.mop.scheduler import Unit
from ease_jupyter.execution.mop.shared_pool import SharedPoolScheduler

__all__ = ["Phase", "PoolDriver", "PoolSlot"]

log = logging.getLogger(__name__)

DEFAULT_OWNER = "-"  # the owner of workloads submitted without one
EVENT_WAIT = 0.2  # seconds the loop waits for an event when nothing happens
DEADLINE_SLACK = 1.0  # seconds: the engine's clock (monotonic) and a workload's deadline (time.time()) may differ


@dataclass(frozen=True)
class Phase:
    """One phase of a workload as it joins the pool: the arguments of
    ``SharedPoolScheduler.add_workload`` (``epoch`` is its ``first_epoch``).
    A ``partial`` phase ends when what is left of it no live worker can run."""

    configs: tuple[str, ...]
    availability: Mapping[str, Iterable[int]]
    partitions: Iterable[int]
    seed: int
    visit_order: Mapping[tuple[str, int], Any] | None
    epoch: int
    partial: bool = False


class PoolSlot:
    """What one workload's :class:`~ease_jupyter.execution.mop.placement.Placement`
    and resume see of the pool: its scheduler for the current phase.

    Worker arrivals and losses go to the pool once, by the driver, for every
    workload; here a placement only tells the pool which of its partitions a
    live, idle worker holds now (repair, rebalancing).
    """

    def __init__(self, pool: SharedPoolScheduler, workload: str):
        self._pool = pool
        self._workload = workload

    @property
    def workers(self) -> tuple[str, ...]:
        return self._pool.workers

    def add_worker(self, worker: str, partitions: Iterable[int]) -> None:
        self._pool.place(worker, self._workload, partitions)

    def remove_worker(self, worker: str) -> list[Unit]:
        return []  # the driver takes lost workers out of the pool, for all workloads at once

    def mark_completed(self, unit: Unit) -> None:
        self._pool.mark_completed(self._workload, unit)


@dataclass
class _Entry:
    name: str
    runner: Any  # a MOPRunner (duck-typed: the runner imports this module)
    owner: str
    namespace: str  # prefixes its data keys on the engine
    future: Future = field(default_factory=Future)
    failures: Counter = field(default_factory=Counter)  # unit -> times its function raised, this phase
    partial: bool = False  # its current phase is partial
    running: int = 0  # its units in flight
    since: float = 0.0  # the driver's clock when the first of them was submitted
    used: float = 0.0  # seconds with a unit of it in flight, before ``since``


_drivers: "weakref.WeakKeyDictionary[Engine, PoolDriver]" = weakref.WeakKeyDictionary()
_drivers_lock = threading.Lock()


class PoolDriver:
    """Drives the MOP workloads on one engine (see the module docstring).

    Args:
        engine: where units run; the driver reads its event stream.
        seed: seeds the pool's random choices.
        weights: owner -> weight (1 for owners not named).
        clock: seconds, for charging workloads' time budgets (default
            ``time.monotonic``).
    """

    def __init__(self, engine: Engine, *, seed: int = 0, weights: Mapping[str, float] | None = None,
                 clock: Callable[[], float] | None = None):
        self.engine = engine
        self._clock = clock or time.monotonic
        self._seed = int(seed)
        self._weights = dict(weights or {})
        self._pool = SharedPoolScheduler((), seed=self._seed, weights=self._weights)
        self._lock = threading.Lock()
        self._joining: list[_Entry] = []
        self._active: dict[str, _Entry] = {}
        self._inflight: dict[str, tuple[str, str, Unit, str]] = {}  # handle -> (workload, kind, unit, worker)
        self._warm: set[str] = set()  # workers that completed a unit (their first unit's deadline is longer)
        self._gpu: dict[str, bool] = {}  # worker -> whether it declares a GPU (asked once per worker)
        self._gpu_mode = False  # the pool holds GPU workers only (see the module docstring)
        self._gpus_gone_since: float | None = None  # in GPU mode, when the last GPU worker left
        self._set_aside: set[str] = set()  # live CPU workers kept out of the pool while GPU workers exist
        self._device_failed: set[str] = set()  # workers this driver never uses again
        self._names = itertools.count()
        self._thread: threading.Thread | None = None
        #: Workload name -> units completed (train and validation), over the driver's life.
        self.units_completed: Counter = Counter()

    @classmethod
    def shared(cls, engine: Engine, *, seed: int = 0) -> "PoolDriver":
        """The process-wide driver of ``engine`` (made on first use)."""
        with _drivers_lock:
            driver = _drivers.get(engine)
            if driver is None:
                driver = _drivers[engine] = cls(engine, seed=seed)
            return driver

    # -- joining ---------------------------------------------------------------------------------
    def submit(self, runner: Any, *, owner: str = DEFAULT_OWNER) -> "Future[Any]":
        """Admit ``runner``'s workload at the next unit boundary; the future
        gets its ``RunResult`` (or the error that ended it)."""
        entry = self._entry(runner, owner)
        with self._lock:
            self._joining.append(entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="easeml-mop-pool", daemon=True)
                self._thread.start()
        return entry.future

    def run(self, runner: Any, *, owner: str = DEFAULT_OWNER) -> Any:
        """:meth:`submit` and wait for the ``RunResult`` (raises the workload's error)."""
        return self.submit(runner, owner=owner).result()

    def run_alone(self, runner: Any) -> Any:
        """Run one workload on the calling thread (no other may join meanwhile)."""
        with self._lock:
            if self._thread is not None or self._active or self._joining:
                raise RunnerError("run_alone: found workloads running on this driver, expected none")
            entry = self._entry(runner, DEFAULT_OWNER, alone=True)
            self._joining.append(entry)
        try:
            self._loop()
        except BaseException as error:
            self._fail_all(error)
            raise
        return entry.future.result()

    def set_weight(self, owner: str, weight: float) -> None:
        """An owner's share of the pool from the next decision on (equal by default)."""
        with self._lock:
            self._weights[owner] = weight
            self._pool.set_weight(owner, weight)

    @property
    def workloads(self) -> tuple[str, ...]:
        """The active workloads' names."""
        return tuple(self._active)

    def _entry(self, runner: Any, owner: str, *, alone: bool = False) -> _Entry:
        name = f"w{next(self._names)}"
        return _Entry(name, runner, str(owner) or DEFAULT_OWNER, "" if alone else f"{name}/")

    # -- the loop --------------------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            self._loop()
        except BaseException as error:  # noqa: BLE001 - every waiting workload learns of it
            log.exception("the MOP pool driver stopped")
            self._fail_all(error)
            with self._lock:
                self._thread = None

    def _loop(self) -> None:
        while True:
            with self._lock:
                joining, self._joining = self._joining, []
                if not joining and not self._active:
                    if self._thread is threading.current_thread():
                        self._thread = None
                    return
            for entry in joining:
                self._join(entry)
            self._step()

    def _step(self) -> None:
        self._fall_back_to_cpus()
        for a in self._pool.schedule():
            self._submit(self._active[a.workload], a.unit, a.worker)
        for ev in self.engine.events(EVENT_WAIT):
            self._on_event(ev)
        busy = set(self._pool.running)
        for entry in list(self._active.values()):
            self._guard(entry, self._tend, entry, busy)

    def _tend(self, entry: _Entry, busy: set[str]) -> None:
        """Repair the workload's placement, and end its phase once every unit of it is done."""
        placement = entry.runner._placement
        if placement.needs_repair():
            placement.repair(busy)
        while entry.name in self._active and self._phase_over(entry):
            self._advance(entry)

    def _phase_over(self, entry: _Entry) -> bool:
        view = self._pool.workload(entry.name)
        return view.epoch_done() or (entry.partial and view.stuck())

    def _guard(self, entry: _Entry, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` for ``entry``; an error fails that workload only."""
        try:
            fn(*args)
        except Exception as error:  # noqa: BLE001 - the workload's waiter gets it
            self._fail(entry, error)

    # -- workloads join, change phase and leave ------------------------------------------------------
    def _join(self, entry: _Entry) -> None:
        if not self._active:  # nothing runs: start from the engine's workers as they are now
            live = [w for w in self.engine.workers() if w not in self._device_failed]
            gpus = [w for w in live if self._is_gpu(w, refresh=True)]
            self._gpu_mode, self._gpus_gone_since = bool(gpus), None
            self._set_aside = set(live) - set(gpus) if gpus else set()
            self._pool = SharedPoolScheduler(gpus or live, seed=self._seed, weights=self._weights)
        try:
            finished = entry.runner._pool_open(entry.namespace, list(self._pool.workers))
        except Exception as error:  # noqa: BLE001
            self._close(entry, error=error)
            return
        if finished:
            self._close(entry)
            return
        self._active[entry.name] = entry
        self._guard(entry, self._start_phase, entry)

    def _start_phase(self, entry: _Entry) -> None:
        phase = entry.runner._pool_phase()
        live = set(self._pool.workers)
        availability = {w: ps for w, ps in phase.availability.items() if w in live}
        self._pool.add_workload(entry.name, phase.configs, availability, owner=entry.owner,
                                partitions=phase.partitions, seed=phase.seed, visit_order=phase.visit_order,
                                first_epoch=phase.epoch)
        entry.failures.clear()
        entry.partial = phase.partial
        entry.runner._pool_phase_started(PoolSlot(self._pool, entry.name))

    def _advance(self, entry: _Entry) -> None:
        visit_log = dict(self._pool.workload(entry.name).visit_log)
        self._pool.remove_workload(entry.name)  # nothing of it in flight: its phase is done
        if entry.runner._pool_phase_done(visit_log):
            del self._active[entry.name]
            self._close(entry)
        else:
            self._start_phase(entry)

    def _fail(self, entry: _Entry, error: BaseException) -> None:
        if entry.name in self._pool.workloads:
            self._pool.remove_workload(entry.name)
        for h, (name, *_rest) in list(self._inflight.items()):
            if name == entry.name:
                del self._inflight[h]
                self.engine.cancel(h)
        self._active.pop(entry.name, None)
        self._close(entry, error=error)

    def _fail_all(self, error: BaseException) -> None:
        with self._lock:
            joining, self._joining = self._joining, []
        for entry in list(self._active.values()):
            self._fail(entry, error)
        for entry in joining:
            self._close(entry, error=error)

    def _close(self, entry: _Entry, error: BaseException | None = None) -> None:
        """Free the workload's data and tell its waiter how it ended."""
        result = None
        try:
            if error is None:
                result = entry.runner._result()
        except Exception as e:  # noqa: BLE001
            error = e
        finally:
            try:
                entry.runner._pool_close()
            except Exception:  # noqa: BLE001 - the outcome stands; the leak is logged
                log.exception("closing workload %s failed", entry.name)
        if error is not None:
            entry.future.set_exception(error)
        else:
            entry.future.set_result(result)

    # -- units -------------------------------------------------------------------------------------
    def _submit(self, entry: _Entry, unit: Unit, worker: str) -> None:
        runner = entry.runner
        kind = runner._pool_kind
        try:
            if not runner._pool_allows(unit, worker):
                self._pool.requeue(entry.name, unit)
                return
            fn, key, args = runner._pool_unit(unit)
            timeout = runner.unit_timeout if worker in self._warm else runner.first_unit_timeout
            if runner.deadline is not None:  # no unit outlives its workload's deadline
                left = runner.deadline - time.time()
                if left <= 0:
                    self._past_deadline(entry)
                timeout = min(timeout, left)
            if runner.time_budget is not None:  # nor the running time it has left
                left = runner.time_budget - self._used(entry)
                if left <= 0:
                    if entry.running:  # that unit's engine deadline is now: its loss ends the workload
                        self._pool.requeue(entry.name, unit)
                        return
                    self._budget_spent(entry)
                timeout = min(timeout, left)
            h = self.engine.submit_pinned(fn, key, *args, worker=worker, timeout=timeout)
        except EngineError as error:  # the engine saw the worker go first
            runner._faults.note(f"could not submit {unit} to {worker}: {error}")
            self._pool.requeue(entry.name, unit)
            if worker not in self.engine.workers():
                self._lose_worker(worker, "gone")
            return
        except Exception as error:  # noqa: BLE001
            self._fail(entry, error)
            return
        self._inflight[h] = (entry.name, kind, unit, worker)
        if entry.running == 0:
            entry.since = self._clock()
        entry.running += 1

    def _used(self, entry: _Entry) -> float:
        """Seconds with a unit of ``entry`` in flight so far (its time budget's charge)."""
        return entry.used + (self._clock() - entry.since if entry.running else 0.0)

    def _unit_ended(self, entry: _Entry) -> None:
        """One unit of ``entry`` left flight (done, failed, lost, withdrawn): charge its time."""
        entry.running -= 1
        if entry.running == 0:
            entry.used += self._clock() - entry.since
        entry.runner.time_used = self._used(entry)

    def _on_event(self, ev: Any) -> None:
        if isinstance(ev, WorkerLost):
            self._lose_worker(ev.worker, ev.reason)
            return
        if isinstance(ev, WorkerAdded):
            self._add_worker(ev.worker)
            return
        entry_of = self._inflight.pop(getattr(ev, "handle", None), None)
        if entry_of is None:
            return  # a late result of a unit already requeued, or of a workload that ended
        name, kind, unit, worker = entry_of
        entry = self._active[name]
        runner = entry.runner
        self._unit_ended(entry)
        if isinstance(ev, UnitDone):
            self._warm.add(worker)
            self._pool.complete(name, unit, worker)
            self.units_completed[name] += 1
            self._guard(entry, runner._pool_unit_done, kind, unit, worker, ev.result)
        elif isinstance(ev, UnitFailed) and isinstance(ev.error, DeviceFailedError):
            runner._faults.note(f"{kind} unit {unit} failed on {worker}, whose device failed: {ev.error}; "
                                f"the worker leaves the pool")
            runner._requeued += 1
            self._device_failed.add(worker)
            self._lose_worker(worker, "device failed", drop=True)  # the pool puts the unit back in Q
        elif isinstance(ev, UnitFailed) and isinstance(ev.error, DeviceOutOfMemoryError):
            try:
                runner._pool_out_of_memory(kind, unit, worker, ev.error)
            except Exception as error:  # noqa: BLE001 - the config does not fit: the workload ends
                self._fail(entry, error)
                return
            self._pool.requeue(name, unit)
            runner._requeued += 1
        elif isinstance(ev, UnitFailed):
            entry.failures[unit] += 1
            if entry.failures[unit] > runner.max_unit_retries:
                error = RunnerError(f"{kind} unit (trial {unit.config!r}, partition {unit.partition}, epoch {unit.epoch}) "
                                    f"failed {entry.failures[unit]} times: {ev.error!r}")
                error.__cause__ = ev.error
                self._fail(entry, error)
                return
            runner._faults.note(f"{kind} unit {unit} failed: {ev.error!r}")
            self._pool.requeue(name, unit)
            runner._requeued += 1
        elif isinstance(ev, UnitLost):
            runner._faults.note(f"{kind} unit {unit} lost on {worker} ({ev.reason})")
            if runner.deadline is not None and time.time() >= runner.deadline - DEADLINE_SLACK:
                self._guard(entry, self._past_deadline, entry)  # given up on, its worker replaced: not run again
                return
            if runner.time_budget is not None and self._used(entry) >= runner.time_budget - DEADLINE_SLACK:
                self._guard(entry, self._past_deadline, entry)  # it ran until its budget was spent: the same
                return
            running = self._pool.running.get(worker)
            if running is not None and running.workload == name and running.unit == unit:
                self._pool.requeue(name, unit)
            runner._requeued += 1

    def _past_deadline(self, entry: _Entry) -> None:
        """Raise the error of a workload past its deadline (``MOPRunner.deadline``)."""
        if entry.runner.on_deadline is not None:
            entry.runner.on_deadline()
        raise RunnerError(f"workload {entry.name!r}: past its deadline, expected its units to finish before it")

    def _budget_spent(self, entry: _Entry) -> None:
        """Raise the error of a workload whose time budget ran out with none
        of its units running (``MOPRunner.on_budget_spent``)."""
        if entry.runner.on_budget_spent is not None:
            entry.runner.on_budget_spent()
        raise RunnerError(f"workload {entry.name!r}: its units ran {self._used(entry):.1f} s, "
                          f"expected at most its time budget of {entry.runner.time_budget:g} s")

    # -- workers (§5.5-5.6) -------------------------------------------------------------------------
    def _lose_worker(self, worker: str, reason: str, *, drop: bool = False) -> None:
        """A worker left: its unit in flight goes back to its workload's Q,
        and every workload's placement forgets what it held (and drops its
        copies there when ``drop``: the worker itself lives on)."""
        self._set_aside.discard(worker)
        self._withdraw(worker, reason, drop=drop)
        if self._gpu_mode and self._gpus_gone_since is None and not any(self._gpu.get(w) for w in self._pool.workers):
            self._gpus_gone_since = time.monotonic()

    def _withdraw(self, worker: str, reason: str, *, drop: bool) -> None:
        """Take ``worker`` out of the pool and of every workload's placement
        (its unit in flight goes back to Q)."""
        if worker in self._pool.workers:
            for a in self._pool.remove_worker(worker):
                for h, (name, _, unit, _w) in list(self._inflight.items()):
                    if name == a.workload and unit == a.unit:
                        del self._inflight[h]
                        self.engine.cancel(h)
                        self._unit_ended(self._active[name])
                        self._active[name].runner._requeued += 1
        for entry in list(self._active.values()):
            placement = entry.runner._placement
            if worker in placement.live:
                self._guard(entry, placement.retire if drop else placement.worker_lost, worker, reason)

    def _add_worker(self, worker: str) -> None:
        """A worker joined: each workload places its under-replicated partitions
        there (a CPU worker that joins while GPU workers exist is set aside)."""
        if worker in self._pool.workers or worker in self._set_aside or worker in self._device_failed:
            return
        if self._is_gpu(worker, refresh=True):
            if not self._gpu_mode:  # the first GPU worker takes over from the CPU workers
                for cpu in [w for w in self._pool.workers if not self._gpu.get(w)]:
                    self._withdraw(cpu, "set aside: a GPU worker joined", drop=True)
                    self._set_aside.add(cpu)
            self._gpu_mode, self._gpus_gone_since = True, None
        elif self._gpu_mode:
            self._set_aside.add(worker)
            return
        self._pool.add_worker(worker)
        for entry in list(self._active.values()):
            self._guard(entry, entry.runner._pool_worker_added, worker)

    def _fall_back_to_cpus(self) -> None:
        """The last GPU worker left and none came back within the workloads'
        ``repair_grace``: the set-aside CPU workers join the pool."""
        if self._gpus_gone_since is None or not self._active:
            return
        grace = min(entry.runner.repair_grace for entry in self._active.values())
        if time.monotonic() - self._gpus_gone_since < grace:
            return
        live = set(self.engine.workers())
        cpus = sorted(self._set_aside & live)
        self._gpu_mode, self._gpus_gone_since, self._set_aside = False, None, set()
        for entry in self._active.values():
            entry.runner._faults.note(f"no GPU worker left: training goes on on the CPU workers {cpus}")
        for worker in cpus:
            self._add_worker(worker)

    def _is_gpu(self, worker: str, *, refresh: bool = False) -> bool:
        """Whether ``worker`` declares a GPU; asked of the engine once per
        worker (``refresh``: ask now for workers not known yet)."""
        if worker not in self._gpu and refresh:
            resources = self.engine.worker_resources()
            gpus = set(gpu_workers(resources))
            for w in resources:
                self._gpu.setdefault(w, w in gpus)
        return self._gpu.get(worker, False)
