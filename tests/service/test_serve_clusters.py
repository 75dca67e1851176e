"""``easeml serve`` on real clusters, loopback only.

* ``--engine tcp://...`` on a scheduler and two workers started with the
  ``dask scheduler`` / ``dask worker`` command lines (worker ``gpu`` declares
  ``--resources GPU=1``): a flat task (scikit-learn grids) and an image task
  (torch MOP) train to success, and the workers' own task records show where
  each ran: MOP units on the GPU worker, scikit-learn fits on the CPU worker.
* ``--engine gateway`` with a dask-gateway server: an image task trains on
  the cluster the service asks the gateway for, in job-slot processes that
  connect to it, and the cluster is shut down when the service stops.
* ``--engine`` values that are none of the accepted forms stop the service
  before it starts, naming the value.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.client import Client
from ease_jupyter.service.testing import ServeProcess
from ease_jupyter.testing import clusters as loopback

GPU = "GPU"


def admin_token(data_dir) -> str:
    return CliRunner().invoke(main, ["users", "add", "ada", "--admin", "--data-dir", str(data_dir)]).output.strip()


def iris():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    return X.astype("float32"), y.astype("int64")


def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images[:400] / 16.0).astype("float32")[..., None], d.target[:400].astype("int64")


def wait_for_success(serve: ServeProcess, tasks, timeout: float) -> dict[str, list[dict]]:
    """Each task's jobs, once every task has a succeeded job (or time runs out)."""
    deadline = time.monotonic() + timeout
    jobs: dict[str, list[dict]] = {}
    while time.monotonic() < deadline and serve.proc.poll() is None:
        jobs = {t.name: t.jobs() for t in tasks}
        if all(any(j["status"] == "succeeded" for j in js) for js in jobs.values()):
            return jobs
        time.sleep(1.0)
    raise AssertionError(f"not every task trained a job in {timeout} s: {jobs}\n{serve.output()}")


# -- a cluster started from the command line ----------------------------------------------------------


@pytest.fixture(scope="module")
def cli_cluster(tmp_path_factory):
    with loopback.dask_cli_cluster(tmp_path_factory.mktemp("dask-cli")) as address:
        yield address


def test_serve_trains_flat_and_image_tasks_on_the_cluster_workers(tmp_path, cli_cluster):
    from distributed import Client as DaskClient

    token = admin_token(tmp_path)
    serve = ServeProcess(tmp_path, "--engine", cli_cluster, "--executor", "thread", "--workers", "2", "--torch-epochs", "1")
    try:
        client = Client(serve.url, token)
        flat = client.task("iris", input=[4], output=[3])
        flat.feed(*iris())
        image = client.task("digits", input=[8, 8, 1], output=[10])
        image.feed(*digits())
        jobs = wait_for_success(serve, [flat, image], timeout=300)
        assert any(j["status"] == "succeeded" for j in jobs["digits"])
    finally:
        assert serve.stop() == 0, serve.output()
    with DaskClient(cli_cluster, set_as_default=False) as dask_client:
        resources = {a: i.get("resources") or {} for a, i in dask_client.scheduler_info(n_workers=-1)["workers"].items()}
        executed = loopback.executed_keys(dask_client)  # the workers' own records
    (gpu,) = [a for a, r in resources.items() if r.get(GPU)]
    (cpu,) = [a for a, r in resources.items() if not r.get(GPU)]
    # The engine's task keys start with the function that ran: MOP's pinned
    # units carry "-unit-", the Seneca grid's scikit-learn fits "_fit_task-".
    units = {w: [k for k in keys if "-unit-" in k] for w, keys in executed.items()}
    fits = {w: [k for k in keys if k.startswith("_fit_task-")] for w, keys in executed.items()}
    assert units[gpu] and not units[cpu], "torch units run on the GPU worker only"
    assert fits[cpu] and not fits[gpu], "scikit-learn tasks keep off the GPU worker while a CPU worker exists"


# -- dask-gateway ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    pytest.importorskip("dask_gateway", reason="dask-gateway is not installed (it is in the test extra)")
    pytest.importorskip("dask_gateway_server", reason="dask-gateway-server is not installed (it is in the test extra)")
    with loopback.gateway_server(tmp_path_factory.mktemp("gateway")) as env:
        yield env


def test_serve_on_a_gateway_cluster_shuts_it_down_on_stop(tmp_path, gateway):
    assert loopback.gateway_clusters(gateway) == {}
    token = admin_token(tmp_path)
    # Job slots in spawned processes (the default executor) connect to the
    # one cluster the service opened.
    serve = ServeProcess(tmp_path, "--engine", "gateway", "--workers", "1", "--torch-epochs", "1", env=gateway)
    stopped = None
    try:
        assert len(loopback.gateway_clusters(gateway)) == 1, "the service opens one cluster as it starts"
        client = Client(serve.url, token)
        image = client.task("digits", input=[8, 8, 1], output=[10])
        image.feed(*digits())
        wait_for_success(serve, [image], timeout=300)
        (executed,) = loopback.gateway_clusters(gateway).values()  # one cluster, the service's
        (keys,) = executed.values()  # of its one worker (--workers 1)
        assert any("-unit-" in k for k in keys), "the MOP units ran on the gateway cluster's worker"
    finally:
        stopped = serve.stop()
    assert stopped == 0, serve.output()
    assert loopback.gateway_clusters(gateway) == {}, "the service shuts its gateway cluster down when it stops"


# -- bad --engine values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec,message", [
    ("spark", "'--engine': found 'spark'"),
    ("no_such_module_xyz:make", "no_such_module_xyz"),
])
def test_a_bad_engine_stops_serve_before_it_starts(tmp_path, spec, message):
    proc = subprocess.Popen([sys.executable, "-m", "ease_jupyter", "serve", "--data-dir", str(tmp_path), "--port", "0",
                             "--engine", spec], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = []
        for line in proc.stdout:  # until it exits, or announces that it serves
            out.append(line)
            assert "listening on" not in line, f"serve started with --engine {spec!r}:\n{''.join(out)}"
        assert proc.wait(60) != 0, "".join(out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert message in "".join(out)
