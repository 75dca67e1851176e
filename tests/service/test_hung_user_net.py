"""A user's net whose ``forward`` hangs DURING MOP training (after its first
calls, which ran in the job's child process, succeeded) fails her job at
about her limit, and another user's torch job training on the same engine
at the same time finishes normally: the engine gives up on the hung unit at
her deadline and a fresh worker takes the place of the one it held."""

from __future__ import annotations

import contextlib
import json
import time

import pytest

from ease_jupyter.execution.automl import GridSearch
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.mop.pool_driver import PoolDriver
from ease_jupyter.execution.mop.runner import MOPRunner
from ease_jupyter.execution.units import Hooks, default_train_fn
from ease_jupyter.jobspec import TorchWorkload, parse_job
from ease_jupyter.zoo.templates import TorchBuilder
from ease_jupyter.store import JobStatus

from .conftest import serving, until

LIMIT = 12.0  # her model's limit (seconds)
HANG_SECONDS = 150.0  # "forever": far past every limit and wait here


@pytest.fixture(scope="module")
def digits_images():
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.images[:300] / 16.0).astype("float32")[..., None]  # [n, 8, 8, 1]
    return X, d.target[:300].astype("int64")


def _hangs_in_training(input_shape, output_shape):
    """Builds a net whose forward returns for its first two calls (the child
    process's first batch, then one in the worker) and then hangs."""
    import math
    import time as clock

    from torch import nn

    class HangsLater(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), output_shape[0]))
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            started = clock.monotonic()
            while self.calls > 2 and clock.monotonic() - started < HANG_SECONDS:  # ends, so no test leaks it
                clock.sleep(0.2)
            return self.net(x)

    return HangsLater()


@pytest.fixture
def shared(tmp_path):
    # one engine worker shared by both users' torch picks, several picks at once on one driver
    with serving(tmp_path, "ada", "bob", torch=True, torch_epochs=1, allow_user_models=True, workers=1,
                 max_torch_workloads=4) as running:
        yield running


def _torch_engine(running):
    from ease_jupyter.zoo import Engine

    engines = running.service.loop.executors[Engine.TORCH].engines()
    assert len(engines) == 1  # the job slots share one engine
    return engines[0]


def _finished(store, task, model=None):
    jobs = [store.get_job(j["id"]) for j in task.jobs() if model is None or j["model"] == model]
    return [j for j in jobs if j.status in (JobStatus.SUCCEEDED, JobStatus.FAILED)]


def test_a_net_that_hangs_in_training_fails_its_job_at_its_limit_and_no_one_elses(shared, digits_images):
    X, y = digits_images
    store = shared.service.store
    ada = shared.client("ada").task("digits-ada", input=[8, 8, 1], output=[10])
    bob = shared.client("bob").task("digits-bob", input=[8, 8, 1], output=[10])
    ada.add_model(_hangs_in_training, name="later", grid={"lr": [0.1]}, limit=LIMIT)
    ada.feed(X, y)

    def running_later():
        return [j for j in ada.jobs() if j["model"] == "later" and j["status"] != "queued"]
    assert until(running_later, 120, every=0.2), ada.jobs()
    engine = _torch_engine(shared)
    time.sleep(3)  # her first training unit is in its forward now, hung
    before = engine.workers()
    bob.feed(X, y)  # his torch picks join the same driver and engine while hers hangs
    assert until(lambda: _finished(store, ada, "later"), 120, every=0.5), ada.jobs()
    [hung] = _finished(store, ada, "later")
    assert hung.status is JobStatus.FAILED
    assert "UserModelTimeout" in hung.error and "later: a training unit" in hung.error, hung.error
    took = (hung.finished_at - hung.started_at).total_seconds()
    # Her limit (the running time of her units; their waits behind other units are not charged)
    # decides, not the units' 300 s floor.
    assert LIMIT - 1 <= took < 100, took

    # A torch pick of bob's, started on the same engine while hers hung, finished.
    def overlapping():
        return [j for j in _finished(store, bob) if isinstance(parse_job(j.model, j.config), TorchWorkload)
                and j.started_at < hung.finished_at]
    assert until(overlapping, 200, every=0.5), bob.jobs()
    assert all(j.status is JobStatus.SUCCEEDED for j in overlapping()), \
        [(j.model, j.status, j.error) for j in overlapping()]
    # The worker her unit held was replaced by a fresh one: the engine keeps its one worker.
    after = engine.workers()
    assert len(after) == len(before) == 1 and set(after).isdisjoint(before), (before, after)


def _plain(input_shape, output_shape):
    import math

    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), output_shape[0]))


