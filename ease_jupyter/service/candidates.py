"""A task's candidate models and the job specs of its arms, resolved once.

A task's program never changes, so its candidates (``zoo.candidates``) are
built once per program text and shared by the control loop, the executors
and the model server; each job's candidate is looked up by name here. A
user's own models (``user_models.py``) are arms of her task only: their
specs come from the store, and a job that trains one (``spec.code``) gets
its candidate from the user's code, loaded where the job runs.
"""

from __future__ import annotations

from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

from ..errors import EaseMLError
from ..jobspec import JobSpec, SklearnGrid, TorchWorkload
from ..schema import parse
from ..store import BlobStore, Store, Task
from ..zoo import Candidate, Engine, candidates
from . import user_models


@lru_cache(maxsize=4096)
def _by_program(program: str) -> Mapping[str, Candidate]:
    try:
        found = candidates(parse(program))
    except Exception:  # noqa: BLE001 - a program no model fits has no candidates
        found = []
    by_name: dict[str, Candidate] = {}
    for cand in found:
        by_name.setdefault(cand.name, cand)
    return MappingProxyType(by_name)


def task_candidates(task: Task) -> Mapping[str, Candidate]:
    """The task's candidates by name, in the zoo's order."""
    return _by_program(task.program)


def candidate_of(task: Task, spec: JobSpec, blobs: BlobStore | None = None, *,
                 started: float | None = None) -> Candidate:
    """The candidate a job trains; an error naming the model when the task has none of that name and engine.
    A user model's (``spec.code``) needs ``blobs``; its calls are bounded by ``started`` + its limit."""
    if spec.is_user_model:
        if blobs is None:
            raise EaseMLError(f"model: found user model {spec.model!r}, expected the blob store to load it from")
        return user_models.user_candidate(task, spec, blobs, started=started)
    cand = task_candidates(task).get(spec.model)
    if cand is None or cand.engine is not spec.engine:
        raise EaseMLError(f"model: found {spec.model!r}, expected a {spec.engine.value} candidate of task {task.name!r}")
    return cand


def arm_specs(task: Task, *, torch_epochs: int | None, store: Store | None = None) -> dict[str, JobSpec]:
    """Arm key -> the job a pick of that arm trains: every scikit-learn
    candidate's grid and, with ``torch_epochs`` (a torch executor is there),
    every torch candidate's learning-rate workload; with ``store``, the
    task's own user models too (``user_models.arm_specs``)."""
    found = task_candidates(task).values()
    specs: dict[str, JobSpec] = {c.name: SklearnGrid.of(c) for c in found if c.engine is Engine.SKLEARN}
    if torch_epochs is not None:
        specs.update((c.name, TorchWorkload.of(c, torch_epochs)) for c in found if c.engine is Engine.TORCH)
    if store is not None:
        specs.update(user_models.arm_specs(store, task, torch_epochs))
    return specs
