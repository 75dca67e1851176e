"""GPU memory sizing in the MOP runner (runner, pool_driver, gpu_memory):
before a trial's first training unit, a sizing unit runs once on each GPU
worker that holds the run's data; the trial keeps or cuts its batch size,
keeps its units off the GPUs it does not fit on, or fails when it fits none.

On this CPU machine the decisions are checked with a fake sizing unit (an
affine peak per trial on a fake GPU per worker); a worker that declares a
GPU without having CUDA runs the real sizing unit, which answers None, and
nothing changes. The real probe on a CUDA device is marked ``gpu``."""

from __future__ import annotations

import io
import threading
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

from ease_jupyter.errors import DeviceOutOfMemoryError
from ease_jupyter.execution import gpu_memory
from ease_jupyter.execution.automl import GridSearch
from ease_jupyter.execution.engine import GPU, LocalEngine
from ease_jupyter.execution.gpu_memory import BatchSizing, fit_batch_size, plan_from_sizings, sizing_unit
from ease_jupyter.execution.mop.results import RunnerError
from ease_jupyter.execution.mop.runner import MOPRunner
from ease_jupyter.execution.units import Hooks, default_train_fn
from ease_jupyter.zoo.templates import TorchBuilder

MODELS = {"lenet": TorchBuilder("lenet", "LeNet", ((8, 8), 10))}
GB = 10**9


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:300].astype(np.float32) / 16.0, d.target[:300]


def grid(batch_size: int = 32, lrs=(0.1, 0.05), epochs: int = 2) -> GridSearch:
    return GridSearch("lenet", {"lr": list(lrs), "batch_size": [batch_size]}, epochs=epochs)


def worker_name() -> str:
    return threading.current_thread().name.removeprefix("ease-")


