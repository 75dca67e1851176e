"""A database that cannot be written: at start ``easeml serve`` refuses, at run
time writes answer 503 ``store_unavailable`` (507 ``storage_full`` for a full
disk), the control loop says it is blocked (once in the log, retrying with
backoff), no task with untrained arms looks idle, and everything goes on
once the database is writable again.

The database is made read-only at run time with ``chattr +i`` on the SQLite
file and its WAL: root ignores file modes, and a remount read-only is refused
while the service holds the file open. The ``-shm`` file is left alone (SQLite
maps it into memory; an immutable one makes the process die of SIGBUS).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import event, exc

from ease_jupyter import datasets
from ease_jupyter.errors import StorageFullError, StoreUnavailableError
from ease_jupyter.schema import program_from_shapes
from ease_jupyter.schema import format_program
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.store import JobStatus, JobUpdate, open_store
from ease_jupyter.store.sql import engine as sql_engine
from ease_jupyter.store.sql.failures import storage_error
from ease_jupyter.zoo import Engine

from .conftest import until

LOOP_LOG = "ease_jupyter.service.loop"


@contextlib.contextmanager
def read_only(db: Path):
    """The SQLite file ``db`` and its WAL cannot be written inside the block."""
    if os.geteuid() != 0:
        pytest.skip("needs root for chattr +i: a chmod does not stop writes through files already open")
    paths = [str(p) for p in (db, Path(f"{db}-wal")) if p.exists()]
    made = subprocess.run(["chattr", "+i", *paths], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i does not work on this filesystem: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *paths], check=True)


def db_file(data_dir: Path) -> Path:
    return Path(data_dir) / "easeml.sqlite"


# ---------------------------------------------------------------- error mapping


def sqlite_error(code: int, message: str) -> exc.OperationalError:
    orig = sqlite3.OperationalError(message)
    orig.sqlite_errorcode = code
    return exc.OperationalError("INSERT INTO users VALUES (?)", ("x",), orig)


class PgError(Exception):
    """Stands in for a psycopg2 error: only ``pgcode`` matters."""

    def __init__(self, pgcode: str):
        super().__init__(f"pg {pgcode}")
        self.pgcode = pgcode


@pytest.mark.parametrize("error, expected", [
    (sqlite_error(sqlite3.SQLITE_READONLY, "attempt to write a readonly database"), StoreUnavailableError),
    (sqlite_error(sqlite3.SQLITE_BUSY, "database is locked"), StoreUnavailableError),
    (sqlite_error(sqlite3.SQLITE_IOERR_WRITE, "disk I/O error"), StoreUnavailableError),
    (sqlite_error(sqlite3.SQLITE_CANTOPEN, "unable to open database file"), StoreUnavailableError),
    (sqlite_error(sqlite3.SQLITE_FULL, "database or disk is full"), StorageFullError),
    (exc.InternalError("UPDATE t", {}, PgError("25006")), StoreUnavailableError),  # read-only transaction
    (exc.OperationalError("SELECT 1", {}, PgError("08006")), StoreUnavailableError),  # connection failure
    (exc.OperationalError("SELECT 1", {}, PgError("57P01")), StoreUnavailableError),  # admin shutdown
    (exc.OperationalError("INSERT", {}, PgError("53100")), StorageFullError),  # disk full
    (exc.TimeoutError("QueuePool limit reached"), StoreUnavailableError),
])
def test_database_outages_map_to_storage_errors(error, expected):
    mapped = storage_error(error)
    assert type(mapped) is expected and mapped.field == "database"
    text = str(mapped)
    assert "INSERT" not in text and "sqlite" not in text.lower() and "Error" not in text


@pytest.mark.parametrize("error", [
    sqlite_error(sqlite3.SQLITE_ERROR, "no such table: users"),  # a bug, not an outage
    exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed")),
    exc.ProgrammingError("SELECT", {}, PgError("42601")),  # syntax error
])
def test_other_database_errors_pass_through(error):
    assert storage_error(error) is None


@pytest.fixture
def sql_store(tmp_path):
    store, blobs = open_store(None, tmp_path)
    store.create_user("ada", "a" * 64)
    try:
        yield store
    finally:
        store.close()


def real_error_from(tmp_path, sql: str, mode: str = "ro") -> sqlite3.Error:
    """A genuine SQLite error object (with its result code), from a side database."""
    path = tmp_path / "side.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE IF NOT EXISTS t (x)").connection.commit()
    try:
        sqlite3.connect(f"file:{path}?mode={mode}", uri=True).execute(sql)
    except sqlite3.Error as error:
        return error
    raise AssertionError("no error")


def test_store_whose_engine_raises_gives_storage_errors(sql_store, tmp_path):
    readonly = real_error_from(tmp_path, "INSERT INTO t VALUES (1)")

    def fail(*args):
        raise readonly

    event.listen(sql_store.engine, "before_cursor_execute", fail)
    with pytest.raises(StoreUnavailableError, match="read-only") as caught:
        sql_store.create_user("bob", "b" * 64)
    assert "INSERT" not in str(caught.value) and str(tmp_path) not in str(caught.value)
    with pytest.raises(StoreUnavailableError):
        sql_store.check_writable()
    event.remove(sql_store.engine, "before_cursor_execute", fail)
    assert sql_store.create_user("bob", "b" * 64).name == "bob"  # no lasting harm


def test_full_database_is_storage_full(sql_store):
    # SQLite's page limit gives the genuine SQLITE_FULL "database or disk is full".
    event.listen(sql_store.engine, "connect", lambda conn, _: conn.execute("PRAGMA max_page_count = 1"))
    sql_store.engine.dispose()
    with pytest.raises(StorageFullError, match="disk is full"):
        for i in range(1000):
            sql_store.create_user(f"u{i}", f"{i:064d}")


def test_lock_held_past_the_busy_timeout_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setattr(sql_engine, "SQLITE_BUSY_TIMEOUT_MS", 50)
    store, _ = open_store(None, tmp_path)
    other = sqlite3.connect(db_file(tmp_path), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(StoreUnavailableError, match="locked"):
            store.create_user("ada", "a" * 64)
        other.execute("ROLLBACK")
        assert store.create_user("ada", "a" * 64).name == "ada"
    finally:
        other.close()
        store.close()


def test_store_recovers_on_fresh_connections_after_a_read_only_spell(tmp_path):
    store, _ = open_store(None, tmp_path)
    try:
        store.create_user("ada", "a" * 64)
        with read_only(db_file(tmp_path)):
            for name in ("bob", "carol"):  # every write fails alike, whatever the pooled connection
                with pytest.raises(StoreUnavailableError, match="read-only|I/O"):
                    store.create_user(name, name[0] * 64)
            assert [u.name for u in store.list_users()] == ["ada"]  # reads still work
        # The first write after the spell succeeds (connections opened during it were read-only).
        assert store.create_user("dan", "d" * 64).name == "dan"
    finally:
        store.close()


# ---------------------------------------------------------------- start-up


def test_serve_refuses_to_start_on_a_read_only_database(tmp_path):
    store, _ = open_store(None, tmp_path)
    store.create_user("ada", "a" * 64)
    store.close()
    with read_only(db_file(tmp_path)):
        run = subprocess.run([sys.executable, "-m", "ease_jupyter", "serve", "--data-dir", str(tmp_path), "--port", "0"],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert str(db_file(tmp_path)) in run.stderr and "read-only" in run.stderr and "writable" in run.stderr
    assert "Traceback" not in run.stderr and "listening" not in run.stdout


# ---------------------------------------------------------------- the control loop


class Gated:
    """An executor with one worker thread that records its jobs in the store
    itself, as the real ones do; after ``budget`` jobs it holds the next one
    (RUNNING) until ``release``."""

    workers = 1

    def __init__(self, store, budget: int):
        self.store, self.budget = store, budget
        self.gate = threading.Event()
        self.pool = ThreadPoolExecutor(1)
        self.started: list[int] = []

    def submit(self, job_id: int) -> Future:
        return self.pool.submit(self._run, job_id)

    def _run(self, job_id: int) -> None:
        try:
            self.store.update_job(job_id, JobStatus.RUNNING)
            self.started.append(job_id)
            if len(self.started) > self.budget:
                self.gate.wait(60)
            self.store.update_job(job_id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=0.01))
        except StoreUnavailableError:
            pass  # could not record the result: the loop finds the job still running and runs it again

    def release(self) -> None:
        self.gate.set()

    def shutdown(self) -> None:
        self.gate.set()
        self.pool.shutdown()


def test_loop_blocked_by_a_read_only_store_reports_it_then_recovers(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOOP_LOG)
    store, blobs = open_store(None, tmp_path)
    user = store.create_user("ada", "a" * 64)
    task = store.create_task(user.id, "t", format_program(program_from_shapes([4], [3])))
    rng = np.random.default_rng(0)
    datasets.feed(store, blobs, task, rng.normal(size=(30, 4)).astype("float32"), rng.integers(0, 3, 30))
    executor = Gated(store, budget=2)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, tick_seconds=0.02)
    arms = loop.candidates(task)
    assert arms > 3
    turns = []  # when each turn began: a turn during an outage first checks the store, then steps
    for name in ("step", "_check_store"):
        setattr(loop, name, lambda f=getattr(loop, name): (turns.append(time.monotonic()), f())[1])
    loop.start()
    try:
        assert until(lambda: len(executor.started) == 3, 30)  # two jobs done, the third held running
        with read_only(db_file(tmp_path)):
            executor.release()  # its result cannot be recorded now
            assert until(lambda: loop.blocked == "store_unavailable", 10)
            outage_began = time.monotonic()
            time.sleep(2.0)
            state = loop.task_status(task, has_data=True)
            assert state["idle"] is False and state["blocked"] == "store_unavailable"
            assert state["status"] == "blocked" and "store" in state["reason"]
            assert loop.progress()["store"]["writable"] is False
            retries = [t for t in turns if t >= outage_began]
            assert 2 <= len(retries) <= 12  # backing off, not 100 turns in 2 s
        assert until(lambda: loop.outage is None and loop.is_idle(task.id), 60)
    finally:
        loop.stop()
    jobs = store.list_jobs(task.id)
    assert sorted(j.status.value for j in jobs) == ["succeeded"] * arms  # nothing lost, nothing twice
    assert len({j.model for j in jobs}) == arms
    messages = [r.getMessage() for r in caplog.records if r.name == LOOP_LOG]
    assert sum("cannot be written" in m for m in messages) == 1  # once per outage, not per turn
    assert sum("can be written again" in m for m in messages) == 1
    assert not any("turn failed" in m for m in messages)
    store.close()


def test_pick_that_cannot_be_recorded_goes_back_to_the_pool(tmp_path):
    """A pick whose job cannot be created must not stay pending: it would
    never be trained, and its task would look finished without it."""
    store, blobs = open_store(None, tmp_path)
    user = store.create_user("ada", "a" * 64)
    task = store.create_task(user.id, "t", format_program(program_from_shapes([4], [3])))
    datasets.feed(store, blobs, task, np.zeros((10, 4), "float32"), np.arange(10) % 3)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: Gated(store, budget=1000)})
    loop.recover()
    try:
        with read_only(db_file(tmp_path)):
            with pytest.raises(StoreUnavailableError):
                loop.step()
            assert loop.selector.pending() == []
        # Writable again: the loop trains every arm before it calls the task idle.
        deadline = time.monotonic() + 60
        while not loop.is_idle(task.id) and time.monotonic() < deadline:
            loop.step()
            time.sleep(0.01)
        assert loop.is_idle(task.id)
        trained = {j.model for j in store.list_jobs(task.id) if j.status is JobStatus.SUCCEEDED}
        assert len(trained) == loop.candidates(task)
    finally:
        loop.stop()
        store.close()


# ---------------------------------------------------------------- over HTTP


def test_api_answers_503_and_health_and_task_show_the_outage(svc, iris):
    X, y = iris
    loop = svc.service.loop
    svc.call("POST", "/tasks", "alice", body={"name": "iris", "input": [4], "output": [3]})
    outage = contextlib.ExitStack()
    # Hold the loop between turns so that the feed is taken in only once the store is read-only.
    with loop._lock:
        assert svc.call("POST", "/tasks/iris/feed", "alice", body={"X": X.tolist(), "y": y.tolist()}).status == 201
        outage.enter_context(read_only(db_file(svc.service.data_dir)))
    with outage:
        r = svc.call("POST", "/tasks", "alice", body={"name": "other", "input": [4], "output": [3]})
        assert r.status == 503 and r.body["error"]["code"] == "store_unavailable"
        message = r.body["error"]["message"]
        assert "INSERT" not in message and str(svc.service.data_dir) not in message and "Error" not in message
        assert until(lambda: svc.call("GET", "/health", "admin").body.get("store", {}).get("blocked")
                     == "store_unavailable", 10)
        assert "store" not in svc.call("GET", "/health").body  # admins only
        task = svc.call("GET", "/tasks/iris", "alice").body  # reads still work
        assert task["idle"] is False and task["blocked"] == "store_unavailable" and task["status"] == "blocked"
    assert svc.call("POST", "/tasks", "alice", body={"name": "other", "input": [4], "output": [3]}).status == 201
    assert until(lambda: svc.call("GET", "/tasks/iris", "alice").body["idle"], 120)
    task = svc.call("GET", "/tasks/iris", "alice").body
    assert task["blocked"] is None and task["status"] == "idle" and task["jobs"].get("succeeded")
    assert svc.call("GET", "/health", "admin").body["store"]["writable"] is True


def test_task_with_picks_never_launched_is_not_idle():
    """Idle means nothing left to train: a pick handed out with no job behind
    it (whatever lost it) is still to train, though no arm is eligible."""
    from ease_jupyter.store import InMemoryStore, MemoryBlobStore

    store, blobs = InMemoryStore(), MemoryBlobStore()
    user = store.create_user("ada", "a" * 64)
    task = store.create_task(user.id, "t", format_program(program_from_shapes([4], [3])))
    datasets.feed(store, blobs, task, np.zeros((10, 4), "float32"), np.arange(10) % 3)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: Gated(store, budget=0)})
    loop.recover()
    loop._sync()
    while loop.selector.next_picks(1):  # every arm handed out, none launched
        pass
    loop._publish_view()
    assert not loop.is_idle(task.id)
    loop.stop()
