"""A task's arms are made once and kept across its versions; a user model
added through the service (``ControlLoop.models_changed``) or the task's
deletion makes them again, and a build that such a forget overtook is not kept."""

from __future__ import annotations

import numpy as np

from ease_jupyter import datasets
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.user_models import UserModel, UserModels
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor
from .test_loop_recovery import fed_task


def _loop_with_task():
    store, blobs, task = fed_task()  # 30 examples
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: ManualExecutor(store, workers=1)})
    loop.recover()
    return store, blobs, task, loop


def _own_model(blobs, name: str) -> UserModel:
    return UserModel(name, "estimator", {}, blobs.put_bytes(b"code"), 60.0, 4, "", 1.0)


def test_a_user_model_added_through_the_service_joins_the_next_turn():
    store, blobs, task, loop = _loop_with_task()
    loop.step()
    tenant = next(iter(loop.state.tenants.values()))
    assert "mine" not in tenant.configs
    UserModels(store).put(task.id, _own_model(blobs, "mine"))
    loop.models_changed(task.id)
    loop.step()
    tenant = next(iter(loop.state.tenants.values()))
    assert "mine" in tenant.configs  # joined the tenant (TenantSync._add_own)
    loop.stop()


def test_a_new_version_reuses_the_arms_without_reading_the_user_models_again(monkeypatch):
    store, blobs, task, loop = _loop_with_task()
    loop.step()
    reads = []
    real = UserModels.list
    monkeypatch.setattr(UserModels, "list", lambda self, task_id: (reads.append(task_id), real(self, task_id))[1])
    rng = np.random.default_rng(1)
    datasets.feed(store, blobs, task, rng.normal(size=(12, 4)).astype("float32"), rng.integers(0, 3, 12))
    loop.notify(task.id)
    loop.step()
    assert reads == []
    assert [t.n_examples for t in loop.state.tenants.values()] == [42]
    loop.stop()


def test_a_build_overtaken_by_a_forget_is_not_kept(monkeypatch):
    store, blobs, task, loop = _loop_with_task()
    costs = loop.costs
    costs.forget(task.id)
    real = UserModels.list

    def list_then_add(self, task_id):  # another thread adds a model while this build reads
        found = real(self, task_id)
        UserModels(store).put(task_id, _own_model(blobs, "late"))
        costs.forget(task_id)
        return found

    monkeypatch.setattr(UserModels, "list", list_then_add)
    assert "late" not in costs.configs(task)
    monkeypatch.setattr(UserModels, "list", real)
    assert "late" in costs.configs(task)
    loop.stop()
