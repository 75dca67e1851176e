"""Executors: where a queued job's training runs.

The control loop hands a job id to the executor registered for the job's
engine kind (``JobSpec.engine``). There is one contract (``JobExecutor``)
and two executors, each parametrised by a ``JobRunner`` (how to make the
engine a job slot trains on, and how to run one job on it:
``runner.SklearnJobs``, ``mop.TorchJobs``):

- ``ThreadExecutor``: ``workers`` threads in the service process, each with
  its own engine, made on its first job (an engine's event stream has one
  reader). For ``memory://`` stores and quick tests. Its shutdown waits at
  most ``SHUTDOWN_SECONDS`` for running jobs: one stuck on a cluster that
  does not answer is left RUNNING in the store (its daemon thread ends with
  the process, and should it end first, it writes nothing to the store:
  ``JobAbandoned``), and the next start re-queues it.
- A runner with ``shares_engine = True`` (``mop.TorchJobs``: its jobs are
  MOP workloads that one driver per engine interleaves) gets one engine for
  all its job slots: the thread executor's threads share it, and the process
  executor runs its ``workers`` jobs at once, on threads, in one process.
- ``ProcessExecutor``: ``workers`` processes, forked from a fork server that
  imported the job code once (``worker_context``), each with its own store
  connection and its own engine, so that training never holds the
  service's GIL. They start when the executor is made (with the service),
  so no job waits for a process to start; an engine is still made at its
  worker's first job. An executor made with
  ``start_workers=False`` (the service's express slots) starts them at
  ``warm()`` or at its first job or call instead, so slots that may never be
  used cost no process. Each process has its own pipe: a worker that dies
  (killed, out of memory) ends only its own job, whose future fails with
  ``WorkerDied`` while the job is still RUNNING in the store (the control
  loop re-queues it, and it resumes from what it recorded), and a fresh
  process takes its place on the next job. Events a runner publishes in a
  worker (per-epoch metrics) come back over the same pipe and are published
  by the executor's dispatcher thread.
"""

from __future__ import annotations

import collections
import itertools
import logging
import multiprocessing
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Callable, Protocol

from ..store import BlobStore, Job, Store, open_store
from ..user_confine import adopt_code_env, code_env

log = logging.getLogger(__name__)

Publish = Callable[[int, dict], None]


class JobRunner(Protocol):
    """How one kind of job trains. Picklable: a process executor sends it to its workers."""

    shares_engine: bool  # its jobs run at once on one engine (see the module docstring)

    def make_engine(self) -> Any: ...

    def run(self, store: Store, blobs: BlobStore, engine: Any, job_id: int, publish: Publish) -> Job: ...


class JobExecutor(Protocol):
    """Runs one stored job to a finished state (succeeded or failed), and
    short calls beside the jobs (``call``), where the jobs run."""

    workers: int

    def submit(self, job_id: int) -> "Future[Any]": ...

    def call(self, fn: Callable[..., Any], *args: Any) -> "Future[Any]":
        """``fn(store, blobs, *args)`` where this executor's jobs run (in a
        worker process for ``ProcessExecutor``), without waiting for a job
        to end: a model's outputs for a request, say. ``fn`` and ``args`` are
        picklable."""
        ...

    def warm(self) -> None:
        """Start the workers now if they are not running yet, so that a job
        submitted soon need not wait for them; returns at once."""
        ...

    def shutdown(self) -> None: ...


class WorkerDied(RuntimeError):
    """The worker process running a job ended before the job did."""


def _ignore(owner: int, event: dict) -> None:
    pass


def _close_engine(engine: Any) -> None:
    try:
        engine.close()
    except Exception:  # noqa: BLE001 - closing must not hide the shutdown of the others
        log.exception("closing an executor's engine failed")


SHUTDOWN_SECONDS = 30.0  # the longest a thread executor's shutdown waits for its running jobs


class JobAbandoned(RuntimeError):
    """A thread executor was shut down while the job ran: the job is left
    RUNNING in the store, for the next start to re-queue."""


class _UntilShutdown:
    """The store as a thread executor's jobs see it: once the executor is
    shut down, every call raises ``JobAbandoned``. In a process that lives on
    (tests, a service in a kernel), a job stuck past the shutdown that ends
    later writes nothing, not SUCCEEDED or FAILED over a job the next start
    re-queued, and nothing to a store closed since."""

    def __init__(self, store: Any, closed: threading.Event):
        self._store, self._closed = store, closed

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not callable(value):
            return value
        closed = self._closed

        def call(*args: Any, **kwargs: Any) -> Any:
            if closed.is_set():
                raise JobAbandoned(f"store.{name}: the executor was shut down while the job ran; "
                                   "the job stays running for the next start")
            return value(*args, **kwargs)

        return call


