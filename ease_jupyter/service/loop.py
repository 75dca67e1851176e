"""The control loop: one thread that owns time (ease.ml §5; ACAI §3.3).

Each turn it (1) collects finished jobs and reports them to the selector,
(2) brings the selector's tenants in line with the store (new tasks, new
dataset versions, cancelled tasks), (3) starts queued jobs FIFO while workers
are free and their owner is under the cap of ``k`` running jobs, and (4) asks
the selector for as many new picks as there are free workers.

Selector tenants are (task, dataset version) pairs named ``"<task id>/<version
id>"``; their arms are the task's candidate models: one per scikit-learn
candidate (a pick trains its hyperparameter grid, ``runner.py``) and, when a
torch executor is registered, one per torch candidate (a pick trains its
learning-rate grid as one MOP workload, ``mop.py``); ease.ml pvldb §3. A new feed or
refine replaces the tenant, so results on the old version are stale and are
no longer reported. The selector's state is saved (at most every
``save_every_seconds``, and on stop) as a blob, and the newest job carries a
tag pointing at it; a restarted loop restores it, reconciles it with the jobs
in the store and re-queues the jobs that were left running.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Callable, Iterable

import numpy as np

from ..errors import InvalidStateError, NotFoundError, StorageError, StorageFullError, StoreUnavailableError
from ..jobspec import DEFAULT_EPOCHS, JobSpec, parse_job
from ..schema import parse, program_from_shapes
from ..selection.selector import Selector
from ..store import BlobStore, Job, JobStatus, JobUpdate, Store, Task
from ..zoo import Engine, candidates
from .candidates import arm_specs, task_candidates
from .failures import failure_code
from .executors import JobExecutor
from .runner import one_blas_thread

log = logging.getLogger(__name__)

STATE_TAG = "easeml.selector_state"
MAX_ATTEMPTS = 3  # a job lost by its executor this often is failed
STORAGE_RETRY_SECONDS = 60.0  # a tenant's wait for new picks after a job failed for want of storage
FLOPS_PER_SECOND = 1e9  # first guess, replaced by measured runtimes (see _cost_seconds)
NOMINAL_PROGRAMS = (((16,), (4,)), ((16,), (1,)))  # flat classification and regression
NOMINAL_TORCH_PROGRAMS = (((8, 8, 1), (4,)), ((8, 8, 3), (4,)))  # images: the torch arms
MAX_BACKOFF_SECONDS = 30.0  # the longest wait between turns while the store cannot be written
# Errors that mean the store cannot take writes now (not a bug): the loop waits them out.
STORE_OUTAGES = (StoreUnavailableError, StorageFullError)


def arm_key(job: Job) -> str:
    """A job's selector arm (``JobSpec.arm``): its candidate model (ease.ml
    pvldb §3: a pick is a (user, model) pair; its configs are trained within
    the job). A job from before picks trained grids keeps its config key,
    which is no arm: it is never reported."""
    return parse_job(job.model, job.config).arm


def catalogue() -> tuple[list[str], np.ndarray]:
    """Every candidate model the zoo can offer, with its GP descriptor
    (standardised): scikit-learn models for flat tasks, torch nets for images."""
    keys: list[str] = []
    rows: list[list[float]] = []
    for inp, out in (*NOMINAL_PROGRAMS, *NOMINAL_TORCH_PROGRAMS):
        for cand in candidates(program_from_shapes(inp, out)):
            if cand.name not in keys:
                keys.append(cand.name)
                rows.append(list(cand.descriptor))
    d = np.asarray(rows, dtype=float)
    spread = d.std(axis=0)
    d = (d - d.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    return keys, d


@dataclass
class _Tenant:
    task_id: int
    owner_id: int
    version_id: int
    configs: dict[str, JobSpec]  # arm key -> the job a pick of it trains


@dataclass
class _Running:
    job_id: int
    tenant: str
    key: str
    owner_id: int
    task_id: int
    engine: Engine = Engine.SKLEARN


class ControlLoop:
    def __init__(self, store: Store, blobs: BlobStore, *, executors: dict[Engine, JobExecutor],
                 max_running_per_user: int = 2, publish: Callable[[int, dict], None] | None = None,
                 tick_seconds: float = 0.5, seed: int | None = 0, save_every_seconds: float = 0.0,
                 torch_epochs: int = DEFAULT_EPOCHS, on_decision: Callable[[dict], None] | None = None):
        self.store, self.blobs = store, blobs
        self.executors = executors
        self.cap = int(max_running_per_user)
        self.publish = publish or (lambda owner, event: None)
        self.on_decision = on_decision or (lambda decision: None)
        self.last_decision: dict | None = None  # the latest launched pick, explained (see _decided)
        self.tick = tick_seconds
        self.seed = seed
        self.torch_epochs = int(torch_epochs)
        self.selector: Selector | None = None
        self._tenants: dict[str, _Tenant] = {}
        self._running: dict[int, _Running] = {}
        self._done: SimpleQueue[int] = SimpleQueue()
        self._dirty: set[int] = set()
        # What readers see without waiting for a turn (see _publish_view): per
        # task, idle or not, as of the end of the last turn; tasks notified
        # since then ("settling") are never idle.
        self._view_lock = threading.Lock()
        self._view_changed = threading.Condition(self._view_lock)
        self._settling: set[int] = set()
        self._synced: set[int] = set()
        self._idle_view: dict[int, bool] = {}
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_job_id = 0
        self._maybe_queued = True  # False once no job was left QUEUED: _start_queued skips its query
        self._start_failures: dict[int, int] = {}
        self._rate: list[float] = []  # measured seconds per estimated FLOP
        self.n_observed = 0
        # Saves are throttled (every state is a new blob); a restart reconciles
        # the last saved state with the jobs in the store, so nothing is lost.
        self.save_every = save_every_seconds
        self.storage_retry_seconds = STORAGE_RETRY_SECONDS
        self._unsaved, self._saved_at = False, 0.0
        self.error: BaseException | None = None
        self._storage_hold: dict[str, float] = {}  # tenant -> when it may get picks again (see _collect)
        # The store outage that blocks the loop now (None while writes work), and since when.
        self.outage: StorageError | None = None
        self.outage_since: float | None = None
        self._collecting: _Running | None = None  # the finished job _collect is recording
        self._task_configs: dict[int, dict[str, JobSpec]] = {}  # see _configs
        self._rate_median: float | None = None  # of _rate, kept by _learn_rate: each new tenant's arms ask it

    # ------------------------------------------------------------ life cycle
    @property
    def workers(self) -> int:
        return sum(e.workers for e in self.executors.values())

    def start(self) -> "ControlLoop":
        self.recover()
        self._thread = threading.Thread(target=self._run, name="easeml-control-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for executor in self.executors.values():
            executor.shutdown()
        with self._lock, one_blas_thread():
            if self.selector is not None:
                try:
                    self._collect()  # jobs that finished while the executors drained
                    self._save_state()
                except StorageError as error:  # a restart reconciles the state with the jobs in the store
                    log.warning("could not record the last results at stop: %s", error)

    def notify(self, task_id: int | None = None) -> None:
        """A task changed (created, fed, refined, cancelled): look at it next turn.
        Never waits for a turn in progress."""
        if task_id is not None:
            with self._view_lock:
                self._dirty.add(task_id)
                self._settling.add(task_id)
        self._wake.set()

    def _run(self) -> None:
        failed_turns = 0  # in a row, because of a store outage: the wait doubles with each
        while not self._stop.is_set():
            try:
                if self.outage is not None:
                    self._check_store()
                self.step()
            except STORE_OUTAGES as error:
                failed_turns += 1
                self._store_failed(error)
            except Exception as error:  # noqa: BLE001 - keep serving; surfaced in /admin/progress
                log.exception("control loop turn failed")
                self.error = error
            else:
                failed_turns = 0
                self._store_recovered()
            self._wake.wait(min(self.tick * 2 ** min(failed_turns, 20), max(self.tick, MAX_BACKOFF_SECONDS)))
            self._wake.clear()

    def _store_failed(self, error: StorageError) -> None:
        """Log an outage once, when it starts; the turns that fail during it are quiet."""
        if self.outage is None:
            self.outage_since = time.time()
            log.warning("the store cannot be written (%s); the control loop is blocked and retries with backoff",
                        error)
        self.outage = error

    def _check_store(self) -> None:
        """During an outage: a turn may have nothing to write, so only a
        successful write ends it (stores without the check have no outages)."""
        check = getattr(self.store, "check_writable", None)
        if check is not None:
            check()

    def _store_recovered(self) -> None:
        if self.outage is not None:
            log.warning("the store can be written again after %.0f s; the control loop goes on",
                        time.time() - (self.outage_since or time.time()))
            self.outage, self.outage_since = None, None

    @property
    def blocked(self) -> str | None:
        """Why the loop cannot go on: ``store_unavailable``, ``storage_full``, or None."""
        outage = self.outage
        if outage is None:
            return None
        return "storage_full" if isinstance(outage, StorageFullError) else "store_unavailable"

    def store_status(self) -> dict:
        """The store as the loop last met it: writable, or blocked since when and why."""
        outage = self.outage
        return {"writable": outage is None, "blocked": self.blocked,
                "since": None if outage is None else self.outage_since,
                "message": None if outage is None else str(outage)}

    # ------------------------------------------------------------ recovery
    def recover(self) -> None:
        """Re-queue jobs left RUNNING and restore the selector state."""
        with self._lock:
            jobs = self.store.list_jobs()
            self._last_job_id = jobs[-1].id if jobs else 0
            for job in jobs:
                if job.status is JobStatus.RUNNING:
                    self.store.update_job(job.id, JobStatus.QUEUED)
                    log.info("re-queued job %d left running by a previous service", job.id)
            state = self._load_state()
            keys, descriptors = catalogue()
            if state is not None and state.get("models") != keys:
                # Saved by a version with another catalogue: start afresh;
                # _sync replays the jobs in the store into the new selector.
                log.warning("the saved selector state has another model catalogue; rebuilding it from the jobs")
                state = None
            if state is not None:
                with one_blas_thread():
                    self.selector = Selector.from_dict(state)
                for name in self.selector.users:
                    task_id, version_id = (int(x) for x in name.split("/"))
                    try:
                        task = self.store.get_task(task_id)
                    except NotFoundError:
                        self.selector.remove_user(name)
                        continue
                    self._tenants[name] = _Tenant(task_id, task.owner_id, version_id, self._configs(task))
                for job in self.store.list_jobs(status=JobStatus.SUCCEEDED):
                    self._learn_rate(job)
                self._reconcile()
            else:
                with one_blas_thread():
                    # arms="untried": a pick trains the model's whole grid on a given
                    # dataset version, so training it again would only repeat its result
                    # (and a task would never become idle). A new version is a new tenant.
                    self.selector = Selector(keys, descriptors=descriptors, arms="untried", random_state=self.seed)
            ids = {t.id for t in self.store.list_tasks()}
            with self._view_lock:
                self._dirty.update(ids)
                self._settling.update(ids)
        self._wake.set()

    def _reconcile(self) -> None:
        """Make the restored selector agree with the jobs in the store: results
        that finished after the last save are reported, and pending picks with
        no queued job behind them go back to the pool."""
        state = {u["name"]: u for u in self.selector.to_dict()["users"] if u}
        for name, tenant in self._tenants.items():
            models = state[name]["models"]
            observed = {models[int(o[0])] for o in state[name]["obs"]}
            pending = {models[int(k)] for k, _ in state[name]["pending"]}
            queued: set[str] = set()
            for job in self.store.list_jobs(tenant.task_id):
                if job.dataset_version_id != tenant.version_id:
                    continue
                key = arm_key(job)
                if key not in tenant.configs or key not in models:
                    continue
                if job.status is JobStatus.QUEUED:
                    queued.add(key)
                elif (job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED) and key not in observed
                      and failure_code(self.store, job) is None):
                    ok = job.status is JobStatus.SUCCEEDED and job.accuracy is not None
                    self.selector.observe(name, key, job.accuracy if ok else 0.0, cost=job.cost_seconds)
                    observed.add(key)
                    pending.discard(key)
            for key in pending - queued:
                self.selector.cancel(name, key)

    def _load_state(self) -> dict | None:
        ids = self.store.find_by_tag("job", STATE_TAG)
        if not ids:
            return None
        digest = self.store.tags("job", max(ids))[STATE_TAG]
        return json.loads(self.blobs.get_bytes(digest))

    def _state_bytes(self) -> tuple[int, bytes] | None:
        """The selector state to save, taken under the lock: (job id to tag, JSON)."""
        if self._last_job_id == 0 or self.selector is None:
            return None
        self._unsaved, self._saved_at = False, time.monotonic()
        return self._last_job_id, json.dumps(self.selector.to_dict()).encode()

    def _write_state(self, job_id: int, data: bytes) -> None:
        digest = self.blobs.put_bytes(data)
        self.store.set_tag("job", job_id, STATE_TAG, digest)

    def _save_state(self) -> None:
        state = self._state_bytes()
        if state is not None:
            self._write_state(*state)

    # ------------------------------------------------------------ one turn
    def step(self) -> None:
        state = None
        with self._lock, one_blas_thread():
            try:
                changed = self._collect()
                changed |= self._sync()
                changed |= self._start_queued()
                changed |= self._pick()
            except StorageError:
                self._resume_later()
                raise
            self._unsaved |= changed
            if self._unsaved and time.monotonic() - self._saved_at >= self.save_every:
                state = self._state_bytes()
            newly_idle = self._publish_view()
        for task_id, owner_id in newly_idle:
            self.publish(owner_id, {"type": "task", "task_id": task_id, "status": "idle"})
        if state is not None:  # the blob write (with fsync) and tag need no lock: readers don't wait on them
            try:
                self._write_state(*state)
            except StorageError:
                self._unsaved = True  # saved by a later turn
                raise

    def _resume_later(self) -> None:
        """After a turn cut short by the store: keep what it had not recorded
        yet for the next turn, so an outage loses nothing (the picks it had not
        launched went back to the selector in ``_pick``)."""
        run, self._collecting = self._collecting, None
        if run is not None:  # its result is not recorded: collect it again
            self._running[run.job_id] = run
            self._done.put(run.job_id)
        with self._view_lock:
            self._dirty |= self._synced  # taken by _sync, perhaps not brought in line: look again

    def _publish_view(self) -> list[tuple[int, int]]:
        """At the end of a turn: each task's idleness for ``is_idle``, which
        reads it without the loop's lock (a read never waits for a turn). Returns the (task, owner) pairs that just
        became idle; the caller announces them as ``task`` events with status
        ``idle`` (``Task.wait`` wakes on them)."""
        busy = {r.task_id for r in self._running.values()}
        if self._maybe_queued:
            busy |= {j.task_id for j in self.store.list_jobs(status=JobStatus.QUEUED)}
        idle: dict[int, bool] = {task_id: False for task_id in busy}
        owners: dict[int, int] = {r.task_id: r.owner_id for r in self._running.values()}
        for name, t in self._tenants.items():
            owners[t.task_id] = t.owner_id
            if t.task_id not in busy:
                stats = self.selector.stats(name)
                # A pick still pending has not been trained yet, even with no job behind it.
                idle[t.task_id] = not stats["eligible"] and not stats["pending"]
        with self._view_lock:
            before, settled = self._idle_view, self._synced - self._dirty
            was_settling = self._settling & settled
            self._idle_view = idle
            self._settling -= settled
            self._synced = set()
            self._view_changed.notify_all()
        changed = {task_id for task_id, now in idle.items()
                   if now and (not before.get(task_id, True) or task_id in was_settling)}
        changed |= {task_id for task_id in was_settling if task_id not in idle}  # no tenant: idle at once
        out = []
        for task_id in sorted(changed):
            owner = owners.get(task_id)
            if owner is None:
                try:
                    owner = self.store.get_task(task_id).owner_id
                except NotFoundError:
                    continue
            out.append((task_id, owner))
        return out

    def _collect(self) -> bool:
        changed = False
        while True:
            self._collecting = None
            try:
                job_id = self._done.get_nowait()
            except Empty:
                return changed
            run = self._running.pop(job_id, None)
            if run is None:
                continue
            self._collecting = run  # see _resume_later
            job = self.store.get_job(job_id)
            if job.status is JobStatus.RUNNING:  # the executor lost it (worker died): run it again
                log.warning("job %d came back from its executor still running; re-queued", job_id)
                retry = job.attempts < MAX_ATTEMPTS
                job = self.store.update_job(job_id, JobStatus.QUEUED if retry else JobStatus.FAILED,
                                            None if retry else JobUpdate(error="lost by its executor too often"))
                if retry:
                    self._maybe_queued = True
                    self._emit_job(job, run.owner_id)
                    continue  # still pending in the selector; _start_queued picks it up
            elif job.status is JobStatus.QUEUED:  # the executor failed before starting it (a broken pool)
                self._start_failures[job_id] = self._start_failures.get(job_id, 0) + 1
                if self._start_failures[job_id] < MAX_ATTEMPTS:
                    self._maybe_queued = True
                    continue  # still queued and pending: started again next turn
                job = self.store.update_job(job_id, JobStatus.CANCELLED, JobUpdate(error="the executor could not start it"))
            self._emit_job(job, run.owner_id)
            if run.tenant not in self._tenants:
                continue  # stale (new version) or cancelled: the result is kept but not reported
            if failure_code(self.store, job) is not None:
                self._hold_after_storage_failure(run)
                changed = True
                continue
            if job.status is JobStatus.SUCCEEDED and job.accuracy is not None and math.isfinite(job.accuracy):
                quality = job.accuracy
                self._learn_rate(job)
            else:
                quality = 0.0  # a failing config is a bad arm, not one to retry forever
            try:
                self.selector.observe(run.tenant, run.key, quality, cost=job.cost_seconds)
                self.n_observed += 1
                changed = True
            except KeyError:
                pass

    def _hold_after_storage_failure(self, run: _Running) -> None:
        """A job failed for want of storage (``failures.fail_job``), which says
        nothing of its model: the arm goes back to the pool unscored, and the
        tenant gets no new pick for ``storage_retry_seconds``, so a missing
        blob or a full disk does not fail one job after another."""
        log.warning("job %d failed for want of storage; task %d gets no new pick for %g s",
                    run.job_id, run.task_id, self.storage_retry_seconds)
        self._storage_hold[run.tenant] = time.monotonic() + self.storage_retry_seconds
        try:
            self.selector.cancel(run.tenant, run.key)
        except KeyError:  # not pending (a restart reconciled it)
            pass

    def _on_hold(self, tenant: str) -> bool:
        until = self._storage_hold.get(tenant)
        if until is not None and time.monotonic() >= until:
            del self._storage_hold[tenant]
            return False
        return until is not None

    def _sync(self) -> bool:
        with self._view_lock:
            dirty, self._dirty = self._dirty, set()
        self._synced |= dirty
        changed = False
        for task_id in sorted(dirty):
            try:
                task = self.store.get_task(task_id)
            except NotFoundError:
                continue
            current = [n for n, t in self._tenants.items() if t.task_id == task_id]
            latest = None if task.cancelled else self.store.latest_dataset_version(task_id)
            wanted = None if latest is None else f"{task_id}/{latest.id}"
            for name in current:
                if name != wanted:
                    self.selector.remove_user(name)
                    del self._tenants[name]
                    changed = True
            new_tenant = wanted is not None and wanted not in self._tenants
            # One read of the task's jobs serves both the cancelling and the
            # replay, and a feed of a task with nothing queued needs neither.
            jobs = self.store.list_jobs(task_id) if new_tenant or self._may_have_queued(task_id) else ()
            self._cancel_queued(task, jobs, keep_version=None if latest is None else latest.id)
            if not new_tenant:
                continue
            configs = self._configs(task)
            known = set(self.selector.model_names)
            arms = [k for k in configs if k in known]
            if not arms:
                log.warning("task %d has no candidates in the selector's catalogue", task_id)
                continue
            costs = {k: self._cost_seconds(task, configs[k], latest.n_examples) for k in arms}
            self.selector.add_user(wanted, models=arms, costs=costs)
            self._tenants[wanted] = _Tenant(task_id, task.owner_id, latest.id, configs)
            self._replay(wanted, jobs, latest.id, set(arms))
            changed = True
        return changed

    def _replay(self, tenant: str, jobs: Iterable[Job], version_id: int, arms: set[str]) -> None:
        """Report results that already exist for this version (a resumed task,
        or a restart without a saved state), so no config is trained twice."""
        seen: set[str] = set()
        for job in jobs:
            if job.dataset_version_id != version_id or job.status not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
                continue
            key = arm_key(job)
            if key in arms and key not in seen and failure_code(self.store, job) is None:
                ok = job.status is JobStatus.SUCCEEDED and job.accuracy is not None
                self.selector.observe(tenant, key, job.accuracy if ok else 0.0, cost=job.cost_seconds)
                seen.add(key)

    def _may_have_queued(self, task_id: int) -> bool:
        """Whether a job of the task may be QUEUED: one launched and not
        started yet, or one re-queued (``_maybe_queued``)."""
        return self._maybe_queued or any(r.task_id == task_id for r in self._running.values())

    def _cancel_queued(self, task: Task, jobs: Iterable[Job], keep_version: int | None) -> None:
        """Cancel the task's queued ``jobs`` (its jobs, as read this turn) of other versions than ``keep_version``."""
        for job in jobs:
            if job.status is JobStatus.QUEUED and job.dataset_version_id != keep_version:
                try:
                    job = self.store.update_job(job.id, JobStatus.CANCELLED)
                except InvalidStateError:
                    continue
                self._emit_job(job, task.owner_id)

    def _running_per_owner(self) -> Counter:
        return Counter(r.owner_id for r in self._running.values())

    def _free(self) -> int:
        return self.workers - len(self._running)

    def _engine_full(self, engine: Engine) -> bool:
        """Each executor has its own slots: a torch pick must not take a
        scikit-learn worker's place (it would only wait in the MOP queue)."""
        executor = self.executors.get(engine)
        if executor is None:
            return True
        return sum(r.engine is engine for r in self._running.values()) >= executor.workers

    def _start_queued(self) -> bool:
        """Queued jobs (re-queued after a restart) go first, FIFO per owner."""
        started = False
        if self._free() <= 0 or not self._maybe_queued:
            return False
        per_owner = self._running_per_owner()
        queued = self.store.list_jobs(status=JobStatus.QUEUED)
        self._maybe_queued = bool(queued)
        for job in queued:
            if self._free() <= 0:
                break
            if job.id in self._running:
                continue
            tenant = f"{job.task_id}/{job.dataset_version_id}"
            info = self._tenants.get(tenant)
            if info is None:
                continue
            spec = parse_job(job.model, job.config)
            if per_owner[info.owner_id] >= self.cap or self._engine_full(spec.engine):
                continue
            self._launch(job, spec, tenant, info.owner_id)
            per_owner[info.owner_id] += 1
            started = True
        return started

    def _pick(self) -> bool:
        """Ask for exactly as many picks as there are free workers. A pick whose
        owner is at the cap, or whose tenant is on hold after a storage failure
        (``_hold_after_storage_failure``), is held back (still pending, so the
        next ask in this turn yields another tenant) and returned to the pool at the end."""
        if self._free() <= 0 or not self._tenants:
            return False
        per_owner = self._running_per_owner()
        if all(per_owner[t.owner_id] >= self.cap or self._on_hold(name) for name, t in self._tenants.items()):
            return False
        held: list[tuple[str, str]] = []
        asked = False
        try:
            for _ in range(len(self._tenants) + 1):
                free = self._free()
                if free <= 0:
                    break
                # One pick per call (the same rule as next_picks(free), which loops the
                # same way), so that each pick's explanation (last_decision) is kept.
                picks: list[tuple[str, str, dict | None]] = []
                for _ in range(free):
                    got = self.selector.next_picks(1)
                    if not got:
                        break
                    picks.append((*got[0], self.selector.last_decision))
                if not picks:
                    break
                for n, (tenant, key, why) in enumerate(picks):
                    info = self._tenants[tenant]
                    spec = info.configs[key]
                    if (per_owner[info.owner_id] >= self.cap or self._engine_full(spec.engine)
                            or self._on_hold(tenant)):
                        held.append((tenant, key))
                        continue
                    try:
                        job = self.store.create_job(info.task_id, info.version_id, spec.model, spec.config())
                    except StorageError:
                        # Not launched: back to the pool. A pick left pending with no job
                        # would never be trained, and its task would look finished.
                        held.extend((t, k) for t, k, _ in picks[n:])
                        raise
                    self._last_job_id = max(self._last_job_id, job.id)
                    self._emit_job(job, info.owner_id)
                    self._launch(job, spec, tenant, info.owner_id)
                    self._decided(why, tenant, job)
                    per_owner[info.owner_id] += 1
                    asked = True  # only a launch changes the state worth saving (held picks go back below)
        finally:
            for tenant, key in held:
                self.selector.cancel(tenant, key)
        return asked

    def _decided(self, why: dict | None, tenant: str, job: Job) -> None:
        """Keep and announce the explanation of a launched pick: the selector's
        ``last_decision`` (tenants by name) plus the task, owner and job."""
        info = self._tenants[tenant]
        why = dict(why or {"user": tenant, "model": arm_key(job), "phase": None,
                           "policy": None, "candidates": None, "decision": None})
        candidates = why.get("candidates")
        why.update(tenant=tenant, mode=self.selector.mode, task_id=info.task_id, owner_id=info.owner_id,
                   job_id=job.id, time=time.time(), candidates=None if candidates is None else [
                       {"tenant": name, "task_id": self._tenants[name].task_id,
                        "owner_id": self._tenants[name].owner_id, "gap": float(gap)}
                       for name, gap in candidates.items() if name in self._tenants])
        self.last_decision = why
        try:
            self.on_decision(why)
        except Exception:  # noqa: BLE001 - a view must never stop the loop
            log.exception("publishing a decision failed")

    def _launch(self, job: Job, spec: JobSpec, tenant: str, owner_id: int) -> None:
        engine = spec.engine
        self._running[job.id] = _Running(job.id, tenant, spec.arm, owner_id, job.task_id, engine)
        self.publish(owner_id, {"type": "job", "task_id": job.task_id, "job_id": job.id, "status": "running",
                                "model": job.model, "config": dict(job.config)})
        future: Future = self.executors[engine].submit(job.id)
        future.add_done_callback(lambda _f, job_id=job.id: (self._done.put(job_id), self._wake.set()))

    # ------------------------------------------------------------ costs
    def _configs(self, task: Task) -> dict[str, JobSpec]:
        """The task's arms: arm key -> the job a pick of it trains
        (``candidates.arm_specs``); made once per task."""
        found = self._task_configs.get(task.id)
        if found is None:
            epochs = self.torch_epochs if Engine.TORCH in self.executors else None
            found = self._task_configs[task.id] = arm_specs(task, torch_epochs=epochs)
        return found

    @staticmethod
    def _spec_flops(task: Task, spec: JobSpec, n: int) -> float:
        """A pick's estimated work: every config of its grid (and for torch,
        every epoch)."""
        cand = task_candidates(task).get(spec.model)
        if cand is None:
            return 1e6
        flops = max(cand.cost(n), 1.0) * len(spec.points())
        if spec.engine is Engine.TORCH:
            flops *= spec.epochs
        return flops

    def _cost_seconds(self, task: Task, spec: JobSpec, n: int) -> float:
        """Candidate.cost (FLOPs) times the median measured seconds per FLOP
        (a first guess of 1 GFLOP/s before anything was measured)."""
        rate = self._rate_median if self._rate_median is not None else 1.0 / FLOPS_PER_SECOND
        return max(self._spec_flops(task, spec, n) * rate, 1e-3)

    def _learn_rate(self, job: Job) -> None:
        if not job.cost_seconds:
            return
        try:
            task = self.store.get_task(job.task_id)
            n = self.store.get_dataset_version(job.dataset_version_id).n_examples
        except NotFoundError:
            return
        self._rate.append(job.cost_seconds / self._spec_flops(task, parse_job(job.model, job.config), n))
        del self._rate[:-200]
        self._rate_median = float(np.median(self._rate))

    # ------------------------------------------------------------ queries
    def _emit_job(self, job: Job, owner_id: int) -> None:
        event = {"type": "job", "task_id": job.task_id, "job_id": job.id, "status": job.status.value,
                 "model": job.model, "config": dict(job.config), "accuracy": job.accuracy,
                 "cost_seconds": job.cost_seconds}
        if job.status is JobStatus.SUCCEEDED:
            event["metrics"] = {m.name: m.value for m in self.store.list_metrics(job.id)}
        self.publish(owner_id, event)

    def is_idle(self, task_id: int) -> bool:
        """Nothing running, queued, pending or left to try for the task's latest
        version, as of the end of the last turn (a task changed since is not
        idle; while the store cannot be written no turn ends, so a task with
        work left stays not idle: see ``task_status``)."""
        with self._view_lock:
            if task_id in self._settling:
                return False
            return self._idle_view.get(task_id, True)

    def n_running(self) -> int:
        return len(self._running)

    def candidates(self, task: Task) -> int:
        """How many candidate models (arms) the task can ever have in this
        service: 0 when no model fits its program here (its configs are made
        once per task, see ``_configs``)."""
        configs = self._configs(task)
        known = set(self.selector.model_names) if self.selector is not None else set(configs)
        return sum(key in known for key in configs)

    def task_status(self, task: Task, has_data: bool) -> dict:
        """``idle``, ``candidates``, ``blocked`` (why the loop cannot go on with
        the task's work, or None), ``status`` (cancelled, no_candidates, no_data,
        blocked, training or idle) and ``reason``, a sentence for people."""
        idle = self.is_idle(task.id)
        count = self.candidates(task)
        blocked = None if idle else self.blocked
        if task.cancelled:
            status, reason = "cancelled", "the task is cancelled; resume it to train again"
        elif count == 0:
            status, reason = "no_candidates", self._no_candidates_reason(task)
        elif not has_data:
            status, reason = "no_data", "no examples yet: feed some to start training"
        elif blocked is not None:
            status, reason = "blocked", (f"training is paused: {self.outage}; it goes on by itself once the "
                                         "service can write its store again")
        elif idle:
            status, reason = "idle", "every candidate model has been trained on the latest version"
        else:
            status, reason = "training", "candidate models are being trained on the latest version"
        return {"idle": idle, "candidates": count, "blocked": blocked, "status": status, "reason": reason}

    def _no_candidates_reason(self, task: Task) -> str:
        try:
            fitting = candidates(parse(task.program))
        except Exception as error:  # noqa: BLE001 - the zoo explains why nothing fits
            return f"no candidate model fits this program: {error}"
        if any(c.engine is Engine.TORCH for c in fitting) and Engine.TORCH not in self.executors:
            return "its candidate models are torch networks, and this service trains without torch"
        return "none of the models that fit this program is in the service's catalogue"

    def scheduler_state(self) -> dict:
        """What the scheduler view needs, taken under the loop's lock: policy,
        mode, the last launched decision, and per tenant (task, latest version)
        her best observed quality and the highest posterior mean of her arms."""
        with self._lock, one_blas_thread():
            tenants = {}
            for name, t in self._tenants.items():
                best = self.selector.best(name)
                posterior = self.selector.posterior(name)
                tenants[name] = {"task_id": t.task_id, "owner_id": t.owner_id, "version_id": t.version_id,
                                 "best": None if best is None else best[1],
                                 "max_mean": max((m for m, _ in posterior.values()), default=None)}
            return {
                "policy": self.selector.policy if self.selector else None,
                "mode": self.selector.mode if self.selector else None,
                "last_decision": None if self.last_decision is None else dict(self.last_decision),
                "tenants": tenants,
                "running": [{"job_id": r.job_id, "task_id": r.task_id, "owner_id": r.owner_id}
                            for r in self._running.values()],
            }

    def progress(self) -> dict:
        with self._lock, one_blas_thread():
            per_owner = self._running_per_owner()
            return {
                "workers": self.workers,
                "running": len(self._running),
                "running_per_user": {str(k): v for k, v in per_owner.items()},
                "tenants": len(self._tenants),
                "observations": self.n_observed,  # reported by this process since it started
                # what the (restored) selector holds: survives a restart
                "selector_observations": {name: int(self.selector.stats(name)["n_obs"]) for name in self._tenants},
                "mode": self.selector.mode if self.selector else None,
                "error": None if self.error is None else repr(self.error),
                "store": self.store_status(),
            }
