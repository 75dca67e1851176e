"""What a pick costs: the selector's cost estimates (ease.ml pvldb §4.1, the
``c_k`` of cost-aware GP-UCB) and the model catalogue the selector ranges over.

A pick's estimate is its FLOPs (``Candidate.cost``) over the speed of the
devices its engine runs on: torch arms at the speed of the pool's GPU workers
when it has any, scikit-learn arms at the CPU's (``execution.device_speed``
measures both per device kind; without a measurement, 1 GFLOP/s for both).
Finished jobs then correct the prediction: per engine, the median of measured
over predicted seconds (an engine with no finished job yet takes the median
over all engines, or 1). So a GPU pool makes torch arms cheaper from the
first pick on, and what the jobs measure still has the last word.

That FLOPs proxy is the fallback. Given a ``ProfileBook`` (the profiler's
runtime model per family, learned across all users' finished jobs: ACAI
§3.3.2, §4.2.2), a pick costs the profiler's predicted seconds for the
resources it will run on, wherever the profiler can predict it; the control
loop refits the profiler as jobs finish (``ProfileRefits``) and re-prices the
arms.

A user's own model is a family of its own (``profiling.family_of``: keyed
by its owner and its code's blob): once the profiler has a record of it, it is priced and
provisioned like a zoo arm. It has no FLOP estimate, so before that it
costs its last measured seconds on the task, else the median of the task's
other arms (``user_models.neutral_seconds``: a neutral prior)."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections import deque
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Callable

import numpy as np

from ...errors import NotFoundError, StorageError
from ...execution.automl import pick_schedule
from ...jobspec import JobSpec, parse_job
from ...schema import program_from_shapes
from ...selection.profiler import Prediction
from ...store import Job, JobStatus, Store, Task
from ...zoo import Engine, candidates
from ..candidates import arm_specs, task_candidates
from ..profiling import FLOPS_SOURCE, TAG_NOTE, ProfileBook, Resources, full_seconds, job_resources
from ..task_epochs import pick_epochs, task_max_epochs
from ..user_models import last_measured_seconds, neutral_seconds
from .provision import PickProvisioner

if TYPE_CHECKING:
    from ...execution.device_speed import PoolSpeeds

log = logging.getLogger(__package__)  # one logger for the whole loop

FLOPS_PER_SECOND = 1e9  # the speed assumed where none was measured (see Costs.seconds)
NOMINAL_PROGRAMS = (((16,), (4,)), ((16,), (1,)))  # flat classification and regression
NOMINAL_TORCH_PROGRAMS = (((8, 8, 1), (4,)), ((8, 8, 3), (4,)))  # images: the torch arms
MEASURED_SOURCE = "measured"  # a user model without a runtime model: its last measured seconds ...
NEUTRAL_SOURCE = "neutral"  # ... or, before it ran on the task, the median of the task's other arms
RATE_WINDOW = 200  # measured jobs, per engine, the correction's median is taken over


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


def fan_out(spec: JobSpec, resources: Resources) -> int:
    """How many of a pick's configs run side by side on ``resources``: its
    grid's points over the workers (a Seneca grid), or its configs over the
    MOP workload's partitions, one worker each (Cerebro §3.1)."""
    return max(1, min(resources.workers, spec.n_points))


def spec_flops(task: Task, spec: JobSpec, n: int, epochs: int | None = None) -> float:
    """A pick's estimated work: every config of its grid; for torch, the
    config-epochs its successive halving trains (``automl.pick_schedule``)
    up to ``epochs`` (default: the spec's)."""
    cand = task_candidates(task).get(spec.model)
    if cand is None:
        return 1e6
    n_configs = spec.n_points
    if spec.engine is not Engine.TORCH:
        return max(cand.cost(n), 1.0) * n_configs
    return max(cand.cost(n), 1.0) * pick_schedule(n_configs, epochs or spec.epochs).config_epochs


