"""Device errors in MOP units (pool_driver, runner): a unit that runs out of
GPU memory runs again with half its trial's batch size, once, outside
``max_unit_retries``; a second time fails the workload with an error that
names the model, the batch size and the GPU memory; a unit whose device
failed sends its worker out of the pool. The errors are raised from a
train hook, as ``units`` raises them on a GPU, so no GPU is needed."""

from __future__ import annotations

import io
import threading
from collections import Counter

import numpy as np
import pytest
import torch

from ease_jupyter.errors import DeviceFailedError, DeviceOutOfMemoryError
from ease_jupyter.execution.automl import GridSearch
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.mop.pool_driver import PoolDriver
from ease_jupyter.execution.mop.runner import MOPRunner
from ease_jupyter.execution.units import Hooks, default_train_fn
from ease_jupyter.zoo.templates import TorchBuilder

MODELS = {"lenet": TorchBuilder("lenet", "LeNet", ((8, 8), 10))}
GPU_MEMORY = 8 * 2**30


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:300].astype(np.float32) / 16.0, d.target[:300]


class OutOfMemoryAbove:
    """A train hook on a fake 8 GiB GPU where batches above ``limit`` do not fit."""

    def __init__(self, limit: int):
        self.limit = limit
        self.lock = threading.Lock()
        self.sizes: Counter = Counter()  # batch sizes units started with

    def __call__(self, net, opt, X, y, spec, generator, **extra):
        with self.lock:
            self.sizes[spec.batch_size] += 1
        if spec.batch_size > self.limit:
            raise DeviceOutOfMemoryError(spec.model, spec.batch_size, "cuda:Fake GPU", GPU_MEMORY)
        return default_train_fn(net, opt, X, y, spec, generator, **extra)


class DeviceFailsOnce:
    """A train hook whose first unit finds its device broken."""

    def __init__(self):
        self.lock = threading.Lock()
        self.failed_on: str | None = None

    def __call__(self, net, opt, X, y, spec, generator, **extra):
        with self.lock:
            if self.failed_on is None:
                self.failed_on = threading.current_thread().name.removeprefix("ease-")
                raise DeviceFailedError("cuda:Fake GPU", "an illegal memory access was encountered")
        return default_train_fn(net, opt, X, y, spec, generator, **extra)


class Pins(LocalEngine):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pinned: Counter = Counter()

    def submit_pinned(self, fn, key, *args, worker, timeout):
        self.pinned[worker] += 1
        return super().submit_pinned(fn, key, *args, worker=worker, timeout=timeout)


def procedure(batch_size: int):
    return GridSearch("lenet", {"lr": [0.1, 0.05], "batch_size": [batch_size]}, epochs=2)


def weights(blob: bytes):
    return torch.load(io.BytesIO(blob), weights_only=True)["model"]


def test_out_of_memory_halves_the_batch_size_once_and_the_trial_keeps_it(digits):
    X, y = digits
    hook = OutOfMemoryAbove(16)
    with LocalEngine(2) as e:
        runner = MOPRunner(e, procedure(32), MODELS, X, y, hooks=Hooks(train_fn=hook), seed=5, max_unit_retries=0)
        result = runner.run()
    assert runner.reduced_batch_sizes == {t: 16 for t in result.trials}
    assert hook.sizes[32] == 2  # one failed unit per trial, then never again at 32
    assert hook.sizes[16] == 2 * 2 * runner.partitions  # every train unit, 2 trials x 2 epochs
    assert sum("ran out of memory" in f and "batch size 16" in f for f in result.faults) == 2
    assert len(result.history) == 4
    # The retried unit started from the same checkpoint: the run equals one at batch size 16 from the start.
    with LocalEngine(2) as e:
        plain = MOPRunner(e, procedure(16), MODELS, X, y, seed=5, visit_order=result.visit_log).run()
    for t in result.trials:
        a, b = weights(result.checkpoints[t]), weights(plain.checkpoints[t])
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_config_that_still_does_not_fit_fails_with_model_batch_size_and_memory(digits):
    X, y = digits
    hook = OutOfMemoryAbove(4)
    with LocalEngine(2) as e:
        runner = MOPRunner(e, procedure(32), MODELS, X, y, hooks=Hooks(train_fn=hook), seed=5, max_unit_retries=5)
        with pytest.raises(DeviceOutOfMemoryError, match=r"'lenet' with batch_size 16 .*8\.0 GiB") as info:
            runner.run()
    assert info.value.code == "gpu_out_of_memory"
    assert info.value.batch_size == 16 and info.value.total_memory == GPU_MEMORY
    assert hook.sizes[16] >= 1 and set(hook.sizes) <= {32, 16}  # no third try, no max_unit_retries re-runs


def test_a_worker_whose_device_failed_leaves_the_pool(digits):
    X, y = digits
    hook = DeviceFailsOnce()
    with Pins(3) as e:
        driver = PoolDriver(e)
        runner = MOPRunner(e, procedure(32), MODELS, X, y, hooks=Hooks(train_fn=hook), seed=5, max_unit_retries=0,
                           repair_grace=0.2)
        result = driver.run_alone(runner)
        assert hook.failed_on in e.workers()  # the engine still has it; this driver does not use it
        assert e.pinned[hook.failed_on] == 1
        later = driver.run_alone(MOPRunner(e, procedure(32), MODELS, X, y, seed=6))  # nor for a later workload
        assert len(later.history) == 4
    assert e.pinned[hook.failed_on] == 1
    assert any("device failed" in f or "whose device failed" in f for f in result.faults)
    assert result.requeued >= 1 and len(result.history) == 4


# -- on a real GPU ------------------------------------------------------------------------


class AllocatesOnTheDevice:
    """A train hook that asks the GPU for twice its memory at batch sizes
    above ``limit`` (a real CUDA out-of-memory error, which the unit
    classifies), and trains normally otherwise."""

    def __init__(self, limit: int):
        self.limit = limit

    def __call__(self, net, opt, X, y, spec, generator, **extra):
        if spec.batch_size > self.limit:
            total = torch.cuda.get_device_properties(X.device).total_memory
            torch.empty(2 * total, dtype=torch.uint8, device=X.device)
        return default_train_fn(net, opt, X, y, spec, generator, **extra)


@pytest.mark.gpu
def test_a_real_cuda_out_of_memory_error_halves_the_batch_size(digits):
    X, y = digits
    with LocalEngine(1, worker_resources=[{"GPU": 1}]) as e:
        runner = MOPRunner(e, procedure(32), MODELS, X, y, hooks=Hooks(train_fn=AllocatesOnTheDevice(16)), seed=5)
        result = runner.run()
    assert runner.reduced_batch_sizes == {t: 16 for t in result.trials}
    assert len(result.history) == 4


@pytest.mark.gpu
def test_a_config_that_never_fits_the_gpu_names_its_memory(digits):
    X, y = digits
    total = torch.cuda.get_device_properties(0).total_memory
    with LocalEngine(1, worker_resources=[{"GPU": 1}]) as e:
        runner = MOPRunner(e, procedure(32), MODELS, X, y, hooks=Hooks(train_fn=AllocatesOnTheDevice(1)), seed=5)
        with pytest.raises(DeviceOutOfMemoryError, match=f"batch_size 16 .*{total / 2**30:.1f} GiB") as info:
            runner.run()
    assert info.value.total_memory == total and info.value.device.startswith("cuda")
