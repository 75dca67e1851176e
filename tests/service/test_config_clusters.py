"""The service settings of clusters and GPUs: which ``--engine`` values are
accepted, mixed precision, the fsspec blob URL, and the error code a failed
job carries."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from ease_jupyter import datasets
from ease_jupyter.cli import main
from ease_jupyter.errors import EaseMLError
from ease_jupyter.service.config import ServiceConfig, engine_form
from ease_jupyter.service.core import Service
from ease_jupyter.service.failures import error_code, fail_job, failure_code
from ease_jupyter.store import JobStatus, open_store


@pytest.mark.parametrize("spec, form", [
    ("local", "mode"), ("dask", "mode"), ("gateway", "mode"),
    ("tcp://10.0.0.5:8786", "address"), ("tls://scheduler.example.org:8786", "address"),
    ("site_clusters:slurm_gpus", "factory"), ("my.pkg.clusters:make.cluster", "factory"),
])
def test_engine_values_of_each_form_are_accepted(spec, form):
    assert engine_form(spec) == form
    assert ServiceConfig(engine=spec).engine == spec


@pytest.mark.parametrize("spec", ["bogus", "tcp//host:1", "a:b:c", "mod:", ":make", "1mod:make", ""])
def test_other_engine_values_are_refused_naming_the_field_and_the_forms(spec):
    with pytest.raises(ValueError, match=r"engine: found .*expected local, dask, gateway, a scheduler address.*module:callable"):
        ServiceConfig(engine=spec)


def test_serve_refuses_a_bad_engine_before_starting(tmp_path):
    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), "--engine", "nonsense"])
    assert result.exit_code == 2
    assert "'--engine': found 'nonsense'" in result.output and "module:callable" in result.output
    assert not (tmp_path / "service.json").exists()


def test_precision_and_blob_url_are_checked():
    assert ServiceConfig(precision="bf16", blob_url="file:///srv/shared").precision == "bf16"
    with pytest.raises(ValueError, match="precision: found 'fp8', expected one of fp32, bf16, fp16"):
        ServiceConfig(precision="fp8")
    with pytest.raises(ValueError, match="blob_url: found '/srv/shared', expected an fsspec URL"):
        ServiceConfig(blob_url="/srv/shared")


class _CodedError(EaseMLError):
    code = "gpu_out_of_memory"


def _running_job(store, blobs):
    user = store.create_user("alice", "h" * 64)
    task = store.create_task(user.id, "t", "input: [2] output: [2]")
    version = datasets.feed(store, blobs, task, np.zeros((4, 2), "float32"), np.array([0, 1, 0, 1]))
    return store.update_job(store.create_job(task.id, version.id, "m", {}).id, JobStatus.RUNNING)


def test_a_failure_with_a_code_keeps_it_even_when_wrapped_and_is_still_scored():
    store, blobs = open_store("memory://")
    job = _running_job(store, blobs)
    wrapper = RuntimeError("train unit failed")
    wrapper.__cause__ = _CodedError("lenet at batch size 32 does not fit in 80 GiB")
    failed = fail_job(store, job.id, wrapper)
    assert error_code(store, failed) == "gpu_out_of_memory"
    assert failure_code(store, failed) is None  # the model's failure: the selector hears of it


def test_the_job_list_shows_the_error_code(tmp_path):
    service = Service(ServiceConfig(db_url="memory://", data_dir=tmp_path, torch=False))
    try:
        admin = service.store.create_user("root", "r" * 64, is_admin=True)
        task = service.store.create_task(admin.id, "t", "input: [2] output: [2]")
        version = datasets.feed(service.store, service.blobs, task, np.zeros((4, 2), "float32"), np.array([0, 1, 0, 1]))
        coded = service.store.update_job(service.store.create_job(task.id, version.id, "m", {}).id, JobStatus.RUNNING)
        plain = service.store.update_job(service.store.create_job(task.id, version.id, "n", {}).id, JobStatus.RUNNING)
        fail_job(service.store, coded.id, _CodedError("out of memory"))
        fail_job(service.store, plain.id, ValueError("diverged"))
        codes = {j["model"]: j["error_code"] for j in service.jobs(admin, task.name)}
        assert codes == {"m": "gpu_out_of_memory", "n": None}
    finally:
        service.stop()
