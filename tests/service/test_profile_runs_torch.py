"""A family's first torch job is profiled before its MOP workload (ACAI
§4.2.2): its first config trains one epoch on subsamples of the task's
training rows at the planned threads, the runs' seconds are counted in the
job's cost and become profiler records, and a resumed job does not profile
again."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from ease_jupyter import datasets
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.mop.partitions import split_validation
from ease_jupyter.jobspec import parse_job
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.selection.profile_plan import ProfileRun, plan_from_json
from ease_jupyter.service import profile_runs
from ease_jupyter.service.mop import run_torch_job
from ease_jupyter.service.profiling import (
    TAG_FULL_SECONDS,
    TAG_PLAN,
    TAG_RESOURCES,
    TAG_RUNS,
    ProfileBook,
    Resources,
)
from ease_jupyter.store import InMemoryStore, JobStatus, MemoryBlobStore

N = 160
PAUSE = 0.1
CONFIG = {"lrs": [0.05], "epochs": 1}


@pytest.fixture()
def torch_task():
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.images[:N] / 16.0).astype("float32")[..., None]  # [n, 8, 8, 1]
    y = d.target[:N].astype("int64")
    store, blobs = InMemoryStore(), MemoryBlobStore()
    user = store.create_user("ada", "h" * 64)
    task = store.create_task(user.id, "digits", format_program(program_from_shapes([8, 8, 1], [10])))
    version = datasets.feed(store, blobs, task, X, y)
    engine = LocalEngine(1)
    yield store, blobs, engine, task, version
    engine.close()


def _launch(store, book, task, version, threads=2, config=CONFIG, partitions=1):
    """A lenet pick launched as the control loop launches it (``Costs.record_launch``)."""
    job = store.create_job(task.id, version.id, "lenet", config)
    resources = Resources(threads=threads, partitions=partitions)
    store.set_tag("job", job.id, TAG_RESOURCES, resources.to_json())
    planned = book.plan_profiling(job, task, parse_job("lenet", config), version.n_examples, resources)
    return job, planned


@pytest.fixture()
def profiled_units(monkeypatch):
    """Every profiling run's (examples, torch threads) as its epoch starts;
    ``fail`` names run sizes that raise. Each run also waits ``PAUSE``
    seconds (and says so), so that its time is seen in the job's."""
    seen: list[tuple[int, int]] = []
    fail: set[int] = set()
    epoch = profile_runs.one_epoch

    def spy(spec, X, y, hooks):
        seen.append((len(y), torch.get_num_threads()))
        if len(y) in fail:
            raise RuntimeError("a profiling run that breaks")
        time.sleep(PAUSE)
        return PAUSE + epoch(spec, X, y, hooks)

    monkeypatch.setattr(profile_runs, "one_epoch", spy)
    return seen, fail


def _training_sizes(store, blobs, version, runs):
    data = datasets.load(store, blobs, version)
    (_, y_train), _ = split_validation(np.asarray(data.X), np.asarray(data.y), example_ids=data.split_keys, seed=0)
    return [max(2, round(r.n / N * len(y_train))) for r in runs], len(y_train)


def test_a_planned_torch_job_records_its_runs_and_pays_for_them(torch_task, profiled_units):
    store, blobs, engine, task, version = torch_task
    seen, _ = profiled_units
    book = ProfileBook(store)
    job, planned = _launch(store, book, task, version, threads=2, config={"lrs": [0.05], "epochs": 2}, partitions=2)
    assert planned
    plan = plan_from_json(store.tags("job", job.id)[TAG_PLAN])
    assert plan == (ProfileRun(32, 1), ProfileRun(32, 2), ProfileRun(40, 1), ProfileRun(40, 2))
    before = torch.get_num_threads()
    started = time.monotonic()
    done = run_torch_job(store, blobs, engine, job.id, partitions=2)
    wall = time.monotonic() - started
    assert done.status is JobStatus.SUCCEEDED, done.error
    assert torch.get_num_threads() == before  # the runs' threads are restored
    # each run trained one epoch on its share of the training rows only, at its threads
    sizes, train_rows = _training_sizes(store, blobs, version, plan)
    assert all(s < train_rows for s in sizes)
    assert seen == [(s, r.threads) for s, r in zip(sizes, plan)]
    tags = store.tags("job", job.id)
    runs = json.loads(tags[TAG_RUNS])
    assert [(r["n"], r["threads"], r["epochs"]) for r in runs] == [(r.n, r.threads, 1) for r in plan]
    assert all(r["seconds"] > 0 for r in runs)
    full = float(tags[TAG_FULL_SECONDS])
    assert 0 < full < done.cost_seconds <= wall  # the runs are counted once: not in the workload's own seconds
    assert done.cost_seconds == pytest.approx(full + sum(r["seconds"] for r in runs))

    # the profiler learns from the full workload at its own seconds and from each one-epoch run
    records = book.records()
    assert [s for _, s in records] == pytest.approx([full] + [r["seconds"] for r in runs])
    assert [(f.n, f.points, f.epochs, f.partitions, f.threads) for f, _ in records] == (
        [(N, 1, 2, 2, 2)] + [(r.n, 1, 1, 1, r.threads) for r in plan])
    assert {(f.family, f.engine) for f, _ in records} == {("lenet", "torch")}

    # the family has a planned job that did not fail: the next one trains unprofiled
    second, planned = _launch(store, book, task, version)
    assert not planned and TAG_PLAN not in store.tags("job", second.id)


