"""GPU memory sizing (Seneca Alg. 1 on GPU memory): the pure search with fake
measurements, the plan's worker choice on a local engine, and, on CUDA, the
real probe (marked ``gpu``)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ease_jupyter.errors import EaseMLError
from ease_jupyter.execution import gpu_memory
from ease_jupyter.execution.engine.local import LocalEngine
from ease_jupyter.execution.gpu_memory import (
    SAFETY,
    WorkerDevice,
    fit_batch_size,
    measure_step_peak,
    plan_config,
    size_batch,
    workers_that_fit,
)
from ease_jupyter.execution.units import UnitSpec
from ease_jupyter.schema import program_from_shapes
from ease_jupyter.zoo import candidates

GB = 10**9


def affine(fixed: float, per: float, oom_above: int | None = None, calls: list[int] | None = None):
    def peak_at(b: int) -> int | None:
        if calls is not None:
            calls.append(b)
        if oom_above is not None and b > oom_above:
            return None
        return int(fixed + per * b)
    return peak_at


# -- the search, on fake measurements -----------------------------------------------------


def test_a_request_that_fits_is_kept_after_one_probe():
    calls: list[int] = []
    got = fit_batch_size(affine(1 * GB, 1e7, calls=calls), 64, 10 * GB)
    assert got.batch_size == 64 and calls == [64]


def test_a_request_too_big_is_cut_to_the_largest_size_that_fits():
    calls: list[int] = []
    # budget = 2.4e9 / 1.2 = 2e9 = 1e9 + 1e7 * 100: exactly 100 fits, 101 does not
    got = fit_batch_size(affine(1 * GB, 1e7, calls=calls), 256, 2.4 * GB, safety=1.2)
    assert got.batch_size == 100
    # the requested size, a guess scaled by budget / peak, the line's crossing, and one above it to check
    assert calls == [256, 143, 100, 101]
    assert got.fixed_bytes == pytest.approx(1 * GB) and got.bytes_per_example == pytest.approx(1e7)
    assert got.peak_bytes() == pytest.approx(2 * GB)
    assert got.peak_bytes(50) == pytest.approx(1.5 * GB)  # predicted, never probed
    assert got.peak_bytes(101) * 1.2 > 2.4 * GB


def test_out_of_memory_probes_do_not_stop_the_search():
    # the probe at the requested size and anything above 130 run out of memory
    got = fit_batch_size(affine(1 * GB, 1e7, oom_above=130), 512, 2.205 * GB * SAFETY)
    assert got.batch_size == 120
    assert dict(got.peaks)[512] is None


def test_an_out_of_memory_just_above_the_fit_is_a_limit_too():
    # the fit predicts 120, but a workspace makes anything above 110 run out of memory
    got = fit_batch_size(affine(1 * GB, 1e7, oom_above=110), 512, 2.205 * GB * SAFETY)
    assert 0.9 * 110 <= got.batch_size <= 110  # bisected within the probe budget
    assert len(got.peaks) <= gpu_memory.MAX_PROBES


def test_a_superlinear_peak_still_gives_a_size_that_fits():
    def peak_at(b: int) -> int:
        return int(1 * GB + 5e6 * b + 2e4 * b * b)
    cap = 3 * GB
    got = fit_batch_size(peak_at, 1024, cap, safety=1.0)
    best = max(b for b in range(2, 1025) if peak_at(b) <= cap)
    assert got.batch_size is not None and peak_at(got.batch_size) <= cap  # measured, never only predicted
    assert got.batch_size >= 0.9 * best


def test_nothing_fits_when_even_the_smallest_batch_is_too_big():
    calls: list[int] = []
    got = fit_batch_size(affine(5 * GB, 1e7, calls=calls), 64, 4 * GB)
    assert got.batch_size is None and 2 in calls
    assert got.peak_bytes() is None


def test_the_search_respects_its_probe_budget():
    calls: list[int] = []
    got = fit_batch_size(affine(1 * GB, 1e7, oom_above=3, calls=calls), 4096, 100 * GB, max_probes=3)
    assert len(calls) == 3 and got.batch_size in (2, 3)


@pytest.mark.parametrize("kwargs, field", [
    ({"requested": 1}, "requested"),
    ({"capacity": 0}, "capacity"),
    ({"capacity": float("nan")}, "capacity"),
    ({"safety": 0.5}, "safety"),
    ({"max_probes": 0}, "max_probes"),
])
def test_bad_arguments_name_the_field(kwargs, field):
    args = {"requested": 32, "capacity": 1e9, **kwargs}
    with pytest.raises(EaseMLError, match=field):
        fit_batch_size(affine(1, 1), args.pop("requested"), args.pop("capacity"), **args)


def test_workers_that_fit_by_their_gpu_memory():
    memory = {"a": 12 * GB, "b": 40 * GB, "c": None, "d": 10 * GB}
    assert workers_that_fit(10 * GB, memory, safety=1.2) == ["a", "b"]  # 12 GB holds exactly 10 x 1.2
    assert workers_that_fit(10 * GB, memory, safety=1.0) == ["a", "b", "d"]
    assert workers_that_fit(50 * GB, memory) == []


# -- on the CPU: no GPU sizing -------------------------------------------------------------


def image_spec(batch_size: int = 32, shape=(16, 16, 3), model: str = "resnet_small") -> UnitSpec:
    cand = next(c for c in candidates(program_from_shapes(list(shape), [10])) if c.name == model)
    return UnitSpec.of("t0", model, {"lr": 0.01, "batch_size": batch_size}, cand.build)


def image_sample(n: int = 40, shape=(16, 16, 3)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, *shape)).astype(np.float32), rng.integers(0, 10, n)


def test_the_probe_on_a_cpu_says_there_is_nothing_to_size():
    assert measure_step_peak(image_spec(), image_sample(), 8, "cpu") is None


def test_a_pool_without_gpus_gets_no_plan():
    with LocalEngine(2) as engine:
        assert plan_config(engine, None, image_spec(), image_sample(), 64) is None


def test_a_worker_that_declares_a_gpu_without_cuda_gets_no_plan(monkeypatch):
    monkeypatch.setenv("EASEML_DEVICE", "cpu")  # as on a machine without CUDA
    with LocalEngine(2, worker_resources=[{}, {"GPU": 1}]) as engine:
        devices = gpu_memory.worker_devices(engine)
        assert devices == {"local-0": WorkerDevice("cpu"), "local-1": WorkerDevice("cpu")}
        assert plan_config(engine, None, image_spec(), image_sample(), 64, devices=devices) is None
        assert size_batch(image_spec(), image_sample(), 64) is None
        # told the worker has GPU memory, the sizing task runs there and finds no CUDA
        told = {**devices, "local-1": WorkerDevice("cuda:Fake", 8 * GB, 8 * GB)}
        assert plan_config(engine, None, image_spec(), image_sample(), 64, devices=told) is None


# -- the plan's choice of workers, with a fake probe -------------------------------------------


@pytest.fixture
def fake_gpus(monkeypatch):
    """``size_batch`` replaced by a search on fake affine peaks, with each
    worker's capacity from its thread name; records where it ran."""
    capacity = {"local-1": 10 * GB, "local-2": 40 * GB}
    ran: list[str] = []

    def fake_size_batch(spec, sample, requested, capacity_bytes=None, safety=SAFETY, min_batch=2, hooks=None):
        worker = threading.current_thread().name.removeprefix("ease-")
        ran.append(worker)
        fixed = spec.options["fixed"]
        return fit_batch_size(affine(fixed, 1e7), requested, capacity[worker], safety=safety, min_batch=min_batch)

    monkeypatch.setattr(gpu_memory, "size_batch", fake_size_batch)
    devices = {"local-0": WorkerDevice("cpu"),
               "local-1": WorkerDevice("cuda:Small", capacity["local-1"], capacity["local-1"]),
               "local-2": WorkerDevice("cuda:Large", capacity["local-2"], capacity["local-2"])}
    with LocalEngine(3, worker_resources=[{}, {"GPU": 1}, {"GPU": 1}]) as engine:
        yield engine, devices, ran


