"""DaskEngine on real clusters, loopback only: a scheduler and two workers
started with the ``dask scheduler`` / ``dask worker`` command lines
(``scripts/dask_cluster.sh``; one worker declares ``--resources GPU=1``)
passes the engine contract; ``--engine module:callable`` factories returning
a Client, a cluster object and dask-jobqueue's local cluster; a TLS
scheduler with its Security from the dask config; a dask-gateway server
(``scripts/gateway.sh``) giving ``make_engine("gateway")`` a cluster that is
shut down when the engine closes; a cluster that goes away; and the errors
for ``--engine`` values that are none of the accepted forms."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import cloudpickle
import dask
import pytest
from distributed import Client, LocalCluster
from distributed.security import Security

from ease_jupyter.execution.engine import GPU, MEMORY, EngineError, UnitDone, UnitLost, WorkerAdded, WorkerLost, make_engine
from ease_jupyter.execution.engine import dask as dask_engine
from ease_jupyter.execution.engine.clusters import check_engine_spec, open_cluster
from ease_jupyter.execution.engine.dask import DaskEngine
from ease_jupyter.testing import clusters as loopback
from ease_jupyter.testing.engine_contract import add, collect, echo, events_until, nap, where_task

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FACTORIES = "ease_jupyter.testing.clusters"
TWO_GIB = 2 * 2**30  # scripts/dask_cluster.sh's --memory-limit


@pytest.fixture(scope="module")
def cli_cluster(tmp_path_factory):
    """The scheduler address of a two-worker cluster started from the command line."""
    with loopback.dask_cli_cluster(tmp_path_factory.mktemp("dask-cli")) as address:
        yield address


def wait_for_two_workers(address: str) -> None:
    """After a fault test, the killed worker's nanny starts a new one."""
    with Client(address, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        end = time.monotonic() + 60
        while len(client.scheduler_info(n_workers=-1)["workers"]) != 2 and time.monotonic() < end:
            time.sleep(0.2)


def cluster_engine(address: str) -> DaskEngine:
    wait_for_two_workers(address)
    e = DaskEngine(address, shared_filesystem=True)  # loopback: the workers see our files
    e.kind = "dask"
    return e


@pytest.fixture(scope="module")
def engine(cli_cluster):
    e = cluster_engine(cli_cluster)
    yield e
    e.close()


@pytest.fixture
def fresh_engine(cli_cluster):
    e = cluster_engine(cli_cluster)
    yield e
    e.close()


def ran_on(engine, handle: str) -> list[str]:
    """The workers whose own transition logs show the task ``handle`` executed."""
    key_end = f"-{handle}-{engine._tag}"
    return sorted(w for w, keys in loopback.executed_keys(engine.client).items() if any(k.endswith(key_end) for k in keys))


# -- the command-line cluster ------------------------------------------------------------------


def test_cli_workers_declare_gpu_and_imply_memory(engine):
    res = engine.worker_resources()
    assert len(res) == 2 and all(r[MEMORY] == TWO_GIB for r in res.values())  # the memory limit, not declared
    assert [r.get(GPU, 0) for r in res.values()].count(1.0) == 1
    (gpu,) = engine.gpu_workers()
    assert engine.cpu_workers() == [w for w in engine.workers() if w != gpu]


def test_tasks_run_where_their_resources_and_workers_say(engine):
    """Checked from the workers' own task records, not from what we report."""
    (gpu,) = engine.gpu_workers()
    (cpu,) = engine.cpu_workers()
    asked = {}
    for i in range(6):  # interleaved, each a little slow: unrestricted, they would spread over both
        asked[engine.submit(loopback.where_after, 0.05, resources={GPU: 1})] = gpu
        asked[engine.submit(loopback.where_after, 0.05, workers=[cpu])] = cpu
        asked[engine.submit(loopback.where_after, 0.05, workers=[gpu])] = gpu
    done = collect(engine, asked)
    for h, w in asked.items():
        assert done[h].result == w and ran_on(engine, h) == [w]
    keys = [k for ks in loopback.executed_keys(engine.client).values() for k in ks]
    assert sum(k.startswith("where_after-task-") for k in keys) >= 18  # keys name the function that ran


def test_unpinned_tasks_and_resources_on_a_pool_with_a_gpu(engine):
    """The contract's check of unpinned tasks, for a pool where one worker has a GPU."""
    ref = engine.share(40)
    h = engine.submit(add, ref, 2, resources={MEMORY: 2**20})
    assert collect(engine, [h])[h].result == 42
    with pytest.raises(EngineError, match="resources"):
        engine.submit(add, 1, 2, resources={MEMORY: 2 * TWO_GIB})
    with pytest.raises(EngineError, match="resources"):
        engine.submit(add, 1, 2, resources={GPU: 2})
    with pytest.raises(EngineError, match="resources"):
        engine.submit(add, 1, 2, resources={GPU: 1}, workers=engine.cpu_workers())


def test_memory_requests_run_on_workers_that_declare_none(engine):
    """Dask would hold a task asking for an undeclared resource forever; the
    engine checks MEMORY against the memory limit instead."""
    h = engine.submit(add, 40, 2, resources={MEMORY: 2**20})
    assert collect(engine, [h], timeout=30)[h].result == 42
    with pytest.raises(EngineError, match="resources"):
        engine.submit(add, 1, 2, resources={MEMORY: 2 * TWO_GIB})


def test_engines_in_different_processes_never_share_task_keys(cli_cluster, monkeypatch):
    """Job slots in several processes are clients of one cluster, and each
    process numbers its handles from 0: two tasks with the same handle must
    still be two tasks."""
    monkeypatch.setattr(dask_engine, "new_handle", lambda kind: f"{kind}-same")
    one, two = DaskEngine(cli_cluster), DaskEngine(cli_cluster)
    try:
        h1 = one.submit(add, 1, 0)
        h2 = two.submit(add, 2, 0)
        assert h1 == h2
        assert collect(one, [h1])[h1].result == 1 and collect(two, [h2])[h2].result == 2
    finally:
        one.close()
        two.close()


# -- factories (--engine module:callable) --------------------------------------------------------


def test_a_factory_returning_a_client(cli_cluster, monkeypatch):
    monkeypatch.setenv(loopback.ADDRESS_ENV, cli_cluster)
    e = make_engine(f"{FACTORIES}:client_of_test_cluster")
    made = loopback.MADE[-1]
    try:
        assert isinstance(e, DaskEngine) and e.client is made and len(e.workers()) == 2
        h = e.submit(add, 1, 2)
        assert collect(e, [h])[h].result == 3
    finally:
        e.close()
    assert made.status == "closed"  # the engine owned the client it was given by a factory
    with Client(cli_cluster, set_as_default=False) as other:  # and closed only that: the cluster is not ours
        assert len(other.scheduler_info(n_workers=-1)["workers"]) == 2


def test_a_factory_returning_a_cluster_object():
    e = make_engine(f"{FACTORIES}:local_cluster")
    cluster = loopback.MADE[-1]
    try:
        (w,) = e.workers()
        e.place("k", "here", [w])
        h = e.submit_pinned(echo, "k", 1, worker=w, timeout=60)
        assert collect(e, [h])[h].result == ("here", 1, w)
    finally:
        e.close()
    assert cluster.status.name == "closed"


def test_dask_jobqueue_local_cluster_through_a_factory():
    """dask-jobqueue's job machinery (a job script per worker) with local
    processes as jobs: the worker declares GPU=1 through ``worker_extra_args``,
    as a Slurm job with ``--gres=gpu:1`` would."""
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is not installed (it is in the test extra)")
    e = make_engine(f"{FACTORIES}:jobqueue_local_cluster")
    cluster = loopback.MADE[-1]
    try:
        if not e.workers():  # the job starts after the factory returns
            events_until(e, lambda evs: any(isinstance(ev, WorkerAdded) for ev in evs), timeout=60)
        (w,) = e.workers()
        assert e.worker_resources()[w][GPU] == 1 and e.gpu_workers() == [w]
        assert "--resources GPU=1" in cluster.job_script()
        h = e.submit(where_task, 0, resources={GPU: 1})
        assert collect(e, [h])[h].result == w
    finally:
        e.close()
    assert cluster.status.name == "closed"


# -- TLS ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_cluster():
    security = Security.temporary()  # a fresh CA and certificate, in memory
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tls://", host="127.0.0.1",
                           security=security, dashboard_address=None, scheduler_kwargs={"dashboard_address": ":0"})
    yield cluster, security
    cluster.close()


