"""``easeml serve`` as a subprocess, for tests and benchmarks (and the job
count of a fully explored flat task, ``flat_models``; one scikit-learn job
trained at once, behind the control loop, ``train_now``).

``ServeProcess`` starts the real service (``python -m ease_jupyter serve``)
on a free loopback port and reads its URL from the announcement line;
``add_user`` runs ``easeml users add`` on the same database and returns the
printed token.

.. code-block:: python

    token = add_user(data_dir, "admin", admin=True)
    server = ServeProcess(data_dir, "--workers", "2")
    try:
        Client(server.url, token).tasks()
    finally:
        server.stop()
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

_LISTENING = re.compile(r"listening on (http://[\d.]+:\d+)/api/v1")


def add_user(data_dir: str | Path, name: str, *, admin: bool = False, db_url: str | None = None,
             cwd: str | Path | None = None) -> str:
    """``easeml users add`` on the service's database; returns the token it
    prints. The command runs in this process (click's test runner): a
    second interpreter would spend seconds importing what this one has.
    ``cwd``: where a relative ``data_dir`` is found."""
    from click.testing import CliRunner

    from ..cli import main

    args = ["users", "add", name, "--data-dir", str(Path(cwd or ".") / data_dir)]
    args += ["--admin"] if admin else []
    args += ["--db", db_url] if db_url else []
    result = CliRunner().invoke(main, args)
    if result.exit_code != 0:
        raise RuntimeError(f"easeml users add {name} failed: {result.output[-2000:]}") from result.exception
    return result.output.strip().splitlines()[-1]


class ServeProcess:
    """``easeml serve --port 0`` as a subprocess; ``url`` once it announced
    itself. Its stderr (the log) goes to ``<data_dir>/serve.out``, and its
    stdout is drained on a thread so that the child never blocks on a pipe."""

    def __init__(self, data_dir: str | Path, *args: str, db_url: str | None = None, cwd: str | Path | None = None,
                 env: Mapping[str, str] | None = None, timeout: float = 120.0):
        cmd = [sys.executable, "-m", "ease_jupyter", "serve", "--data-dir", str(data_dir), "--port", "0", *args]
        cmd += ["--db", db_url] if db_url else []
        self.log = Path(data_dir) / "serve.out"
        self._log = open(self.log, "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, text=True, cwd=cwd,
                                     env={**os.environ, **dict(env or {})})
        self.url = ""
        deadline = time.monotonic() + timeout
        while not self.url and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                break
            match = _LISTENING.search(line)
            self.url = match.group(1) if match else ""
        if not self.url:
            self.stop()
            raise RuntimeError(f"easeml serve did not start: {self.log.read_text()[-2000:]}")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self, chars: int = 20_000) -> str:
        """The end of the service's log (for a failing test's message)."""
        return self.log.read_text()[-chars:] if self.log.exists() else ""

    def errors(self) -> list[str]:
        """Server-side tracebacks and 5xx lines from the service log."""
        text = self.log.read_text() if self.log.exists() else ""
        return [line for line in text.splitlines() if "Traceback" in line or re.search(r"\b5\d\d (GET|POST|PUT)", line)]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send ``sig`` (SIGTERM: a clean stop) and wait; kill after ``timeout`` s."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


__all__ = ["ServeProcess", "add_user"]


def flat_models(n_features: int, n_classes: int) -> int:
    """Jobs a flat task trains once every arm is tried: one per scikit-learn
    candidate (its grid trains inside the job)."""
    from ..schema import DataType, Program, TensorField
    from ..zoo import Engine, candidates

    program = Program(DataType((TensorField((n_features,)),)), DataType((TensorField((n_classes,)),)))
    return sum(c.engine is Engine.SKLEARN for c in candidates(program))


@contextlib.contextmanager
def fresh_postgres_database(server_url: str, prefix: str = "easeml_test"):
    """The URL of a new, empty database on the PostgreSQL server at
    ``server_url``, dropped afterwards (tests, benchmarks)."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")  # CREATE/DROP DATABASE take no transaction
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        _drop_database(admin, name)
    finally:
        admin.dispose()


def _drop_database(admin: Any, name: str, attempts: int = 40) -> None:
    """DROP DATABASE ... WITH (FORCE) (PostgreSQL 13+ ends the connections a
    test may have leaked). An autovacuum worker on that database cannot be
    ended by a role that is not a superuser ("must be a member of the role
    whose process is being terminated"); it finishes in moments, so retry."""
    from sqlalchemy.exc import DBAPIError

    for attempt in range(attempts):
        try:
            with admin.connect() as connection:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except DBAPIError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.25)


def train_now(store: Any, blobs: Any, task: Any, model: str, options: dict[str, Any] | None = None) -> Any:
    """Train one scikit-learn job of ``task``'s latest version here, through
    the executors' own path (``runner.run_sklearn_job``): the candidate
    ``model``'s whole grid, or only ``options`` (a one-point grid)."""
    from ..jobspec import SklearnGrid
    from .candidates import task_candidates
    from .runner import grid_engine, run_sklearn_job

    version = store.latest_dataset_version(task.id)
    if options is None:
        config = SklearnGrid.of(task_candidates(task)[model]).config()
    else:
        config = {"grid": {k: [v] for k, v in options.items()}}
    job = store.create_job(task.id, version.id, model, config)
    engine = grid_engine("local")
    try:
        return run_sklearn_job(store, blobs, job.id, engine)
    finally:
        engine.close()


def _stat_fields(stat: str) -> list[str]:
    """The fields of a ``/proc/PID/stat`` line after the command name: state, parent pid, ..."""
    return stat[stat.rindex(")") + 2:].split()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (Linux ``/proc``): not gone, not a zombie awaiting its reaper."""
    try:
        return _stat_fields(Path(f"/proc/{pid}/stat").read_text())[0] != "Z"
    except OSError:
        return False


def live_children(pid: int) -> dict[int, str]:
    """Live (non-zombie) child processes of ``pid`` (Linux ``/proc``): {pid: command line}."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = _stat_fields(stat)
        if int(fields[1]) == pid and fields[0] != "Z":
            out[int(entry.name)] = cmdline
    return out


def worker_processes(service_pid: int) -> dict[int, str]:
    """The service's worker and feed processes: its spawned children and the
    children of its fork server (``executors.worker_context``), not the
    server itself or multiprocessing's resource tracker."""
    workers = {}
    for pid, cmdline in live_children(service_pid).items():
        if "multiprocessing.forkserver" in cmdline:
            workers.update(live_children(pid))
        elif "spawn_main" in cmdline and "resource_tracker" not in cmdline:
            workers[pid] = cmdline
    return workers
