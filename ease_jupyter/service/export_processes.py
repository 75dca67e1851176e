"""Zoo scikit-learn exports in processes of their own (docs/export.md, "Where it runs").

Unpickling a fitted model and converting it (skl2onnx) holds the GIL for
seconds and allocates many times the model's size: a 52 MB random forest
took 11 s and about 800 MB to convert to ONNX. In the service's process that
is memory it keeps and time every other request waits. ``ExportProcesses``
runs each conversion in one of ``size`` processes of the service
(``worker_context``), not on the training workers: their ``call`` waits for
a worker, so an export would queue behind training.

- A conversion is sent what it needs, the model's bytes included
  (``export.sklearn_artifact_from``), so the process opens no store and
  works beside every store, ``memory://`` (which no other process can open)
  included. The service holds the bytes for as long as they are sent;
  ``Connection`` carries messages over 2 GiB, so a model's size is bounded
  by memory only.
- Started lazily, one at the first conversion that finds no process idle:
  most services never export, and a process with scikit-learn and skl2onnx
  loaded holds a hundred MB or more and takes seconds of CPU to start, for
  every service (each embedded ``Client()``, each test's). The first export
  pays that start; the next ones find the process ready.
- One conversion per process at a time; a request waits for an idle one.
  The whole wait, queue and conversion, is bounded by the request's
  (``run``'s ``wait``): a conversion cannot be interrupted inside a
  process, so one still running then is abandoned and its process killed
  (``ExportProcessTimeout``); a process that dies (killed, out of memory)
  fails only its own conversion (``ExportProcessDied``). Either way a fresh
  process takes its place at the next conversion.
- A process whose memory grew by more than ``recycle_bytes`` over a
  conversion exits after answering, giving back what the allocator keeps.
- Each process exits with the service (``exit_with_parent``), ignores
  Ctrl-C (``ignore_interrupts``), and ``close`` ends them all.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable

from .executors import exit_with_parent, ignore_interrupts, worker_context

__all__ = ["EXPORT_PROCESSES", "ExportProcessDied", "ExportProcessTimeout", "ExportProcesses"]

# A user runs at most two model calls at once (handlers.MODEL_CALLS_PER_USER); two
# processes bound the CPU and memory all exports together take, whoever asks.
EXPORT_PROCESSES = 2
RECYCLE_BYTES = 256 * 1024 * 1024
STOP_SECONDS = 5.0  # for a killed or retiring process to be reaped


class ExportProcessTimeout(TimeoutError):
    """No answer within the wait. ``started``: the conversion had begun, and
    its process was killed; otherwise every process was busy the whole wait
    and it never ran."""

    def __init__(self, wait: float | None, started: bool):
        self.wait, self.started = wait, started
        super().__init__(f"no answer within {wait} s ({'killed' if started else 'never started'})")


class ExportProcessDied(RuntimeError):
    """The process ended before it answered; ``how`` says how (a signal or an exit code)."""

    def __init__(self, how: str):
        self.how = how
        super().__init__(f"the export process ended before it answered ({how})")


def _rss() -> int | None:
    """This process's resident bytes now (Linux), None where unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _portable(error: BaseException) -> BaseException:
    """The error itself if it survives pickling (our typed errors do), else a RuntimeError with its traceback."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - an exception type that does not pickle
        return RuntimeError("".join(traceback.format_exception(error)))


def _serve(conn: Connection, parent_pid: int, recycle_bytes: int) -> None:
    """An export process: answer ``(fn, args)`` messages with ``(kind, value,
    retire)`` until ``None`` or the service is gone; exit after an answer
    that ``retire``\\ s it."""
    ignore_interrupts()
    exit_with_parent(parent_pid)
    started = _rss()
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):  # the service closed its end
            return
        try:
            message = pickle.loads(raw)
            if message is None:
                return
            fn, args = message
            reply: tuple[str, Any] = ("value", fn(*args))
        except Exception as error:  # noqa: BLE001 - the caller gets it
            reply = ("error", _portable(error))
        raw = message = args = None  # the model's bytes, before measuring what stays
        now = _rss()
        retire = started is not None and now is not None and now - started > recycle_bytes
        try:
            conn.send((*reply, retire))
        except (pickle.PicklingError, TypeError, AttributeError) as error:  # a value that does not pickle
            conn.send(("error", _portable(error), retire))
        if retire:
            return


def _how(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running when given up on"
    if exitcode == -signal.SIGKILL:
        return "killed by SIGKILL: out of memory, say"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}: it failed, and the service's log says why"


@dataclass(eq=False)
class _Process:
    process: Any
    conn: Connection


class ExportProcesses:
    """At most ``size`` export processes of this service, started as
    conversions need them (see the module docstring)."""

    def __init__(self, size: int = EXPORT_PROCESSES, *, recycle_bytes: int = RECYCLE_BYTES):
        if size < 1:
            raise ValueError(f"size: found {size}, expected >= 1")
        self.size, self._recycle = size, recycle_bytes
        self._ctx = worker_context()
        self._idle: queue.SimpleQueue[_Process | None] = queue.SimpleQueue()  # None: a place with no process yet
        for _ in range(size):
            self._idle.put(None)
        self._live: set[_Process] = set()
        self._lock = threading.Lock()
        self._closed = False

    def run(self, fn: Callable[..., Any], *args: Any, wait: float | None = None) -> Any:
        """``fn(*args)`` (picklable) in an export process, waited for at most
        ``wait`` seconds in all, queue included (None: no limit). Raises what
        ``fn`` raised, ``ExportProcessTimeout`` or ``ExportProcessDied``."""
        deadline = None if wait is None else time.monotonic() + wait
        try:
            proc = self._idle.get(timeout=wait)
        except queue.Empty:
            raise ExportProcessTimeout(wait, started=False) from None
        keep = proc
        try:
            if self._closed:
                raise RuntimeError("the export processes are closed (the service is stopping)")
            if proc is None:
                proc = keep = self._start()
            outcome, alive = self._ask(proc, fn, args, deadline)
            if not alive:
                keep = None
        finally:
            if keep is not None and self._closed:
                self._end(keep, kill=True)
                keep = None
            self._idle.put(keep)
        kind, value = outcome
        if kind == "value":
            return value
        if kind == "error":
            raise value
        if kind == "timeout":
            raise ExportProcessTimeout(wait, started=True)
        raise ExportProcessDied(value)

    def _ask(self, proc: _Process, fn: Callable[..., Any], args: tuple, deadline: float | None
             ) -> tuple[tuple[str, Any], bool]:
        """(outcome, whether ``proc`` takes the next conversion) of one call;
        a process that overran the deadline is killed."""
        try:
            proc.conn.send((fn, args))
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not proc.conn.poll(left):
                self._end(proc, kill=True)
                return ("timeout", None), False
            kind, value, retire = proc.conn.recv()
        except (EOFError, OSError):  # the pipe broke or closed: it died
            return ("died", self._end(proc, kill=True)), False
        if retire:
            self._end(proc, kill=False)
        return (kind, value), not retire

    def _start(self) -> _Process:
        ours, theirs = self._ctx.Pipe()
        process = self._ctx.Process(target=_serve, args=(theirs, os.getpid(), self._recycle),
                                    name="easeml-export", daemon=True)
        process.start()
        theirs.close()  # so that its death reads as the end of the pipe here
        proc = _Process(process, ours)
        with self._lock:
            self._live.add(proc)
        return proc

    def _end(self, proc: _Process, kill: bool) -> str:
        """Reap ``proc`` (killed first where ``kill``) and say how it ended."""
        if kill:
            proc.process.kill()
        proc.process.join(STOP_SECONDS)
        if proc.process.is_alive():
            proc.process.kill()
            proc.process.join(STOP_SECONDS)
        proc.conn.close()
        with self._lock:
            self._live.discard(proc)
        return _how(proc.process.exitcode)

    def pids(self) -> list[int]:
        """The processes started and not ended, idle or converting."""
        with self._lock:
            return sorted(proc.process.pid for proc in self._live)

    def close(self) -> None:
        """End every process; a conversion under way fails with ``ExportProcessDied``. Idempotent."""
        self._closed = True
        while True:
            try:
                proc = self._idle.get_nowait()
            except queue.Empty:
                break
            if proc is not None:
                self._end(proc, kill=True)
        with self._lock:
            busy = list(self._live)
        for proc in busy:  # their requests' threads reap them, once they read the end of the pipe
            proc.process.kill()