def test_a_tls_address_with_security_from_the_dask_config(tls_cluster):
    cluster, security = tls_cluster
    assert cluster.scheduler_address.startswith("tls://")
    with pytest.raises(EngineError, match="security.*distributed.comm.tls"):
        make_engine(cluster.scheduler_address)
    tls = {"distributed.comm.tls.ca-file": security.tls_ca_file,
           "distributed.comm.tls.client.cert": security.tls_client_cert,
           "distributed.comm.tls.client.key": security.tls_client_key}
    with dask.config.set(tls):
        e = make_engine(cluster.scheduler_address)
    try:
        h = e.submit(add, 2, 3)
        assert collect(e, [h])[h].result == 5
    finally:
        e.close()


def test_a_security_object_is_passed_through(tls_cluster):
    cluster, security = tls_cluster
    e = DaskEngine(cluster.scheduler_address, security=security)
    try:
        assert e.client.security is security
        h = e.submit(add, 2, 3)
        assert collect(e, [h])[h].result == 5
    finally:
        e.close()
    assert cluster.status.name == "running"  # an address is never ours to close


# -- dask-gateway ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A loopback dask-gateway server; yields dask-gateway's client settings."""
    pytest.importorskip("dask_gateway", reason="dask-gateway is not installed (it is in the test extra)")
    pytest.importorskip("dask_gateway_server", reason="dask-gateway-server is not installed (it is in the test extra)")
    with loopback.gateway_server(tmp_path_factory.mktemp("gateway")) as env:
        yield env


