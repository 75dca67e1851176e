"""A user's torch factory with no history is profiled on subsamples before
its first workload (ACAI §4.2.2), as a zoo net is, but every call into her
code runs as a MOP unit on the job's engine under her job's deadline (as her
training does), never on the job's own thread: the runs are paid for by her
job and teach the profiler her family, and a forward that hangs in a
profiling run fails her job at her limit, frees its slot, and leaves another
user's workload on the same engine to finish."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import cloudpickle
import numpy as np
import pytest
from torch import nn

from ease_jupyter import datasets
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.jobspec import parse_job
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.selection.profile_plan import plan_from_json
from ease_jupyter.service.loop.costs import Costs
from ease_jupyter.service.mop import run_torch_job
from ease_jupyter.service.profiling import (
    TAG_FULL_SECONDS,
    TAG_PLAN,
    TAG_RESOURCES,
    TAG_RUNS,
    ProfileBook,
    Resources,
    family_of,
)
from ease_jupyter.service.user_models import UserModel, UserModels
from ease_jupyter.store import InMemoryStore, JobStatus, MemoryBlobStore

N = 160
LIMIT = 20.0  # her job's limit (seconds): room for her code's child to start and load before the hang (10 s ran out once under load)
HANG_SECONDS = 40.0  # "forever" here; it ends, so that no test leaks a thread for long

TRAINED_ON: list[int] = []  # the threads her forward trained on (the worker's calls reach this module)


class NotesWhereItTrains(nn.Module):
    """A small net whose forward, when training, notes the thread it runs on."""

    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(inputs, outputs))

    def forward(self, x):
        if self.training:  # her child process's first forward is in eval mode: only training is noted
            TRAINED_ON.append(threading.get_ident())
        return self.net(x)


class HangsWhenTraining(nn.Module):
    """Returns in eval mode (her child's first forward), hangs once training starts."""

    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(inputs, outputs))

    def forward(self, x):
        started = time.monotonic()
        while self.training and time.monotonic() - started < HANG_SECONDS:
            time.sleep(0.1)
        return self.net(x)


def notes_where_it_trains(input_shape, output_shape):
    return NotesWhereItTrains(int(np.prod(input_shape)), output_shape[0])


def hangs_when_training(input_shape, output_shape):
    return HangsWhenTraining(int(np.prod(input_shape)), output_shape[0])


@pytest.fixture()
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images[:N] / 16.0).astype("float32")[..., None], d.target[:N].astype("int64")


@pytest.fixture()
def stores():
    return InMemoryStore(), MemoryBlobStore()


def image_task(stores, digits, user: str, name: str):
    store, blobs = stores
    owner = store.create_user(user, user[0] * 64)
    task = store.create_task(owner.id, name, format_program(program_from_shapes([8, 8, 1], [10])))
    return task, datasets.feed(store, blobs, task, *digits)


def her_job(stores, task, version, factory, *, limit: float, threads: int = 2):
    """Her factory stored as the service stores it, and a pick of it launched with a profiling plan."""
    store, blobs = stores
    code = cloudpickle.dumps(factory)
    UserModels(store).put(task.id, UserModel("mine", "factory", {"lr": [0.05]}, blobs.put_bytes(code), limit,
                                             len(code), factory.__name__, time.time()))
    spec = Costs(store, torch_epochs=1).configs(task)["mine"]
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    resources = Resources(threads=threads, partitions=1)
    store.set_tag("job", job.id, TAG_RESOURCES, resources.to_json())
    planned = ProfileBook(store).plan_profiling(job, task, spec, version.n_examples, resources)
    return job, spec, planned