class _DaemonThreads:
    """Up to ``n`` daemon threads that run submitted calls in turn. Not a
    ``ThreadPoolExecutor``: the interpreter joins those at exit, so a job
    stuck on a dead cluster would keep the service from ending."""

    def __init__(self, n: int, prefix: str):
        self._n, self._prefix = n, prefix
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self.shut = threading.Event()  # set by shutdown: a call that ends later is not reported

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.put((future, fn, args))
            if len(self._threads) < self._n:
                thread = threading.Thread(target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as error:  # noqa: BLE001 - handed to the future's waiter
                future.set_exception(error)
            else:
                if self.shut.is_set():  # its waiter gave up on it: no result to report
                    future.set_exception(JobAbandoned("the executor was shut down while it ran"))
                else:
                    future.set_result(result)

    def shutdown(self, timeout: float) -> list[threading.Thread]:
        """Cancel the calls not started and wait up to ``timeout`` seconds for
        the running ones; returns the threads still running."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in threads:
            self._queue.put(None)
        end = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, end - time.monotonic()))
        self.shut.set()
        return [t for t in threads if t.is_alive()]


class ThreadExecutor:
    """``workers`` threads in the service, each with its own engine."""

    def __init__(self, runner: JobRunner, store: Store, blobs: BlobStore, workers: int = 1, *,
                 publish: Publish | None = None, shutdown_seconds: float = SHUTDOWN_SECONDS):
        self.runner, self.store, self.blobs = runner, store, blobs
        self.workers = int(workers)
        self.publish = publish or _ignore
        self.shutdown_seconds = float(shutdown_seconds)
        self._local = threading.local()
        self._engines: list[tuple[threading.Thread | None, Any]] = []  # (its thread, or None when shared; engine)
        self._engines_lock = threading.Lock()
        self._pool = _DaemonThreads(self.workers, "easeml-worker")
        self._calls = _DaemonThreads(1, "easeml-call")
        self._jobs_store = _UntilShutdown(store, self._pool.shut)
        self._calls_store = _UntilShutdown(store, self._calls.shut)

    def _engine(self) -> Any:
        if self.runner.shares_engine:
            with self._engines_lock:
                if not self._engines:
                    self._engines.append((None, self.runner.make_engine()))
                return self._engines[0][1]
        engine = getattr(self._local, "engine", None)
        if engine is None:
            engine = self._local.engine = self.runner.make_engine()
            with self._engines_lock:
                self._engines.append((threading.current_thread(), engine))
        return engine

    def engines(self) -> list[Any]:
        """The engines made so far, one per thread that ran a job (one in all
        for a runner that shares its engine)."""
        with self._engines_lock:
            return [engine for _thread, engine in self._engines]

    def _run(self, job_id: int) -> Job:
        return self.runner.run(self._jobs_store, self.blobs, self._engine(), job_id, self.publish)

    def submit(self, job_id: int) -> "Future[Job]":
        return self._pool.submit(self._run, job_id)

    def call(self, fn: Callable[..., Any], *args: Any) -> "Future[Any]":
        return self._calls.submit(fn, self._calls_store, self.blobs, *args)

    def warm(self) -> None:
        pass  # threads cost nothing to have; each makes its engine at its first job

    def shutdown(self) -> None:
        """Cancel the jobs not started and wait at most ``shutdown_seconds``
        for the running ones. A job still running then (stuck on a cluster
        that does not answer) is left RUNNING in the store, for the next
        start to re-queue, and its engine is not closed under it (that would
        fail the job). Should it end later, it writes nothing to the store
        and its future reports ``JobAbandoned``, not its result."""
        end = time.monotonic() + self.shutdown_seconds
        stuck = self._pool.shutdown(self.shutdown_seconds)
        stuck += self._calls.shutdown(max(0.0, end - time.monotonic()))
        if stuck:
            log.warning("%d job thread(s) still running after %g s; their jobs stay running and are "
                        "re-queued at the next start", len(stuck), self.shutdown_seconds)
        with self._engines_lock:
            engines, self._engines = self._engines, []
        for thread, engine in engines:
            if thread in stuck or (thread is None and stuck):
                continue
            _close_engine(engine)


# The modules a job worker needs, imported once by the fork server the workers
# start from (``worker_context``).
WORKER_MODULES = ("ease_jupyter.service.executors", "ease_jupyter.service.runner", "ease_jupyter.service.mop")


def worker_context() -> Any:
    """Where worker processes come from: multiprocessing's fork server, which
    imports ``WORKER_MODULES`` once, so a worker does not import them again
    (seconds of CPU each; docs/service.md has the start times); the server is a
    clean single-threaded process, safe to fork where the service is not.
    Spawned processes where a platform has no fork server."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(WORKER_MODULES))  # no effect once the server runs
    return context


def exit_with_parent(service_pid: int, every: float = 0.5) -> None:
    """In a worker process: exit as soon as the service that started it is
    gone (SIGKILLed). Otherwise an orphaned worker would finish its job and
    write to the store while the restarted service re-runs the same job.
    The worker's parent is the service or the service's fork server, which
    exits with it: either way the parent changes when the service is gone."""
    parent = os.getppid()

    def gone() -> bool:
        if os.getppid() != parent:
            return True
        try:
            os.kill(service_pid, 0)  # orphaned before ``parent`` was read: the service is not there
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False

    def watch() -> None:
        while True:
            if gone():
                os._exit(1)
            time.sleep(every)

    threading.Thread(target=watch, name="easeml-parent-watch", daemon=True).start()


def ignore_interrupts() -> None:
    """In a child process of the service: ignore SIGINT. A terminal's Ctrl-C
    reaches the whole process group, and the service stops its children
    itself; each child would otherwise print a KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _serve_jobs(runner: JobRunner, db_url: str | None, data_dir: str, conn: Connection, parent_pid: int,
                nice: int, jobs_at_once: int = 1, code_env: dict[str, str | None] | None = None) -> None:
    """A worker process: run the jobs that arrive on ``conn`` (up to
    ``jobs_at_once`` at a time, on one engine), until ``None``, and answer
    calls on a thread of their own meanwhile. ``code_env``: the service's
    settings for users' code (``user_confine.code_env``)."""
    ignore_interrupts()
    adopt_code_env(code_env or {})
    if nice:
        try:
            os.nice(nice)  # see ServiceConfig.worker_nice
        except OSError:  # not permitted here: run at the service's priority
            pass
    exit_with_parent(parent_pid)
    store, blobs = open_store(db_url, data_dir)
    send_lock = threading.Lock()  # the job, the calls and a runner's engine threads all send

    def send(message: tuple) -> None:
        with send_lock:
            conn.send(message)

    def answer(call_id: int, fn: Callable[..., Any], args: tuple) -> None:
        try:
            send(("result", call_id, fn(store, blobs, *args), None))
        except Exception as error:  # noqa: BLE001 - the caller gets it
            send(("result", call_id, None, _portable(error)))

    jobs: queue.SimpleQueue = queue.SimpleQueue()
    calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="easeml-call")

    def read() -> None:
        try:
            while (message := conn.recv()) is not None:
                if message[0] == "job":
                    jobs.put(message[1])
                else:
                    calls.submit(answer, *message[1:])
        except (EOFError, OSError):  # the service closed its end
            pass
        jobs.put(None)

    threading.Thread(target=read, name="easeml-worker-reader", daemon=True).start()
    engines: list[Any] = []
    engine_lock = threading.Lock()

    def run(job_id: int) -> None:
        try:
            with engine_lock:
                if not engines:
                    engines.append(runner.make_engine())
            runner.run(store, blobs, engines[0], job_id, lambda owner, event: send(("event", owner, event)))
            send(("done", job_id, None))
        except Exception:  # noqa: BLE001 - a runner records a job's own failure; this is ours
            send(("done", job_id, traceback.format_exc()))

    slots = ThreadPoolExecutor(max_workers=jobs_at_once, thread_name_prefix="easeml-job")
    try:
        while (job_id := jobs.get()) is not None:
            slots.submit(run, job_id)
    finally:
        slots.shutdown(wait=True)
        calls.shutdown(wait=True)
        for engine in engines:
            _close_engine(engine)
        store.close()


