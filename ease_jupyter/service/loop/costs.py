"""What a pick costs: the selector's cost estimates (ease.ml pvldb §4.1, the
``c_k`` of cost-aware GP-UCB) from the candidates' FLOP counts, scaled by the
seconds per FLOP measured on finished jobs; and the model catalogue the
selector ranges over."""

from __future__ import annotations

from collections import deque

import numpy as np

from ...errors import NotFoundError
from ...jobspec import JobSpec, parse_job
from ...schema import program_from_shapes
from ...store import Job, Store, Task
from ...zoo import Engine, candidates
from ..candidates import arm_specs, task_candidates

FLOPS_PER_SECOND = 1e9  # first guess, replaced by measured runtimes (see Costs.seconds)
NOMINAL_PROGRAMS = (((16,), (4,)), ((16,), (1,)))  # flat classification and regression
NOMINAL_TORCH_PROGRAMS = (((8, 8, 1), (4,)), ((8, 8, 3), (4,)))  # images: the torch arms
RATE_WINDOW = 200  # measured jobs the seconds-per-FLOP median is taken over


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


def spec_flops(task: Task, spec: JobSpec, n: int) -> float:
    """A pick's estimated work: every config of its grid (and for torch,
    every epoch)."""
    cand = task_candidates(task).get(spec.model)
    if cand is None:
        return 1e6
    flops = max(cand.cost(n), 1.0) * len(spec.points())
    if spec.engine is Engine.TORCH:
        flops *= spec.epochs
    return flops


class Costs:
    """Each task's arms (made once per task) and their estimated seconds."""

    def __init__(self, store: Store, *, torch_epochs: int | None):
        self.store = store
        self.torch_epochs = torch_epochs  # None: no torch executor, so no torch arms
        self._task_configs: dict[int, dict[str, JobSpec]] = {}
        self._rate: deque[float] = deque(maxlen=RATE_WINDOW)  # measured seconds per estimated FLOP
        self._rate_median: float | None = None  # of _rate: each new tenant's arms ask it

    def configs(self, task: Task) -> dict[str, JobSpec]:
        """The task's arms: arm key -> the job a pick of it trains
        (``candidates.arm_specs``); made once per task."""
        found = self._task_configs.get(task.id)
        if found is None:
            found = self._task_configs[task.id] = arm_specs(task, torch_epochs=self.torch_epochs)
        return found

    def seconds(self, task: Task, spec: JobSpec, n: int) -> float:
        """Candidate.cost (FLOPs) times the median measured seconds per FLOP
        (a first guess of 1 GFLOP/s before anything was measured)."""
        rate = self._rate_median if self._rate_median is not None else 1.0 / FLOPS_PER_SECOND
        return max(spec_flops(task, spec, n) * rate, 1e-3)

    def learn(self, job: Job) -> None:
        """Take a finished job's measured seconds into the rate."""
        if not job.cost_seconds:
            return
        try:
            task = self.store.get_task(job.task_id)
            n = self.store.get_dataset_version(job.dataset_version_id).n_examples
        except NotFoundError:
            return
        self._rate.append(job.cost_seconds / spec_flops(task, parse_job(job.model, job.config), n))
        self._rate_median = float(np.median(self._rate))
