"""The loop's side of the auto-provisioner (ACAI §4.2.4): the resources each
pick runs on, chosen from what this service can give a pick
(``service/provisioning.py`` maps the owner's budget to the chooser's
constraints, ``selection/provisioner.py`` searches the space).

The space is what the runners apply: threads per fit for scikit-learn
picks (1 to a job slot's share of the machine's cores), and for torch
picks the service's MOP partitions on the pool's device kind. Each pick's
configuration is the least predicted runtime under her cost budget, the
least cost within her deadline, else the least runtime within her fair
share (``fair_share``: the pool split equally among the owners with tasks).
Predictions are the profiler's (``ProfileBook``), the FLOPs proxy's where the
profiler has none or fails; a user's own model is provisioned by the
profiler once it has a record of her model's family, as a zoo model is.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from ...jobspec import JobSpec
from ...selection.provisioner import DEFAULT_PRICES, Pool, Prices, ResourceConfig
from ...store import Job, JobStatus, Store, Task
from ...zoo import Engine
from .. import budget as budgets
from ..profiling import TAG_PREDICTED, TAG_RUNS, ProfileBook, Resources, family_of, job_resources, profiling_runs
from ..provisioning import Provisioned, provision_pick
from ..runner import GRID_COST_TAG

log = logging.getLogger(__package__)  # one logger for the whole loop

TAG_COST = "easeml.profile.cost"  # a finished job's cost at the prices it ran under
PROFILING_RUN_SECONDS = 1.0  # a profiling run's length before any was measured

Seconds = Callable[[Task, JobSpec, int, Resources], float]


@dataclass(frozen=True)
class Pools:
    """What one pick of each engine may be given (``selection.provisioner.Pool``)."""

    sklearn: Pool = Pool(cores=1, workers=1)
    torch: Pool = Pool(cores=1, workers=1)

    def of(self, engine: Engine) -> Pool:
        return self.torch if engine is Engine.TORCH else self.sklearn


def service_pools(*, cpus: int, sklearn_slots: int, own_processes: bool = True, grid_workers: int = 1,
                  mop_workers: int = 1, mop_partitions: int | None = None) -> Pools:
    """This service's space.

    scikit-learn picks: a grid fans out to 1..``grid_workers`` workers (the
    Dask cluster's; a local engine's job slot has one), and on a local
    engine a slot may use its share of the ``cpus`` as threads per fit
    where each slot is a process of its own (``own_processes``: BLAS's
    thread limit holds per process, so slots that are threads of one
    process, or grids sharing a Dask worker, would set each other's).

    torch picks: a MOP workload on 1..``mop_workers`` partitions, one
    worker each (Cerebro §3.1); an admin's ``--mop-partitions`` fixes it."""
    if grid_workers > 1:
        sklearn = Pool(cores=1, workers=grid_workers)
    else:
        sklearn = Pool(cores=max(1, cpus // max(1, sklearn_slots)) if own_processes else 1, workers=1)
    torch = (Pool(cores=1, workers=1, partitions=(mop_partitions,)) if mop_partitions is not None
             else Pool(cores=1, workers=max(1, mop_workers)))
    return Pools(sklearn=sklearn, torch=torch)


class PickProvisioner:
    """Chooses each pick's resources. What an owner may spend is read from
    ``limits`` (owner id -> (limits that apply, her spent)), the loop's
    budget gate's view; ``running`` lists her running jobs' ids, whose
    predicted cost is held back from what is left of her cost budget, so
    picks launched side by side cannot each spend all of it.

    Choices are kept until :meth:`forget` (the loop calls it at each turn
    and after each refit of the profiler), so pricing an arm, launching it
    and showing it search the space once."""

    def __init__(self, store: Store, book: ProfileBook, *, flops: Seconds, pools: Pools | None = None,
                 prices: Prices = DEFAULT_PRICES, gpu_pool: Callable[[], bool] = lambda: False,
                 owners: Callable[[], int] = lambda: 1,
                 limits: Callable[[int], tuple[budgets.Limits, budgets.Spent]] | None = None,
                 running: Callable[[int], Iterable[int]] = lambda owner: ()):
        self.store, self.book, self.flops = store, book, flops
        self.pools = pools or Pools()
        self.prices = prices
        self.gpu_pool = gpu_pool
        self.owners = owners  # how many owners share the pool now
        self.limits = limits or (lambda owner: (budgets.Limits(), budgets.Spent()))
        self.running = running
        self._chosen: dict[tuple, Provisioned] = {}
        self._memory: dict[int, dict[str, int]] = {}  # task id -> model -> its last Seneca reservation
        self._costs: dict[int, float] = {}  # job id -> its cost, once finished (or its predicted cost, once launched)

    def forget(self) -> None:
        """Search again at the next ask: the profiler or the owners' spending changed."""
        self._chosen.clear()

    def pool(self, spec: JobSpec) -> Pool:
        pool = self.pools.of(spec.engine)
        if spec.engine is Engine.TORCH and self.gpu_pool():
            return Pool(cores=pool.cores, workers=pool.workers, partitions=pool.partitions, devices=("gpu",))
        return pool

    def provision(self, task: Task, spec: JobSpec, n: int, *, now: datetime | None = None) -> Provisioned:
        """The pick's configuration, its predicted seconds and cost, and where
        the prediction came from (``"profiler"`` or ``"flops"``)."""
        key = (task.id, spec.model, json.dumps(spec.config(), sort_keys=True, default=str), n)
        found = self._chosen.get(key) if now is None else None
        if found is None:
            found = self._provision(task, spec, n, now or datetime.now(timezone.utc))
            if now is None:
                self._chosen[key] = found
        return found

    def _provision(self, task: Task, spec: JobSpec, n: int, now: datetime) -> Provisioned:
        limits, spent = self.limits(task.owner_id)
        budget = None
        if limits.cost is not None and math.isfinite(spent.money):
            held = sum(self.predicted_cost(job_id) for job_id in self.running(task.owner_id))
            budget = max(0.0, limits.cost - spent.money - held)

        def profiler(config: ResourceConfig) -> float:
            prediction = self.book.predict_job(task, spec, n, Resources(**config.json()))
            if prediction.source is None:
                raise LookupError(f"no runtime model of {spec.model} yet")
            return prediction.seconds

        def proxy(config: ResourceConfig) -> float:
            return self.flops(task, spec, n, Resources(**config.json()))

        # A user model has no FLOP estimate, so no proxy to fall back on worth a note: until the profiler
        # has a record of its family the proxy prices every configuration alike and the cheapest wins.
        known = not spec.is_user_model or self.book.profiler.source(family_of(task, spec)) is not None
        predict = profiler if known else proxy
        return provision_pick(pool=self.pool(spec), memory_bytes=self.memory(task, spec), predict=predict,
                              fallback=proxy,
                              prices=self.prices, limits=limits, spent=spent, budget=budget,
                              active_users=max(1, self.owners()), now=now)

    def memory(self, task: Task, spec: JobSpec) -> int:
        """The pick's memory reservation: Seneca's sizing (``execution/memory.py``)
        as the model's last grid on this task recorded it; 0 before any, or
        where the grid reserved none (a one-worker engine runs its fits in
        turn and reserves nothing). Read once per task, then kept up to date
        as jobs finish (:meth:`record_cost`)."""
        known = self._memory.get(task.id)
        if known is None:
            known = self._memory[task.id] = {}
            for job in self.store.list_jobs(task.id, status=JobStatus.SUCCEEDED):
                self._note_memory(job)
        return known.get(spec.model, 0)

    def _note_memory(self, job: Job) -> None:
        text = self.store.tags("job", job.id).get(GRID_COST_TAG)
        if not text or job.task_id not in self._memory:
            return
        try:
            reserved = int(json.loads(text)["reserved_bytes"])
        except (ValueError, TypeError, KeyError):  # an unreadable record: keep what was known
            return
        self._memory[job.task_id][job.model] = max(reserved, 0)

    def resources(self, task: Task, spec: JobSpec, n: int) -> Resources:
        """Just the configuration (``Costs.resources``); the service's
        defaults if the search itself fails (logged: a pick must not stop)."""
        try:
            return Resources(**self.provision(task, spec, n).choice.config.json())
        except Exception:  # noqa: BLE001 - a failed search must not hold back a pick
            log.warning("could not provision %s on task %d; it runs on the defaults", spec.model, task.id,
                        exc_info=True)
            return self.book.default

    def profiling_run_cost(self) -> float:
        """What one profiling run costs at the least: the cheapest
        configuration held for the shortest profiling run recorded, or
        :data:`PROFILING_RUN_SECONDS` before any. A cost budget below it
        could not even learn a family's runtime."""
        seconds = [run["seconds"] for job_id in self.store.find_by_tag("job", TAG_RUNS)
                   for run in profiling_runs(self.store.tags("job", job_id))]
        return self.prices.cost(ResourceConfig(), min(seconds, default=PROFILING_RUN_SECONDS))

    def job_cost(self, job: Job, seconds: float) -> float:
        """What ``seconds`` of the job cost at the resources it recorded
        (ACAI's runtime × hourly price; one thread where none recorded). A
        finished job's cost is kept (:meth:`record_cost`) at the prices it
        ran under, so a later change of prices does not re-price the past;
        it is read once, then held here (a finished job does not change)."""
        finished = job.status.is_finished()
        if finished and job.id in self._costs:
            return self._costs[job.id]
        tags = self.store.tags("job", job.id)
        try:
            cost = float(tags[TAG_COST]) if finished and tags.get(TAG_COST) else math.nan
        except ValueError:
            cost = math.nan
        if not math.isfinite(cost):
            cost = self.prices.cost(config_of(job_resources(tags, self.book.default)), seconds)
        if finished:
            self._costs[job.id] = cost
        return cost

    def record_cost(self, job: Job) -> None:
        """Keep a finished job's cost with it (``easeml.profile.cost``)."""
        if not job.status.is_finished() or job.cost_seconds is None:
            return
        cost = self.prices.cost(config_of(job_resources(self.store.tags("job", job.id), self.book.default)),
                                float(job.cost_seconds))
        self.store.set_tag("job", job.id, TAG_COST, repr(cost))
        self._costs[job.id] = cost
        if job.status is JobStatus.SUCCEEDED:
            self._note_memory(job)

    def predicted_cost(self, job_id: int) -> float:
        """What a launched job was predicted to cost (0 where it has no prediction)."""
        tags = self.store.tags("job", job_id)
        try:
            seconds = float(tags.get(TAG_PREDICTED) or 0.0)
        except ValueError:
            return 0.0
        return self.prices.cost(config_of(job_resources(tags, self.book.default)), seconds) if seconds > 0 else 0.0


def config_of(res: Resources) -> ResourceConfig:
    return ResourceConfig(**dataclasses.asdict(res))