@pytest.fixture
def gateway_config(gateway, monkeypatch):
    """dask-gateway's own configuration, as a deployment gives it: environment variables."""
    for key, value in gateway.items():
        monkeypatch.setenv(key, value)
    dask.config.refresh()
    yield gateway
    monkeypatch.undo()
    dask.config.refresh()


def gateway_clusters(env) -> list[str]:
    return sorted(loopback.gateway_clusters(env))


def test_make_engine_gateway_starts_a_cluster_and_shuts_it_down(gateway_config):
    e = make_engine("gateway", n_workers=1)
    try:
        assert len(gateway_clusters(gateway_config)) == 1
        if not e.workers():
            events_until(e, lambda evs: any(isinstance(ev, WorkerAdded) for ev in evs), timeout=60)
        (w,) = e.workers()
        assert w.startswith("tls://")  # the gateway's clusters speak TLS, with the credentials it gave us
        e.place("k", "data", [w])
        h = e.submit_pinned(echo, "k", 7, worker=w, timeout=60)
        assert collect(e, [h])[h].result == ("data", 7, w)
    finally:
        e.close()
    assert gateway_clusters(gateway_config) == []


def test_an_adaptive_gateway_cluster_keeps_a_worker(gateway_config):
    e = make_engine("gateway", n_workers=2, adaptive=True)
    try:
        if not e.workers():  # adaptive from one worker up to two
            events_until(e, lambda evs: any(isinstance(ev, WorkerAdded) for ev in evs), timeout=60)
        h = e.submit(add, 2, 2)
        assert collect(e, [h])[h].result == 4
    finally:
        e.close()
    assert gateway_clusters(gateway_config) == []


def test_an_opened_gateway_cluster_connects_other_engines_and_closes(gateway_config):
    """What a service does: open one cluster, let job slots connect to it
    (through a picklable Connection), shut it down on stop."""
    import pickle

    opened = open_cluster("gateway", workers=1)
    try:
        e = make_engine(pickle.loads(pickle.dumps(opened.connection)))
        try:
            if not e.workers():
                events_until(e, lambda evs: any(isinstance(ev, WorkerAdded) for ev in evs), timeout=60)
            h = e.submit(add, 1, 1)
            assert collect(e, [h])[h].result == 2
        finally:
            e.close()
        assert gateway_clusters(gateway_config) == [opened.cluster.name]  # a connection does not own the cluster
    finally:
        opened.close()
    assert gateway_clusters(gateway_config) == []


def test_gateway_errors_say_what_is_missing(gateway_config, monkeypatch):
    monkeypatch.setenv("DASK_GATEWAY__AUTH__KWARGS__PASSWORD", "pw-wrong")
    dask.config.refresh()
    with pytest.raises(EngineError, match="gateway.*did not start a cluster"):
        make_engine("gateway")
    monkeypatch.delenv("DASK_GATEWAY__ADDRESS")
    dask.config.refresh()
    with pytest.raises(EngineError, match="gateway.address"):
        make_engine("gateway")


