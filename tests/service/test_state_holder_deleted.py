"""A task deleted between a turn's snapshot of the selector state (taken
under the loop's lock, with the newest job as its holder) and the write of
that snapshot (outside the lock): the write finds its job gone. The turn
does not fail; the state stays unsaved and the next turn saves it on the
job that holds it then."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.errors import NotFoundError
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service import budget as budgets
from ease_jupyter.service.loop import ControlLoop, saved_state_digest
from ease_jupyter.store import InMemoryStore, MemoryBlobStore
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor


def two_tasks():
    store, blobs = InMemoryStore(), MemoryBlobStore()
    rng = np.random.default_rng(0)
    tasks = {}
    for name in ("ada", "bob"):
        user = store.create_user(name, name[0] * 64)
        task = store.create_task(user.id, f"{name}_task", format_program(program_from_shapes([4], [3])))
        datasets.feed(store, blobs, task, rng.normal(size=(30, 4)).astype("float32"), rng.integers(0, 3, 30))
        tasks[name] = task
    return store, blobs, tasks


@pytest.mark.parametrize("via", ["loop", "store"])
def test_a_state_write_whose_job_was_deleted_is_saved_next_turn_on_the_current_one(via):
    store, blobs, tasks = two_tasks()
    ada, bob = tasks["ada"], tasks["bob"]
    executor = ManualExecutor(store, workers=2)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=1)
    loop.recover()
    loop.step()  # a pick each
    executor.finish_all()
    budgets.write_limits(store, bob.owner_id, budgets.OWN_PREFIX, {"seconds": 0.001})  # bob gets no more
    loop.budget_changed(bob.owner_id)
    loop.step()  # ada's next pick: the newest job
    executor.finish_all()
    holder = loop.state.last_job_id
    assert store.get_job(holder).task_id == ada.id
    bobs_newest = max(j.id for j in store.list_jobs(bob.id))
    store.set_task_cancelled(ada.id, True)  # a deletion cancels the task first
    loop.notify(ada.id)

    writes: list[tuple[int, str]] = []
    write = loop._write_state

    def deleted_meanwhile(job_id: int, data: bytes) -> None:
        if not writes:  # the task goes between the snapshot and its write
            writes.append((job_id, "snapshot"))
            if via == "loop":  # the service's deletion: the loop moves the holder and saves on it
                loop.forget_task(ada.id, ada.name, lambda: store.delete_task(ada.id), wait_seconds=5)
            else:  # rows deleted behind the loop's back: nothing moved the holder
                store.delete_task(ada.id)
        try:
            write(job_id, data)
        except NotFoundError:
            writes.append((job_id, "not found"))
            raise
        writes.append((job_id, "saved"))

    loop._write_state = deleted_meanwhile
    loop.step()  # collects ada's job, drops her tenant, snapshots on her job: its write finds it gone
    assert loop.error is None
    moved = [(bobs_newest, "saved")] if via == "loop" else []
    assert writes == [(holder, "snapshot"), *moved, (holder, "not found")]
    assert loop.saved.unsaved  # not lost: the next turn saves it
    loop.step()
    assert writes[-1] == (bobs_newest, "saved") and len(writes) == 3 + len(moved)
    assert loop.state.last_job_id == bobs_newest and not loop.saved.unsaved
    job_id, digest = saved_state_digest(store)
    assert job_id == bobs_newest
    assert json.loads(blobs.get_bytes(digest)) == loop.selector.to_dict()
    loop.step()  # nothing changed: nothing more to save
    assert len(writes) == 3 + len(moved)
    loop.stop()
