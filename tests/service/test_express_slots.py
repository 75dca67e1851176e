"""Express slots (``Admission.pick_express``): while every worker is busy, a
task's first pick, predicted short, starts at once on a slot of its own."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service import ServiceConfig
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.scheduler_view import Viewer, decision_view
from ease_jupyter.store import InMemoryStore, JobStatus, MemoryBlobStore
from ease_jupyter.zoo import Engine

from .conftest import IRIS_MODELS, ManualExecutor, start

LONG, SHORT = 300.0, 0.5  # hand-made predicted seconds: every arm of a "costly" task, of any other


def add_task(store, blobs, owner: str, name: str, shape=(4,)):
    user = store.create_user(owner, owner[0] * 64)
    task = store.create_task(user.id, name, format_program(program_from_shapes(list(shape), [3])))
    rng = np.random.default_rng(len(name))
    datasets.feed(store, blobs, task, rng.normal(size=(30, *shape)).astype("float32"), rng.integers(0, 3, 30))
    return task


def active(store, task) -> list:
    return [j for j in store.list_jobs(task.id) if j.status in (JobStatus.QUEUED, JobStatus.RUNNING)]


class Case:
    """One worker slot, busy with Eve's costly task; ``express`` slots beside it."""

    def __init__(self, express: int, engine: Engine = Engine.SKLEARN):
        self.store, self.blobs = InMemoryStore(), MemoryBlobStore()
        self.shape = (8, 8, 1) if engine is Engine.TORCH else (4,)  # an image task's arms are torch nets
        self.worker = ManualExecutor(self.store, workers=1)
        self.express = ManualExecutor(self.store, workers=express) if express else None
        self.loop = ControlLoop(self.store, self.blobs, executors={engine: self.worker},
                                express={engine: self.express} if express else None,
                                max_running_per_user=2, torch_epochs=1 if engine is Engine.TORCH else None)
        # the profiler and the FLOPs proxy are not under test: every arm costs what the case says
        self.loop.costs.arm_costs = lambda task, configs, arms, n: {
            k: LONG if task.name.startswith("costly") else SHORT for k in arms}
        self.loop.recover()
        self.costly = self.arrive("eve", "costly")

    def arrive(self, owner: str, name: str):
        task = add_task(self.store, self.blobs, owner, name, self.shape)
        self.loop.notify(task.id)
        self.loop.step()  # no job finishes here: what starts, starts within the newcomer's own wait
        return task

    def stop(self) -> None:
        self.loop.stop()


@pytest.fixture
def case():
    made: list[Case] = []

    def make(express: int, engine: Engine = Engine.SKLEARN) -> Case:
        made.append(Case(express, engine))
        return made[-1]

    yield make
    for c in made:
        c.stop()


def test_a_newcomers_short_first_pick_starts_on_the_express_slot_while_the_worker_is_busy(case):
    c = case(express=1)
    assert len(active(c.store, c.costly)) == 1 and len(c.worker.running) == 1  # eve's costly pick has the worker
    fay = c.arrive("fay", "cheap")
    assert len(active(c.store, fay)) == 1  # no job ended, and yet her first model trains
    assert [job_id for job_id, _ in c.express.running] == [j.id for j in active(c.store, fay)]
    assert len(c.worker.running) == 1 and len(active(c.store, c.costly)) == 1  # the worker's job is eve's still


def test_an_image_newcomers_first_net_starts_on_the_torch_express_slot(case):
    c = case(express=1, engine=Engine.TORCH)
    assert len(active(c.store, c.costly)) == 1 and len(c.worker.running) == 1  # eve's costly net has the slot
    fay = c.arrive("fay", "small images")
    (job,) = active(c.store, fay)
    assert [job_id for job_id, _ in c.express.running] == [job.id]
    assert c.loop.state.running[job.id].engine is Engine.TORCH and c.loop.state.running[job.id].express


def test_the_express_slot_takes_one_first_pick_and_no_second_one(case):
    c = case(express=1)
    fay = c.arrive("fay", "cheap")
    gus = c.arrive("gus", "cheap too")  # the express slot is busy with fay's first pick
    assert len(active(c.store, fay)) == 1 and active(c.store, gus) == []
    c.express.finish_all()
    c.loop.step()  # fay's result is in: her next pick is not a first one, so gus's goes express
    assert c.loop.selector.stats(c.loop.admission.last_decision["tenant"])["n_obs"] == 0
    assert [j.task_id for j in active(c.store, gus)] == [gus.id]
    assert len(active(c.store, fay)) == 0  # fay waits for the worker like everyone with a result
    decision = c.loop.admission.last_decision
    assert decision["express"] is True
    viewer = Viewer(c.store.list_users(), decision["owner_id"], admin=False)
    words = decision_view(decision, viewer, {gus.id: gus.name})["reason"]
    assert words.startswith("serving you next: ") and "because it is your task's first model" in words