class Costs:
    """Each task's arms (made once per task) and their estimated seconds.

    ``speeds`` (``execution.device_speed.measure_pool``) prices torch and
    scikit-learn arms at their devices' measured speeds; None assumes
    :data:`FLOPS_PER_SECOND` for both. :meth:`use_speeds` sets it later.

    ``profile`` (a ``service.profiling.ProfileBook``) prices a pick at the
    profiler's prediction where it has one (:meth:`seconds`), the FLOPs
    proxy (:meth:`flops_seconds`) where it has none or fails.
    """

    def __init__(self, store: Store, *, torch_epochs: int | None, speeds: PoolSpeeds | None = None,
                 service_epochs: int | None = None, profile: ProfileBook | None = None,
                 provisioner: PickProvisioner | None = None):
        self.store = store
        # None: the FLOPs proxy alone. A pick runs on the ``provisioner``'s
        # choice; without one, on the service's own resources (see pick_resources).
        self.profile = profile
        self.provisioner = provisioner
        self.torch_epochs = torch_epochs  # None: no torch executor, so no torch arms
        self.service_epochs = service_epochs  # the operator's --torch-epochs (None: the rule by data size)
        # A task's arms change only when a user model is added (``forget``, called by the
        # service's own write) or the task is deleted; the program never changes. A
        # build that a forget overtook is not kept (``_generation``), since HTTP
        # threads build them too (``ControlLoop.candidates``).
        self._task_configs: dict[int, dict[str, JobSpec]] = {}
        self._generation: dict[int, int] = {}
        self._forgetting = threading.Lock()
        # measured seconds per estimated FLOP of finished jobs, per engine
        self._rate: dict[Engine, deque[float]] = {e: deque(maxlen=RATE_WINDOW) for e in Engine}
        self._correction: dict[Engine, float] = {}  # what each new tenant's arms ask (see correction)
        self.use_speeds(speeds)

    def use_speeds(self, speeds: PoolSpeeds | None) -> None:
        """Price arms at these device speeds from now on (None: the
        1 GFLOP/s assumption). Tenants registered earlier keep their costs,
        as with the learned correction."""
        self.speeds = speeds
        self._speed = {
            Engine.TORCH: speeds.torch.flops_per_second if speeds is not None else FLOPS_PER_SECOND,
            Engine.SKLEARN: speeds.sklearn.flops_per_second if speeds is not None else FLOPS_PER_SECOND,
        }
        self._update_corrections()

    def configs(self, task: Task) -> dict[str, JobSpec]:
        """The task's arms: arm key -> the job a pick of it trains
        (``candidates.arm_specs``, the task's user models included); made
        once per task, and again after :meth:`forget`."""
        found = self._task_configs.get(task.id)
        if found is None:
            generation = self._generation.get(task.id, 0)
            found = arm_specs(task, torch_epochs=self.torch_epochs, store=self.store)
            with self._forgetting:
                if self._generation.get(task.id, 0) == generation:
                    self._task_configs[task.id] = found
        return found

    def forget(self, task_id: int) -> None:
        """Make the task's arms again at the next ``configs`` (a user model
        was added, or the task deleted); any thread."""
        with self._forgetting:
            self._generation[task_id] = self._generation.get(task_id, 0) + 1
            self._task_configs.pop(task_id, None)

    def predicted(self, task: Task, spec: JobSpec, n: int) -> float:
        """The pick's FLOPs over its engine's device speed, in seconds; a
        torch pick at the epochs it will train (``task_epochs.pick_epochs``)."""
        epochs = None
        if spec.engine is Engine.TORCH:
            epochs = pick_epochs(task_max_epochs(self.store, task.id), self.service_epochs, n)
        return spec_flops(task, spec, n, epochs) / self._speed[spec.engine]

    def correction(self, engine: Engine) -> float:
        """Measured over predicted seconds: the median over ``engine``'s
        finished jobs, else over all engines' jobs, else 1."""
        return self._correction.get(engine, 1.0)

    def seconds(self, task: Task, spec: JobSpec, n: int, others: list[float] | None = None) -> float:
        """The pick's cost ``c_k``: the profiler's predicted seconds where it
        can predict the pick, else :meth:`flops_seconds` (a user model:
        :meth:`own_fallback`, ``others`` being the task's zoo arms' costs)."""
        prediction = self.prediction(task, spec, n)
        if prediction is not None:
            return max(prediction.seconds, 1e-3)
        if spec.is_user_model:
            return self.own_fallback(task, spec, n, others)[0]
        return self.flops_seconds(task, spec, n, self.resources(task, spec, n))

    def own_fallback(self, task: Task, spec: JobSpec, n: int, others: list[float] | None = None) -> tuple[float, str]:
        """A user model's seconds where the profiler has no record of it, and
        their source: its last measured seconds on the task (``measured``),
        else the median of ``others`` (default: the task's zoo arms' costs),
        a neutral prior (``neutral``)."""
        measured = last_measured_seconds(self.store, task, spec.model)
        if measured is not None:
            return max(measured, 1e-3), MEASURED_SOURCE
        if others is None:
            others = [self.seconds(task, s, n) for s in self.configs(task).values() if not s.is_user_model]
        return neutral_seconds(self.store, task, spec.model, others), NEUTRAL_SOURCE

    def arm_costs(self, task: Task, configs: dict[str, JobSpec], arms: list[str], n: int) -> dict[str, float]:
        """The ``c_k`` of the task's ``arms`` (keys of ``configs``): zoo arms
        first, then the user's own, whose fallback needs the zoo arms' costs."""
        costs = {k: self.seconds(task, configs[k], n) for k in arms if not configs[k].is_user_model}
        zoo = list(costs.values())
        costs.update((k, self.seconds(task, configs[k], n, zoo)) for k in arms if configs[k].is_user_model)
        return costs

    def flops_seconds(self, task: Task, spec: JobSpec, n: int, resources: Resources | None = None) -> float:
        """The FLOPs proxy: the pick's predicted seconds times its engine's
        correction (once the engine has finished jobs: its FLOPs times their
        median measured seconds per FLOP), over its fan-out on ``resources``
        (:func:`fan_out`: its grid's configs, or a MOP workload's, run side
        by side on that many workers; threads it cannot tell apart)."""
        seconds = self.predicted(task, spec, n) * self.correction(spec.engine)
        return max(seconds / (fan_out(spec, resources) if resources is not None else 1), 1e-3)

    def prediction(self, task: Task, spec: JobSpec, n: int) -> Prediction | None:
        """The profiler's prediction of the pick on the resources it will run
        on; None without a profiler, or where the profiler cannot predict it
        (no history of its family) or fails (logged)."""
        if self.profile is None:
            return None
        try:
            prediction = self.profile.predict_job(task, spec, n, self.resources(task, spec, n))
        except Exception:  # noqa: BLE001 - a broken prediction must not stop a pick: the proxy prices it
            log.warning("the profiler could not predict %s on task %d; the FLOPs proxy prices it",
                        spec.model, task.id, exc_info=True)
            return None
        if prediction.source is None or not (math.isfinite(prediction.seconds) and prediction.seconds > 0):
            return None
        return prediction

    def plan(self, task: Task, spec: JobSpec, n: int) -> dict:
        """One candidate's predicted cost for the task (``task.profile()``,
        ``easeml models --task``): the selector's ``c_k`` and where it came
        from, the FLOPs proxy's seconds beside it, and the resources the
        provisioner chose with their cost. A user's own model has no FLOP
        estimate: before the profiler has a record of it, its seconds are
        :meth:`own_fallback`'s."""
        out: dict = {"model": spec.arm, "engine": spec.engine.value}
        prediction = self.prediction(task, spec, n)  # once: seconds() would predict again
        if spec.is_user_model:
            seconds, source = ((max(prediction.seconds, 1e-3), prediction.source) if prediction is not None
                               else self.own_fallback(task, spec, n))
            out.update(predicted_seconds=seconds, source=source,
                       log_sd=prediction.log_sd if prediction is not None else None, flops_seconds=None)
        else:
            flops = self.flops_seconds(task, spec, n, self.resources(task, spec, n))
            out.update(predicted_seconds=max(prediction.seconds, 1e-3) if prediction is not None else flops,
                       source=prediction.source if prediction is not None else FLOPS_SOURCE,
                       log_sd=prediction.log_sd if prediction is not None else None, flops_seconds=flops)
        if self.provisioner is not None:
            provisioned = self.provisioner.provision(task, spec, n).json()
            out.update({k: provisioned[k] for k in ("cost", "goal", "feasible", "note")},
                       resources=provisioned["config"], provisioned_by=provisioned["source"])
        else:
            out.update(resources=dataclasses.asdict(self.resources(task, spec, n)))
        return out

    def resources(self, task: Task, spec: JobSpec, n: int) -> Resources:
        """What the pick will run on: the provisioner's choice, else the service's own."""
        if self.provisioner is not None:
            return self.provisioner.resources(task, spec, n)
        return self.pick_resources(task, spec, n)

    def pick_resources(self, task: Task, spec: JobSpec, n: int) -> Resources:
        """What a pick runs on in this service without a provisioner: the
        profile book's default (the service's configuration); torch picks on
        a GPU where the pool has GPU workers (its speeds were measured)."""
        gpu = spec.engine is Engine.TORCH and self.speeds is not None
        base = self.profile.default if self.profile is not None else Resources()
        return dataclasses.replace(base, device="gpu" if gpu else "cpu")

    def record_launch(self, job: Job, task: Task, spec: JobSpec, n: int) -> None:
        """Keep with a launched job what it was predicted to cost: the
        profiler's prediction, or the FLOPs proxy's seconds (source
        ``"flops"``) where the profiler had none (a user model, which has no
        FLOP estimate: :meth:`own_fallback`'s, source ``measured`` or ``neutral``)."""
        if self.profile is None:
            return
        resources = self.resources(task, spec, n)
        prediction = self.prediction(task, spec, n)
        if prediction is None and spec.is_user_model:
            fallback, source = self.own_fallback(task, spec, n)
        else:
            fallback, source = self.flops_seconds(task, spec, n, resources), FLOPS_SOURCE
        self.profile.record_prediction(job, prediction, fallback_seconds=fallback, fallback_source=source,
                                       resources=resources)
        note = self.provisioner.provision(task, spec, n).json()["note"] if self.provisioner is not None else ""
        if note:  # why the pick runs where it does: a prediction that failed, a budget nothing fits
            self.profile.store.set_tag("job", job.id, TAG_NOTE, note)
        # A family with no history is profiled on subsamples before its full grid (ACAI §4.2.2).
        self.profile.plan_profiling(job, task, spec, n, resources)

    def learn(self, job: Job) -> None:
        """Take a finished job's measured seconds into its engine's correction."""
        if not job.cost_seconds:
            return
        try:
            task = self.store.get_task(job.task_id)
            n = self.store.get_dataset_version(job.dataset_version_id).n_examples
        except NotFoundError:
            return
        spec = parse_job(job.model, job.config)
        if spec.is_user_model:  # a user model: no FLOP estimate to correct
            return
        tags = self.store.tags("job", job.id)
        seconds = full_seconds(job, tags)  # without its profiling runs, if any
        # per FLOP on one worker: the proxy divides by the fan-out of the pick it prices
        self._rate[spec.engine].append(seconds * fan_out(spec, job_resources(tags)) / spec_flops(task, spec, n))
        self._update_corrections()

    def _update_corrections(self) -> None:
        # Rates are kept per FLOP, not per predicted second, so that a later
        # use_speeds re-prices what was learned before it.
        ratios = {e: [r * self._speed[e] for r in rates] for e, rates in self._rate.items()}
        pooled = [r for rs in ratios.values() for r in rs]
        self._correction = {}
        for engine in Engine:
            found = ratios[engine] or pooled
            if found:
                self._correction[engine] = float(np.median(found))


