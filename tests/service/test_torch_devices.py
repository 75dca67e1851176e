"""A torch job's device settings in the service: a config that runs out of
GPU memory trains on at half its batch size (the job records it), one that
still does not fit fails with its own error code; the service's precision
and blob URL reach the units."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ease_jupyter import datasets
from ease_jupyter.execution import units
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.failures import error_code
from ease_jupyter.service.mop import REDUCED_BATCH_TAG, run_torch_job
from ease_jupyter.store import InMemoryStore, JobStatus, MemoryBlobStore
from ease_jupyter.zoo.nets import ZooModule


@pytest.fixture()
def image_job():
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.images[:200] / 16.0).astype("float32")[..., None]
    y = d.target[:200].astype("int64")
    store, blobs = InMemoryStore(), MemoryBlobStore()
    user = store.create_user("ada", "h" * 64)
    task = store.create_task(user.id, "digits", format_program(program_from_shapes([8, 8, 1], [10])))
    version = datasets.feed(store, blobs, task, X, y)

    def new_job():
        return store.create_job(task.id, version.id, "lenet", {"lrs": [0.05], "epochs": 1})

    engine = LocalEngine(1)
    yield store, blobs, engine, new_job
    engine.close()


def _out_of_memory_above(monkeypatch, largest: int) -> list[int]:
    """Training batches larger than ``largest`` raise CUDA's out-of-memory
    error, as a GPU too small for them would; returns the sizes seen."""
    seen: list[int] = []
    step = ZooModule.train_step

    def train_step(self, optimizer, x, y, **kw):
        seen.append(int(x.shape[0]))
        if x.shape[0] > largest:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return step(self, optimizer, x, y, **kw)

    monkeypatch.setattr(ZooModule, "train_step", train_step)
    return seen


def test_a_config_that_runs_out_of_memory_trains_at_half_its_batch_size(image_job, monkeypatch):
    store, blobs, engine, new_job = image_job
    seen = _out_of_memory_above(monkeypatch, 20)
    job = run_torch_job(store, blobs, engine, new_job().id, partitions=1)
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert json.loads(store.tags("job", job.id)[REDUCED_BATCH_TAG]) == {"lr=0.05": 16}
    assert 32 in seen and max(seen[seen.index(16):]) <= 16  # after the retry, no batch over 16


def test_a_config_that_still_does_not_fit_fails_with_its_error_code(image_job, monkeypatch):
    store, blobs, engine, new_job = image_job
    _out_of_memory_above(monkeypatch, 4)
    job = run_torch_job(store, blobs, engine, new_job().id, partitions=1)
    assert job.status is JobStatus.FAILED
    assert error_code(store, job) == "gpu_out_of_memory"
    assert "lenet" in job.error and "16" in job.error  # the model and the batch size it last tried


def test_the_services_precision_and_blob_url_reach_the_units(image_job, monkeypatch, tmp_path):
    store, blobs, engine, new_job = image_job
    seen: list[tuple[str, str | None]] = []
    train = units.train_unit

    def spy(partition, checkpoint, spec, hooks=units.Hooks(), out_dir=None):
        seen.append((hooks.precision, out_dir))
        return train(partition, checkpoint, spec, hooks, out_dir)

    monkeypatch.setattr("ease_jupyter.execution.mop.runner.train_unit", spy)
    url = f"file://{tmp_path}/exchange"
    job = run_torch_job(store, blobs, engine, new_job().id, partitions=1, precision="bf16", blob_url=url)
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert seen and all(p == "bf16" and d is not None and d.startswith(url) for p, d in seen)
    assert list((tmp_path / "exchange").iterdir()) == []  # the run's folder is gone after it
    assert np.isfinite(job.accuracy)
