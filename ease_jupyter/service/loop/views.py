"""What readers see of the loop. Each task's idleness is published at the end
of a turn (``IdleView``) and read without the loop's lock, so a read never
waits for a turn; the other views are taken under the loop's lock."""

from __future__ import annotations

import threading

from ...errors import NotFoundError
from ...schema import parse
from ...store import JobStatus, Task
from ...zoo import Engine, candidates
from .state import LoopState


class IdleView:
    """Per task, idle or not as of the end of the last turn. Tasks notified
    since then ("settling") are never idle; a notified task is "dirty" until a
    turn's tenant sync takes it, and "synced" until that turn ends."""

    def __init__(self):
        self._lock = threading.Lock()
        self._dirty: set[int] = set()
        self._settling: set[int] = set()
        self._synced: set[int] = set()  # only the loop's thread writes it
        self._idle: dict[int, bool] = {}

    def mark(self, task_ids) -> None:
        """These tasks changed: not idle until a turn has looked at them."""
        with self._lock:
            self._dirty.update(task_ids)
            self._settling.update(task_ids)

    def take_dirty(self) -> set[int]:
        """The tasks to bring in line this turn."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        self._synced |= dirty
        return dirty

    def retake(self) -> None:
        """After a turn cut short: the tasks it took may not be in line; look again."""
        with self._lock:
            self._dirty |= self._synced

    def is_idle(self, task_id: int) -> bool:
        with self._lock:
            if task_id in self._settling:
                return False
            return self._idle.get(task_id, True)

    def publish(self, state: LoopState) -> list[tuple[int, int]]:
        """At the end of a turn: each task's idleness. Returns the (task, owner)
        pairs that just became idle; the caller announces them as ``task``
        events with status ``idle`` (``Task.wait`` wakes on them)."""
        busy = {r.task_id for r in state.running.values()}
        if state.maybe_queued:
            busy |= {j.task_id for j in state.store.list_jobs(status=JobStatus.QUEUED)}
        idle: dict[int, bool] = {task_id: False for task_id in busy}
        owners: dict[int, int] = {r.task_id: r.owner_id for r in state.running.values()}
        for name, t in state.tenants.items():
            owners[t.task_id] = t.owner_id
            if t.task_id not in busy:
                stats = state.selector.stats(name)
                # A pick still pending has not been trained yet, even with no job behind it.
                idle[t.task_id] = not stats["eligible"] and not stats["pending"]
        with self._lock:
            before, settled = self._idle, self._synced - self._dirty
            was_settling = self._settling & settled
            self._idle = idle
            self._settling -= settled
            self._synced = set()
        changed = {task_id for task_id, now in idle.items()
                   if now and (not before.get(task_id, True) or task_id in was_settling)}
        changed |= {task_id for task_id in was_settling if task_id not in idle}  # no tenant: idle at once
        # Busy last turn, and now neither busy nor a tenant: its last job ended after its tenant left
        # (cancelled, or all its versions gone while a job ran), so no other rule would announce it.
        changed |= {task_id for task_id, was in before.items() if not was and task_id not in idle}
        out = []
        for task_id in sorted(changed):
            owner = owners.get(task_id)
            if owner is None:
                try:
                    owner = state.store.get_task(task_id).owner_id
                except NotFoundError:
                    continue
            out.append((task_id, owner))
        return out


def no_candidates_reason(task: Task, executors) -> str:
    """Why no model of the service's catalogue fits the task, for people."""
    try:
        fitting = candidates(parse(task.program))
    except Exception as error:  # noqa: BLE001 - the zoo explains why nothing fits
        return f"no candidate model fits this program: {error}"
    if any(c.engine is Engine.TORCH for c in fitting) and Engine.TORCH not in executors:
        return "its candidate models are torch networks, and this service trains without torch"
    return "none of the models that fit this program is in the service's catalogue"


def task_status(task: Task, *, idle: bool, candidates: int, has_data: bool, blocked: str | None,
                outage: BaseException | None, executors) -> dict:
    """``idle``, ``candidates``, ``blocked`` (why the loop cannot go on with
    the task's work, or None), ``status`` (cancelled, no_candidates, no_data,
    blocked, training or idle) and ``reason``, a sentence for people."""
    blocked = None if idle else blocked
    if task.cancelled:
        status, reason = "cancelled", "the task is cancelled; resume it to train again"
    elif candidates == 0:
        status, reason = "no_candidates", no_candidates_reason(task, executors)
    elif not has_data:
        status, reason = "no_data", "no examples yet: feed some to start training"
    elif blocked is not None:
        status, reason = "blocked", (f"training is paused: {outage}; it goes on by itself once the "
                                     "service can write its store again")
    elif idle:
        status, reason = "idle", "every candidate model has been trained on the latest version"
    else:
        status, reason = "training", "candidate models are being trained on the latest version"
    return {"idle": idle, "candidates": candidates, "blocked": blocked, "status": status, "reason": reason}


def scheduler_state(state: LoopState, last_decision: dict | None) -> dict:
    """What the scheduler view needs: policy, mode, the last launched
    decision, and per tenant (task, latest version) her best observed quality
    and the highest posterior mean of her arms. Taken under the loop's lock."""
    selector = state.selector
    tenants = {}
    for name, t in state.tenants.items():
        best = selector.best(name)
        posterior = selector.posterior(name)
        tenants[name] = {"task_id": t.task_id, "owner_id": t.owner_id, "version_id": t.version_id,
                         "best": None if best is None else best[1],
                         "max_mean": max((m for m, _ in posterior.values()), default=None)}
    return {
        "policy": selector.policy if selector else None,
        "mode": selector.mode if selector else None,
        "last_decision": None if last_decision is None else dict(last_decision),
        "tenants": tenants,
        "running": [{"job_id": r.job_id, "task_id": r.task_id, "owner_id": r.owner_id}
                    for r in state.running.values()],
    }


def progress(state: LoopState, *, n_observed: int, error: BaseException | None, store: dict,
             prior: dict | None = None) -> dict:
    """``GET /admin/progress``'s ``loop``. Taken under the loop's lock."""
    per_owner = state.running_per_owner()
    selector = state.selector
    return {
        "workers": state.workers,
        "running": len(state.running),
        "running_per_user": {str(k): v for k, v in per_owner.items()},
        "tenants": len(state.tenants),
        "observations": n_observed,  # reported by this process since it started
        # what the (restored) selector holds: survives a restart
        "selector_observations": {name: int(selector.stats(name)["n_obs"]) for name in state.tenants},
        "mode": selector.mode if selector else None,
        "prior": prior,  # where the selector's GP prior comes from (``prior.PriorRefits.describe``)
        "error": None if error is None else repr(error),
        "store": store,
    }
