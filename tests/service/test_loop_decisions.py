"""The control loop's decisions without HTTP: it asks the selector once per
round for as many picks as there are free workers, and every launched pick is
announced with its own explanation (not the round's last)."""

from __future__ import annotations


import numpy as np

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.store import InMemoryStore, MemoryBlobStore
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor


def manual(store) -> ManualExecutor:
    """Jobs that finish when the test says so (``finish_all``)."""
    return ManualExecutor(store, workers=3, accuracy=lambda job: 0.5 + 0.4 * (job.id % 5) / 5)


def test_each_launched_pick_is_announced_with_its_own_explanation():
    store, blobs = InMemoryStore(), MemoryBlobStore()
    rng = np.random.default_rng(0)
    for owner, n_tasks in (("ada", 2), ("bob", 1)):
        user = store.create_user(owner, owner[0] * 64)
        for i in range(n_tasks):
            task = store.create_task(user.id, f"{owner}{i}", format_program(program_from_shapes([4], [3])))
            datasets.feed(store, blobs, task, rng.normal(size=(30, 4)).astype("float32"), rng.integers(0, 3, 30))
    executor = manual(store)
    decisions: list[dict] = []
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=3,
                       on_decision=decisions.append, policy="hybrid")  # ease.ml's rule: Alg. 2's phases
    loop.recover()
    asked: list[int] = []
    next_picks = loop.selector.next_picks
    loop.selector.next_picks = lambda n: (asked.append(n), next_picks(n))[1]

    for _ in range(4):
        loop.step()
        executor.finish_all()
    loop.stop()

    assert asked[0] == 3  # one ask for every free worker, not one ask per worker
    assert len(decisions) >= 9 and loop.last_decision == decisions[-1]
    assert [d["decision"] for d in decisions] == list(range(len(decisions)))
    for d in decisions:  # each event explains the job it launched
        job = store.get_job(d["job_id"])
        assert d["model"] == job.model and d["user"] == d["tenant"] == f"{job.task_id}/{job.dataset_version_id}"
        assert d["task_id"] == job.task_id and d["owner_id"] == store.get_task(job.task_id).owner_id
        for c in d["candidates"] or ():
            task_id = int(c["tenant"].split("/")[0])
            assert c["task_id"] == task_id and c["owner_id"] == store.get_task(task_id).owner_id
    assert {d["phase"] for d in decisions[:3]} == {"initial"}  # ease.ml Alg. 2 lines 1-4: everyone once
    assert len({d["task_id"] for d in decisions[:3]}) == 3
    assert any(d["phase"] == "greedy" and d["candidates"] for d in decisions)


def test_free_torch_slots_are_not_offered_to_tasks_without_torch_models():
    """With the scikit-learn worker busy and torch slots free, flat tasks
    (no torch arms) get no pick: the loop does not ask the selector for them
    (each ask scores every tenant's arms, and would only hold picks back)."""
    store, blobs = InMemoryStore(), MemoryBlobStore()
    rng = np.random.default_rng(0)
    user = store.create_user("ada", "a" * 64)
    for i in range(3):
        task = store.create_task(user.id, f"t{i}", format_program(program_from_shapes([4], [3])))
        datasets.feed(store, blobs, task, rng.normal(size=(30, 4)).astype("float32"), rng.integers(0, 3, 30))
    flat = ManualExecutor(store, workers=1)
    torch_slots = ManualExecutor(store, workers=4)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: flat, Engine.TORCH: torch_slots},
                       max_running_per_user=5)
    loop.recover()
    asked: list[int] = []
    next_picks = loop.selector.next_picks
    loop.selector.next_picks = lambda n: (asked.append(n), next_picks(n))[1]
    loop.step()  # one flat job starts; the torch slots stay free
    assert len(loop.state.running) == 1 and asked == [1]
    loop.step()
    loop.stop()
    assert asked == [1] and len(loop.state.running) == 1