@contextlib.contextmanager
def _her_first_plain_job(tmp_path, digits_images, limit):
    """(store, job): ada's first job of her plain net with ``limit``, on a
    service of one worker, once it has finished; the service stops after."""
    with serving(tmp_path, "ada", torch=True, torch_epochs=2, mop_partitions=2, allow_user_models=True,
                 workers=1) as running:
        X, y = digits_images
        store = running.service.store
        ada = running.client("ada").task("digits-ada", input=[8, 8, 1], output=[10])
        ada.add_model(_plain, name="plain", grid={"lr": [0.1]}, limit=limit)
        ada.feed(X, y)
        assert until(lambda: _finished(store, ada, "plain"), 400, every=0.2), ada.jobs()
        yield store, min(_finished(store, ada, "plain"), key=lambda j: j.id)


def _clock_moves_when_her_job_starts(monkeypatch, clock) -> None:
    """Once her job has built her own model (``mop._own_model``), call
    ``clock.her_job_started(limit)`` with her model's limit."""
    from ease_jupyter.service import mop

    own_model = mop._own_model

    def own_model_then_the_clock_moves(spec):
        own = own_model(spec)
        if own is not None:
            clock.her_job_started(own.limit)
        return own

    monkeypatch.setattr(mop, "_own_model", own_model_then_the_clock_moves)


class _JumpingClock:
    """``time`` as the pool driver sees it: true until ``jump`` is set, then
    every ``monotonic()`` is ``jump`` seconds later than the one before (so
    each of her units runs past her limit on the driver's clock, which
    charges her job's time budget)."""

    def __init__(self):
        self.jump = 0.0
        self._extra = 0.0

    def her_job_started(self, limit: float) -> None:
        self.jump = limit + 1.0

    def time(self):
        return time.time()

    def monotonic(self):
        self._extra += self.jump
        return time.monotonic() + self._extra


def test_a_job_past_its_limit_between_units_ends_at_the_next_unit(tmp_path, digits_images, monkeypatch):
    """Her limit passes while her units run fine, each one well within it:
    the check after each unit (``_OwnModel.check``, from the job's
    ``on_unit``) ends her job at the next unit with the check's own error,
    long before the runner's deadline. The pool driver's clock is made to
    jump past her limit during each unit, so no timing decides it."""
    from ease_jupyter.execution.mop import pool_driver
    from ease_jupyter.service import mop

    clock = _JumpingClock()
    monkeypatch.setattr(pool_driver, "time", clock)
    _clock_moves_when_her_job_starts(monkeypatch, clock)
    with _her_first_plain_job(tmp_path, digits_images, 600.0) as (store, job):  # the one whose clock jumped
        assert job.status is JobStatus.FAILED, "her job went on past her limit"
        assert "UserModelTimeout" in job.error and "plain: the job ran past its limit of 600 s" in job.error, job.error
        assert "still running" not in job.error  # the check ended it, not the runner's deadline
        assert (job.finished_at - job.started_at).total_seconds() < 120  # not at her (real) limit
        progress = store.tags("job", job.id).get(mop.PROGRESS_TAG)
        assert progress is None or json.loads(progress)["trained_units"] == 0  # its first unit was not taken in


class _LateWallClock:
    """``time`` whose ``time()`` runs ``late`` seconds ahead once it is set
    (the wall clock after her units waited that long for a worker); every
    other clock is the true one."""

    def __init__(self):
        self.late = 0.0

    def her_job_started(self, limit: float) -> None:
        self.late = limit + 60.0

    def time(self):
        return time.time() + self.late

    def __getattr__(self, name):
        return getattr(time, name)


def test_time_her_units_wait_for_a_worker_is_not_charged_to_her_limit(tmp_path, digits_images, monkeypatch):
    """Her limit is the running time of her units: once her job has started,
    the wall clock of every module that bounds her calls jumps far past her
    limit (as if her units had waited that long behind other users'), and
    her job still builds her net in each unit and trains to the end."""
    from ease_jupyter import user_sandbox
    from ease_jupyter.service import mop, user_models

    clock = _LateWallClock()
    for module in (mop, user_models, user_sandbox):
        monkeypatch.setattr(module, "time", clock)
    _clock_moves_when_her_job_starts(monkeypatch, clock)
    with _her_first_plain_job(tmp_path, digits_images, 30.0) as (store, job):
        assert clock.late == 90.0  # her job started, and the wall clock jumped past her limit then
        assert job.status is JobStatus.SUCCEEDED, job.error
        assert json.loads(store.tags("job", job.id)[mop.PROGRESS_TAG])["epoch"] == 2


