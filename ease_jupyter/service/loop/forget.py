"""Forgetting a task that is being deleted: its jobs end first, then its
tenants leave the selector, its rows leave the store (``remove``), and the
selector state is saved again, all in one turn's place under the loop's lock.

The task is cancelled before (so no pick of it starts and the next tenant
sync cancels its queued jobs). A running job cannot be stopped midway
without losing what it trained, so its end is waited for; a job still
running after ``wait_seconds`` makes the deletion an ``InvalidStateError``
that says so, and the task stays cancelled, to be deleted once it is idle.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable, TypeVar

from ...errors import InvalidStateError, StorageError
from ..runner import one_blas_thread

if TYPE_CHECKING:
    from .control import ControlLoop

log = logging.getLogger(__package__)  # one logger for the whole loop

T = TypeVar("T")
POLL_SECONDS = 0.05


def forget_task(loop: "ControlLoop", task_id: int, name: str, remove: Callable[[], T], *,
                wait_seconds: float) -> T:
    """``remove()`` (the store's deletion) once no job of the task runs,
    with the loop's lock held; the selector forgets the task's tenants and
    the saved state moves to the newest job left (the old holder may be
    one of the deleted jobs). Returns what ``remove`` returned."""
    state = loop.state
    deadline = time.monotonic() + wait_seconds
    loop.notify(task_id)  # the next turn cancels its queued jobs and drops its tenant
    while True:
        with loop._lock, one_blas_thread():
            running = sorted(r.job_id for r in state.running.values() if r.task_id == task_id)
            if not running:
                result = remove()
                loop.costs.forget(task_id)  # a new task may get its id
                for tenant in [n for n, t in state.tenants.items() if t.task_id == task_id]:
                    state.selector.remove_user(tenant)
                    del state.tenants[tenant]
                state.keep_state_holder()  # it moves only if the deleted task had it
                loop.saved.unsaved = True
                try:
                    loop._save_state()
                except StorageError as error:  # a later turn saves it
                    log.warning("could not save the selector state after deleting task %d: %s", task_id, error)
                return result
        if time.monotonic() >= deadline:
            raise InvalidStateError(
                f"task {name!r}: job(s) {', '.join(map(str, running))} still running after {wait_seconds:g} s, "
                "expected none; the task is cancelled, so no new job starts: delete it again once they finish")
        loop.notify()
        time.sleep(POLL_SECONDS)
