"""The service measures the torch pool's devices and prices the arms by
them, tenants registered before the measurement included (GP-UCB's c_k,
pvldb §4.1)."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.execution.device_speed import DeviceSpeed, PoolSpeeds
from ease_jupyter.execution.engine import GPU, LocalEngine
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.config import ServiceConfig
from ease_jupyter.service.core import Service, _may_have_gpus
from ease_jupyter.service.mop import TorchJobs, measure_torch_pool

from .conftest import until


@pytest.fixture
def service(tmp_path):
    svc = Service(ServiceConfig(db_url="memory://", data_dir=tmp_path, executor="thread", tick_seconds=0.05))
    yield svc
    svc.stop()


def _image_tenant(svc) -> str:
    user = svc.store.create_user("ada", "h" * 64)
    task = svc.store.create_task(user.id, "digits", format_program(program_from_shapes([8, 8, 1], [4])))
    rng = np.random.default_rng(0)
    datasets.feed(svc.store, svc.blobs, task, rng.standard_normal((40, 8, 8, 1)), rng.integers(0, 4, 40))
    svc.loop.recover()  # registers the tenant (what the first turn would do), without starting jobs
    with svc.loop._lock:
        svc.loop.tenant_sync.sync()
    (name,) = svc.loop.state.tenants
    return name


def _costs(svc, tenant: str) -> dict[str, float]:
    user = next(u for u in svc.loop.selector.to_dict()["users"] if u and u["name"] == tenant)
    return dict(zip(user["models"], user["cost"]))


def test_measured_speeds_reprice_the_tenants_already_registered(service):
    tenant = _image_tenant(service)
    before = _costs(service, tenant)
    cpu = DeviceSpeed("cpu", 1e9)
    service.loop.use_speeds(PoolSpeeds(torch=DeviceSpeed("cuda:Fake", 4e10), sklearn=cpu))
    after = _costs(service, tenant)
    assert set(after) == set(before) and before
    for arm in before:  # 40x the speed: 40x cheaper, unless at the 1 ms floor
        assert after[arm] == pytest.approx(max(before[arm] / 40, 1e-3), rel=1e-6), arm


def test_a_pool_without_gpu_workers_is_not_measured():
    runner = TorchJobs("local", 1)
    assert measure_torch_pool(None, None, runner) is None


def test_the_service_measures_a_gpu_pool_where_its_torch_jobs_run(service, monkeypatch):
    monkeypatch.setattr(TorchJobs, "make_engine", lambda self: LocalEngine(1, worker_resources=[{GPU: 1}]))
    tenant = _image_tenant(service)
    before = _costs(service, tenant)
    speeds = service.measure_devices().result(timeout=120)
    assert speeds.torch.flops_per_second > 0 and len(speeds.workers) == 1
    # the measuring thread reprices after it set the result (a done-callback): wait for it
    assert until(lambda: service.loop.costs.speeds is speeds and _costs(service, tenant) != before, 30)


def test_only_pools_that_may_have_gpus_are_measured_at_start():
    assert _may_have_gpus(ServiceConfig(engine="tcp://127.0.0.1:8786"))
    assert not _may_have_gpus(ServiceConfig(engine="tcp://127.0.0.1:8786", torch=False))
