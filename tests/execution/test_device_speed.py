"""The device speed probe: its unit (``Candidate.cost`` FLOPs per second) and
one probe per device kind of a pool, cached by kind."""

from __future__ import annotations

import threading

import pytest

from ease_jupyter.errors import EaseMLError
from ease_jupyter.execution import device_speed
from ease_jupyter.execution.device_speed import (
    PROBE_BATCH,
    PROBE_SHAPE,
    DeviceSpeed,
    measure_pool,
    measure_speed,
)
from ease_jupyter.execution.engine.local import LocalEngine
from ease_jupyter.execution.gpu_memory import WorkerDevice
from ease_jupyter.zoo import nets
from ease_jupyter.zoo.cost import torch_train_flops


def test_the_probe_speaks_candidate_cost_flops_per_second(monkeypatch):
    """With a clock that advances 0.25 s per reading, the timed steps take a
    known time; the speed must be the zoo's FLOP count of those steps (3 x
    forward per example, x batch) over it."""
    readings: list[float] = []

    def clock() -> float:
        readings.append(0.25 * len(readings))
        return readings[-1]

    steps: list[int] = []
    real = nets.ZooModule.train_step

    def counted(self, *args, **kwargs):
        steps.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(device_speed, "perf_counter", clock)
    monkeypatch.setattr(nets.ZooModule, "train_step", counted)
    speed = measure_speed("cpu", min_seconds=1.0)
    timed = len(steps) - device_speed.WARMUP_STEPS
    seconds = readings[-1] - readings[0]
    flops = torch_train_flops(getattr(nets, device_speed.PROBE_NET)(PROBE_SHAPE, 10), PROBE_SHAPE) * PROBE_BATCH
    assert speed.kind == "cpu" and seconds >= 1.0 and timed >= device_speed.MIN_STEPS
    assert speed.flops_per_second == pytest.approx(flops * timed / seconds)


def test_the_probe_runs_on_one_torch_thread_and_restores_the_count(monkeypatch):
    import torch

    seen: list[int] = []
    real = nets.ZooModule.train_step

    def spy(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(nets.ZooModule, "train_step", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert measure_speed("cpu", min_seconds=0.0).flops_per_second > 0
        assert set(seen) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_speed_must_be_positive():
    with pytest.raises(EaseMLError, match="flops_per_second"):
        DeviceSpeed("cpu", 0.0)


@pytest.fixture
def fake_probe(monkeypatch):
    """``measure_speed`` replaced by fixed speeds per worker thread (the GPU
    kinds) or per device ("cpu"); records where each probe ran."""
    ran: list[tuple[str, str]] = []
    gpu_speed = {"local-1": 2e11, "local-2": 2e11, "local-3": 4e11}

    def fake(device=None, **_):
        worker = threading.current_thread().name.removeprefix("ease-")
        ran.append((worker, str(device)))
        if device == "cpu":
            return DeviceSpeed("cpu", 1e10)
        return DeviceSpeed(f"cuda:{worker}", gpu_speed[worker])

    monkeypatch.setattr(device_speed, "measure_speed", fake)
    return ran


def test_a_cpu_pool_measures_once_and_prices_both_engines_at_the_cpu(fake_probe):
    with LocalEngine(2) as engine:
        speeds = measure_pool(engine)
    assert len(fake_probe) == 1 and fake_probe[0][1] == "cpu"
    assert speeds.torch == speeds.sklearn == DeviceSpeed("cpu", 1e10)
    assert speeds.workers == {"local-0": "cpu", "local-1": "cpu"}


def test_one_probe_per_gpu_kind_and_torch_at_the_gpus_mean_speed(fake_probe):
    devices = {"local-0": WorkerDevice("cpu"),
               "local-1": WorkerDevice("cuda:A", 80 * 2**30), "local-2": WorkerDevice("cuda:A", 80 * 2**30),
               "local-3": WorkerDevice("cuda:B", 40 * 2**30)}
    cache: dict[str, DeviceSpeed] = {}
    with LocalEngine(4, worker_resources=[{}, {"GPU": 1}, {"GPU": 1}, {"GPU": 1}]) as engine:
        speeds = measure_pool(engine, cache=cache, devices=devices, timeout=20)
        # kind A once (on its first worker), kind B once, the CPU on the CPU worker
        assert sorted(fake_probe) == [("local-0", "cpu"), ("local-1", "None"), ("local-3", "None")]
        assert speeds.torch.flops_per_second == pytest.approx((2e11 + 2e11 + 4e11) / 3)
        assert speeds.torch.kind == "cuda:A + cuda:B"
        assert speeds.sklearn == DeviceSpeed("cpu", 1e10)
        assert set(cache) == {"cpu", "cuda:A", "cuda:B"}
        again = measure_pool(engine, cache=cache, devices=devices)
    assert len(fake_probe) == 3 and again == speeds  # cached by kind: no probe ran again


def test_gpu_workers_without_cuda_count_as_cpus(fake_probe, monkeypatch):
    monkeypatch.setenv("EASEML_DEVICE", "cpu")
    with LocalEngine(2, worker_resources=[{"GPU": 1}, {"GPU": 1}]) as engine:
        speeds = measure_pool(engine)
    # no CPU-only worker: the CPU probe runs on a GPU worker, on its CPU
    assert fake_probe == [("local-0", "cpu")]
    assert speeds.torch == speeds.sklearn == DeviceSpeed("cpu", 1e10)


def test_a_real_probe_on_a_local_pool():
    with LocalEngine(1) as engine:
        speeds = measure_pool(engine)
    assert speeds.torch.kind == "cpu" and speeds.torch.flops_per_second > 0


@pytest.mark.gpu
def test_a_gpu_is_measured_as_its_own_kind():
    import torch

    gpu = measure_speed()
    cpu = measure_speed("cpu")
    assert gpu.kind == f"cuda:{torch.cuda.get_device_name()}" and cpu.kind == "cpu"
    assert gpu.flops_per_second > 0 and cpu.flops_per_second > 0
    with LocalEngine(2, worker_resources=[{}, {"GPU": 1}]) as engine:
        speeds = measure_pool(engine)
    assert speeds.torch.kind == gpu.kind and speeds.sklearn.kind == "cpu"
    assert speeds.workers == {"local-0": "cpu", "local-1": gpu.kind}


@pytest.mark.gpu
def test_flops_are_counted_the_same_on_a_gpu():
    from ease_jupyter.zoo.nets import RNNClassifier

    for net, shape in ((getattr(nets, device_speed.PROBE_NET)(PROBE_SHAPE, 10), PROBE_SHAPE),
                       (RNNClassifier(6, 3, cell="lstm"), (12, 6))):
        on_cpu = torch_train_flops(net, shape)
        assert torch_train_flops(net.to("cuda"), shape) == pytest.approx(on_cpu, rel=0.05)