class Pins(LocalEngine):
    """Records each pinned unit's function name and worker."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.pinned: list[tuple[str, str]] = []

    def submit_pinned(self, fn, key, *args, worker, timeout):
        with self.lock:
            self.pinned.append((getattr(fn, "__name__", type(fn).__name__), worker))
        return super().submit_pinned(fn, key, *args, worker=worker, timeout=timeout)

    def units(self, name: str) -> list[str]:
        return [w for fn, w in self.pinned if fn == name]


class FakeGpus:
    """A sizing unit on fake GPUs: worker -> its capacity in bytes, trial
    learning rate -> its fixed bytes (weights, gradients, momentum), plus
    1e7 bytes per example; the search is the real one. Records its calls."""

    __name__ = "fake_sizing"

    def __init__(self, capacity: dict[str, float], fixed: dict[float, float], default: float | None = None):
        self.capacity, self.fixed, self.default = capacity, fixed, default
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str, int]] = []  # (trial, worker, requested)

    def __call__(self, partition, spec, requested, hooks):
        worker = worker_name()
        with self.lock:
            self.calls.append((spec.trial, worker, requested))
        fixed = self.fixed[spec.lr] if self.default is None else self.fixed.get(spec.lr, self.default)
        sizing = fit_batch_size(lambda b: int(fixed + 1e7 * b), requested, self.capacity[worker])
        return replace(sizing, device="cuda:Fake GPU", total_bytes=int(self.capacity[worker]))


class BatchSizes:
    """A train hook that records the batch sizes units train with, and, like
    a GPU, runs out of memory above ``limits[trial]``."""

    def __init__(self, limits: dict[str, int] | None = None):
        self.limits = limits or {}
        self.lock = threading.Lock()
        self.seen: Counter = Counter()  # (trial, batch size) -> units

    def __call__(self, net, opt, X, y, spec, generator, **extra):
        with self.lock:
            self.seen[(spec.trial, spec.batch_size)] += 1
        if spec.batch_size > self.limits.get(spec.trial, spec.batch_size):
            raise DeviceOutOfMemoryError(spec.model, spec.batch_size, "cuda:Fake GPU", 8 * 2**30)
        return default_train_fn(net, opt, X, y, spec, generator, **extra)


def weights(blob: bytes):
    return torch.load(io.BytesIO(blob), weights_only=True)["model"]


# -- no GPU: nothing changes ---------------------------------------------------------------------


def test_a_cpu_pool_runs_no_sizing_unit(digits):
    X, y = digits
    sizing = FakeGpus({}, {})
    with Pins(2) as e:
        runner = MOPRunner(e, grid(), MODELS, X, y, seed=3, sizing_fn=sizing)
        result = runner.run()
    assert sizing.calls == []
    assert {fn for fn, _ in e.pinned} == {"train_unit", "eval_unit"}
    assert len(e.pinned) == 2 * 2 * runner.partitions * 2  # trials x epochs x partitions x (train, validation)
    assert runner.planned_batch_sizes == {} and runner.gpu_plans == {}
    assert len(result.history) == 4


def test_gpu_workers_without_cuda_run_the_sizing_unit_once_per_trial_and_train_as_asked(digits, monkeypatch):
    monkeypatch.setenv("EASEML_DEVICE", "cpu")  # as on a machine without CUDA, wherever this runs
    X, y = digits
    with Pins(3, worker_resources=[{}, {GPU: 1}, {GPU: 1}]) as e:
        gpus = e.gpu_workers()
        runner = MOPRunner(e, grid(), MODELS, X, y, seed=3)
        result = runner.run()
        # sizing once per trial and GPU worker, before any training unit; none in the second epoch
        assert sorted(e.units("sizing_unit")) == sorted(gpus * 2)
        assert [fn for fn, _ in e.pinned[:4]] == ["sizing_unit"] * 4
        assert runner.planned_batch_sizes == {} and runner.gpu_plans == {}
        assert not any("sizing" in f for f in result.faults)
        # the training is the one of a run without sizing
        plain = MOPRunner(e, grid(), MODELS, X, y, seed=3, sizing_fn=None, visit_order=result.visit_log).run()
        assert len(e.units("sizing_unit")) == 4
    for t in result.trials:
        a, b = weights(result.checkpoints[t]), weights(plain.checkpoints[t])
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_sizing_unit_on_a_cpu_does_not_read_its_partition(monkeypatch):
    monkeypatch.setenv("EASEML_DEVICE", "cpu")

    def unreadable(partition):
        raise AssertionError("read")

    assert sizing_unit(None, None, 32, Hooks(input_fn=unreadable)) is None


# -- the decisions, on fake GPUs ---------------------------------------------------------------------


def run_on_fake_gpus(digits, sizing, *, hook=None, workers=2, replication=1, **kwargs):
    X, y = digits
    e = Pins(workers, worker_resources=[{GPU: 1}] * workers)
    runner = MOPRunner(e, kwargs.pop("procedure", grid()), MODELS, X, y, seed=3, sizing_fn=sizing,
                       replication=replication, hooks=Hooks(train_fn=hook or BatchSizes()), max_unit_retries=0,
                       **kwargs)
    return e, runner


def test_a_batch_size_that_fits_is_kept(digits):
    hook = BatchSizes({"t0": 32, "t1": 32})
    sizing = FakeGpus({"local-0": 8 * GB, "local-1": 8 * GB}, {0.1: 1 * GB, 0.05: 1 * GB})
    e, runner = run_on_fake_gpus(digits, sizing, hook=hook)
    with e:
        result = runner.run()
    assert sorted(w for _, w, _ in sizing.calls) == ["local-0", "local-0", "local-1", "local-1"]
    assert {r for _, _, r in sizing.calls} == {32}
    assert runner.planned_batch_sizes == {} and runner.reduced_batch_sizes == {}
    assert set(hook.seen) == {("t0", 32), ("t1", 32)}
    assert {t: p.batch_size for t, p in runner.gpu_plans.items()} == {"t0": 32, "t1": 32}
    assert not any("sizing" in f for f in result.faults)


def test_a_batch_size_too_big_for_the_gpus_is_cut_before_training_so_it_never_runs_out(digits):
    # budget 1.44e9 / 1.2 = 1.2e9 = 1e9 + 1e7 * 20: batch 20 fits, 21 does not
    hook = BatchSizes({"t0": 20})  # t0 runs out of memory above 20 on the fake GPU
    sizing = FakeGpus({"local-0": 1.44 * GB, "local-1": 2 * GB}, {0.1: 1 * GB, 0.05: 0.5 * GB})
    e, runner = run_on_fake_gpus(digits, sizing, hook=hook)
    with e:
        result = runner.run()
    # t0 (lr 0.1) is cut by the smaller GPU, so that it fits both; t1 fits as asked
    assert runner.planned_batch_sizes == {"t0": 20}
    assert runner.reduced_batch_sizes == {} and not any("ran out of memory" in f for f in result.faults)
    assert set(hook.seen) == {("t0", 20), ("t1", 32)}
    plan = runner.gpu_plans["t0"]
    assert (plan.batch_size, plan.workers, plan.probed_on) == (20, ("local-0", "local-1"), "local-0")
    notes = [f for f in result.faults if "GPU sizing of trial 't0'" in f]
    assert len(notes) == 1 and plan.describe() in notes[0] and "batch size 20 (requested 32)" in notes[0]
    assert len(result.history) == 4


def test_a_trial_is_sized_for_the_largest_batch_a_partition_allows(digits):
    sizing = FakeGpus({"local-0": 100 * GB}, {0.1: 1 * GB})
    e, runner = run_on_fake_gpus(digits, sizing, workers=1, procedure=grid(batch_size=4096, lrs=(0.1,), epochs=1))
    with e:
        runner.run()
        largest = max(len(x) for x, _ in runner._parts["train"].values())
    assert [r for _, _, r in sizing.calls] == [largest]  # units never train on more than a partition
    assert runner.planned_batch_sizes == {}  # the trial's own 4096 is not a cut


def test_a_trial_keeps_off_the_gpus_it_does_not_fit_on(digits):
    # t0 (lr 0.1) needs 3 GB: not even batch 2 fits local-0's 2 GB; t1 fits both
    hook = BatchSizes()
    sizing = FakeGpus({"local-0": 2 * GB, "local-1": 8 * GB}, {0.1: 3 * GB, 0.05: 0.5 * GB})
    e, runner = run_on_fake_gpus(digits, sizing, hook=hook, replication=2)
    trained_on: dict[str, set[str]] = {"t0": set(), "t1": set()}
    runner.on_unit = lambda rec: trained_on[rec.trial].add(rec.worker)
    with e:
        result = runner.run()
    assert trained_on["t0"] == {"local-1"}  # train and validation units alike
    # t1 may train on both (which it does on each depends on timing: one worker may take all its units)
    assert trained_on["t1"] and set(runner.gpu_plans["t1"].workers) == {"local-0", "local-1"}
    assert runner.planned_batch_sizes == {} and runner.gpu_plans["t0"].workers == ("local-1",)
    assert any("GPU sizing of trial 't0'" in f and "keep off ['local-0']" in f for f in result.faults)
    assert len(result.history) == 4


def test_a_trial_whose_data_lives_only_where_it_does_not_fit_fails_with_the_plan(digits):
    sizing = FakeGpus({"local-0": 2 * GB, "local-1": 8 * GB}, {0.1: 3 * GB, 0.05: 0.5 * GB})
    e, runner = run_on_fake_gpus(digits, sizing, replication=1)
    with e, pytest.raises(RunnerError, match=r"trial 't0': train partition \d lives only on \['local-0'\]") as info:
        runner.run()
    assert "batch size 32 (requested 32)" in str(info.value) and "raise replication" in str(info.value)
    assert not e.units("train_unit")


def test_a_config_that_fits_no_gpu_fails_with_model_batch_size_and_gpu_memory(digits):
    sizing = FakeGpus({"local-0": 2 * GB, "local-1": 4 * GB}, {0.1: 5 * GB, 0.05: 0.5 * GB})
    e, runner = run_on_fake_gpus(digits, sizing)
    with e, pytest.raises(DeviceOutOfMemoryError) as info:
        runner.run()
    error = info.value
    assert error.code == "gpu_out_of_memory" and error.phase == "sizing"
    assert (error.model, error.batch_size, error.device, error.total_memory) == ("lenet", 2, "cuda:Fake GPU", 4 * GB)
    assert "model 'lenet' does not fit on a GPU: batch size 2 needs more than the 3.7 GiB" in str(error)
    assert "on worker 'local-1'" in str(error)  # the GPU with the most room
    assert not e.units("train_unit")


def test_trials_added_later_are_sized_before_their_first_unit(digits):
    from ease_jupyter.execution.automl import PBT

    X, y = digits
    sizing = FakeGpus({"local-0": 1.44 * GB}, {}, default=1 * GB)
    hook = BatchSizes({})
    procedure = PBT("lenet", {"lr": [0.1, 0.05]}, population=2, interval=1, max_epochs=3, quantile=0.5)
    with Pins(1, worker_resources=[{GPU: 1}]) as e:
        runner = MOPRunner(e, procedure, MODELS, X, y, seed=3, sizing_fn=sizing, hooks=Hooks(train_fn=hook))
        runner.run()
    assert len(runner._trials) > 2  # PBT added trials at epoch boundaries
    assert Counter(t for t, _, _ in sizing.calls) == {t: 1 for t in runner._trials}
    assert set(hook.seen) == {(t, 20) for t in runner._trials}  # every trial, added or not, trained at its cut size


def test_a_gpu_worker_lost_while_sizing_does_not_hold_up_training(digits):
    X, y = digits

    class KillsLocal1(FakeGpus):
        def __call__(self, partition, spec, requested, hooks):
            if worker_name() == "local-1" and "local-1" in e.workers():
                e.kill_worker("local-1")
            return super().__call__(partition, spec, requested, hooks)

    sizing = KillsLocal1({"local-0": 1.44 * GB, "local-1": 1.44 * GB}, {0.1: 1 * GB, 0.05: 1 * GB})
    e = Pins(2, worker_resources=[{GPU: 1}, {GPU: 1}], respawn=False)
    with e:
        runner = MOPRunner(e, grid(), MODELS, X, y, seed=3, sizing_fn=sizing, repair_grace=0.2)
        result = runner.run()
    assert runner.planned_batch_sizes == {"t0": 20, "t1": 20}  # from local-0's results
    assert {p.workers for p in runner.gpu_plans.values()} == {("local-0",)}
    assert len(result.history) == 4


def test_a_resumed_run_sizes_its_trials_again(digits):
    X, y = digits
    capacity, fixed = {"local-0": 1.44 * GB}, {0.1: 1 * GB, 0.05: 1 * GB}
    states = []
    with Pins(1, worker_resources=[{GPU: 1}]) as e:
        first = MOPRunner(e, grid(), MODELS, X, y, seed=3, sizing_fn=FakeGpus(capacity, fixed))
        first.on_metrics = lambda m: states.append(first.resume_state())
        first.run()
        again = FakeGpus(capacity, fixed)
        resumed = MOPRunner(e, grid(), MODELS, X, y, seed=3, sizing_fn=again, resume=states[1])
        resumed.run()
    assert resumed.planned_batch_sizes == first.planned_batch_sizes == {"t0": 20, "t1": 20}
    assert sorted(t for t, _, _ in again.calls) == ["t0", "t1"]


# -- the plan from several workers' results (pure) -----------------------------------------------------


def sized(batch_size, capacity, requested=64):
    return BatchSizing(batch_size, requested, int(capacity), 1.2, ((2, 1),) if batch_size is None else ((batch_size, 1),))


def test_the_plan_takes_the_smallest_batch_that_any_gpu_fits_and_every_gpu_that_fits_one():
    plan = plan_from_sizings("m", {"a": sized(48, 10 * GB), "b": sized(64, 40 * GB), "c": sized(None, 1 * GB),
                                   "d": None})
    assert (plan.batch_size, plan.workers, plan.probed_on, plan.cut) == (48, ("a", "b"), "a", True)
    assert plan_from_sizings("m", {"a": None}) is None
    none = plan_from_sizings("m", {"a": sized(None, 1 * GB), "b": sized(None, 3 * GB)})
    assert (none.batch_size, none.workers, none.probed_on) == (None, (), "b")


# -- on a GPU: the real sizing unit in a MOP run --------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [True, None], ids=["deterministic-kernels", "autotuned-kernels"])
def test_on_a_gpu_a_batch_size_that_cannot_fit_is_cut_before_training_and_never_runs_out(deterministic):
    from ease_jupyter.execution.gpu_memory import SAFETY, measure_step_peak
    from ease_jupyter.execution.units import DEVICE_PARTITION_SHARE, UnitSpec
    from ease_jupyter.schema import program_from_shapes
    from ease_jupyter.zoo import candidates

    shape, requested = (32, 32, 3), 4096
    cand = next(c for c in candidates(program_from_shapes(list(shape), [10])) if c.name == "resnet_small")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((requested + 8, *shape)).astype(np.float32)  # one partition of more than 4096
    y = rng.integers(0, 10, len(X))
    val = (X[:256], y[:256])
    device = torch.device("cuda", torch.cuda.current_device())
    # A process limit with room for a step of about 1024 examples (the sizing's safety factor and the
    # partitions' share of the limit on top): the requested 4096 cannot fit under it.
    spec = UnitSpec.of("probe", "resnet_small", {"lr": 0.01}, cand.build)
    measure_step_peak(spec, (X[:64], y[:64]), 8, device)  # first use: cuBLAS/cuDNN handles
    peak = measure_step_peak(spec, (X[:1024], y[:1024]), 1024, device)
    total = torch.cuda.get_device_properties(device).total_memory
    held = torch.cuda.memory_reserved(device)
    limit = (held + peak * SAFETY * 1.1) / (1 - DEVICE_PARTITION_SHARE)
    torch.cuda.set_per_process_memory_fraction(limit / total, device)
    try:
        with LocalEngine(1, worker_resources=[{GPU: 1}]) as e:
            runner = MOPRunner(e, GridSearch("resnet_small", {"lr": [0.01], "batch_size": [requested]}, epochs=1),
                               [cand], X, y, validation=val, seed=0, hooks=Hooks(deterministic=deterministic))
            result = runner.run()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        gpu_memory._free_bytes(device)
    plan = runner.gpu_plans["t0"]
    assert plan.sizing.device.startswith("cuda:") and plan.requested == requested
    at_requested = dict(plan.sizing.peaks)[requested]  # out of memory (None), or more than the room
    assert at_requested is None or at_requested * SAFETY > plan.sizing.capacity_bytes
    # about 1024 fits (fewer where the autotuned kernels' workspaces count in the peak)
    assert 32 <= runner.planned_batch_sizes["t0"] < requested
    assert runner.reduced_batch_sizes == {} and not any("ran out of memory" in f for f in result.faults)
    assert any(plan.describe() in f for f in result.faults)
    assert len(result.history) == 1 and result.history[0].examples == requested + 8
