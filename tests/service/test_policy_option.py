"""``easeml serve --policy NAME`` (``ServiceConfig.policy``) chooses the
selection rule of the live service, and the worker processes start with the
service rather than at its first job."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.selection import DEFAULT_POLICY
from ease_jupyter.service import ServiceConfig
from ease_jupyter.service.candidates import arm_specs
from ease_jupyter.service.config import LIVE_POLICIES
from ease_jupyter.service.core import Service
from ease_jupyter.service.executors import ProcessExecutor
from ease_jupyter.service.testing import worker_processes
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.store import InMemoryStore, MemoryBlobStore
from ease_jupyter.testing.executor_contract import ContractRunner
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor

FLAT = format_program(program_from_shapes([4], [3]))


def manual(store) -> ManualExecutor:
    """Jobs that finish when the test says so (``finish_all``)."""
    return ManualExecutor(store, workers=2, accuracy=lambda job: 0.5 + 0.01 * job.id)


def _two_tasks():
    store, blobs = InMemoryStore(), MemoryBlobStore()
    rng = np.random.default_rng(0)
    tasks = []
    for name in ("first", "second"):
        user = store.create_user(name, name[0] * 64)
        task = store.create_task(user.id, name, FLAT)
        datasets.feed(store, blobs, task, rng.normal(size=(40, 4)).astype("float32"), rng.integers(0, 3, 40))
        tasks.append(task)
    return store, blobs, tasks


def test_the_policy_names_a_live_rule_or_is_refused_naming_the_field():
    assert ServiceConfig().policy == DEFAULT_POLICY == LIVE_POLICIES[0]
    assert {"default", "hybrid", "greedy", "round_robin", "fifo"} <= set(LIVE_POLICIES)
    for bad in ("oracle", "oracle_greedy", "nope"):
        with pytest.raises(ValueError, match=r"^policy: found '.*', expected one of default, hybrid"):
            ServiceConfig(policy=bad)


def test_serve_refuses_an_unknown_policy_naming_the_option(tmp_path):
    from click.testing import CliRunner

    from ease_jupyter.cli import main

    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), "--policy", "oracle"])
    assert result.exit_code == 2
    assert "'--policy'" in result.output and "expected one of default" in result.output


def test_serve_passes_the_policy_to_the_service(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from ease_jupyter import service
    from ease_jupyter.cli import main

    served: list[ServiceConfig] = []
    monkeypatch.setattr(service, "serve", lambda config, **kw: served.append(config))
    for args, expected, cross_user in (([], DEFAULT_POLICY, True), (["--policy", "fifo"], "fifo", True),
                                       (["--no-cross-user-prior"], DEFAULT_POLICY, False)):
        result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), *args])
        assert result.exit_code == 0, result.output
        assert served[-1].policy == expected and served[-1].cross_user_prior is cross_user


def test_fifo_trains_each_task_whole_in_arrival_order_and_says_so():
    store, blobs, (first, second) = _two_tasks()
    executor = manual(store)
    decisions: list[dict] = []
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, policy="fifo",
                       on_decision=decisions.append)
    loop.recover()
    assert loop.selector.policy == "fifo"
    for _ in range(8):
        loop.step()
        executor.finish_all()
    loop.stop()
    zoo_order = list(arm_specs(first, torch_epochs=None))
    assert [(d["task_id"], d["model"]) for d in decisions] == (
        [(first.id, m) for m in zoo_order] + [(second.id, m) for m in zoo_order])
    assert decisions[0]["rule"] == "fifo" and decisions[0]["chooser"] == "fixed"


def test_fifo_serves_the_next_task_while_the_first_ones_owner_is_at_her_cap():
    """First come, first served under ACAI's per-user cap: the head of the
    queue is held at her cap, and the free worker goes to the next task
    (the rule keeps offering the head's models; the loop asks until one fits)."""
    store, blobs, (first, second) = _two_tasks()
    executor = manual(store)
    executor.workers = 3
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, policy="fifo", max_running_per_user=2)
    loop.recover()
    loop.step()
    launched = [store.get_job(job_id).task_id for job_id, _ in executor.running]
    assert sorted(launched) == [first.id, first.id, second.id]
    assert len(loop.selector.pending()) == 3  # the launched ones: the held picks went back to the pool
    loop.stop()


def test_a_restart_under_another_policy_rebuilds_the_selector_from_the_jobs():
    store, blobs, _ = _two_tasks()
    executor = manual(store)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, policy="hybrid")
    loop.recover()
    for _ in range(2):
        loop.step()
        executor.finish_all()
    loop.step()
    observed = {name: loop.selector.stats(name)["n_obs"] for name in loop.selector.users}
    assert sum(observed.values()) >= 4
    loop.stop()  # saves a state that ran "hybrid"

    again = ControlLoop(store, blobs, executors={Engine.SKLEARN: manual(store)})
    again.recover()
    assert again.selector.policy == DEFAULT_POLICY and again.selector.users == []  # not the saved one
    again._sync()  # the tenant sync replays the jobs in the store
    assert {name: again.selector.stats(name)["n_obs"] for name in again.selector.users} == observed


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_worker_processes_start_with_the_service_before_any_job(tmp_path):
    service = Service(ServiceConfig(data_dir=tmp_path, executor="process", workers=2, policy="fifo"))
    try:
        service.start()
        assert service.loop.selector.policy == "fifo"  # ServiceConfig.policy reaches the selector
        sklearn, torch = service.loop.executors[Engine.SKLEARN], service.loop.executors[Engine.TORCH]
        assert isinstance(sklearn, ProcessExecutor) and isinstance(torch, ProcessExecutor)
        assert not service.store.list_jobs()
        pids = sklearn.worker_pids()
        assert len(pids) == 2 and len(torch.worker_pids()) == 1  # the torch jobs share one process
        assert set(pids) | set(torch.worker_pids()) <= set(worker_processes(os.getpid()))
    finally:
        service.stop()


def test_the_first_job_runs_on_a_worker_started_before_it(tmp_path):
    from ease_jupyter.store import open_store

    store, blobs = open_store(None, tmp_path)
    user = store.create_user("u", "u" * 64)
    task = store.create_task(user.id, "t", "input: [2] output: [2]")
    version = datasets.feed(store, blobs, task, np.zeros((4, 2), dtype=np.float32), np.arange(4) % 2)
    executor = ProcessExecutor(ContractRunner(), None, tmp_path, 1)
    try:
        before = executor.worker_pids()
        assert len(before) == 1
        job = store.create_job(task.id, version.id, "contract", {})
        executor.submit(job.id).result(120)
        assert int(store.tags("job", job.id)["pid"]) == before[0]
    finally:
        executor.shutdown()
        store.close()
