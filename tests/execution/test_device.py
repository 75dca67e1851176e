"""Devices in training units: the worker's choice, mixed precision, device
errors, no host sync per batch, device-neutral checkpoints.

The first part runs on the CPU through the same code a GPU worker runs; the
tests marked ``gpu`` need CUDA (tests/conftest.py skips them with a reason).
"""

from __future__ import annotations

import io
import json
import os
import pickle
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from ease_jupyter.errors import DeviceFailedError, DeviceOutOfMemoryError, EaseMLError
from ease_jupyter.execution import units
from ease_jupyter.execution.device import (
    DEVICE_ENV,
    PRECISIONS,
    classify_device_error,
    describe_device,
    mixed_precision,
    worker_device,
)
from ease_jupyter.execution.units import (
    Hooks,
    UnitSpec,
    _batches,
    eval_unit,
    initial_checkpoint,
    load_model,
    read_checkpoint,
    train_unit,
)
from ease_jupyter.zoo.nets import LeNet
from ease_jupyter.zoo.templates import TorchBuilder

from benchmark_scripts import load_benchmark


LENET = TorchBuilder("lenet", "LeNet", ((8, 8), 10))
LENET_RGB = TorchBuilder("lenet", "LeNet", ((32, 32, 3), 10))


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:300].astype(np.float32) / 16.0, d.target[:300]


@pytest.fixture(scope="module")
def rgb():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 512)
    X = (rng.normal(size=(512, 32, 32, 3)) + y[:, None, None, None] * 0.1).astype(np.float32)
    return X, y


def spec(trial="t0", lr=0.05, builder=LENET, **extra):
    return UnitSpec.of(trial, "lenet", {"lr": lr, **extra}, builder, seed=7)


def state(ref):
    return torch.load(io.BytesIO(read_checkpoint(ref)), weights_only=True)


