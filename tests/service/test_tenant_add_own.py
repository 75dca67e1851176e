"""A user model that joins a running tenant (``TenantSync._add_own``) while
one of the tenant's arms is missing from the task's configs made again (a
model removed since): the join goes through and the tenant keeps its arms."""

from __future__ import annotations

from ease_jupyter.service.user_models import UserModels

from .test_loop_arm_cache import _loop_with_task, _own_model


def test_a_model_joins_a_tenant_whose_configs_lost_an_arm(monkeypatch):
    store, blobs, task, loop = _loop_with_task()
    loop.step()
    tenant = next(iter(loop.state.tenants.values()))
    before = dict(tenant.configs)
    dropped = next(iter(before))
    UserModels(store).put(task.id, _own_model(blobs, "mine"))
    real = loop.costs.configs
    monkeypatch.setattr(loop.costs, "configs",
                        lambda t: {k: v for k, v in real(t).items() if k != dropped})
    loop.models_changed(task.id)
    loop.step()
    tenant = next(iter(loop.state.tenants.values()))
    assert "mine" in tenant.configs and tenant.configs[dropped] == before[dropped]
    assert set(before) < set(tenant.configs)
    loop.stop()
