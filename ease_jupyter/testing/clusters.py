"""Real Dask clusters on loopback for the cluster tests, and factories for
``--engine module:callable``.

* :func:`dask_cli_cluster`: a scheduler and two workers started with the
  ``dask scheduler`` / ``dask worker`` command lines by
  ``scripts/dask_cluster.sh`` (worker ``gpu`` declares ``--resources GPU=1``,
  worker ``cpu`` nothing);
* :func:`gateway_server`: a dask-gateway server (``scripts/gateway.sh``:
  ``UnsafeLocalBackend``, ``SimpleAuthenticator``) and the dask-gateway
  client settings that reach it;
* :func:`executed_keys`: the task keys each worker of a cluster executed,
  from the workers' own transition logs;
* the factories (``ease_jupyter.testing.clusters:client_of_test_cluster``,
  ``:local_cluster``, ``:jobqueue_local_cluster``) return what a user's
  factory would: a ``distributed.Client`` or a cluster object. Each records
  what it made in :data:`MADE`, so a test can check that the engine closed it.

The scripts live in the repository's ``scripts/`` (not in the wheel): these
helpers run from a checkout.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

__all__ = [
    "ADDRESS_ENV",
    "MADE",
    "SCRIPTS",
    "dask_cli_cluster",
    "gateway_server",
    "executed_keys",
    "gateway_clusters",
    "where_after",
    "client_of_test_cluster",
    "local_cluster",
    "jobqueue_local_cluster",
]

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"

#: Where :func:`client_of_test_cluster` finds the scheduler (set by the tests).
ADDRESS_ENV = "EASEML_TEST_DASK_ADDRESS"

#: Everything the factories below made in this process, newest last.
MADE: list[Any] = []

#: Worker transition logs long enough to hold every task of a test.
LONG_WORKER_LOG = {"DASK_ADMIN__LOW_LEVEL_LOG_LENGTH": "1000000"}


def _script(name: str, command: str, env: Mapping[str, str]) -> str:
    path = SCRIPTS / name
    if not path.exists():
        raise FileNotFoundError(f"{path}: the cluster scripts come with a checkout of the repository")
    done = subprocess.run(["bash", str(path), command], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"{name} {command} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def _exports(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export "):].split("=", 1)
            out[key] = value
    return out


@contextmanager
def dask_cli_cluster(directory: Path | str, *, env: Mapping[str, str] | None = None,
                     idle_timeout: str = "900s") -> Iterator[str]:
    """Start a scheduler and the workers ``cpu`` and ``gpu`` (``GPU=1``) in
    ``directory``; yield the scheduler's ``tcp://`` address; stop them.
    ``idle_timeout``: the scheduler exits by itself after that long idle,
    so an interrupted test run leaves nothing behind."""
    settings = {"EASEML_DASK_DIR": str(directory), "EASEML_DASK_IDLE_TIMEOUT": idle_timeout,
                **LONG_WORKER_LOG, **dict(env or {})}
    try:
        address = _exports(_script("dask_cluster.sh", "start", settings))["EASEML_TEST_DASK_ADDRESS"]
        yield address
    finally:
        _script("dask_cluster.sh", "stop", settings)


@contextmanager
def gateway_server(directory: Path | str) -> Iterator[dict[str, str]]:
    """Start a dask-gateway server in ``directory``; yield the environment
    variables (dask config ``gateway.*``) that point dask-gateway's client at
    it; stop it (it stops its clusters)."""
    settings = {"EASEML_GATEWAY_DIR": str(directory)}
    try:
        yield _exports(_script("gateway.sh", "start", settings))
    finally:
        _script("gateway.sh", "stop", settings)


def _executed(dask_worker: Any) -> list[str]:
    # A transition record is (key, start, finish, recommendations, stimulus, time).
    return [str(r[0]) for r in dask_worker.state.log
            if len(r) >= 3 and r[1] == "executing" and r[2] in ("memory", "error")]


def executed_keys(client: Any) -> dict[str, list[str]]:
    """Worker address -> the keys of the tasks it executed, from its own log."""
    return client.run(_executed)


def gateway_clusters(env: Mapping[str, str]) -> dict[str, dict[str, list[str]]]:
    """The running clusters of the gateway that ``env`` (its client
    settings, as :func:`gateway_server` yields them) points at, for the user
    they log in as: cluster name -> :func:`executed_keys` of its workers."""
    from dask_gateway import BasicAuth, Gateway

    auth = BasicAuth(env["DASK_GATEWAY__AUTH__KWARGS__USERNAME"], env["DASK_GATEWAY__AUTH__KWARGS__PASSWORD"])
    gateway = Gateway(env["DASK_GATEWAY__ADDRESS"], auth=auth)
    out = {}
    for report in gateway.list_clusters():
        cluster = gateway.connect(report.name)  # shutdown_on_close=False: only looks
        try:
            with cluster.get_client(set_as_default=False) as client:
                out[report.name] = executed_keys(client)
        finally:
            cluster.close()
            cluster.gateway.close = lambda: None  # see engine.clusters.close_cluster
    # Not closed: a Gateway closes itself when dropped, and fails if closed twice.
    return out


def where_after(seconds: float) -> str:
    """A task that takes a moment and says which worker ran it. (Task
    functions live in an importable module: Dask pickles a task graph by
    reference where it can, and a scheduler cannot import test modules.)"""
    import time

    from .engine_contract import where

    time.sleep(seconds)
    return where()


# -- factories for ``--engine module:callable`` -----------------------------------------


def client_of_test_cluster() -> Any:
    """A ``distributed.Client`` of the scheduler at ``$EASEML_TEST_DASK_ADDRESS``."""
    from distributed import Client

    client = Client(os.environ[ADDRESS_ENV], set_as_default=False)
    MADE.append(client)
    return client


def local_cluster() -> Any:
    """A cluster object: ``distributed.LocalCluster`` of one worker process."""
    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                           scheduler_kwargs={"dashboard_address": ":0"}, host="127.0.0.1")
    MADE.append(cluster)
    return cluster


def jobqueue_local_cluster() -> Any:
    """dask-jobqueue's ``LocalCluster``: its job machinery (a job script per
    worker) with jobs that are local processes, one worker each declaring
    ``GPU=1`` as a Slurm job with ``--gres=gpu:1`` would."""
    from dask_jobqueue.local import LocalCluster

    cluster = LocalCluster(cores=1, processes=1, memory="2GiB", worker_extra_args=["--resources", "GPU=1"],
                           scheduler_options={"host": "127.0.0.1", "dashboard_address": ":0"})
    cluster.scale(jobs=1)
    MADE.append(cluster)
    return cluster
