"""Which jobs start: queued jobs first, then new picks, while workers are free
and each owner is under the cap of ``k`` running jobs (ACAI §3.3; across
users, the order is ease.ml's selector, not FIFO) and within her budget
(``budget.BudgetGate``: no new picks over budget or past her deadline;
queued jobs, which had started before a restart, still go on), and, where
slots are kept for short jobs (``lanes.ShortLane``, off by default), one
user's long picks do not fill an engine. Where an engine has express slots,
a tenant's first short pick starts there while its own slots are full
(``Admission.pick_express``)."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Callable

from ...errors import StorageError
from ...jobspec import JobSpec, parse_job
from ...selection.baselines import policy_spec
from ...selection.selector import Pick
from ...store import Job, JobStatus
from .budget import BudgetGate, PickEpochs
from .costs import Costs
from .lanes import ShortLane
from .results import StorageHolds
from .state import LoopState, Running, Tenant, tenant_name

log = logging.getLogger(__package__)  # one logger for the whole loop


class Admission:
    """Starts jobs on their engine's executor and explains each launched pick."""

    def __init__(self, state: LoopState, holds: StorageHolds, *, on_done: Callable[[int], None],
                 on_decision: Callable[[dict], None], budget: BudgetGate | None = None,
                 epochs: PickEpochs | None = None, costs: Costs | None = None, lane: ShortLane | None = None):
        self.state, self.holds = state, holds
        self.lane = lane if lane is not None else ShortLane()
        self._long: set[int] = set()  # running jobs launched as long picks (see ShortLane)
        self.costs = costs  # None: launched jobs keep no predicted cost
        self.budget = budget if budget is not None else BudgetGate(state, gpu_pool=lambda: False)
        self.epochs = epochs if epochs is not None else PickEpochs(state, None)
        self.on_done = on_done  # called with the job id from the executor's thread
        self.on_decision = on_decision
        self.last_decision: dict | None = None  # the latest launched pick, explained (see decided)

    def start_queued(self) -> bool:
        """Queued jobs (re-queued after a restart) go first, FIFO per owner."""
        state = self.state
        started = False
        if state.free() <= 0 or not state.maybe_queued:
            return False
        per_owner = state.running_per_owner()
        queued = state.store.list_jobs(status=JobStatus.QUEUED)
        state.maybe_queued = bool(queued)
        for job in queued:
            if state.free() <= 0:
                break
            if job.id in state.running:
                continue
            tenant = tenant_name(job.task_id, job.dataset_version_id)
            info = state.tenants.get(tenant)
            if info is None:
                continue
            spec = parse_job(job.model, job.config)
            if per_owner[info.owner_id] >= state.cap or state.engine_full(spec.engine):
                continue
            self.launch(job, spec, tenant, info.owner_id)
            self._count_if_long(job.id, tenant, spec)
            per_owner[info.owner_id] += 1
            started = True
        return started

    def _count_if_long(self, job_id: int, tenant: str, spec: JobSpec) -> None:
        """Remember a launched job as long (``ShortLane``) at the selector's cost of its arm."""
        if not self.lane.active:
            return
        try:
            cost = self.state.selector.cost(tenant, spec.arm)
        except KeyError:  # an arm the selector no longer ranks (its tenant left): not counted
            return
        if self.lane.is_long(cost):
            self._long.add(job_id)

    def pick(self) -> bool:
        """Ask for exactly as many picks as there are free workers. A pick whose
        owner is at the cap, whose engine has no free slot, or whose tenant is
        on hold after a storage failure is held back (still pending, so the
        next ask in this turn yields another pair) and returned to the pool
        at the end. Every ask launches a pick or holds one, so asking until
        the workers are full or the rule has nothing left ends: a rule that
        keeps offering one tenant's models (``fifo``) reaches the next
        tenant once that one's are all held. True when a pick was launched
        (held picks alone change nothing worth saving)."""
        state = self.state
        selector = state.selector
        if state.free() <= 0 or not state.tenants:
            return False
        per_owner = state.running_per_owner()
        budget = self.budget
        budget.check()
        if all(per_owner[t.owner_id] >= state.cap or self.holds.on_hold(name) or budget.holds(t.owner_id)
               for name, t in state.tenants.items()):
            return False
        held: list[Pick] = []
        waiting = WaitingTasks(state)
        launched = False
        # Only the free slots of engines that some tenant has arms for can take a pick:
        # asking for more would only hold back picks (a flat task's models while a
        # torch slot is free), each ask scoring every tenant's arms.
        engines = {spec.engine for name, t in state.tenants.items()
                   if not (per_owner[t.owner_id] >= state.cap or self.holds.on_hold(name) or budget.holds(t.owner_id))
                   for spec in t.configs.values()}
        try:
            for _ in range(len(state.tenants) + sum(len(t.configs) for t in state.tenants.values())):
                free = min(state.free(), sum(state.free_slots(e) for e in engines))
                if free <= 0:
                    break
                picks = selector.next_picks(free)  # each pick carries its own explanation
                if not picks:
                    break
                for n, pick in enumerate(picks):
                    info = state.tenants[pick.user]
                    spec = info.configs[pick.model]
                    if (per_owner[info.owner_id] >= state.cap or state.engine_full(spec.engine)
                            or self.holds.on_hold(pick.user) or budget.holds(info.owner_id, spec.engine)
                            or not self._in_lane(pick, spec, info.owner_id)):
                        held.append(pick)
                        continue
                    try:
                        job, spec = self._create(info, spec)
                    except StorageError:
                        # Not launched: back to the pool. A pick left pending with no job
                        # would never be trained, and its task would look finished.
                        held.extend(picks[n:])
                        raise
                    self._start(pick, info, job, spec, waiting)
                    per_owner[info.owner_id] += 1
                    launched = True
        finally:
            for pick in held:
                selector.cancel(pick.user, pick.model)
        return launched

    def _create(self, info: Tenant, spec: JobSpec) -> tuple[Job, JobSpec]:
        """The pick's job in the store (QUEUED), with a torch pick's epochs as its task is now."""
        spec = self.epochs(info, spec)
        job = self.state.store.create_job(info.task_id, info.version_id, spec.model, spec.config())
        self.state.last_job_id = max(self.state.last_job_id, job.id)
        return job, spec

    def _start(self, pick: Pick, info: Tenant, job: Job, spec: JobSpec, waiting: "WaitingTasks | None",
               *, express: bool = False) -> None:
        self.predicted(job, spec, info)
        self.state.emit_job(job, info.owner_id)
        self.launch(job, spec, pick.user, info.owner_id, express=express)
        self._count_if_long(job.id, pick.user, spec)
        self.decided(pick, job, waiting, express=express)

    def pick_express(self) -> bool:
        """While an engine's own slots are all taken, a tenant's first pick
        (no result on its data version, nothing of it running), predicted
        short (``ShortLane.is_long`` says no, at the selector's cost
        estimate), starts at once on one of the engine's express slots
        (``LoopState.express``). A newcomer whose models take a second then
        has her first result within about that second, not after someone
        else's long job ends: what each user running her own optimizer in
        her own process gets, at the price of processes beyond the engine's
        slots. The rule still chooses: the loop takes its next picks while
        they are first picks, and starts those that fit an express slot; the
        first pick that is not a first pick ends the search (the default
        rule serves every newcomer before anyone else, so none is left
        behind it; under other rules one may be, and waits for a worker).
        The picks not started go back to the pool. True when one started."""
        state = self.state
        self._warm_express()
        selector = state.selector
        if selector is None or not state.tenants or not self._express_free():
            return False
        per_owner = state.running_per_owner()
        held: list[Pick] = []
        launched = False
        try:
            for _ in range(len(state.tenants)):
                picks = selector.next_picks(1)
                if not picks:
                    break
                pick = picks[0]
                info = state.tenants[pick.user]
                spec = info.configs[pick.model]
                if not self._first_pick(pick):
                    held.append(pick)
                    break
                if not self._express_admits(pick, spec, info.owner_id, per_owner):
                    held.append(pick)  # pending meanwhile, so the next ask offers another tenant's
                    continue
                try:
                    job, spec = self._create(info, spec)
                except StorageError:
                    held.append(pick)
                    raise
                self._start(pick, info, job, spec, None, express=True)
                per_owner[info.owner_id] += 1
                launched = True
                if not self._express_free():
                    break
        finally:
            for pick in held:
                selector.cancel(pick.user, pick.model)
        return launched

    def _warm_express(self) -> None:
        """Start the express workers of each engine whose own slots are all
        taken: only then can they be used, and the first newcomer to need
        one should not wait for its process to start."""
        for engine, executor in self.state.express.items():
            if self.state.engine_full(engine):
                executor.warm()

    def _express_free(self) -> bool:
        """Whether an engine with every own slot taken has a free express slot."""
        return any(self.state.free_express(e) > 0 and self.state.engine_full(e) for e in self.state.express)

    def _first_pick(self, pick: Pick) -> bool:
        """Whether the pick is its tenant's first: no result, and nothing else of it running."""
        state = self.state
        return (not any(r.tenant == pick.user for r in state.running.values())
                and state.selector.stats(pick.user)["n_obs"] == 0)

    def _express_admits(self, pick: Pick, spec: JobSpec, owner_id: int, per_owner) -> bool:
        """Whether a first pick may start on an express slot of its engine now."""
        state = self.state
        if not (state.free_express(spec.engine) > 0 and state.engine_full(spec.engine)):
            return False
        if per_owner[owner_id] >= state.cap or self.holds.on_hold(pick.user) or self.budget.holds(owner_id, spec.engine):
            return False
        return not self.lane.is_long(state.selector.cost(pick.user, pick.model))

    def _in_lane(self, pick: Pick, spec: JobSpec, owner_id: int) -> bool:
        """Whether the pick may start beside its owner's long jobs running on
        its engine (``ShortLane.admits``, at the selector's cost estimate)."""
        if not self.lane.active:
            return True
        state = self.state
        self._long &= state.running.keys()  # finished jobs leave the count
        executor = state.executors.get(spec.engine)
        long_running = sum(state.running[j].engine is spec.engine and state.running[j].owner_id == owner_id
                           for j in self._long)
        return self.lane.admits(state.selector.cost(pick.user, pick.model),
                                executor.workers if executor is not None else 0, long_running)

    def predicted(self, job: Job, spec: JobSpec, info: Tenant) -> None:
        """Keep with the new job what it is predicted to cost
        (``Costs.record_launch``); the job goes on without it if that fails."""
        if self.costs is None:
            return
        try:
            task, n = info.facts(self.state.store)
            self.costs.record_launch(job, task, spec, n)
        except Exception:  # noqa: BLE001 - a missing prediction must never hold back a pick
            log.warning("could not record the predicted cost of job %d", job.id, exc_info=True)

    def launch(self, job: Job, spec: JobSpec, tenant: str, owner_id: int, *, express: bool = False) -> None:
        """Hand the job to the executor of its engine kind (its express slots' with ``express``)."""
        state = self.state
        engine = spec.engine
        state.running[job.id] = Running(job.id, tenant, spec.arm, owner_id, job.task_id, engine, express)
        state.publish(owner_id, {"type": "job", "task_id": job.task_id, "job_id": job.id, "status": "running",
                                 "model": job.model, "config": dict(job.config)})
        future: Future = (state.express if express else state.executors)[engine].submit(job.id)
        future.add_done_callback(lambda _f, job_id=job.id: self.on_done(job_id))

    def decided(self, pick: Pick, job: Job, waiting: "WaitingTasks | None" = None, *, express: bool = False) -> None:
        """Keep and announce the explanation of a launched pick: the pick's
        own (``Pick.explain``, tenants by name) plus the task, owner and job,
        the selector's rule and model chooser, and the other tasks left
        waiting with models to try, which the scheduler view puts into words
        for each viewer."""
        state = self.state
        tenants = state.tenants
        selector = state.selector
        info = tenants[pick.user]
        why = pick.explain()
        candidates = why["candidates"]
        waiting = waiting if waiting is not None else WaitingTasks(state)
        why.update(tenant=pick.user, express=express, mode=selector.mode, rule=selector.policy, chooser=policy_spec(selector.policy)[1],
                   waiting=waiting.besides(pick.user), task_id=info.task_id, owner_id=info.owner_id,
                   job_id=job.id, time=time.time(), candidates=None if candidates is None else [
                       {"tenant": name, "task_id": tenants[name].task_id,
                        "owner_id": tenants[name].owner_id, "gap": float(gap)}
                       for name, gap in candidates.items() if name in tenants])
        self.last_decision = why
        try:
            self.on_decision(why)
        except Exception:  # noqa: BLE001 - a view must never stop the loop
            log.exception("publishing a decision failed")


class WaitingTasks:
    """The tasks left waiting beside a turn's picks: those with models left to
    try when the turn's first pick was launched (read once per turn: asking
    the selector about every tenant costs about 40 us each), less the tasks
    the turn served."""

    def __init__(self, state: LoopState):
        self.state = state
        self._eligible: list[str] | None = None
        self._served: set[str] = set()

    def besides(self, served: str) -> list[dict]:
        """The waiting tasks as ``{"task_id", "owner_id"}``, once ``served`` got its pick."""
        tenants, selector = self.state.tenants, self.state.selector
        if self._eligible is None:
            self._eligible = [name for name in tenants if selector.stats(name)["eligible"]]
        self._served.add(served)
        return [{"task_id": tenants[name].task_id, "owner_id": tenants[name].owner_id}
                for name in self._eligible if name not in self._served and name in tenants]