def spec_with_fixed(fixed: float) -> UnitSpec:
    return UnitSpec.of("t", "fake", {"fixed": fixed}, lambda config: None)


def test_the_plan_sizes_on_the_gpu_with_the_least_memory_so_the_config_fits_every_gpu(fake_gpus):
    engine, devices, ran = fake_gpus
    plan = plan_config(engine, None, spec_with_fixed(2 * GB), None, 1024, devices=devices)
    assert ran == ["local-1"]
    # budget 10 GB / 1.2 = 8.33 GB = 2 GB + 1e7 * 633.3
    assert (plan.batch_size, plan.cut, plan.workers, plan.probed_on) == (633, True, ("local-1", "local-2"), "local-1")
    assert "batch size 633 (requested 1024)" in plan.describe()


def test_a_config_too_big_for_the_small_gpu_is_planned_on_the_large_one(fake_gpus):
    engine, devices, ran = fake_gpus
    plan = plan_config(engine, None, spec_with_fixed(12 * GB), None, 64, devices=devices)
    assert ran == ["local-1", "local-2"]
    assert (plan.batch_size, plan.cut, plan.workers, plan.probed_on) == (64, False, ("local-2",), "local-2")


def test_a_config_that_fits_no_gpu_gets_a_plan_without_workers_and_a_message(fake_gpus):
    engine, devices, ran = fake_gpus
    plan = plan_config(engine, None, spec_with_fixed(50 * GB), None, 64, devices=devices)
    assert ran == ["local-1", "local-2"]
    assert plan.batch_size is None and plan.workers == ()
    assert plan.describe() == ("model 'fake' does not fit on a GPU: batch size 2 needs more than the "
                               "37.3 GiB of GPU memory free on worker 'local-2'")