# -- the driver alone: a workload's deadline bounds its units ---------------------------------------

class PastHerLimit(Exception):
    pass


def _hang(net, opt, X, y, spec, generator, **kwargs):
    """A train_fn that returns long after any deadline here (then trains as usual)."""
    time.sleep(HANG_SECONDS / 5)
    return default_train_fn(net, opt, X, y, spec, generator, **kwargs)


def _runner(engine, digits, lrs, **kwargs):
    X, y = digits
    return MOPRunner(engine, GridSearch("lenet", {"lr": list(lrs)}, epochs=1),
                     {"lenet": TorchBuilder("lenet", "LeNet", ((8, 8), 10))}, X[..., 0], y, **kwargs)


def _dask(n_workers):
    from ease_jupyter.execution.engine.dask import DaskEngine

    return DaskEngine(n_workers=n_workers)


@pytest.mark.parametrize("make", [
    LocalEngine,  # a fresh worker thread; the hung one is abandoned
    pytest.param(_dask, marks=pytest.mark.slow),  # the worker process is restarted by its nanny
])
@pytest.mark.parametrize("her_limit", [
    lambda: {"deadline": time.time() + 3.0},  # a wall-clock deadline
    lambda: {"time_budget": 3.0},  # seconds her units run (a user model's limit)
])
def test_a_hung_unit_is_given_up_at_its_workloads_deadline_and_its_worker_replaced(digits_images, make, her_limit):
    with make(1) as engine:
        first = engine.workers()
        pids = set(engine.worker_pids().values()) if make is _dask else set()
        driver = PoolDriver(engine)

        def timed_out():
            raise PastHerLimit("her limit")

        started = time.monotonic()
        hung = _runner(engine, digits_images, (0.1,), hooks=Hooks(train_fn=_hang), max_unit_retries=0,
                       on_deadline=timed_out, **her_limit())
        f_hung = driver.submit(hung, owner="ada")
        time.sleep(0.5)
        f_ok = driver.submit(_runner(engine, digits_images, (0.1, 0.05)), owner="bob")
        with pytest.raises(PastHerLimit):
            f_hung.result(60)
        # at her deadline, not the units' 300 s (the margin is for a loaded machine: 8.5 s was seen)
        assert time.monotonic() - started < 3.0 + 20.0
        res = f_ok.result(120)  # his workload waited for the worker no longer than her deadline
        assert sorted(t for t, _ in res.visit_log) == ["t0", "t1"]
        def replaced():  # (an engine learns of workers as its events are read: the driver is idle now)
            engine.events(0.1)
            return len(engine.workers()) == 1 and engine.workers() != first
        assert until(replaced, 60), (first, engine.workers())
        # a fresh worker took the hung one's place (on Dask, in a new process: the hung one's was ended)
        if make is _dask:
            assert set(engine.worker_pids().values()).isdisjoint(pids)


def _raises_in_training(input_shape, output_shape):
    from torch import nn

    class RaisesLater(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(input_shape[0], output_shape[0])
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls > 1:
                raise ValueError("my forward broke on purpose")
            return self.linear(x)

    return RaisesLater()


def test_a_forward_that_raises_in_the_worker_gives_her_own_traceback():
    import torch

    from ease_jupyter.service.user_models import user_net
    from ease_jupyter.user_sandbox import UserModelError

    net = user_net("raises_later", _raises_in_training, (4,), (3,), True, {}, time.time() + 60)
    with pytest.raises(UserModelError, match=r"(?s)raises_later\.forward raised:.*in forward.*my forward broke"):
        net(torch.zeros(2, 4))  # its first call ran in the child process; this one runs here


def test_her_profiling_runs_and_her_workload_share_one_budget():
    from types import SimpleNamespace

    from ease_jupyter.service import mop
    from ease_jupyter.user_sandbox import UserModelTimeout

    own = mop._own_model(TorchWorkload("plain", (0.1,), 1, (), "c" * 64, 10.0))
    assert own.runner_options()["time_budget"] == 10.0
    own.charge(SimpleNamespace(time_used=4.0))  # a profiling run's units ran 4 s
    assert own.runner_options()["time_budget"] == 6.0 and not own.spent_all()
    own.check(5.5)  # 4 + 5.5 s: within her 10 s
    with pytest.raises(UserModelTimeout, match="ran past its limit of 10 s"):
        own.check(6.5)
    own.charge(SimpleNamespace(time_used=7.0))
    assert own.spent_all() and own.runner_options()["time_budget"] == 0.0
