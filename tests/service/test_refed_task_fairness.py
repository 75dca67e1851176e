"""A task fed again and again cannot take every turn from a task that waits:
its new version's tenant succeeds the previous one in the selector
(``loop/tenants.py``, ``Selector.add_user(succeeds=...)``), keeping its place
in the turns and its results as evidence, instead of arriving as a newcomer
owed a first model with everything to gain at each feed."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.store import InMemoryStore, JobStatus, MemoryBlobStore
from ease_jupyter.zoo import Engine

from .conftest import IRIS_MODELS, StartingExecutor


def _quality(job) -> float:
    """A model's accuracy, the same on every version (a row more changes little)."""
    return 0.6 + 0.3 * (sum(map(ord, job.model)) % 7) / 7


def _task(store, blobs, owner: str, seed: int):
    user = store.create_user(owner, owner[0] * 64)
    task = store.create_task(user.id, "t", format_program(program_from_shapes([4], [3])))
    _feed(store, blobs, task, seed, 30)
    return task


def _feed(store, blobs, task, seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    datasets.feed(store, blobs, task, rng.normal(size=(n, 4)).astype("float32"), rng.integers(0, 3, n),
                  mode=datasets.APPEND)


@pytest.mark.parametrize("fed_while_running", [False, True])
def test_a_task_fed_after_every_job_leaves_turns_to_the_task_that_waits(fed_while_running):
    """``fed_while_running``: her row comes while her job runs, so its result
    is of a version replaced meanwhile, and is passed on as evidence
    (``Results._pass_on``) rather than dropped."""
    store, blobs = InMemoryStore(), MemoryBlobStore()
    ada = _task(store, blobs, "ada", 0)
    bob = _task(store, blobs, "bob", 1)
    executor = StartingExecutor(store, workers=1, accuracy=_quality)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=1)
    loop.costs.arm_costs = lambda task, configs, arms, n: {k: 1.0 for k in arms}  # (not under test)
    loop.recover()
    try:
        for round_ in range(2 * IRIS_MODELS):
            loop.step()
            if fed_while_running:
                _feed(store, blobs, ada, 100 + round_, 1)  # a new row of hers while her job runs: a new version
                loop.notify(ada.id)
                loop.step()
                executor.finish_all()
            else:
                executor.finish_all()
                _feed(store, blobs, ada, 100 + round_, 1)  # a new row of hers after every job: a new version
                loop.notify(ada.id)
        loop.step()
    finally:
        loop.stop()
    bobs = [j for j in store.list_jobs(bob.id) if j.status is JobStatus.SUCCEEDED]
    adas = [j for j in store.list_jobs(ada.id) if j.status is JobStatus.SUCCEEDED]
    # (before: bob had his first model and then nothing, ada every other job)
    assert len({j.model for j in bobs}) == IRIS_MODELS, ([j.model for j in bobs], len(adas))
    assert len(adas) >= IRIS_MODELS - 1  # and she is served too: turn about