def _portable(error: Exception) -> Exception | str:
    """The error itself if it survives pickling (our typed errors do), else its traceback."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - an exception type that does not pickle
        return "".join(traceback.format_exception(error))


@dataclass
class _Slot:
    process: Any
    conn: Connection
    jobs: dict[int, Future] = field(default_factory=dict)  # job id -> its future, the jobs it runs now
    calls: dict[int, Future] = field(default_factory=dict)  # call id -> its future


@dataclass
class _Queue:
    """What the dispatcher has not handed to a worker yet."""

    jobs: collections.deque = field(default_factory=collections.deque)  # (job id, future), FIFO
    calls: collections.deque = field(default_factory=collections.deque)  # (call id, fn, args, future)
    closing: bool = False
    warm: bool = False  # start every worker that is not running


class ProcessExecutor:
    """``workers`` worker processes, each running one job at a time, or,
    for a runner that shares its engine, one process running ``workers``
    jobs at once (see the module docstring). They start with the executor
    (with ``start_workers=False``, at ``warm()`` or the first job or call);
    one that dies is replaced at the next job or call."""

    def __init__(self, runner: JobRunner, db_url: str | None, data_dir: str | Path, workers: int = 1, *,
                 nice: int = 0, publish: Publish | None = None, start_workers: bool = True):
        self.runner = runner
        self.workers = int(workers)
        self.publish = publish or _ignore
        self._jobs_at_once = self.workers if runner.shares_engine else 1
        self._processes = -(-self.workers // self._jobs_at_once)
        self._args = (db_url, str(data_dir), os.getpid(), int(nice), self._jobs_at_once, code_env())
        self._ctx = worker_context()
        self._slots: list[_Slot] = []
        self._queue = _Queue()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = self._ctx.Pipe(duplex=False)
        self._call_ids = itertools.count()
        # Started now, not at the first job: the first start waits for the fork
        # server's imports (seconds), which a new service's first picks would otherwise wait for.
        if start_workers:
            self._slots.extend(self._start_worker() for _ in range(self._processes))
        self._dispatcher = threading.Thread(target=self._dispatch, name="easeml-executor", daemon=True)
        self._dispatcher.start()

    # ------------------------------------------------------------ public
    def submit(self, job_id: int) -> "Future[int]":
        return self._enqueue(self._queue.jobs, job_id)

    def call(self, fn: Callable[..., Any], *args: Any) -> "Future[Any]":
        return self._enqueue(self._queue.calls, next(self._call_ids), fn, args)

    def _enqueue(self, line: collections.deque, *item: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._queue.closing:
                raise RuntimeError("the executor is shut down")
            line.append((*item, future))
        self._wake_w.send(None)
        return future

    def warm(self) -> None:
        with self._lock:
            if self._queue.closing or self._queue.warm or len(self._slots) >= self._processes:
                return
            self._queue.warm = True  # the dispatcher starts them: it alone adds workers
        self._wake_w.send(None)

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [s.process.pid for s in self._slots if s.process.is_alive()]

    def shutdown(self) -> None:
        """Cancel the jobs not started, wait for the running ones, stop the workers."""
        with self._lock:
            self._queue.closing = True
            pending = [*self._queue.jobs, *self._queue.calls]
            self._queue.jobs.clear()
            self._queue.calls.clear()
        for *_, future in pending:
            future.cancel()
        self._wake_w.send(None)
        self._dispatcher.join()
        for slot in self._slots:
            slot.process.join(30)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()
            slot.conn.close()

    # ------------------------------------------------------------ dispatcher
    def _start_worker(self) -> _Slot:
        ours, theirs = self._ctx.Pipe()
        process = self._ctx.Process(target=_serve_jobs, args=(self.runner, *self._args[:2], theirs, *self._args[2:]),
                                    name="easeml-worker", daemon=True)
        process.start()
        theirs.close()
        return _Slot(process, ours)

    def _new_slot(self) -> _Slot:
        slot = self._start_worker()
        with self._lock:
            self._slots.append(slot)
        return slot

    def _start_missing(self) -> None:
        """Start the workers ``warm()`` asked for (the dispatcher's thread adds every worker)."""
        with self._lock:
            missing = self._processes - len(self._slots) if self._queue.warm else 0
            self._queue.warm = False
        for _ in range(missing):
            try:
                self._new_slot()
            except OSError as error:  # a job's own start tries again
                log.warning("could not start a worker process: %s", error)
                return

    def _send_calls(self) -> None:
        """Hand calls to the worker with the fewest calls (starting one if there is none)."""
        while True:
            with self._lock:
                if not self._queue.calls:
                    return
                call_id, fn, args, future = self._queue.calls.popleft()
                slot = min(self._slots, key=lambda s: len(s.calls), default=None)
            if not future.set_running_or_notify_cancel():
                continue
            slot = slot or self._slot_for(future)
            if slot is None:
                continue
            slot.calls[call_id] = future
            self._send(slot, ("call", call_id, fn, args))

    def _assign(self) -> None:
        """Hand queued jobs to workers with a free job slot, starting workers as needed."""
        while True:
            with self._lock:
                if not self._queue.jobs:
                    return
                idle = next((s for s in self._slots if len(s.jobs) < self._jobs_at_once), None)
                if idle is None and len(self._slots) >= self._processes:
                    return
                job_id, future = self._queue.jobs.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            idle = idle or self._slot_for(future)
            if idle is None:
                continue
            idle.jobs[job_id] = future
            self._send(idle, ("job", job_id))

    def _slot_for(self, future: Future) -> _Slot | None:
        """A new worker for ``future``'s job or call; None (and the future
        failed with ``WorkerDied``) when no process can be started now."""
        try:
            return self._new_slot()
        except OSError as error:  # out of processes or memory: this one fails, the next may start
            log.warning("could not start a worker process: %s", error)
            future.set_exception(WorkerDied(f"no worker process could be started: {error}"))
            return None

    @staticmethod
    def _send(slot: _Slot, message: Any) -> None:
        """A message to a worker; one that died meanwhile is seen at its sentinel, which fails its work."""
        try:
            slot.conn.send(message)
        except OSError:
            pass

    def _dispatch(self) -> None:
        while True:
            try:
                if self._dispatch_round():
                    return
            except Exception:  # noqa: BLE001 - a dispatcher that ended would leave every future unresolved
                log.exception("the worker dispatcher's round failed; it goes on")
                time.sleep(0.1)

    def _dispatch_round(self) -> bool:
        """Start, assign and send what is queued, then read what the workers
        answer; True once closing and every job and call is done."""
        self._start_missing()
        self._assign()
        self._send_calls()
        with self._lock:
            done = self._queue.closing and not any(s.jobs or s.calls for s in self._slots)
        if done:
            for slot in self._slots:
                if slot.process.is_alive():
                    self._send(slot, None)
            return True
        watched: list[Any] = [self._wake_r]
        for slot in self._slots:
            watched += [slot.conn, slot.process.sentinel]
        for ready in wait(watched):
            if ready is self._wake_r:
                self._wake_r.recv()
                continue
            slot = next((s for s in self._slots if ready in (s.conn, s.process.sentinel)), None)
            if slot is not None:
                self._read(slot)
        return False

    def _read(self, slot: _Slot) -> None:
        """Messages of one worker; if it died, end its job and take it out."""
        try:
            while slot.conn.poll():
                kind, *rest = slot.conn.recv()
                if kind == "event":
                    self._publish(*rest)
                elif kind == "result":
                    call_id, value, error = rest
                    call = slot.calls.pop(call_id)
                    if error is None:
                        call.set_result(value)
                    elif isinstance(error, BaseException):
                        call.set_exception(error)  # our typed errors keep their code (store_corrupt, ...)
                    else:
                        call.set_exception(RuntimeError(f"a call in a worker raised:\n{error}"))
                elif rest[0] in slot.jobs:
                    job_id, error = rest
                    future = slot.jobs.pop(job_id)
                    if error is None:
                        future.set_result(job_id)
                    else:
                        future.set_exception(RuntimeError(f"job {job_id} raised in its worker:\n{error}"))
        except (EOFError, OSError):
            pass
        if slot.process.is_alive():
            return
        slot.process.join()
        for job_id, future in slot.jobs.items():
            log.warning("worker %s running job %d died (exit code %s)", slot.process.pid, job_id, slot.process.exitcode)
            future.set_exception(WorkerDied(f"the worker running job {job_id} died "
                                            f"(exit code {slot.process.exitcode})"))
        for call in slot.calls.values():
            call.set_exception(WorkerDied(f"the worker answering a call died (exit code {slot.process.exitcode})"))
        slot.conn.close()
        with self._lock:
            self._slots.remove(slot)

    def _publish(self, owner: int, event: dict) -> None:
        try:
            self.publish(owner, event)
        except Exception:  # noqa: BLE001 - one bad event must not stop the dispatcher
            log.exception("publishing a worker's event failed")