def test_her_factorys_first_job_is_profiled_in_units_and_paid_for(stores, digits):
    store, blobs = stores
    task, version = image_task(stores, digits, "ada", "digits")
    job, spec, planned = her_job(stores, task, version, notes_where_it_trains, limit=120.0, threads=2)
    assert planned
    plan = plan_from_json(store.tags("job", job.id)[TAG_PLAN])
    # two subsample sizes, each at one thread (a unit's), whatever the job's threads
    assert len(plan) == 2 and {r.threads for r in plan} == {1} and all(r.n < N for r in plan)
    TRAINED_ON.clear()
    with LocalEngine(1) as engine:
        done = run_torch_job(store, blobs, engine, job.id, partitions=1)
    assert done.status is JobStatus.SUCCEEDED, done.error
    # her forward trained, and never on the job's own thread (this one): only in the engine's units
    assert TRAINED_ON and threading.get_ident() not in TRAINED_ON
    tags = store.tags("job", job.id)
    runs = json.loads(tags[TAG_RUNS])
    assert [(r["n"], r["threads"], r["epochs"]) for r in runs] == [(r.n, 1, 1) for r in plan]
    assert all(r["seconds"] > 0 for r in runs)
    full = float(tags[TAG_FULL_SECONDS])
    assert done.cost_seconds == pytest.approx(full + sum(r["seconds"] for r in runs))  # her budget pays for them
    # the runs are records of her family (one epoch, one partition, one thread each): it has history now
    book = ProfileBook(store)
    records = book.records()
    assert {f.family for f, _ in records} == {family_of(task, spec)} == {f"user:{task.owner_id}:{spec.code}"}
    assert sorted((f.n, f.epochs, f.partitions, f.threads) for f, _ in records[1:]) == \
        sorted((r.n, 1, 1, 1) for r in plan)
    assert [s for _, s in records] == pytest.approx([full] + [r["seconds"] for r in runs])
    book.refit()
    second = store.create_job(task.id, version.id, spec.model, spec.config())
    assert not book.plan_profiling(second, task, spec, version.n_examples)  # profiled once


def test_a_forward_that_hangs_in_profiling_fails_her_job_at_her_limit_and_no_one_elses(stores, digits):
    store, blobs = stores
    task, version = image_task(stores, digits, "ada", "digits-ada")
    job, _, planned = her_job(stores, task, version, hangs_when_training, limit=LIMIT)
    assert planned
    bob_task, bob_version = image_task(stores, digits, "bob", "digits-bob")
    his = store.create_job(bob_task.id, bob_version.id, "lenet", {"lrs": [0.05], "epochs": 1})
    with LocalEngine(1) as engine, ThreadPoolExecutor(2) as slots:  # two job slots, one engine worker
        first = engine.workers()
        started = time.monotonic()
        hers = slots.submit(run_torch_job, store, blobs, engine, job.id, partitions=1)
        time.sleep(LIMIT / 2)  # her first profiling unit holds the one worker, hung in her forward
        theirs = slots.submit(run_torch_job, store, blobs, engine, his.id, partitions=1)
        failed = hers.result(timeout=LIMIT + 30)  # her slot is free again: the job thread returned
        took = time.monotonic() - started
        finished = theirs.result(timeout=120)

        # Her child is killed at her limit, which frees the worker's thread; the unit's deadline
        # may abandon that thread first, and then a new worker replaces it. Either way one worker.
        def one_worker():  # the engine learns of workers as its events are read
            engine.events(0.1)
            return len(engine.workers()) == 1
        deadline = time.monotonic() + 30
        while not one_worker() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert one_worker(), (first, engine.workers())
    assert failed.status is JobStatus.FAILED
    assert "UserModelTimeout" in failed.error and "mine: a training unit of a profiling run" in failed.error, \
        failed.error
    assert LIMIT - 1 <= took < LIMIT + 10, took  # her limit decides, not the units' 300 s
    tags = store.tags("job", job.id)
    assert TAG_PLAN in tags and TAG_RUNS not in tags  # it failed in its profiling, before its workload
    assert finished.status is JobStatus.SUCCEEDED, finished.error  # his workload, on the same engine, finished
    assert parse_job(finished.model, finished.config).engine.value == "torch"


def test_no_run_of_her_factory_pays_for_starting_her_child():
    """The first unit on a worker starts her sandboxed child and imports torch
    there; a warm-up epoch takes that, so the smallest run's seconds are its own."""
    from ease_jupyter.selection.profile_plan import ProfileRun
    from ease_jupyter.service.profile_runs import profile_in_units

    start_seconds = 0.5
    calls = []

    def run_epoch(train, validation):  # her child starts on the first unit only
        if not calls:
            time.sleep(start_seconds)
        calls.append(len(train[1]))

    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((200, 4)).astype("float32"), rng.integers(0, 2, 200)
    runs = [ProfileRun(20, 1), ProfileRun(60, 1)]
    done = profile_in_units(runs, X, y, np.arange(200), run_epoch, name="net")
    assert [r["n"] for r in done] == [20, 60]
    assert done[0]["seconds"] < start_seconds  # the smallest run holds no child start
    assert len(calls) == len(runs) + 1 and calls[0] < calls[1]  # the warm-up came first, on fewer rows
