"""What the parts of the control loop share: the selector, its tenants and the
running jobs, read and written under the loop's lock by one turn at a time."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from ...errors import NotFoundError
from ...jobspec import JobSpec, parse_job
from ...selection.selector import Selector
from ...store import BlobStore, Job, JobStatus, Store, Task
from ...zoo import Engine
from ..executors import JobExecutor


def arm_key(job: Job) -> str:
    """A job's selector arm (``JobSpec.arm``): its candidate model (ease.ml
    pvldb §3: a pick is a (user, model) pair; its configs are trained within
    the job). A job from before picks trained grids keeps its config key,
    which is no arm: it is never reported."""
    return parse_job(job.model, job.config).arm


def measured_quality(job: Job) -> float | None:
    """A job's accuracy where it succeeded with a finite one, else None
    (failed, cancelled, running, or no score)."""
    ok = job.status is JobStatus.SUCCEEDED and job.accuracy is not None and math.isfinite(job.accuracy)
    return job.accuracy if ok else None


def tenant_name(task_id: int, version_id: int) -> str:
    """A selector tenant: one (task, dataset version) pair."""
    return f"{task_id}/{version_id}"


@dataclass
class Tenant:
    task_id: int
    owner_id: int
    version_id: int
    configs: dict[str, JobSpec]  # arm key -> the job a pick of it trains
    # As read when the tenant was made, so repricing needs no query: a task's id,
    # owner and program never change, nor does a version's size (None: read them).
    task: Task | None = None
    n_examples: int | None = None

    def facts(self, store: Store) -> tuple[Task, int]:
        """Its task and its version's number of examples: as kept, else read
        (NotFoundError once either is gone)."""
        task = self.task or store.get_task(self.task_id)
        n = self.n_examples if self.n_examples is not None else store.get_dataset_version(self.version_id).n_examples
        return task, n


class Tenants(dict):
    """The loop's tenants by name, counting the tenants of each owner as they
    come and go, so that the number of owners (the provisioner's fair share
    asks it once per arm priced) costs no pass over every tenant."""

    def __init__(self) -> None:
        super().__init__()
        self._per_owner: Counter = Counter()

    def __setitem__(self, name: str, tenant: Tenant) -> None:
        if name in self:
            self._forget(self[name].owner_id)
        super().__setitem__(name, tenant)
        self._per_owner[tenant.owner_id] += 1

    def __delitem__(self, name: str) -> None:
        owner_id = self[name].owner_id
        super().__delitem__(name)
        self._forget(owner_id)

    def _forget(self, owner_id: int) -> None:
        self._per_owner[owner_id] -= 1
        if not self._per_owner[owner_id]:
            del self._per_owner[owner_id]

    def owners(self) -> int:
        """How many owners have a tenant."""
        return len(self._per_owner)

    def _unsupported(self, *args, **kwargs):
        raise TypeError("Tenants change only by item: tenants[name] = tenant, del tenants[name]")

    pop = popitem = clear = update = setdefault = __ior__ = _unsupported


@dataclass
class Running:
    job_id: int
    tenant: str
    key: str
    owner_id: int
    task_id: int
    engine: Engine = Engine.SKLEARN
    express: bool = False  # on an express slot (``LoopState.express``), beside the engine's own


@dataclass
class LoopState:
    store: Store
    blobs: BlobStore
    executors: dict[Engine, JobExecutor]
    publish: Callable[[int, dict], None]  # (owner id, event)
    cap: int  # running jobs per owner (ACAI §3.3)
    # Per engine, an executor of slots beyond its own that take only a tenant's
    # first pick, predicted short (``Admission.pick_express``); none by default.
    express: dict[Engine, JobExecutor] = field(default_factory=dict)
    selector: Selector | None = None  # made or restored by ``recovery.recover``
    tenants: Tenants = field(default_factory=Tenants)
    running: dict[int, Running] = field(default_factory=dict)
    # False once no job was left QUEUED: admission and the idle view skip their query
    maybe_queued: bool = True
    last_job_id: int = 0  # the newest job, which carries the saved selector state's tag

    @property
    def workers(self) -> int:
        return sum(e.workers for e in self.executors.values())

    def keep_state_holder(self) -> None:
        """Where the job that carries the saved state's tag (``last_job_id``)
        was deleted with its task, the newest job left carries it (0: none).
        Reads one job; lists them all only when it is gone."""
        if self.last_job_id == 0:
            return
        try:
            self.store.get_job(self.last_job_id)
        except NotFoundError:
            jobs = self.store.list_jobs()
            self.last_job_id = jobs[-1].id if jobs else 0

    def free(self) -> int:
        return self.workers - sum(not r.express for r in self.running.values())

    def running_per_owner(self) -> Counter:
        return Counter(r.owner_id for r in self.running.values())

    def free_slots(self, engine: Engine) -> int:
        """Free slots of ``engine``'s executor (0 without one)."""
        return self._free(engine, express=False)

    def free_express(self, engine: Engine) -> int:
        """Free express slots of ``engine`` (0 without them)."""
        return self._free(engine, express=True)

    def _free(self, engine: Engine, *, express: bool) -> int:
        executor = (self.express if express else self.executors).get(engine)
        if executor is None:
            return 0
        return max(0, executor.workers - sum(r.engine is engine and r.express is express
                                             for r in self.running.values()))

    def engine_full(self, engine: Engine) -> bool:
        """Each executor has its own slots: a torch pick must not take a
        scikit-learn worker's place (it would only wait in the MOP queue)."""
        return self.free_slots(engine) <= 0

    def emit_job(self, job: Job, owner_id: int) -> None:
        """Announce a job's new status to its owner (with its metrics once it succeeded)."""
        event = {"type": "job", "task_id": job.task_id, "job_id": job.id, "status": job.status.value,
                 "model": job.model, "config": dict(job.config), "accuracy": job.accuracy,
                 "cost_seconds": job.cost_seconds}
        if job.status is JobStatus.SUCCEEDED:
            event["metrics"] = {m.name: m.value for m in self.store.list_metrics(job.id)}
        self.publish(owner_id, event)