def test_a_named_worker_is_the_one_probed(fake_gpus):
    engine, devices, ran = fake_gpus
    plan = plan_config(engine, "local-2", spec_with_fixed(2 * GB), None, 4096, devices=devices)
    assert ran == ["local-2"]
    assert (plan.batch_size, plan.workers) == (3133, ("local-2",))  # 40 GB / 1.2 = 2 GB + 1e7 * 3133.3


# -- on a GPU: the real probe ----------------------------------------------------------------

GPU_SHAPE = (32, 32, 3)  # resnet_small saves about 0.6 MB per example for its backward pass


def train_steps(spec: UnitSpec, sample, batch_size: int, device, steps: int) -> None:
    """What a training unit does to the GPU, ``steps`` times at ``batch_size``."""
    from ease_jupyter.execution.units import default_input_fn, default_model_fn

    X, y = default_input_fn(sample)
    net = default_model_fn(spec)
    net.adapt(X, y)
    net.to(device)
    opt = net.make_optimizer(spec.lr)
    idx = np.arange(batch_size) % X.shape[0]
    xb, yb = X[idx].to(device), y[idx].to(device)
    for _ in range(steps):
        net.train_step(opt, xb, yb)


@pytest.mark.gpu
def test_on_a_gpu_the_peak_grows_with_the_batch_about_affinely():
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    spec, sample = image_spec(shape=GPU_SHAPE), image_sample(64, GPU_SHAPE)
    measure_step_peak(spec, sample, 8, device)  # first use: cuBLAS/cuDNN handles and workspaces
    peaks = {b: measure_step_peak(spec, sample, b, device) for b in (256, 512, 768)}
    assert 0 < peaks[256] < peaks[512] < peaks[768]
    # the midpoint of an affine peak is the mean of its ends (within 15%: allocator rounding, workspaces)
    assert peaks[512] == pytest.approx((peaks[256] + peaks[768]) / 2, rel=0.15)
    assert measure_step_peak(spec, sample, 8, "cpu") is None


@pytest.mark.gpu
def test_on_a_gpu_a_request_too_big_is_cut_and_the_cut_size_trains_without_running_out():
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    spec, sample = image_spec(shape=GPU_SHAPE), image_sample(64, GPU_SHAPE)
    measure_step_peak(spec, sample, 8, device)
    capacity = int(measure_step_peak(spec, sample, 1024, device) * SAFETY * 1.05)  # room for about 1024 examples
    sizing = fit_batch_size(lambda b: measure_step_peak(spec, sample, b, device), 8192, capacity)
    assert sizing.batch_size is not None and 1024 <= sizing.batch_size < 8192
    assert sizing.peak_bytes() * SAFETY <= capacity
    # A hard limit of that capacity above what the process holds now: the
    # planned size trains, the requested one runs out of memory.
    assert gpu_memory._free_bytes(device) > capacity
    total = torch.cuda.get_device_properties(device).total_memory
    held = torch.cuda.memory_reserved(device)
    torch.cuda.set_per_process_memory_fraction((held + capacity) / total, device)
    try:
        train_steps(spec, sample, sizing.batch_size, device, steps=3)
        with pytest.raises(torch.cuda.OutOfMemoryError):
            train_steps(spec, sample, 8192, device, steps=1)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        gpu_memory._free_bytes(device)


@pytest.mark.gpu
def test_on_a_gpu_pool_plan_config_runs_as_a_task_on_the_gpu_worker():
    with LocalEngine(2, worker_resources=[{}, {"GPU": 1}]) as engine:
        devices = gpu_memory.worker_devices(engine)
        assert devices["local-0"] == WorkerDevice("cpu")
        assert devices["local-1"].kind.startswith("cuda:") and devices["local-1"].memory_bytes > 2**30
        spec, sample = image_spec(shape=GPU_SHAPE), image_sample(64, GPU_SHAPE)
        plan = plan_config(engine, None, spec, sample, 512, devices=devices)
        assert (plan.batch_size, plan.cut, plan.workers, plan.probed_on) == (512, False, ("local-1",), "local-1")
        assert dict(plan.sizing.peaks) == {512: pytest.approx(plan.peak_bytes)}  # one probe: it fits
        # with a GPU of half the requested size's need, the request is cut
        small = int(plan.peak_bytes * SAFETY / 2)
        cut = plan_config(engine, None, spec, sample, 512, devices=devices, capacity_bytes=small)
        assert cut.cut and 128 <= cut.batch_size < 512 and cut.workers == ("local-1",)
        assert cut.peak_bytes * SAFETY <= small
