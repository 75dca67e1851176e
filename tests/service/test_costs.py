"""The selector's cost estimates (``c_k`` of cost-aware GP-UCB, pvldb §4.1):
FLOPs over the measured speed of each engine's devices, corrected per engine
by what finished jobs measured."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.execution.device_speed import DeviceSpeed, PoolSpeeds
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.loop.costs import FLOPS_PER_SECOND, Costs, spec_flops
from ease_jupyter.store import JobStatus, JobUpdate, open_store
from ease_jupyter.zoo import Engine

CPU = DeviceSpeed("cpu", 1e6)  # slow, so that no estimate of these small tasks hits the 1 ms floor
GPU = DeviceSpeed("cuda:Fake", 20 * 1e6)
GPU_POOL = PoolSpeeds(torch=GPU, sklearn=CPU)
CPU_POOL = PoolSpeeds(torch=CPU, sklearn=CPU)


@pytest.fixture
def two_tasks():
    """An image task (torch arms) and a flat task (scikit-learn arms), fed."""
    store, blobs = open_store("memory://")
    rng = np.random.default_rng(0)
    user = store.create_user("ada", "h" * 64)
    image = store.create_task(user.id, "digits", format_program(program_from_shapes([8, 8, 1], [4])))
    flat = store.create_task(user.id, "flat", format_program(program_from_shapes([16], [4])))
    image_v = datasets.feed(store, blobs, image, rng.standard_normal((40, 8, 8, 1)), rng.integers(0, 4, 40))
    flat_v = datasets.feed(store, blobs, flat, rng.standard_normal((40, 16)), rng.integers(0, 4, 40))
    yield store, (image, image_v), (flat, flat_v)
    store.close()


def arm_seconds(costs: Costs, task, version) -> dict[str, float]:
    return {k: costs.seconds(task, spec, version.n_examples) for k, spec in costs.configs(task).items()}


def finish(store, costs: Costs, task, version, arm: str, seconds: float) -> None:
    spec = costs.configs(task)[arm]
    job = store.create_job(task.id, version.id, spec.model, spec.config())
    store.update_job(job.id, JobStatus.RUNNING)
    costs.learn(store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=seconds)))


def test_without_speeds_every_arm_is_priced_at_one_gflop_per_second(two_tasks):
    store, (image, image_v), (flat, flat_v) = two_tasks
    costs = Costs(store, torch_epochs=2, service_epochs=2)
    for task, version in ((image, image_v), (flat, flat_v)):
        for arm, spec in costs.configs(task).items():
            want = max(spec_flops(task, spec, version.n_examples) / FLOPS_PER_SECOND, 1e-3)
            assert costs.seconds(task, spec, version.n_examples) == pytest.approx(want), arm


def test_a_gpu_pool_makes_torch_arms_cheaper_by_its_speed_before_any_job(two_tasks):
    store, (image, image_v), (flat, flat_v) = two_tasks
    on_cpu = Costs(store, torch_epochs=2, speeds=CPU_POOL, service_epochs=2)
    on_gpu = Costs(store, torch_epochs=2, speeds=GPU_POOL, service_epochs=2)
    torch_cpu, torch_gpu = arm_seconds(on_cpu, image, image_v), arm_seconds(on_gpu, image, image_v)
    sk_cpu, sk_gpu = arm_seconds(on_cpu, flat, flat_v), arm_seconds(on_gpu, flat, flat_v)
    assert set(torch_gpu) == {"lenet", "resnet_small", "vgg_small", "mobilenet_small"}
    assert sk_gpu == sk_cpu  # scikit-learn arms stay on the CPU's speed
    for arm in torch_gpu:
        assert torch_cpu[arm] / torch_gpu[arm] == pytest.approx(20.0)
    # relative to the scikit-learn arms (what c* / c_k compares), torch arms drop 20x
    ratio_cpu = torch_cpu["lenet"] / sk_cpu["logreg"]
    ratio_gpu = torch_gpu["lenet"] / sk_gpu["logreg"]
    assert ratio_cpu / ratio_gpu == pytest.approx(20.0)


def test_finished_jobs_correct_each_engine_on_its_own(two_tasks):
    store, (image, image_v), (flat, flat_v) = two_tasks
    costs = Costs(store, torch_epochs=2, speeds=GPU_POOL, service_epochs=2)
    predicted = arm_seconds(costs, image, image_v)
    sk_before = arm_seconds(costs, flat, flat_v)
    # the GPU ran lenet 3x slower than the probe predicted (small nets leave a GPU idle)
    finish(store, costs, image, image_v, "lenet", 3 * predicted["lenet"])
    after = arm_seconds(costs, image, image_v)
    for arm in predicted:
        assert after[arm] == pytest.approx(3 * predicted[arm])
    assert costs.correction(Engine.TORCH) == pytest.approx(3.0)
    # an engine with no finished job yet borrows the pooled correction
    assert arm_seconds(costs, flat, flat_v) == pytest.approx({k: 3 * v for k, v in sk_before.items()})
    # then its own jobs take over: knn ran at exactly the probe's CPU prediction
    finish(store, costs, flat, flat_v, "knn", sk_before["knn"])
    assert arm_seconds(costs, flat, flat_v) == pytest.approx(sk_before)
    assert arm_seconds(costs, image, image_v) == pytest.approx(after)


def test_learning_takes_the_median_per_engine(two_tasks):
    store, (image, image_v), _ = two_tasks
    costs = Costs(store, torch_epochs=2, speeds=GPU_POOL, service_epochs=2)
    predicted = arm_seconds(costs, image, image_v)
    for arm, factor in (("lenet", 2.0), ("vgg_small", 4.0), ("mobilenet_small", 100.0)):
        finish(store, costs, image, image_v, arm, factor * predicted[arm])
    assert costs.correction(Engine.TORCH) == pytest.approx(4.0)


def test_speeds_measured_after_jobs_were_learned_re_price_nothing_the_jobs_measured(two_tasks):
    """Once an engine has finished jobs, its arms cost their measured seconds
    per FLOP whatever speed was assumed when they were learned."""
    store, (image, image_v), _ = two_tasks
    costs = Costs(store, torch_epochs=2, service_epochs=2)
    finish(store, costs, image, image_v, "lenet", 7.0)
    learned = arm_seconds(costs, image, image_v)
    assert learned["lenet"] == pytest.approx(7.0)
    costs.use_speeds(GPU_POOL)
    assert arm_seconds(costs, image, image_v) == pytest.approx(learned)


def test_a_job_without_a_measured_cost_teaches_nothing(two_tasks):
    store, (image, image_v), _ = two_tasks
    costs = Costs(store, torch_epochs=2, speeds=GPU_POOL, service_epochs=2)
    before = arm_seconds(costs, image, image_v)
    spec = costs.configs(image)["lenet"]
    job = store.create_job(image.id, image_v.id, spec.model, spec.config())
    costs.learn(job)
    assert arm_seconds(costs, image, image_v) == before and costs.correction(Engine.TORCH) == 1.0


def test_a_torch_arm_is_priced_at_the_config_epochs_its_halving_trains(two_tasks):
    """With no operator setting a torch pick trains the task's own
    ``max_epochs``, else the rule by data size, by successive halving: its
    price counts the config-epochs that schedule trains, not configs x epochs."""
    from ease_jupyter.execution.automl import pick_schedule
    from ease_jupyter.service.task_epochs import set_max_epochs
    from ease_jupyter.zoo.templates import default_max_epochs

    store, (image, image_v), _ = two_tasks
    costs = Costs(store, torch_epochs=2)
    n = image_v.n_examples
    arm, spec = next((k, s) for k, s in costs.configs(image).items() if s.engine.value == "torch")
    per_config_epoch = spec_flops(image, spec, n, 1) / len(spec.points())
    for own in (None, 9):
        set_max_epochs(store, image.id, own)
        epochs = own or default_max_epochs(n)
        schedule = pick_schedule(len(spec.points()), epochs)
        assert schedule.config_epochs < len(spec.points()) * epochs  # some configs stop early
        want = per_config_epoch * schedule.config_epochs / FLOPS_PER_SECOND
        assert costs.seconds(image, spec, n) == pytest.approx(max(want, 1e-3)), (arm, own)