@pytest.mark.parametrize("auth, says", [
    ({"DASK_GATEWAY__AUTH__TYPE": "jupyterhub"}, "refused its configuration (No JupyterHub API token"),
    ({}, "did not start a cluster"),
])
def test_a_refused_gateway_start_leaves_no_traceback_at_exit(tmp_path, auth, says):
    """``easeml serve --engine gateway`` against a loopback address where
    nothing listens: one error naming the option, and no traceback from
    dask-gateway's clean-up at exit (it used to trip over the cluster object
    whose start was refused)."""
    import socket
    import subprocess

    pytest.importorskip("dask_gateway", reason="dask-gateway is not installed (it is in the test extra)")
    with socket.socket() as taken:  # bound, never listening: connections are refused
        taken.bind(("127.0.0.1", 0))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("DASK_GATEWAY__") and k != "JUPYTERHUB_API_TOKEN"}
        env.update({"DASK_GATEWAY__ADDRESS": f"http://127.0.0.1:{taken.getsockname()[1]}", **auth})
        run = subprocess.run([sys.executable, "-m", "ease_jupyter", "serve", "--engine", "gateway",
                              "--data-dir", str(tmp_path / "data"), "--port", "0"],
                             env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr
    assert "Invalid value for '--engine': found 'gateway', but " in run.stderr and says in run.stderr
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
    assert not (tmp_path / "data" / "service.json").exists()


# -- a cluster that goes away ------------------------------------------------------------------------------


def test_a_cluster_that_goes_away_loses_its_units_and_workers(tmp_path):
    with loopback.dask_cli_cluster(tmp_path) as address:
        e = DaskEngine(address)
        try:
            w = e.workers()[0]
            e.place("p", 0, [w])
            pinned = e.submit_pinned(nap, "p", 30.0, worker=w, timeout=120)
            free = e.submit(nap, None, 30.0)
            time.sleep(0.5)
            os.kill(int(Path(tmp_path, "scheduler.pid").read_text()), signal.SIGKILL)
            seen = events_until(e, lambda evs: sum(isinstance(ev, WorkerLost) for ev in evs) == 2
                                and {pinned, free} <= {ev.handle for ev in evs if isinstance(ev, UnitLost)}, timeout=30)
            assert {ev.reason for ev in seen if isinstance(ev, WorkerLost)} == {"scheduler-lost"}
            assert e.workers() == [] and not any(isinstance(ev, UnitDone) for ev in seen)
            with pytest.raises(EngineError, match="worker"):
                e.submit_pinned(nap, "p", 0, worker=w, timeout=5)
        finally:
            e.close()


# -- bad --engine values --------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec,message", [
    ("spark", r"engine: found 'spark', expected 'local', 'dask', 'gateway', a scheduler address.*module:callable"),
    ("", r"engine: found '', expected"),
    ("tcp:/host", r"engine: found 'tcp:/host', expected"),
    ("no_such_module_xyz:make", r"module 'no_such_module_xyz' failed to import.*No module named"),
    ("os.path:no_such_attribute", r"'os.path' has no attribute 'no_such_attribute'"),
    ("os:sep", r"os:sep is a str, expected a callable"),
])
def test_bad_engine_values_are_refused_before_anything_starts(spec, message):
    with pytest.raises(EngineError, match=message):
        check_engine_spec(spec)
    with pytest.raises(EngineError, match=message):
        make_engine(spec)


@pytest.mark.parametrize("spec,message", [
    ("json:dumps", r"the factory 'json:dumps' raised TypeError"),
    ("builtins:object", r"the factory 'builtins:object' returned a object, expected a distributed.Client or a cluster"),
])
def test_a_factory_that_fails_or_returns_something_else(spec, message):
    assert check_engine_spec(spec) == "factory"  # it imports: the failure shows when it is called
    with pytest.raises(EngineError, match=message):
        make_engine(spec)


def test_an_address_nobody_listens_on():
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        with pytest.raises(EngineError, match=r"could not connect to the Dask scheduler at 'tcp://127.0.0.1:9'"):
            make_engine("tcp://127.0.0.1:9")


def test_a_client_whose_event_loop_thread_did_not_start_is_tried_again(cli_cluster, monkeypatch):
    """distributed fails an ``assert`` when a new Client's event-loop thread
    does not start within 10 s (a loaded machine); the engine tries again."""
    starts = []

    class SlowFirst(Client):
        def __init__(self, *args, **kwargs):
            starts.append(args)
            if len(starts) == 1:
                raise AssertionError
            super().__init__(*args, **kwargs)

    class NeverStarts(Client):
        def __init__(self, *args, **kwargs):
            starts.append(args)
            raise AssertionError

    monkeypatch.setattr(dask_engine, "Client", SlowFirst)
    e = DaskEngine(cli_cluster)
    try:
        assert len(starts) == 2 and e.workers()
    finally:
        e.close()
    starts.clear()
    monkeypatch.setattr(dask_engine, "Client", NeverStarts)
    with pytest.raises(EngineError, match=r"event-loop thread did not start \(3 tries\)"):
        DaskEngine(cli_cluster)
    assert len(starts) == dask_engine.CLIENT_STARTS


# -- the engine contract on the command-line cluster (last: its fault tests restart workers) --------------

from ease_jupyter.testing.engine_contract import *  # noqa: E402,F401,F403 - the suite's tests

# The contract's check for a pool with no GPU does not hold here: this cluster
# declares one, and test_cli_workers_declare_gpu_and_imply_memory checks it.
# Nor does its check that a GPU request is refused (here it runs on that
# worker): test_unpinned_tasks_and_resources_on_a_pool_with_a_gpu replaces it.
globals().pop("test_no_declared_gpu_means_every_worker_is_a_cpu_worker", None)
globals().pop("test_unpinned_tasks_resources_and_shared_values", None)
