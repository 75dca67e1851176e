"""The loop's side of the users' budgets (``service.budget``) and of each
task's epochs (``service.task_epochs``): which owners may get new picks this
turn, telling those who may not, and the epochs a torch pick trains."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone

from ...errors import NotFoundError
from ...jobspec import JobSpec, TorchWorkload
from ...store import Job
from ...zoo import Engine
from .. import budget as budgets
from ..task_epochs import pick_epochs, task_max_epochs, with_epochs
from .state import LoopState, Tenant

log = logging.getLogger(__package__)  # one logger for the whole loop


class BudgetGate:
    """Owners over budget or past their deadline, as of the last check.

    ``blocked`` (owner id -> the reason, a sentence) is replaced whole by
    each check, so the HTTP threads read it without the loop's lock.
    ``changed(owner)`` (any thread) makes the next check re-read her limits;
    they are cached otherwise, and her spent seconds are summed only while
    she has a limit on them.
    """

    def __init__(self, state: LoopState, *, gpu_pool: Callable[[], bool],
                 price: Callable[[Job, float], float] | None = None):
        self.state = state
        self.gpu_pool = gpu_pool
        self.price = price  # a job's cost (summed only for owners with a cost limit)
        self.blocked: dict[int, str] = {}
        self.spent: dict[int, budgets.Spent] = {}  # owner -> what she spent, as of the last check (limited owners)
        self.gpu_only: frozenset[int] = frozenset()  # owners blocked only for torch picks (a GPU budget spent)
        self._limits: dict[int, tuple[budgets.Limits, budgets.Limits]] = {}  # owner -> (applied, admin's cap)
        self._stale: set[int] = set()

    def changed(self, owner_id: int) -> None:
        self._stale.add(owner_id)

    def _limits_of(self, owner_id: int) -> tuple[budgets.Limits, budgets.Limits]:
        if owner_id in self._stale:
            self._stale.discard(owner_id)
            self._limits.pop(owner_id, None)
        found = self._limits.get(owner_id)
        if found is None:
            store = self.state.store
            cap = budgets.read_limits(store, owner_id, budgets.CAP_PREFIX)
            found = budgets.read_limits(store, owner_id, budgets.OWN_PREFIX).within(cap), cap
            self._limits[owner_id] = found
        return found

    def check(self) -> dict[int, str]:
        """Re-check the owners of the current tenants (once per turn that may
        pick); tell those whose state changed. Returns ``blocked``."""
        state = self.state
        now = datetime.now(timezone.utc)
        gpu_pool = self.gpu_pool()
        blocked: dict[int, str] = {}
        gpu_only: set[int] = set()
        spent: dict[int, budgets.Spent] = {}
        for owner in sorted({t.owner_id for t in state.tenants.values()}):
            try:
                limits, cap = self._limits_of(owner)
            except NotFoundError:
                continue
            if limits.empty:
                continue
            used = budgets.Spent()
            if limits.seconds is not None or limits.gpu_seconds is not None or limits.cost is not None:
                used = budgets.user_spent(state.store, owner, gpu_pool=gpu_pool, now=now,
                                          price=self.price if limits.cost is not None else None)
                spent[owner] = used
            reason = budgets.blocked_reason(limits, used, cap=cap, gpu_pool=gpu_pool, now=now)
            if reason is not None:
                blocked[owner] = reason
                if budgets.blocked_reason(limits, used, cap=cap, gpu_pool=False, now=now) is None:
                    gpu_only.add(owner)
        before, self.blocked, self.gpu_only, self.spent = self.blocked, blocked, frozenset(gpu_only), spent
        for owner in sorted(blocked.keys() - before.keys()):
            log.info("user %d gets no new picks: %s", owner, blocked[owner])
            self._tell(owner, blocked[owner])
        for owner in sorted(before.keys() - blocked.keys()):
            self._tell(owner, None)
        return blocked

    def limits(self, owner_id: int) -> tuple[budgets.Limits, budgets.Spent]:
        """Her limits that apply and what she spent, as of the last check
        (the auto-provisioner's constraints)."""
        try:
            limits, _ = self._limits_of(owner_id)
        except NotFoundError:
            return budgets.Limits(), budgets.Spent()
        return limits, self.spent.get(owner_id, budgets.Spent())

    def holds(self, owner_id: int, engine: Engine | None = None) -> bool:
        """Whether a pick of ``engine`` (None: any pick) of the owner is held
        back, as of the last check."""
        if owner_id not in self.blocked:
            return False
        return owner_id not in self.gpu_only or engine is Engine.TORCH

    def _tell(self, owner: int, reason: str | None) -> None:
        """A ``budget`` event, and a ``task`` event per task of hers the loop
        serves (``Task.wait`` re-reads its status on it)."""
        state = self.state
        state.publish(owner, {"type": "budget", "blocked": reason is not None, "reason": reason})
        if reason is None:
            return
        for task_id in sorted({t.task_id for t in state.tenants.values() if t.owner_id == owner}):
            state.publish(owner, {"type": "task", "task_id": task_id, "status": "over_budget", "reason": reason})


class PickEpochs:
    """The epochs of a torch pick (``task_epochs.pick_epochs``), resolved
    when the pick is launched: the task's setting and its latest version's
    size as they are then."""

    def __init__(self, state: LoopState, service_default: int | None):
        self.state = state
        self.service_default = service_default

    def __call__(self, tenant: Tenant, spec: JobSpec) -> JobSpec:
        if not isinstance(spec, TorchWorkload):
            return spec
        store = self.state.store
        _, n = tenant.facts(store)
        return with_epochs(spec, pick_epochs(task_max_epochs(store, tenant.task_id), self.service_default, n))
