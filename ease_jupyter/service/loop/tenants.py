"""Tenant sync: the selector's tenants follow the store. A tenant is a (task,
dataset version) pair whose arms are the task's candidate models (ease.ml
pvldb §3); a new feed or refine replaces it (results on the old version are
stale and no longer reported), a cancelled task loses it, and a new tenant
is told the results that already exist for its version. A user's own models
(``user_models.py``) are arms of her tenants only (``Selector.add_user``'s
``own``); one added while a tenant trains joins it (``Selector.add_models``).
An own arm costs the profiler's prediction once it has a record of her
model's family; before that the median of the task's other arms until it
has run on the task, then its last measured seconds (``Costs.arm_costs``)."""

from __future__ import annotations

import logging
from typing import Iterable

from ...errors import InvalidStateError, NotFoundError
from ...store import DatasetVersion, Job, JobStatus, Task
from ..failures import failure_code
from .costs import Costs
from .outage import STORE_OUTAGES
from .state import LoopState, Tenant, arm_key, measured_quality, tenant_name
from .views import IdleView

log = logging.getLogger(__package__)  # one logger for the whole loop


class TenantSync:
    def __init__(self, state: LoopState, costs: Costs, view: IdleView):
        self.state, self.costs, self.view = state, costs, view
        self.added: list[str] = []  # the tenants the last sync added
        self._failing: dict[int, int] = {}  # task id -> turns in a row its sync failed

    def sync(self) -> bool:
        """Bring the tenants of the tasks notified since the last turn in line
        with the store; True when a tenant came or went."""
        changed = False
        self.added = []
        for task_id in sorted(self.view.take_dirty()):
            try:
                changed |= self._sync_task(task_id)
            except STORE_OUTAGES:  # the turn fails; view.retake brings back every task it took
                raise
            except Exception:  # noqa: BLE001 - one task's failure must not keep every other task from its turn
                failures = self._failing[task_id] = self._failing.get(task_id, 0) + 1
                if failures & (failures - 1) == 0:  # the 1st, 2nd, 4th, ... time in a row
                    log.exception("could not take in task %d (%d time(s) in a row); tried again next turn",
                                  task_id, failures)
                self.view.mark((task_id,))
                changed = True
            else:
                self._failing.pop(task_id, None)
        return changed

    def _sync_task(self, task_id: int) -> bool:
        """Bring one task's tenant in line with the store; True when a tenant came or went."""
        state = self.state
        selector = state.selector
        changed = False
        try:
            task = state.store.get_task(task_id)
        except NotFoundError:
            return changed
        latest = None if task.cancelled else state.store.latest_dataset_version(task_id)
        wanted = None if latest is None else tenant_name(task_id, latest.id)
        stale = [n for n, t in state.tenants.items() if t.task_id == task_id and n != wanted]
        try:  # the new version's tenant takes the place of the previous one's, which leaves after
            return self._take_in(task, latest, wanted, succeeds=stale[-1] if stale else None)
        finally:
            for name in stale:
                selector.remove_user(name)
                del state.tenants[name]

    def _take_in(self, task: Task, latest: DatasetVersion | None, wanted: str | None, *,
                 succeeds: str | None) -> bool:
        """Make ``wanted`` the tenant of the task's latest version, unless it
        is one already; True when a tenant came (or the task's previous
        tenant, ``succeeds``, is to go). A task fed again is no newcomer to
        the selector: its new tenant succeeds the previous one
        (``Selector.add_user(succeeds=...)``), keeping its place in the turns."""
        state = self.state
        selector = state.selector
        task_id = task.id
        changed = succeeds is not None
        new_tenant = wanted is not None and wanted not in state.tenants
        # One read of the task's jobs serves both the cancelling and the
        # replay, and a feed of a task with nothing queued needs neither.
        jobs = state.store.list_jobs(task_id) if new_tenant or self._may_have_queued(task_id) else ()
        self._cancel_queued(task, jobs, keep_version=None if latest is None else latest.id)
        configs = self.costs.configs(task)  # made again after a user model was added (Costs.forget)
        if not new_tenant:
            if wanted is not None:
                changed |= self._add_own(wanted, task, configs, latest.n_examples)
            return changed
        known = set(selector.model_names)
        arms = [k for k in configs if k in known]
        own = [k for k in configs if k not in known and configs[k].is_user_model]
        if not arms and not own:
            log.warning("task %d has no candidates in the selector's catalogue", task_id)
            return changed
        costs = self._arm_costs(task, configs, arms, own, latest.n_examples)
        selector.add_user(wanted, models=arms, costs=costs, own=own, succeeds=succeeds)
        state.tenants[wanted] = Tenant(task_id, task.owner_id, latest.id, configs, task=task,
                                       n_examples=latest.n_examples)
        self._replay(wanted, jobs, latest.id, set(arms) | set(own))
        self.added.append(wanted)
        changed = True
        return changed

    def _arm_costs(self, task: Task, configs: dict, arms: list[str], own: list[str], n: int) -> dict[str, float]:
        return self.costs.arm_costs(task, configs, [*arms, *own], n)

    def _add_own(self, tenant: str, task: Task, configs: dict, n: int) -> bool:
        """User models added to a task whose tenant exists already join it.
        The tenant keeps the arms it has (the selector never drops an arm)
        even where ``configs`` lacks one (a model removed since): the
        tenant's configs are its own merged with ``configs``, newer first."""
        state = self.state
        info = state.tenants[tenant]
        new = [k for k in configs if k not in info.configs and configs[k].is_user_model]
        if not new:
            return False
        merged = {**info.configs, **configs}
        state.selector.add_models(tenant, new, self.costs.arm_costs(task, merged, [*info.configs, *new], n))
        info.configs = merged
        return True

    def _replay(self, tenant: str, jobs: Iterable[Job], version_id: int, arms: set[str]) -> None:
        """Report results that already exist for this version (a resumed task,
        or a restart without a saved state), so no config is trained twice;
        and hold as pending the arms of its jobs that are queued or still
        running here (their results come through ``Results.collect``). The
        latest result of each model on an earlier version of the task is
        evidence (``Selector.inherit``), as a predecessor's results are."""
        seen: set[str] = set()
        earlier: dict[str, float] = {}
        running_here = {run.job_id for run in self.state.running.values()}
        for job in jobs:
            if job.dataset_version_id != version_id:
                quality = measured_quality(job)
                if quality is not None:
                    earlier[arm_key(job)] = quality  # (jobs in id order: the latest wins)
                continue
            key = arm_key(job)
            if key in arms and (job.status is JobStatus.QUEUED or job.id in running_here):
                self.state.selector.hold(tenant, key)
                continue
            if job.status not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
                continue
            if key in arms and key not in seen and failure_code(self.state.store, job) is None:
                ok = job.status is JobStatus.SUCCEEDED and job.accuracy is not None
                self.state.selector.observe(tenant, key, job.accuracy if ok else 0.0, cost=job.cost_seconds)
                seen.add(key)
        for key, quality in earlier.items():
            if key in arms:
                self.state.selector.inherit(tenant, key, quality)

    def _may_have_queued(self, task_id: int) -> bool:
        """Whether a job of the task may be QUEUED: one launched and not
        started yet, or one re-queued (``LoopState.maybe_queued``)."""
        return self.state.maybe_queued or any(r.task_id == task_id for r in self.state.running.values())

    def _cancel_queued(self, task: Task, jobs: Iterable[Job], keep_version: int | None) -> None:
        """Cancel the task's queued ``jobs`` (its jobs, as read this turn) of other versions than ``keep_version``."""
        for job in jobs:
            if job.status is JobStatus.QUEUED and job.dataset_version_id != keep_version:
                try:
                    job = self.state.store.update_job(job.id, JobStatus.CANCELLED)
                except InvalidStateError:
                    continue
                self.state.emit_job(job, task.owner_id)