def same_weights(a, b) -> bool:
    sa, sb = state(a)["model"], state(b)["model"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# -- the worker's device -------------------------------------------------------------


def test_worker_device_is_the_gpu_when_there_is_one(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert worker_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert worker_device() == torch.device("cpu")


def test_device_override_and_its_errors(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    assert worker_device() == torch.device("cpu")
    monkeypatch.setenv(DEVICE_ENV, "tpu")
    with pytest.raises(EaseMLError, match=DEVICE_ENV):
        worker_device()
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(EaseMLError, match="no CUDA device"):
        worker_device()


def test_cublas_workspace_is_set_for_deterministic_gpu_kernels():
    assert os.environ.get("CUBLAS_WORKSPACE_CONFIG") in (":4096:8", ":16:8")


def test_describe_cpu():
    d = describe_device("cpu")
    assert d.kind == "cpu" and d.total_memory and d.total_memory > 2**20


# -- precision -------------------------------------------------------------------------


def test_precisions_on_cpu():
    cpu = torch.device("cpu")
    assert PRECISIONS == ("fp32", "bf16", "fp16")
    fp32 = mixed_precision("fp32", cpu)
    assert not fp32.active and fp32.scaler() is None
    # fp16 on the CPU runs as fp32 (documented fallback), with no scaler
    fp16 = mixed_precision("fp16", cpu)
    assert fp16.effective == "fp32" and not fp16.active and fp16.scaler() is None
    bf16 = mixed_precision("bf16", cpu)
    assert bf16.active and bf16.scaler() is None
    lin = torch.nn.Linear(4, 2)
    with bf16.autocast():
        assert lin(torch.ones(3, 4)).dtype == torch.bfloat16
    with fp32.autocast():
        assert lin(torch.ones(3, 4)).dtype == torch.float32
    # on a GPU, fp16 stays fp16 (the scaler is made by the unit)
    assert mixed_precision("fp16", torch.device("cuda")).effective == "fp16"
    with pytest.raises(EaseMLError, match="precision"):
        mixed_precision("fp8", cpu)


def test_hooks_validate_precision():
    assert Hooks().precision == "fp32"
    with pytest.raises(EaseMLError, match="Hooks.precision"):
        Hooks(precision="half")


def test_bf16_units_train_on_cpu_and_fp16_falls_back_to_fp32(digits):
    X, y = digits
    part = (X[:128], y[:128])
    init = initial_checkpoint(spec(), X, y)
    fp32 = train_unit(part, init, spec().at(0, 1))
    fp16 = train_unit(part, init, spec().at(0, 1), Hooks(precision="fp16"))
    bf16 = train_unit(part, init, spec().at(0, 1), Hooks(precision="bf16"))
    assert same_weights(fp32.checkpoint, fp16.checkpoint)
    assert not same_weights(fp32.checkpoint, bf16.checkpoint)  # autocast took effect
    assert np.isfinite(bf16.metrics["loss"]) and abs(bf16.metrics["loss"] - fp32.metrics["loss"]) < 0.1
    assert "scaler" not in state(fp16.checkpoint)
    sums = eval_unit((X[200:], y[200:]), bf16.checkpoint, spec().at(0, 0), Hooks(precision="bf16"))
    assert sums["n"] == 100 and np.isfinite(sums["loss_sum"])


# -- the spec of a retry -----------------------------------------------------------------


def test_with_params_replaces_and_keeps(digits):
    s = spec(batch_size=32).at(2, 3)
    half = s.with_params(batch_size=16)
    assert half.batch_size == 16 and s.batch_size == 32
    assert (half.trial, half.epoch, half.partition, half.seed, half.lr) == (s.trial, 2, 3, s.seed, s.lr)
    assert half.params == tuple(sorted(half.params))
    assert s.with_params(momentum=0.5).options == {"lr": 0.05, "batch_size": 32, "momentum": 0.5}
    X, y = digits
    init = initial_checkpoint(s, X, y)
    a = train_unit((X[:96], y[:96]), init, s)
    b = train_unit((X[:96], y[:96]), init, half)
    assert not same_weights(a.checkpoint, b.checkpoint)


# -- device errors ---------------------------------------------------------------------------


def test_classify_device_errors():
    cpu = torch.device("cpu")
    oom = classify_device_error(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), cpu,
                                model="resnet_small", batch_size=256)
    assert isinstance(oom, DeviceOutOfMemoryError)
    assert (oom.model, oom.batch_size, oom.code) == ("resnet_small", 256, "gpu_out_of_memory")
    assert "Tried to allocate" in oom.detail
    # "out of memory" in a RuntimeError counts on a CUDA device only
    assert classify_device_error(RuntimeError("out of memory"), cpu, model="m", batch_size=2) is None
    failed = classify_device_error(RuntimeError("CUDA error: device-side assert triggered\nmore"), cpu,
                                   model="m", batch_size=2)
    assert isinstance(failed, DeviceFailedError) and failed.code == "device_failed"
    assert failed.detail == "CUDA error: device-side assert triggered"
    for text in ("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "CUBLAS_STATUS_EXECUTION_FAILED when calling cublasSgemm"):
        assert isinstance(classify_device_error(RuntimeError(text), cpu, model="m", batch_size=2), DeviceFailedError)
    assert classify_device_error(RuntimeError("shape mismatch"), cpu, model="m", batch_size=2) is None
    assert classify_device_error(ValueError("CUDA error"), cpu, model="m", batch_size=2) is None


def test_device_errors_pickle_whole_and_name_what_failed():
    oom = DeviceOutOfMemoryError("resnet_small", 256, "cuda:NVIDIA H100 80GB HBM3", 85_000_000_000,
                                 phase="training", detail="Tried to allocate 2.00 GiB")
    back = pickle.loads(pickle.dumps(oom))
    assert type(back) is DeviceOutOfMemoryError and str(back) == str(oom)
    assert (back.model, back.batch_size, back.device, back.total_memory) == (oom.model, 256, oom.device, 85_000_000_000)
    for part in ("resnet_small", "batch_size 256", "cuda:NVIDIA H100 80GB HBM3", "79.2 GiB"):
        assert part in str(oom)
    assert "unknown size" in str(DeviceOutOfMemoryError("m", 8, "cuda:X", None))
    failed = pickle.loads(pickle.dumps(DeviceFailedError("cuda:X", "CUDA error: boom")))
    assert (failed.device, failed.detail, failed.code) == ("cuda:X", "CUDA error: boom", "device_failed")


class _RaisingLeNet(LeNet):
    def __init__(self, error: BaseException):
        super().__init__((8, 8), 10)
        self.error = error

    def forward(self, x):
        raise self.error


@dataclass(frozen=True)
class RaisingBuilder:
    """A model builder whose nets raise ``kind`` in forward (an injected device failure)."""

    kind: str

    def __call__(self, config):
        errors = {
            "oom": torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB"),
            "cuda": RuntimeError("CUDA error: an illegal memory access was encountered"),
            "other": RuntimeError("mat1 and mat2 shapes cannot be multiplied"),
        }
        return _RaisingLeNet(errors[self.kind])


def test_units_classify_device_failures(digits):
    X, y = digits
    part = (X[:64], y[:64])
    init = initial_checkpoint(spec(), X, y)
    with pytest.raises(DeviceOutOfMemoryError) as caught:
        train_unit(part, init, spec(builder=RaisingBuilder("oom"), batch_size=48).at(0, 0))
    assert caught.value.model == "lenet" and caught.value.batch_size == 48 and caught.value.phase == "training"
    assert caught.value.__context__ is None  # the failed unit's frames (and tensors) are not kept
    with pytest.raises(DeviceOutOfMemoryError) as caught:
        eval_unit(part, init, spec(builder=RaisingBuilder("oom")).at(0, 0))
    assert caught.value.phase == "validation" and caught.value.batch_size == units.EVAL_BATCH_SIZE
    with pytest.raises(DeviceFailedError, match="illegal memory access"):
        train_unit(part, init, spec(builder=RaisingBuilder("cuda")).at(0, 0))
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied") as caught:
        train_unit(part, init, spec(builder=RaisingBuilder("other")).at(0, 0))
    assert not isinstance(caught.value, EaseMLError)


# -- no host sync per batch ---------------------------------------------------------------------


def test_training_reads_the_loss_once_per_unit(digits, monkeypatch):
    """A host read of a tensor (float, item, bool, tolist) waits for the GPU;
    the training loop does it once per unit, not once per batch."""
    X, y = digits
    init = initial_checkpoint(spec(), X, y)
    reads = []
    for name in ("__float__", "item", "__bool__", "tolist", "__int__"):
        original = getattr(torch.Tensor, name)

        def counting(self, *a, _original=original, _name=name, **k):
            reads.append(_name)
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counting)
    out = train_unit((X[:256], y[:256]), init, spec(batch_size=16).at(0, 0))  # 16 batches
    monkeypatch.undo()
    assert out.metrics["examples"] == 256
    assert len(reads) <= 2, reads


def test_train_step_returns_a_detached_device_tensor():
    torch.manual_seed(0)
    net = LeNet((8, 8), 2)
    opt = net.make_optimizer(0.05)
    loss = net.train_step(opt, np.random.rand(4, 8, 8).astype(np.float32), np.array([0, 1, 0, 1]))
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0 and not loss.requires_grad
    assert loss.device == net.device


# -- partitions kept on the device ---------------------------------------------------------------


def test_device_partitions_are_kept_per_array_and_hook():
    cache = units._DevicePartitions()
    cpu = torch.device("cpu")
    X, y = np.ones((4, 2)), np.arange(4)  # float64: the tensors do not share the arrays' memory
    calls = []

    def reading(p):
        calls.append(1)
        return units.default_input_fn(p)

    part = (X, y)
    first = cache.get(part, reading, cpu)
    assert cache.get(part, reading, cpu) is first and len(calls) == 1
    assert cache.get((X, y), reading, cpu) is first  # the same arrays in another tuple
    other = X.copy()
    cache.get((other, y), reading, cpu)  # other arrays: read again
    assert len(calls) == 2
    cache.get(part, units.default_input_fn, cpu)  # another hook: its own entry
    assert len(cache._items) == 3
    del part, X, first
    cache.get(([[1.0]], [0]), reading, cpu)  # lists are not kept; the entries of dead arrays go
    assert len(calls) == 3 and len(cache._items) == 1
    assert cache.get((other, y), reading, cpu) is not None and len(calls) == 3


# -- on a GPU -----------------------------------------------------------------------------------------


def _cuda_spec(**extra):
    return spec(builder=LENET_RGB, batch_size=32, **extra)


@pytest.mark.gpu
def test_gpu_units_use_fast_kernels_unless_deterministic_ones_are_asked_for(rgb):
    import torch

    X, y = rgb
    init = initial_checkpoint(_cuda_spec(), X, y)
    seen = []

    def train_fn(net, opt, Xp, yp, spec, gen, **kw):
        seen.append((torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark))
        return units.default_train_fn(net, opt, Xp, yp, spec, gen, **kw)

    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
    for deterministic in (None, True):
        train_unit((X[:64], y[:64]), init, _cuda_spec().at(0, 0), Hooks(train_fn=train_fn, deterministic=deterministic))
    assert seen == [(False, True), (True, False)]
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark) == before


@pytest.mark.gpu
def test_gpu_units_run_on_the_gpu_and_describe_it():
    d = describe_device(worker_device())
    assert d.kind.startswith("cuda:") and d.total_memory > 2**30


@pytest.mark.gpu
def test_gpu_unit_rerun_gives_bit_identical_weights_in_fp32_with_deterministic_kernels(rgb):
    X, y = rgb
    init = initial_checkpoint(_cuda_spec(), X, y)
    part = (X[:384], y[:384])
    hooks = Hooks(deterministic=True)
    a = train_unit(part, init, _cuda_spec().at(0, 1), hooks)
    b = train_unit(part, init, _cuda_spec().at(0, 1), hooks)  # the partition's tensors now come from the GPU cache
    fresh = train_unit((X[:384].copy(), y[:384].copy()), init, _cuda_spec().at(0, 1), hooks)  # copied to the GPU again
    assert a.metrics["gpu"] == 1.0
    assert same_weights(a.checkpoint, b.checkpoint) and same_weights(a.checkpoint, fresh.checkpoint)
    assert a.metrics["loss"] == b.metrics["loss"]
    assert not same_weights(a.checkpoint, init)


@pytest.mark.gpu
def test_gpu_checkpoints_are_device_neutral_and_hop_to_the_cpu(rgb, monkeypatch):
    X, y = rgb
    s = _cuda_spec()
    init = initial_checkpoint(s, X, y)
    on_gpu = train_unit((X[:256], y[:256]), init, s.at(0, 0))
    st = torch.load(io.BytesIO(on_gpu.checkpoint), weights_only=True)  # no map_location
    tensors = list(st["model"].values()) + [v for p in st["optimizer"]["state"].values() for v in p.values()
                                            if isinstance(v, torch.Tensor)]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    # the same checkpoint predicts the same on either device, to rounding (TF32 convolutions on the GPU)
    Xv = torch.as_tensor(X[256:])
    cpu_out = load_model(on_gpu.checkpoint, s)(Xv)
    gpu_out = load_model(on_gpu.checkpoint, s, device="cuda")(Xv.cuda()).cpu()
    torch.testing.assert_close(gpu_out, cpu_out, rtol=1e-2, atol=1e-2)
    # a config hops GPU -> CPU -> GPU
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    on_cpu = train_unit((X[256:], y[256:]), on_gpu.checkpoint, s.at(0, 1))
    assert on_cpu.metrics["gpu"] == 0.0
    monkeypatch.delenv(DEVICE_ENV)
    back = train_unit((X[:256], y[:256]), on_cpu.checkpoint, s.at(1, 0))
    assert back.metrics["gpu"] == 1.0 and np.isfinite(back.metrics["loss"])
    sums = eval_unit((X[256:], y[256:]), back.checkpoint, s.at(1, 0))
    assert sums["n"] == 256 and np.isfinite(sums["loss_sum"])


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_gpu_mixed_precision_units(rgb, precision):
    X, y = rgb
    s = _cuda_spec()
    init = initial_checkpoint(s, X, y)
    hooks = Hooks(precision=precision)
    out = train_unit((X[:256], y[:256]), init, s.at(0, 0), hooks)
    assert np.isfinite(out.metrics["loss"]) and out.metrics["gpu"] == 1.0
    st = state(out.checkpoint)
    assert ("scaler" in st) == (precision == "fp16")
    assert all(t.dtype == torch.float32 for t in st["model"].values() if t.is_floating_point())  # weights stay fp32
    again = train_unit((X[256:], y[256:]), out.checkpoint, s.at(0, 1), hooks)  # the scaler's state hops too
    assert np.isfinite(again.metrics["loss"])
    sums = eval_unit((X[256:], y[256:]), again.checkpoint, s.at(0, 1), hooks)
    assert sums["n"] == 256 and np.isfinite(sums["loss_sum"])


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_gpu_training_steps_do_not_sync(rgb, precision):
    X, y = rgb
    device = worker_device()
    torch.manual_seed(0)
    net = LeNet((32, 32, 3), 10).to(device)
    opt = net.make_optimizer(0.05)
    amp = mixed_precision(precision, device)
    Xd, yd = torch.as_tensor(X, device=device), torch.as_tensor(y, device=device)
    batches = _batches(len(X), 64, torch.Generator().manual_seed(0), device)
    total = torch.zeros((), dtype=torch.float64, device=device)
    net.train_step(opt, Xd[batches[0]], yd[batches[0]], autocast=amp.autocast)  # first-step set-up may sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for idx in batches[1:]:
            total += net.train_step(opt, Xd[idx], yd[idx], autocast=amp.autocast).double() * len(idx)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert np.isfinite(float(total))


@dataclass(frozen=True)
class HugeBuilder:
    """Nets whose forward asks for twice the GPU's memory: a real CUDA out of memory."""

    def __call__(self, config):
        return _HugeLeNet()


class _HugeLeNet(LeNet):
    def __init__(self):
        super().__init__((32, 32, 3), 10)

    def forward(self, x):
        total = torch.cuda.get_device_properties(x.device).total_memory
        return super().forward(x) + torch.empty(2 * total // 4, device=x.device).sum()


@pytest.mark.gpu
def test_gpu_out_of_memory_names_the_config_and_the_gpu(rgb):
    X, y = rgb
    init = initial_checkpoint(_cuda_spec(), X, y)
    huge = UnitSpec.of("t0", "lenet", {"lr": 0.05, "batch_size": 64}, HugeBuilder(), seed=7)
    with pytest.raises(DeviceOutOfMemoryError) as caught:
        train_unit((X[:128], y[:128]), init, huge.at(0, 0))
    err = caught.value
    assert err.device == describe_device(worker_device()).kind and err.total_memory == describe_device(worker_device()).total_memory
    assert err.batch_size == 64 and "lenet" in str(err) and "GiB" in str(err)
    # the GPU is usable again by the next unit
    ok = train_unit((X[:128], y[:128]), init, _cuda_spec().at(0, 0))
    assert ok.metrics["gpu"] == 1.0


# -- benchmarks/gpu.py -------------------------------------------------------------------------------


def test_gpu_benchmark_without_cuda_says_so_and_keeps_a_gpu_result(tmp_path, monkeypatch, capsys):
    bench = load_benchmark("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu.json"
    assert bench.main(["--quick", "--out", str(out)]) == 0
    assert "needs CUDA" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["cuda"] is False and "is_available" in written["reason"]
    out.write_text('{"cuda": true, "device": "cuda:X"}')
    assert bench.main(["--quick", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["device"] == "cuda:X"


def test_gpu_benchmark_runs_end_to_end_on_the_cpu(tmp_path, monkeypatch):
    """The hidden --allow-cpu mode runs every arm and precision at a tiny size
    (no speed is asserted: the CPU is not what the benchmark is for)."""
    bench = load_benchmark("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    out = tmp_path / "cpu.json"
    assert bench.main(["--allow-cpu", "--images", "128", "--net", "lenet", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["cuda"] is False and r["device"] == "cpu" and r["images"] == 128 and r["repeats_done"] == 2
    for p in ("fp32", "bf16", "fp16"):
        row = r["precisions"][p]
        assert set(row["images_per_s"]) == {"mop", "plain", "plain_det"}
        assert row["ratio_mop_over_plain"]["n"] == 2
        assert row["hop"]["units"] == 4 and row["hop"]["units_on_gpu"] == 0
        assert 0 < row["hop"]["hop_seconds_median"] < row["hop"]["unit_seconds_median"]
    assert r["precisions"]["fp16"]["effective_precision"] == "fp32"


def test_units_are_deterministic_on_the_cpu_by_default_and_as_asked():
    import torch

    assert Hooks().deterministic_on(torch.device("cpu")) is True
    assert Hooks().deterministic_on(torch.device("cuda")) is False
    assert Hooks(deterministic=True).deterministic_on(torch.device("cuda")) is True
    assert Hooks(deterministic=False).deterministic_on(torch.device("cpu")) is False
    with pytest.raises(EaseMLError, match="Hooks.deterministic: found 'yes'"):
        Hooks(deterministic="yes")
