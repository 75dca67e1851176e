"""``ControlLoop``: the one thread that owns time (ease.ml §5; ACAI §3.3), and
the order of a turn. The parts of a turn are collaborators sharing one
``LoopState`` under the loop's lock; see the package docstring."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from ...errors import DataError, NotFoundError, StorageError
from ...jobspec import DEFAULT_EPOCHS
from ...selection import DEFAULT_POLICY
from ...selection.provisioner import DEFAULT_PRICES, Prices
from ...selection.selector import Selector
from ...store import BlobStore, Store, Task
from ...zoo import Engine
from ..executors import JobExecutor
from ..profile_view import profiler_families
from ..profiling import ProfileBook
from ..runner import one_blas_thread
from . import views
from .admission import Admission
from .budget import BudgetGate, PickEpochs
from .costs import Costs, ProfileRefits, catalogue
from .forget import forget_task
from .lanes import ShortLane
from .outage import STORE_OUTAGES, StoreOutage, backoff_seconds
from .prior import PriorRefits
from .provision import PickProvisioner, Pools
from .recovery import SavedState, recover
from .results import Results, StorageHolds
from .state import LoopState, Tenant
from .tenants import TenantSync
from .views import IdleView

log = logging.getLogger(__package__)  # one logger for the whole loop


class ControlLoop:
    """Drives the selector and the executors, one turn at a time on its own
    thread (``start``/``stop``); ``notify`` wakes it when a task changes. The
    read views (``is_idle``, ``task_status``, ``scheduler_state``,
    ``progress``) serve the HTTP handlers' threads."""

    def __init__(self, store: Store, blobs: BlobStore, *, executors: dict[Engine, JobExecutor],
                 max_running_per_user: int = 2, publish: Callable[[int, dict], None] | None = None,
                 tick_seconds: float = 0.5, seed: int | None = 0, save_every_seconds: float = 0.0,
                 torch_epochs: int | None = None, on_decision: Callable[[dict], None] | None = None,
                 policy: str = DEFAULT_POLICY, cross_user_prior: bool = True, prices: Prices = DEFAULT_PRICES,
                 pools: Pools | None = None, lane: ShortLane | None = None,
                 express: dict[Engine, JobExecutor] | None = None):
        self.store, self.blobs, self.executors = store, blobs, executors
        self.publish = publish or (lambda owner, event: None)
        self.tick = tick_seconds
        self.seed = seed
        self.policy = policy
        self.error: BaseException | None = None  # the last turn's unexpected failure (/admin/progress)
        self.state = LoopState(store, blobs, executors, self.publish, int(max_running_per_user),
                               express=dict(express or {}))
        # The arms' cost estimates assume DEFAULT_EPOCHS where epochs follow the data size;
        # a pick's own epochs are set when it is launched (PickEpochs), and measured jobs correct the estimates.
        self.torch_epochs = None if torch_epochs is None else int(torch_epochs)
        # Arms cost the profiler's predictions (ACAI §3.3.2), refitted as jobs finish; the FLOPs proxy before any data.
        self.profile = ProfileBook(store)
        self.profile_refits = ProfileRefits(store, self.profile)
        self.costs = Costs(store, torch_epochs=(self.torch_epochs or DEFAULT_EPOCHS) if Engine.TORCH in executors
                           else None, service_epochs=self.torch_epochs, profile=self.profile)
        # Each pick's resources: the auto-provisioner's choice (ACAI §4.2.4), priced at ``prices``.
        self.provisioner = PickProvisioner(
            store, self.profile, flops=lambda task, spec, n, res: self.costs.flops_seconds(task, spec, n, res),
            pools=pools, prices=prices, gpu_pool=lambda: self.gpu_pool,
            owners=lambda: self.state.tenants.owners(),
            limits=lambda owner: self.budget.limits(owner),
            running=lambda owner: [r.job_id for r in list(self.state.running.values()) if r.owner_id == owner])
        self.costs.provisioner = self.provisioner
        self.profile_refits.record_cost = self.provisioner.record_cost
        self.view = IdleView()
        self.saved = SavedState(self.state, save_every_seconds)
        self.holds = StorageHolds()
        self.results = Results(self.state, self.costs, self.holds)
        self.tenant_sync = TenantSync(self.state, self.costs, self.view)
        self.budget = BudgetGate(self.state, gpu_pool=lambda: self.gpu_pool, price=self.provisioner.job_cost)
        self.admission = Admission(self.state, self.holds, on_done=self._finished,
                                   on_decision=on_decision or (lambda decision: None), budget=self.budget,
                                   epochs=PickEpochs(self.state, self.torch_epochs), costs=self.costs, lane=lane)
        self.store_health = StoreOutage()
        self._lock = threading.RLock()  # one turn at a time; the views below take it too
        self._wake = threading.Event()
        keys, descriptors = catalogue()
        self.priors = PriorRefits(store, keys, descriptors, torch_epochs=self.costs.torch_epochs, seed=seed,
                                  wake=self._wake.set, cross_user=cross_user_prior)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ life cycle
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
        for executor in [*self.executors.values(), *self.state.express.values()]:
            executor.shutdown()
        self.priors.join(timeout=30)  # a refit reading the store must be done before the store closes
        with self._lock, one_blas_thread():
            if self.selector is not None:
                try:
                    self.results.collect()  # jobs that finished while the executors drained
                    self.profile_refits.collect(refit=False)  # their errors against their predictions
                    self._save_state()
                except StorageError as error:  # a restart reconciles the state with the jobs in the store
                    log.warning("could not record the last results at stop: %s", error)

    def recover(self) -> None:
        """Re-queue jobs left RUNNING and restore the selector state (``recovery``)."""
        with self._lock:
            self.view.mark(recover(self.state, self.saved, self.costs, self.priors, seed=self.seed,
                                   policy=self.policy))
        self._wake.set()

    def use_speeds(self, speeds: Any) -> None:
        """Price arms at the measured device speeds (``device_speed.PoolSpeeds``)
        from now on, the tenants already registered included: a GPU pool
        makes torch arms cheaper in GP-UCB's ``c_k`` (pvldb §4.1)."""
        with self._lock:
            self.costs.use_speeds(speeds)
            self.provisioner.forget()
            self._reprice()
        self._wake.set()

    def _reprice(self) -> bool:
        """Give every tenant's arms, her own models' too, their current cost
        (``Costs.arm_costs``): after the devices were measured or the profiler was refitted."""
        selector = self.selector
        if selector is None:
            return False
        known = set(selector.model_names)
        for name, tenant in self.state.tenants.items():
            try:
                task, n = tenant.facts(self.store)
            except NotFoundError:
                continue
            arms = [k for k in tenant.configs if k in known or tenant.configs[k].is_user_model]
            costs = self.costs.arm_costs(task, tenant.configs, arms, n)
            try:
                selector.set_costs(name, costs)
            except KeyError:  # an own arm the selector has not taken in (added just before a restart)
                selector.set_costs(name, {k: c for k, c in costs.items() if k in known})
        return True

    def notify(self, task_id: int | None = None) -> None:
        """A task changed (created, fed, refined, cancelled): look at it next turn.
        Never waits for a turn in progress."""
        if task_id is not None:
            self.view.mark((task_id,))
        self._wake.set()

    def models_changed(self, task_id: int) -> None:
        """A user model was added to the task: make its arms again, and take it in next turn."""
        self.costs.forget(task_id)
        self.notify(task_id)

    def budget_changed(self, owner_id: int) -> None:
        """A user's budget (or an admin's cap of it) changed: re-read it next turn, now."""
        self.budget.changed(owner_id)
        self._wake.set()

    @property
    def gpu_pool(self) -> bool:
        """Whether torch picks train on GPU workers (the pool's speeds were
        measured, which happens only where it has some): their seconds are GPU-seconds."""
        return self.costs.speeds is not None

    def forget_task(self, task_id: int, name: str, remove: Callable[[], Any], *, wait_seconds: float) -> Any:
        """A task is being deleted: ``remove()`` once its jobs ended (``forget.forget_task``)."""
        return forget_task(self, task_id, name, remove, wait_seconds=wait_seconds)

    def _finished(self, job_id: int) -> None:
        """An executor finished a job (its thread): collect it next turn, now."""
        self.results.finished(job_id)
        self.profile_refits.finished(job_id)
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
                self.store_health.failed(error)
            except Exception as error:  # noqa: BLE001 - keep serving; surfaced in /admin/progress
                log.exception("control loop turn failed")
                self.error = error
            else:
                failed_turns = 0
                self.store_health.recovered()
            self._wake.wait(backoff_seconds(self.tick, failed_turns))
            self._wake.clear()

    def _check_store(self) -> None:
        self.store_health.check(self.store)

    # ------------------------------------------------------------ one turn
    def step(self) -> None:
        """One turn: (1) collect finished jobs and report them to the selector,
        (2) bring the tenants in line with the store, (3) start queued jobs,
        (4) launch as many new picks as there are free workers; then publish
        the idle view and, when due, save the selector state."""
        snapshot = None
        with self._lock, one_blas_thread():
            self.provisioner.forget()  # owners' spending and the tenants changed since the last turn
            try:
                changed = self.results.collect()
                if self.profile_refits.collect():  # the profiler learned: the arms' costs changed
                    self.provisioner.forget()
                    changed |= self._reprice()
                changed |= self.tenant_sync.sync()
                changed |= self._update_prior()
                changed |= self.admission.start_queued()
                changed |= self.admission.pick()
                changed |= self.admission.pick_express()
            except BaseException as error:
                self.saved.unsaved = True  # it may have launched picks: the next turn that ends saves them
                if isinstance(error, StorageError):
                    self._resume_later()
                raise
            newly_idle = self.view.publish(self.state)
            if self.saved.due(changed):  # after the publish, which may fail: a snapshot taken marks all saved
                snapshot = self.saved.snapshot()
            self.priors.finished(task_id for task_id, _ in newly_idle)  # every few: a refit in the background
        for task_id, owner_id in newly_idle:
            self.publish(owner_id, {"type": "task", "task_id": task_id, "status": "idle"})
        if snapshot is not None:  # the blob write (with fsync) and tag need no lock: readers don't wait on them
            try:
                self._write_state(*snapshot)
            except NotFoundError:  # its job went with a task deleted meanwhile: the next turn saves it
                log.info("the selector state's job %d was deleted before its save; saving it next turn", snapshot[0])
                self.saved.holder_lost()
            except StorageError:
                self.saved.unsaved = True  # saved by a later turn
                raise

    def _update_prior(self) -> bool:
        """Swap in the prior a background refit made, if any, and leave out of
        the prior every task of its fit set that has work again (a new
        version, or resumed), before that task's first pick: a task never
        informs its own prior (``prior.py``). True when the prior changed."""
        priors, tenants, selector = self.priors, self.state.tenants, self.selector
        ready = priors.take()
        prior = ready or priors.current
        fit_set = prior.task_ids
        names = tenants if ready is not None else self.tenant_sync.added
        back = set()
        for name in names:
            tenant = tenants.get(name)
            if tenant is not None and tenant.task_id in fit_set:
                stats = selector.stats(name)
                if stats["eligible"] or stats["pending"]:
                    back.add(tenant.task_id)
        if ready is None and not back:
            return False
        if back:
            prior = priors.without(prior, back)
        priors.current = prior
        selector.set_prior(prior.prior)
        log.info("selector prior now %s, from %d finished tasks", prior.source, len(prior.history.task_ids))
        return True

    def _resume_later(self) -> None:
        """After a turn cut short by the store: keep what it had not recorded
        yet for the next turn, so an outage loses nothing (the picks it had not
        launched went back to the selector in ``Admission.pick``)."""
        self.results.resume_later()
        self.view.retake()

    def _write_state(self, job_id: int, data: bytes) -> None:
        self.saved.write(job_id, data)

    def _save_state(self) -> None:
        snapshot = self.saved.snapshot()
        if snapshot is not None:
            self._write_state(*snapshot)

    # Half turns, for tests that drive the loop by hand.
    def _sync(self) -> bool:
        return self.tenant_sync.sync()

    def _publish_view(self) -> list[tuple[int, int]]:
        return self.view.publish(self.state)

    # ------------------------------------------------------------ state
    @property
    def selector(self) -> Selector | None:
        return self.state.selector

    @property
    def _tenants(self) -> dict[str, Tenant]:
        return self.state.tenants

    @property
    def workers(self) -> int:
        return self.state.workers

    @property
    def last_decision(self) -> dict | None:
        """The latest launched pick, explained (``Admission.decided``)."""
        return self.admission.last_decision

    @property
    def n_observed(self) -> int:
        return self.results.n_observed

    @property
    def outage(self) -> StorageError | None:
        """The store outage that blocks the loop now (None while writes work)."""
        return self.store_health.error

    @property
    def outage_since(self) -> float | None:
        return self.store_health.since

    @property
    def blocked(self) -> str | None:
        """Why the loop cannot go on: ``store_unavailable``, ``storage_full``, or None."""
        return self.store_health.blocked

    def store_status(self) -> dict:
        """The store as the loop last met it: writable, or blocked since when and why."""
        return self.store_health.status()

    # ------------------------------------------------------------ read views
    def is_idle(self, task_id: int) -> bool:
        """Nothing running, queued, pending or left to try for the task's latest
        version, as of the end of the last turn (a task changed since is not
        idle; while the store cannot be written no turn ends, so a task with
        work left stays not idle: see ``task_status``). Takes no lock of the loop."""
        return self.view.is_idle(task_id)

    def n_running(self) -> int:
        return len(self.state.running)

    def candidates(self, task: Task) -> int:
        """How many candidate models (arms) the task can ever have in this
        service: 0 when no model fits its program here (its configs are made
        once per task, see ``Costs.configs``)."""
        configs = self.costs.configs(task)
        known = set(self.selector.model_names) if self.selector is not None else set(configs)
        return sum(key in known for key in configs)

    def task_status(self, task: Task, has_data: bool) -> dict:
        """``idle``, ``candidates``, ``blocked``, ``status`` and ``reason``
        (``views.task_status``). Takes no lock of the loop.

        A task whose owner gets no new picks (``budget.BudgetGate``) says
        why; once none of its jobs runs it is ``over_budget`` and idle
        (nothing will train until her budget changes, so ``Task.wait`` returns)."""
        out = views.task_status(task, idle=self.is_idle(task.id), candidates=self.candidates(task),
                                has_data=has_data, blocked=self.blocked, outage=self.outage,
                                executors=self.executors)
        reason = self.budget.blocked.get(task.owner_id)
        if reason is not None and out["status"] == "training":
            running = any(r.task_id == task.id for r in list(self.state.running.values()))
            if running or task.owner_id in self.budget.gpu_only:  # a GPU budget holds back torch picks only
                out["reason"] = f"{out['reason']}; {reason} (running jobs finish)"
            else:
                out.update(idle=True, status="over_budget", reason=reason)
        return out

    def task_profile(self, task: Task) -> dict:
        """The profiler's predictions and the provisioner's configurations for
        each candidate of the task's latest version (``task.profile()``),
        cheapest predicted first; none before the task has data."""
        with self._lock, one_blas_thread():
            version = self.store.latest_dataset_version(task.id)
            n = version.n_examples if version is not None else 0
            plans = []
            if n:
                for spec in self.costs.configs(task).values():
                    plans.append(self.costs.plan(task, spec, n))
            plans.sort(key=lambda p: (p["predicted_seconds"] is None, p["predicted_seconds"] or 0.0))  # unknown last
            profiler = self.profile.profiler
            prices = self.provisioner.prices
            return {"task": task.name, "examples": n,
                    "prices": {"cpu": prices.cpu, "gb": prices.gb, "gpu": prices.gpu},
                    # the caller is the task's owner (task routes resolve her own tasks only)
                    "profiler": profiler_families(profiler, task.owner_id),
                    "candidates": plans}

    def check_cost_budget(self, cost: float | None) -> None:
        """A cost budget must buy at least one profiling run (DataError ``cost``)."""
        if cost is None:
            return
        least = self.provisioner.profiling_run_cost()
        if cost < least:
            raise DataError("cost", f"{cost:g}", f"at least one profiling run's cost ({least:.3g}: the cheapest "
                            "configuration for the shortest profiling run), or null for no cost limit")

    def job_cost(self, job: Any, seconds: float) -> float:
        """What ``seconds`` of a job cost at its recorded resources and the service's prices."""
        return self.provisioner.job_cost(job, seconds)

    def scheduler_state(self) -> dict:
        """What the scheduler view needs (``views.scheduler_state``), under the loop's lock."""
        with self._lock, one_blas_thread():
            return views.scheduler_state(self.state, self.last_decision)

    def progress(self) -> dict:
        """The loop's part of ``GET /admin/progress``, under the loop's lock."""
        with self._lock, one_blas_thread():
            return views.progress(self.state, n_observed=self.n_observed, error=self.error,
                                  store=self.store_status(), prior=self.priors.describe())
