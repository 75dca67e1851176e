"""Finished jobs: their results go to the selector (ease.ml pvldb §4: a
finished pick is an observation of its arm), a job its executor lost is run
again, and a job that failed for want of storage or of a cluster that could
run it (``failures.failure_code``) puts its tenant on hold."""

from __future__ import annotations

import logging
import time
from queue import Empty, SimpleQueue

from ...store import Job, JobStatus, JobUpdate
from ..failures import failure_code
from .costs import Costs
from .state import LoopState, Running, measured_quality

log = logging.getLogger(__package__)  # one logger for the whole loop

MAX_ATTEMPTS = 3  # a job lost by its executor this often is failed
STORAGE_RETRY_SECONDS = 60.0  # a tenant's wait for new picks after a job failed for want of storage or cluster


class StorageHolds:
    """Tenants that get no new pick for a while: one of their jobs failed for
    want of storage or of a cluster that could run it (``failures.fail_job``),
    which says nothing of its model, so a missing blob, a full disk or a
    cluster without workers does not fail one job after another."""

    def __init__(self, retry_seconds: float = STORAGE_RETRY_SECONDS):
        self.retry_seconds = retry_seconds
        self._until: dict[str, float] = {}  # tenant -> when it may get picks again

    def hold(self, tenant: str) -> None:
        self._until[tenant] = time.monotonic() + self.retry_seconds

    def on_hold(self, tenant: str) -> bool:
        until = self._until.get(tenant)
        if until is not None and time.monotonic() >= until:
            del self._until[tenant]
            return False
        return until is not None


class Results:
    """Collects the jobs the executors finished (they say so from their own
    threads through ``finished``) at the start of each turn."""

    def __init__(self, state: LoopState, costs: Costs, holds: StorageHolds):
        self.state, self.costs, self.holds = state, costs, holds
        self._done: SimpleQueue[int] = SimpleQueue()
        self._collecting: Running | None = None  # the finished job collect is recording
        self._start_failures: dict[int, int] = {}
        self.n_observed = 0  # results reported to the selector by this process

    def finished(self, job_id: int) -> None:
        """An executor is done with the job (any thread)."""
        self._done.put(job_id)

    def collect(self) -> bool:
        """Record every finished job; True when the selector learned something."""
        state = self.state
        changed = False
        while True:
            self._collecting = None
            try:
                job_id = self._done.get_nowait()
            except Empty:
                return changed
            run = state.running.pop(job_id, None)
            if run is None:
                continue
            self._collecting = run  # see resume_later
            job = state.store.get_job(job_id)
            if job.status is JobStatus.RUNNING and run.tenant not in state.tenants:
                # lost, and its version replaced (or its task cancelled) meanwhile: no turn would start it again
                job = state.store.update_job(job_id, JobStatus.CANCELLED,
                                             JobUpdate(error="lost by its executor after its dataset version "
                                                       "was replaced"))
                state.emit_job(job, run.owner_id)
                continue
            if job.status is JobStatus.RUNNING:  # the executor lost it (worker died): run it again
                log.warning("job %d came back from its executor still running; re-queued", job_id)
                retry = job.attempts < MAX_ATTEMPTS
                job = state.store.update_job(job_id, JobStatus.QUEUED if retry else JobStatus.FAILED,
                                             None if retry else JobUpdate(error="lost by its executor too often"))
                if retry:
                    state.maybe_queued = True
                    state.emit_job(job, run.owner_id)
                    continue  # still pending in the selector; admission starts it again
            elif job.status is JobStatus.QUEUED:  # the executor failed before starting it (a broken pool)
                self._start_failures[job_id] = self._start_failures.get(job_id, 0) + 1
                if self._start_failures[job_id] < MAX_ATTEMPTS:
                    state.maybe_queued = True
                    continue  # still queued and pending: started again next turn
                job = state.store.update_job(job_id, JobStatus.CANCELLED,
                                             JobUpdate(error="the executor could not start it"))
            state.emit_job(job, run.owner_id)
            if run.tenant not in state.tenants:  # stale (new version) or cancelled: kept, not reported as hers
                changed |= self._pass_on(run, job)
                continue
            code = failure_code(state.store, job)
            if code is not None:
                self._hold_after_storage_failure(run, code)
                changed = True
                continue
            quality = measured_quality(job)
            if quality is not None:
                self.costs.learn(job)
            else:
                # A failing config is a bad arm, not one to retry forever: a model
                # larger than its owner's room left too (failures.py).
                quality = 0.0
            try:
                state.selector.observe(run.tenant, run.key, quality, cost=job.cost_seconds)
                self.n_observed += 1
                changed = True
            except KeyError:
                pass

    def _pass_on(self, run: Running, job: Job) -> bool:
        """A model's result on a version its task has replaced since is
        evidence for the task's current tenant (``Selector.inherit``): a task
        fed again while its jobs run keeps what they found, rather than
        counting as one that knows nothing. True when it was passed on."""
        quality = measured_quality(job)
        current = next((name for name, t in self.state.tenants.items() if t.task_id == run.task_id), None)
        if quality is None or current is None:
            return False
        try:
            self.state.selector.inherit(current, run.key, quality)
        except KeyError:  # not a model of the new tenant (a user model removed since)
            return False
        return True

    def resume_later(self) -> None:
        """After a turn cut short by the store: the job being recorded is
        collected again next turn, so an outage loses no result."""
        run, self._collecting = self._collecting, None
        if run is not None:
            self.state.running[run.job_id] = run
            self._done.put(run.job_id)

    def _hold_after_storage_failure(self, run: Running, code: str) -> None:
        """The arm goes back to the pool unscored, and the tenant is put on
        hold (a storage or cluster failure: ``failures.failure_code``)."""
        log.warning("job %d failed for want of storage or cluster (%s); task %d gets no new pick for %g s",
                    run.job_id, code, run.task_id, self.holds.retry_seconds)
        self.holds.hold(run.tenant)
        try:
            self.state.selector.cancel(run.tenant, run.key)
        except KeyError:  # not pending (a restart reconciled it)
            pass