REFIT_EVERY_SECONDS = 5.0  # the profiler is refitted at most this often ...
REFIT_EVERY_JOBS = 20  # ... unless this many jobs finished since its last fit
REFIT_SHARE = 0.1  # and refits take at most this share of the loop's time (a refit reads every finished job)


class ProfileRefits:
    """Finished jobs teach the profiler: each one's error against its
    prediction is recorded (``ProfileBook.record_outcome``), and the profiler
    is refitted on all users' finished jobs once some finished, at most every
    ``every_seconds`` unless ``every_jobs`` finished since the last, and
    never sooner than its last refit's duration over ``share`` (a refit reads
    every finished job: with a long history it must not take over the
    loop). Executors say a job finished from their own threads
    (``finished``); the loop records them in its turn (``collect``)."""

    def __init__(self, store: Store, book: ProfileBook, *, every_seconds: float = REFIT_EVERY_SECONDS,
                 every_jobs: int = REFIT_EVERY_JOBS, share: float = REFIT_SHARE,
                 clock: Callable[[], float] = time.monotonic):
        self.store, self.book = store, book
        self.every_seconds, self.every_jobs, self.share, self.clock = every_seconds, every_jobs, share, clock
        self._pause = 0.0  # the last refit's duration over ``share``
        self._done: SimpleQueue[int] = SimpleQueue()
        self._new = 0  # finished jobs measured since the last refit
        self._fitted_at: float | None = None  # None: never fitted (the first turn fits on the store's history)
        self.record_cost: Callable[[Job], None] | None = None  # keeps a finished job's cost (the provisioner's)

    def finished(self, job_id: int) -> None:
        """An executor is done with the job (any thread)."""
        self._done.put(job_id)

    def collect(self, *, refit: bool = True) -> bool:
        """Record the finished jobs' errors and (``refit``) refit when due;
        True when the profiler was refitted (the arms' costs are then out of date)."""
        while True:
            try:
                job_id = self._done.get_nowait()
            except Empty:
                break
            try:
                job = self.store.get_job(job_id)
                if self.record_cost is not None:
                    self.record_cost(job)
                if job.status is JobStatus.SUCCEEDED and job.cost_seconds:
                    self.book.record_outcome(job)
                    self._new += 1
            except NotFoundError:  # deleted with its task meanwhile
                continue
            except StorageError:  # an outage: recorded by a later turn
                self._done.put(job_id)
                raise
        if not refit:
            return False
        now = self.clock()
        due = self._fitted_at is None or (self._new > 0 and now - self._fitted_at >= self._pause and (
            self._new >= self.every_jobs or now - self._fitted_at >= self.every_seconds))
        if not due:
            return False
        self.book.refit()
        self._fitted_at, self._new = now, 0
        self._pause = (self.clock() - now) / self.share
        return True
