"""Restart recovery. The selector's state is saved as a blob (at most every
``save_every`` seconds, and on stop), and the newest job carries a tag
pointing at it. A restarted loop re-queues the jobs left running, restores
the state, and reconciles it with the jobs in the store, so a throttled save
loses nothing."""

from __future__ import annotations

import json
import logging
import math
import time

from ...errors import NotFoundError, StoreCorruptError
from ...selection.selector import Selector
from ...store import JobStatus, Store
from ..failures import failure_code
from ..runner import one_blas_thread
from .costs import Costs, catalogue
from .prior import PriorRefits
from .state import LoopState, Tenant, arm_key

log = logging.getLogger(__package__)  # one logger for the whole loop

STATE_TAG = "easeml.selector_state"


def saved_state_digest(store: Store) -> tuple[int, str] | None:
    """(job id, blob digest) of the newest saved selector state. A holder
    whose job is gone is passed over: a save may tag a job while its task's
    deletion removes it (under PostgreSQL's READ COMMITTED the deletion does
    not see the new tag row, which then outlives its job)."""
    for job_id in sorted(store.find_by_tag("job", STATE_TAG), reverse=True):
        try:
            digest = store.tags("job", job_id).get(STATE_TAG)
        except NotFoundError:
            continue
        if digest:
            return job_id, digest
    return None


class SavedState:
    """The selector state in the store: throttled saves (every state is a new
    blob) and the load at start."""

    def __init__(self, state: LoopState, save_every: float):
        self.state = state
        self.save_every = save_every
        self.unsaved, self._saved_at = False, 0.0
        self._holder_lost = False  # a write found its job deleted: the next snapshot checks the holder

    def load(self) -> dict | None:
        """The newest saved state; None when there is none, or when its blob
        is lost or damaged (the selector is then rebuilt from the jobs)."""
        saved = saved_state_digest(self.state.store)
        if saved is None:
            return None
        job_id, digest = saved
        try:
            return json.loads(self.state.blobs.get_bytes(digest))
        except (NotFoundError, StoreCorruptError, ValueError) as error:
            log.warning("the selector state saved with job %d cannot be read (%s); rebuilding it from the jobs",
                        job_id, error)
            return None

    def due(self, changed: bool) -> bool:
        """Whether a turn that ``changed`` the selector should save it now."""
        self.unsaved |= changed
        return self.unsaved and time.monotonic() - self._saved_at >= self.save_every

    def snapshot(self) -> tuple[int, bytes] | None:
        """The selector state to save, taken under the lock: (job id to tag, JSON)."""
        state = self.state
        if self._holder_lost:
            self._holder_lost = False
            state.keep_state_holder()
        if state.last_job_id == 0 or state.selector is None:
            return None
        self.unsaved, self._saved_at = False, time.monotonic()
        return state.last_job_id, json.dumps(state.selector.to_dict()).encode()

    def write(self, job_id: int, data: bytes) -> None:
        """Store a snapshot (a blob write with fsync, then its tag): needs no lock."""
        digest = self.state.blobs.put_bytes(data)
        self.state.store.set_tag("job", job_id, STATE_TAG, digest)

    def holder_lost(self) -> None:
        """A snapshot's job was deleted before its write (a task deletion
        between the snapshot and the write): the next turn saves the state
        again, on the job that holds it then."""
        self.unsaved, self._saved_at, self._holder_lost = True, -math.inf, True


def recover(state: LoopState, saved: SavedState, costs: Costs, priors: PriorRefits, *, seed: int | None,
            policy: str) -> set[int]:
    """Re-queue jobs left RUNNING and restore (or make) the selector running
    ``policy`` on the prior fitted on the store's finished tasks (``priors``, at start).
    Returns every task's id: each is brought in line by the next tenant sync."""
    store = state.store
    jobs = store.list_jobs()
    state.last_job_id = jobs[-1].id if jobs else 0
    for job in jobs:
        if job.status is JobStatus.RUNNING:
            store.update_job(job.id, JobStatus.QUEUED)
            log.info("re-queued job %d left running by a previous service", job.id)
    loaded = saved.load()
    keys, _ = catalogue()
    if loaded is not None and loaded.get("models") != keys:
        # Saved by a version with another catalogue: start afresh; the
        # tenant sync replays the jobs in the store into the new selector.
        log.warning("the saved selector state has another model catalogue; rebuilding it from the jobs")
        loaded = None
    if loaded is not None and loaded.get("config", {}).get("policy") != policy:
        # The service now runs another rule: the picker's state is of the old one.
        log.warning("the saved selector state ran policy %r, the service runs %r; rebuilding it from the jobs",
                    loaded.get("config", {}).get("policy"), policy)
        loaded = None
    with one_blas_thread():
        prior = priors.current = priors.fit_now()  # at start, before the first turn
    log.info("selector prior: %s (%d finished tasks)", prior.source, len(prior.history.task_ids))
    if loaded is not None:
        with one_blas_thread():
            state.selector = Selector.from_dict(loaded)
            state.selector.set_prior(prior.prior)
        for name in state.selector.users:
            task_id, version_id = (int(x) for x in name.split("/"))
            try:
                task = store.get_task(task_id)
            except NotFoundError:
                state.selector.remove_user(name)
                continue
            state.tenants[name] = Tenant(task_id, task.owner_id, version_id, costs.configs(task))
        for job in store.list_jobs(status=JobStatus.SUCCEEDED):
            costs.learn(job)
        _reconcile(state)
    else:
        with one_blas_thread():
            # arms="untried": a pick trains the model's whole grid on a given
            # dataset version, so training it again would only repeat its result
            # (and a task would never become idle). A new version is a new tenant.
            state.selector = Selector(keys, prior=prior.prior, policy=policy, arms="untried", random_state=seed)
    return {t.id for t in store.list_tasks()}


def _reconcile(state: LoopState) -> None:
    """Make the restored selector agree with the jobs in the store: results
    that finished after the last save are reported, and pending picks with
    no queued job behind them go back to the pool."""
    selector = state.selector
    saved = {u["name"]: u for u in selector.to_dict()["users"] if u}
    for name, tenant in state.tenants.items():
        models = saved[name]["models"]
        observed = {models[int(o[0])] for o in saved[name]["obs"]}
        pending = {models[int(k)] for k, _ in saved[name]["pending"]}
        queued: set[str] = set()
        for job in state.store.list_jobs(tenant.task_id):
            if job.dataset_version_id != tenant.version_id:
                continue
            key = arm_key(job)
            if key not in tenant.configs or key not in models:
                continue
            if job.status is JobStatus.QUEUED:
                queued.add(key)
            elif (job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED) and key not in observed
                  and failure_code(state.store, job) is None):
                ok = job.status is JobStatus.SUCCEEDED and job.accuracy is not None
                selector.observe(name, key, job.accuracy if ok else 0.0, cost=job.cost_seconds)
                observed.add(key)
                pending.discard(key)
        for key in pending - queued:
            selector.cancel(name, key)
        for key in queued - pending - observed:  # launched after the last save: not picked a second time
            selector.hold(name, key)