def test_a_pick_after_her_first_result_waits_for_a_worker(case):
    c = case(express=1)
    fay = c.arrive("fay", "cheap")
    c.express.finish_all()
    c.loop.step()  # her first result is in, nothing of hers runs, and the express slot is free
    assert active(c.store, fay) == [] and c.express.running == []


def test_a_newcomers_costly_first_pick_waits_for_a_worker(case):
    c = case(express=1)
    newcomer = c.arrive("fay", "costly too")  # predicted over long_job_seconds: not express
    assert active(c.store, newcomer) == [] and c.express.running == []


def test_a_costly_newcomer_first_in_line_does_not_hold_back_a_quick_one(case):
    c = case(express=1)
    fay = add_task(c.store, c.blobs, "fay", "costly too")  # arrives first, every model long
    gus = add_task(c.store, c.blobs, "gus", "cheap")
    c.loop.notify(fay.id)
    c.loop.notify(gus.id)
    c.loop.step()
    assert active(c.store, fay) == [] and len(active(c.store, gus)) == 1
    assert [job_id for job_id, _ in c.express.running] == [j.id for j in active(c.store, gus)]
    c.loop.step()  # fay's pick went back to the pool: she is still a newcomer, first in line for a worker
    tenant = next(name for name, t in c.loop.state.tenants.items() if t.task_id == fay.id)
    assert c.loop.selector.stats(tenant)["pending"] == []


def test_the_express_workers_start_only_once_the_engines_own_slots_fill():
    store, blobs = InMemoryStore(), MemoryBlobStore()
    worker, express = ManualExecutor(store, workers=2), ManualExecutor(store, workers=1)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: worker}, express={Engine.SKLEARN: express},
                       max_running_per_user=1)
    loop.recover()
    try:
        for owner in ("eve", "fay"):
            loop.notify(add_task(store, blobs, owner, f"{owner}'s task").id)
            loop.step()
            # eve's one pick leaves a worker free: no process for a slot nobody can use yet
            assert express.warmed == (0 if owner == "eve" else 1), owner
        assert len(worker.running) == 2 and express.running == []  # full now, and warmed, but nobody new waits
    finally:
        loop.stop()


def test_without_express_slots_the_newcomer_waits(case):
    c = case(express=0)
    fay = c.arrive("fay", "cheap")
    assert active(c.store, fay) == []  # she waits for eve's costly job to end
    c.worker.finish_all()
    c.loop.step()
    assert len(active(c.store, fay)) == 1


def test_express_results_reach_the_selector_like_any_other(case):
    c = case(express=1)
    fay = c.arrive("fay", "cheap")
    (job_id, _), = c.express.running
    c.express.finish_all(lambda job: 0.9)
    c.loop.step()
    tenant = next(name for name, t in c.loop.state.tenants.items() if t.task_id == fay.id)
    assert c.loop.selector.stats(tenant)["n_obs"] == 1 and c.loop.selector.best(tenant)[1] == pytest.approx(0.9)
    assert c.store.get_job(job_id).status is JobStatus.SUCCEEDED and job_id not in c.loop.state.running


@pytest.mark.parametrize("value", [-1, 65, True, 1.5])
def test_express_slots_out_of_range_name_the_field(tmp_path, value):
    with pytest.raises(ValueError, match="express_slots"):
        ServiceConfig(data_dir=tmp_path, express_slots=value)


def test_a_service_with_an_express_slot_trains_its_tasks(tmp_path, iris):
    running = start(tmp_path, express_slots=1)
    try:
        loop = running.service.loop
        express = loop.state.express[Engine.SKLEARN]
        submitted: list[int] = []
        submit = express.submit
        express.submit = lambda job_id: (submitted.append(job_id), submit(job_id))[1]
        tasks = []
        with loop._lock:  # both tasks are fed before the loop's next turn: one worker, two first picks
            for name in ("alice", "bob"):
                running.user(name)
                tasks.append(running.client(name).task("iris", input=[4], output=[3]))
                tasks[-1].feed(*iris)
        for task in tasks:
            assert task.wait(timeout=120)
            jobs = task.jobs()
            assert len({j["model"] for j in jobs}) == IRIS_MODELS and all(j["status"] == "succeeded" for j in jobs)
        assert len(submitted) == 1  # the second first pick, while the worker had the other
        first = min(j["id"] for t in tasks for j in t.jobs())
        assert submitted[0] != first
    finally:
        running.thread.stop()