def test_a_failing_profiling_run_does_not_fail_the_job(torch_task, profiled_units):
    store, blobs, engine, task, version = torch_task
    seen, fail = profiled_units
    job, planned = _launch(store, ProfileBook(store), task, version, threads=1)
    plan = plan_from_json(store.tags("job", job.id)[TAG_PLAN])
    assert planned and len(plan) == 2
    sizes, _ = _training_sizes(store, blobs, version, plan)
    fail.add(sizes[0])
    done = run_torch_job(store, blobs, engine, job.id, partitions=1)
    assert done.status is JobStatus.SUCCEEDED, done.error
    assert len(seen) == 2  # both were tried
    runs = json.loads(store.tags("job", job.id)[TAG_RUNS])
    assert [(r["n"], r["threads"]) for r in runs] == [(plan[1].n, plan[1].threads)]
    full = float(store.tags("job", job.id)[TAG_FULL_SECONDS])
    assert done.cost_seconds == pytest.approx(full + runs[0]["seconds"])


def test_a_job_resumed_after_its_runs_does_not_profile_again(torch_task, profiled_units):
    store, blobs, engine, task, version = torch_task
    seen, _ = profiled_units
    job, planned = _launch(store, ProfileBook(store), task, version, threads=1)
    assert planned
    # a restart after the runs were recorded (the service keeps them on the job)
    earlier = [{"n": 32, "threads": 1, "seconds": 3.5, "epochs": 1}]
    store.set_tag("job", job.id, TAG_RUNS, json.dumps(earlier))
    done = run_torch_job(store, blobs, engine, job.id, partitions=1)
    assert done.status is JobStatus.SUCCEEDED, done.error
    assert seen == []
    assert json.loads(store.tags("job", job.id)[TAG_RUNS]) == earlier
    full = float(store.tags("job", job.id)[TAG_FULL_SECONDS])
    assert done.cost_seconds == pytest.approx(full + 3.5)  # the runs done before the restart are still paid for


def test_a_job_without_a_plan_is_not_profiled(torch_task, profiled_units):
    store, blobs, engine, task, version = torch_task
    seen, _ = profiled_units
    job = store.create_job(task.id, version.id, "lenet", CONFIG)
    done = run_torch_job(store, blobs, engine, job.id, partitions=1)
    assert done.status is JobStatus.SUCCEEDED, done.error
    tags = store.tags("job", job.id)
    assert seen == [] and TAG_RUNS not in tags and TAG_FULL_SECONDS not in tags


def test_one_epoch_trains_every_example_once_at_the_threads_it_is_given(torch_task):
    from ease_jupyter.execution.units import Hooks, UnitSpec, default_train_fn
    from ease_jupyter.service.candidates import candidate_of

    calls = []

    def train_fn(net, opt, X, y, spec, generator, **kw):
        before = [p.detach().clone() for p in net.parameters()]
        out = default_train_fn(net, opt, X, y, spec, generator, **kw)
        calls.append((int(X.shape[0]), torch.get_num_threads(), out["examples"],
                      any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))))
        return out

    rng = np.random.default_rng(0)
    X, y = rng.random((40, 8, 8, 1), dtype=np.float32), rng.integers(0, 10, 40)
    lenet = candidate_of(torch_task[3], parse_job("lenet", CONFIG))
    spec = UnitSpec.of("t0", lenet.name, {"lr": 0.05}, lenet.build)
    with profile_runs.torch_threads(2):
        seconds = profile_runs.one_epoch(spec, X, y, Hooks(train_fn=train_fn))
    assert seconds > 0 and calls == [(40, 2, 40.0, True)]


def test_a_torch_job_trains_on_the_partitions_it_was_provisioned(torch_task):
    """The provisioner's partitions, unless the admin fixed them (--mop-partitions)."""
    from ease_jupyter.service.mop import PROGRESS_TAG

    store, blobs, engine, task, version = torch_task
    for provisioned, fixed, expected in ((3, None, 3), (3, 2, 2)):
        job = store.create_job(task.id, version.id, "lenet", CONFIG)
        store.set_tag("job", job.id, TAG_RESOURCES, Resources(workers=provisioned, partitions=provisioned).to_json())
        done = run_torch_job(store, blobs, engine, job.id, partitions=fixed)
        assert done.status is JobStatus.SUCCEEDED, done.error
        assert json.loads(store.tags("job", job.id)[PROGRESS_TAG])["partitions"] == expected
