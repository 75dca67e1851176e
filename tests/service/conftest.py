"""Fixtures: a real service on 127.0.0.1 (random free port) on a thread,
users with tokens, and a tiny stdlib HTTP helper (``easeml serve`` as a
subprocess is ``ease_jupyter.service.testing.ServeProcess``)."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from concurrent.futures import Future
from typing import Any, Callable, Iterator

import pytest

from ease_jupyter.client import Client
from ease_jupyter.service import ServiceConfig, ServiceThread
from ease_jupyter.service.auth import create_user
from ease_jupyter.service.testing import flat_models


@dataclass
class Response:
    status: int
    body: Any
    headers: Any


def http(url: str, method: str, path: str, *, token: str | None = None, body: Any = None, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> Response:
    hdrs = dict(headers or {})
    if token is not None:
        hdrs["Authorization"] = f"token {token}"
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    if data is None and method in ("POST", "PUT"):
        data = b""
    request = urllib.request.Request(url + path, data=data, headers=hdrs, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            text, status, rh = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        text, status, rh = e.read(), e.code, e.headers
    return Response(status, json.loads(text) if text else None, rh)


class Running:
    def __init__(self, thread: ServiceThread):
        self.thread = thread
        self.url = thread.url
        self.service = thread.service
        self.tokens: dict[str, str] = {}

    def user(self, name: str, admin: bool = False) -> str:
        _, token = create_user(self.service.store, name, admin=admin)
        self.tokens[name] = token
        return token

    def client(self, name: str) -> Client:
        return Client(self.url, self.tokens[name])

    def call(self, method: str, path: str, who: str | None = None, **kw: Any) -> Response:
        return http(self.url, method, "/api/v1" + path, token=self.tokens.get(who) if who else kw.pop("token", None), **kw)


def start(tmp_path, **config: Any) -> Running:
    config.setdefault("tick_seconds", 0.05)
    config.setdefault("executor", "thread")  # the process pool is tested where it matters (its spawn costs ~2 s)
    thread = ServiceThread(ServiceConfig(data_dir=tmp_path, **config)).start()
    return Running(thread)


@contextlib.contextmanager
def serving(tmp_path, *users: str, admins: tuple[str, ...] = (), **config: Any) -> Iterator[Running]:
    """A service (``start``) with the users ``admins`` (admins), then ``users``,
    added in that order; stopped on exit, however the block ends."""
    running = start(tmp_path, **config)
    try:
        for name in admins:
            running.user(name, admin=True)
        for name in users:
            running.user(name)
        yield running
    finally:
        running.thread.stop()


def lend_deleted_ids(monkeypatch, store) -> None:
    """Make the service's SQLite store give new users, tasks, versions and
    jobs the ids of its deleted newest rows, as a database upgraded from
    before migration 0004 can once: what the service's checks of an id
    against its account, task or count must survive."""

    def lending(create):
        def create_after_lending(*args, **kwargs):
            with store._writing_rows() as connection:  # the store's own write path: no lock fights
                for (table,) in connection.exec_driver_sql("SELECT name FROM sqlite_sequence").all():
                    connection.exec_driver_sql(f"UPDATE sqlite_sequence SET seq = (SELECT COALESCE(MAX(id), 0) "
                                               f"FROM {table}) WHERE name = ?", (table,))
            return create(*args, **kwargs)
        return create_after_lending

    for name in ("create_user", "create_task", "create_dataset_version", "create_job"):
        monkeypatch.setattr(store, name, lending(getattr(store, name)))


@contextlib.contextmanager
def writable_notes(parent) -> Iterator[Any]:
    """``notes`` (tests/conftest.py) for a module's fixture: ``parent/notes``,
    which users' code may write, for services started within the block."""
    from ease_jupyter.user_confine import WRITABLE_ENV

    folder = parent / "notes"
    folder.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(WRITABLE_ENV, str(folder))
        yield folder


@pytest.fixture
def svc(tmp_path) -> Iterator[Running]:
    with serving(tmp_path, "alice", "bob", admins=("admin",)) as running:
        yield running


@pytest.fixture(scope="session")
def iris():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    return X.astype("float32"), y.astype("int64")


IRIS_MODELS = flat_models(4, 3)


def train_lenet_once(store, blobs, task_id: int) -> None:
    """One lenet epoch of the task's latest version, here, as the loop would."""
    from ease_jupyter.execution.engine import LocalEngine
    from ease_jupyter.service.mop import run_torch_job

    version = store.latest_dataset_version(task_id)
    job = store.create_job(task_id, version.id, "lenet", {"lrs": [0.05], "epochs": 1})
    engine = LocalEngine(1)
    try:
        assert run_torch_job(store, blobs, engine, job.id, partitions=1).status.value == "succeeded"
    finally:
        engine.close()


def until(predicate, timeout: float, every: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


class ManualExecutor:
    """A job executor whose jobs finish when the test says so
    (``finish_all``), each with ``accuracy(job)`` (the job read as RUNNING)."""

    def __init__(self, store, *, workers: int = 2, accuracy: Callable[[Any], float] = lambda job: 0.8):
        self.store, self.workers, self.accuracy, self.running = store, workers, accuracy, []
        self.warmed = 0  # calls of warm()

    def submit(self, job_id: int) -> Future:
        future: Future = Future()
        self.running.append((job_id, future))
        return future

    def warm(self) -> None:
        self.warmed += 1

    def finish_all(self, accuracy: Callable[[Any], float] | None = None) -> None:
        from ease_jupyter.store import JobStatus, JobUpdate

        score = accuracy or self.accuracy
        running, self.running = self.running, []
        for job_id, future in running:
            job = self.store.update_job(job_id, JobStatus.RUNNING)
            future.set_result(self.store.update_job(job_id, JobStatus.SUCCEEDED,
                                                    JobUpdate(accuracy=score(job), cost_seconds=0.01)))

    def shutdown(self) -> None:
        pass


class StartingExecutor(ManualExecutor):
    """A ``ManualExecutor`` whose jobs start (RUNNING) when submitted, as a
    free worker's do, so a cancel or a new version finds them running, not
    queued; they finish when the test says so."""

    def submit(self, job_id: int) -> Future:
        from ease_jupyter.store import JobStatus

        self.store.update_job(job_id, JobStatus.RUNNING)
        return super().submit(job_id)

    def finish_all(self, accuracy: Callable[[Any], float] | None = None) -> None:
        from ease_jupyter.store import JobStatus, JobUpdate

        score = accuracy or self.accuracy
        running, self.running = self.running, []
        for job_id, future in running:
            job = self.store.get_job(job_id)
            future.set_result(self.store.update_job(job_id, JobStatus.SUCCEEDED,
                                                    JobUpdate(accuracy=score(job), cost_seconds=0.01)))
