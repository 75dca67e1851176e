"""A child process that runs a user's code and is killed at her job's
deadline (``service/user_models.py`` sends its calls into her estimator and
her net factory here).

A thread cannot be killed in Python; a process can. So a call into user code
(``fn(*args, **kwargs)``, cloudpickled) goes over a pipe to a child process,
and its value comes back. A call still running at the deadline gets the
child killed (``SIGKILL``): nothing of the user's code runs on. The parent
reads each reply with its own deadline and a size limit, so a child that
writes half a reply and stops cannot hold it either. The child ends itself
at the deadline (should its parent be stuck or gone) and when its parent
closes the pipe; the parent closes it when the job ends (``JobScope``), or
after ``IDLE_SECONDS`` without calls.

Where the kernel has Landlock, the child is also confined
(``user_confine``): it reads the Python installation and the system's files,
writes only its own folder, and cannot open the data directory, the
database, other processes' ``/proc`` entries, TCP connections or (ABI 6)
signal the worker. Without Landlock it runs with the worker's user and file
system rights. Either way the child bounds the calls it runs, not her code
as a whole: a net's factory and built net come back as objects, which the
worker unpickles (an estimator comes back as data: ``fit_sealed``;
``docs/models.md``, "Trust"). It gets a minimal environment (nothing of
the service's is handed to it), an empty temporary working directory and a
session of its own.

One child per job and thread (``for_job``), started on the first call: a
job's calls pay the start of one process and the pickling of their
arguments and results, not one process each. Children are forked from a
waiting process that imports, while idle, the libraries this process uses
(``user_zygote``), so later children do not import scikit-learn or torch
again.

Output. What her code prints (Python's ``print`` and anything written to
the process's stdout or stderr, C libraries' too) goes to a pipe whose read
end stays in the parent, not to the log of the service or worker, which
other people read. The parent drains it while it waits on a call, keeping
only its last few kilobytes (``_OutputTail``). Each call starts it empty; a
call that raises gets its last ``OUTPUT_TAIL_CHARS`` characters above her
traceback, so she sees what her code printed before the error. The output
of a call that returns is dropped. (Drained in the parent, not by a thread
of the child: C code that writes while holding the GIL would wait forever
for that thread. A file instead would grow without bound, or lose what is
written while it is cut; a limit on file sizes would also refuse the files
her code or its libraries write.) Between calls nothing drains it: a
thread of hers that prints more than the pipe holds waits for the next call.

Threads. A job's thread count (the provisioner's, made real by
``service/threads.py``) limits the thread pools of the worker thread that
runs it, which a child process does not inherit: left alone, her ``fit``
would run at every core. So each call carries the calling thread's count
(:func:`set_call_threads`), and the child runs the call under
``threadpoolctl``'s limit of that many BLAS and OpenMP threads (and torch's
intra-op threads, once her code imported torch), restored after it.

This module imports nothing from the service: a child starts with it alone.
"""

from __future__ import annotations

import io
import os
import pickle
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import logging
import weakref
from typing import Any, Callable

from .user_confine import PROTECTED_ENV, READABLE_ENV, WRITABLE_ENV, abi_version
from .user_zygote import ForkedChild, ForkFailed, fork_child

IDLE_SECONDS = 60.0  # the parent closes a child with no call for this long (its job is over)
REAP_SECONDS = 5.0  # how often the parent looks for such children
END_SECONDS = 5.0  # a child whose pipes closed is killed if still running after this; its exit code waited for as long
MAX_REPLY_BYTES = 4 << 30  # a reply longer than this (a fitted model, predictions) is refused
MAX_TRACEBACK_CHARS = 20_000
OUTPUT_TAIL_CHARS = 4_000  # of her printed output, sent back with the error of a call that raised
CHILD_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "OMP_NUM_THREADS",
                  "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS",
                  "CUDA_VISIBLE_DEVICES", READABLE_ENV, WRITABLE_ENV, PROTECTED_ENV)
_HEADER = struct.Struct("!Q")
log = logging.getLogger(__name__)
_ERROR, _ARRAY, _OBJECT = b"E", b"A", b"O"


_CALL_THREADS = threading.local()


def set_call_threads(threads: int | None) -> None:
    """The thread count this thread's calls into user code run at (None: no
    limit); it holds for this thread's later calls until set again."""
    _CALL_THREADS.count = None if threads is None else max(int(threads), 1)


def call_threads() -> int | None:
    """This thread's thread count for calls into user code (:func:`set_call_threads`)."""
    return getattr(_CALL_THREADS, "count", None)


class UserModelError(RuntimeError):
    """User code raised; the message is its own traceback."""


class UserModelTimeout(TimeoutError):
    """User code ran past its job's limit."""


def from_user_code(error: BaseException) -> bool:
    """Whether ``error`` is her code's failure or wraps one (its causes and
    contexts): its text may hold what her code printed and her traceback,
    which are hers to read, not the service log's."""
    seen: BaseException | None = error
    for _ in range(16):
        if seen is None:
            return False
        if isinstance(seen, (UserModelError, UserModelTimeout)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class Sandbox:
    """One child process running user code, killed at ``deadline`` (``time.time()``)."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.lock = threading.Lock()  # one call at a time; held while a call runs, so no reaper closes it
        self.last_used = time.monotonic()
        self.workdir = tempfile.mkdtemp(prefix="easeml-user-model-")
        try:
            self.proc, self._to, self._from, output = self._start(deadline)
        except BaseException as error:
            shutil.rmtree(self.workdir, ignore_errors=True)
            if isinstance(error, TimeoutError):
                raise UserModelTimeout("the process for her code had not started by the job's time limit") from None
            if isinstance(error, ForkFailed):
                raise UserModelError(f"the process for her code could not be started: {error}") from None
            raise
        os.set_blocking(self._to, False)  # the parent's writes wait in select, bounded by the deadline
        self.output = _OutputTail(output)
        self._closed = False

    def _start(self, deadline: float) -> tuple[ForkedChild, int, int, int]:
        """Her child and the parent's pipe ends (to it, from it, its output).
        A zygote that ended before it answered may have left a child on the
        pipes it was sent, so the second try (from a new zygote) gets new ones."""
        for attempt in range(2):
            to_child_r, to_child_w = os.pipe()
            from_child_r, from_child_w = os.pipe()
            output_r, output_w = os.pipe()
            try:  # room for what she prints while the parent is not yet reading
                import fcntl

                fcntl.fcntl(output_r, fcntl.F_SETPIPE_SZ, 1 << 20)
            except (ImportError, AttributeError, OSError):
                pass
            try:
                proc = fork_child(_child_env(), float(deadline), self.workdir, (to_child_r, from_child_w, output_w),
                                  timeout=deadline - time.time())
            except BaseException as error:
                os.close(to_child_w)
                os.close(from_child_r)
                os.close(output_r)
                if not isinstance(error, ConnectionError) or attempt:
                    raise
                continue
            finally:
                os.close(to_child_r)
                os.close(from_child_w)
                os.close(output_w)
            return proc, to_child_w, from_child_r, output_r
        raise AssertionError("unreachable")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return not self.proc.exited(0)

    def call(self, fn: Callable[..., Any], *args: Any, what: str, returns: str = "object", **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in the child: its value, ``UserModelError``
        with the user's traceback if it raised, ``UserModelTimeout`` (and the
        child killed) if it was still running at the deadline. It runs at
        this thread's thread count (:func:`call_threads`). With
        ``returns="array"`` the value comes back as a numeric numpy array
        (``np.save`` bytes, loaded without pickle); ``"object"`` unpickles it
        here (her classes' code runs in this process as it loads)."""
        import cloudpickle

        with self.lock:
            self.last_used = time.monotonic()
            if self.deadline - time.time() <= 0:
                self.kill()
                raise UserModelTimeout(f"{what}: the job's time limit had passed before it started")
            try:
                request = cloudpickle.dumps((fn, args, kwargs, returns, call_threads()))
            except Exception as error:  # noqa: BLE001 - her object cannot travel: say so with the reason
                raise UserModelError(f"{what}: could not be pickled to run apart from the service: "
                                     f"{type(error).__name__}: {error}") from None
            self.output.clear()  # what was printed since the last call's reply (her threads) is not this call's
            try:
                _write_frame(self._to, request, self.deadline, self.output)
                reply = _read_frame(self._from, self.deadline, MAX_REPLY_BYTES, self.output)
                self.output.take()  # the rest of what she wrote before the reply
            except TimeoutError:
                self.kill()
                raise UserModelTimeout(f"{what}: still running at the job's time limit, expected it to return "
                                       "(the limit is the model's `limit`, at most the service's "
                                       "--user-model-timeout); its process was killed") from None
            except ValueError as error:  # a reply too long
                self.kill()
                raise UserModelError(f"{what}: {error}; its process was killed") from None
            except (EOFError, OSError):
                code = self._end()  # it closed its end: it is ending, or killed if it lingers
                if time.time() >= self.deadline:
                    raise UserModelTimeout(f"{what}: still running at the job's time limit; its process ended "
                                           f"({_exit_text(code)})") from None
                raise UserModelError(f"{what}: the process running it ended ({_exit_text(code)}) before it "
                                     "returned") from None
            finally:
                self.last_used = time.monotonic()
            return _decode(reply, what, returns, self.output)

    def kill(self) -> None:
        """End the child now (it may be running her code), reap it, free its pipes and folder."""
        if self.alive():
            self.proc.kill()
        self._end()

    def close(self) -> None:
        """End the child once its call is done: it ends at the end of its
        input; one that does not within a second is killed."""
        self._close_pipes()
        if not self.proc.exited(1.0):
            self.proc.kill()
        self._end()

    def _end(self) -> int | None:
        """Close the pipes and see the child gone: one still running
        ``END_SECONDS`` after its pipes closed is killed. Its exit code, as
        the zygote reported it (which reaps it: no zombie); None where the
        zygote had not reported it within ``END_SECONDS`` (busy or stuck),
        so no wait here is longer than that."""
        self._close_pipes()
        try:
            if not self.proc.exited(END_SECONDS):
                self.proc.kill()
                self.proc.exited(END_SECONDS)
            try:
                return self.proc.wait(END_SECONDS)
            except subprocess.TimeoutExpired:
                return None
        finally:
            self.proc.release()
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _close_pipes(self) -> None:
        if not self._closed:
            self._closed = True
            for fd in (self._to, self._from, self.output.fd):
                try:
                    os.close(fd)
                except OSError:
                    pass


def _exit_text(code: int | None) -> str:
    return "its exit code was not reported" if code is None else f"exit code {code}"


def _decode(reply: bytearray, what: str, returns: str, output: _OutputTail | None = None) -> Any:
    kind, body = bytes(reply[:1]), memoryview(reply)[1:]  # a view: a large reply is not copied again
    if kind == _ERROR:
        text = str(body, "utf-8", "replace")[-MAX_TRACEBACK_CHARS:]
        raise UserModelError(f"{what} raised:\n{output.before(text) if output is not None else text}")
    if kind == _ARRAY and returns == "array":
        from ease_jupyter.npy_bytes import load_npy

        return load_npy(body)
    if kind == _OBJECT and returns == "object":
        return pickle.loads(body)
    raise UserModelError(f"{what}: its process answered {kind!r}, expected a {returns} reply")


class _OutputTail:
    """The parent's end of a child's output pipe (its fds 1 and 2), drained
    while a call is waited on, keeping only its last ``4 * OUTPUT_TAIL_CHARS``
    bytes: however much her code prints, the child never waits on it long
    and nothing of it grows, here or on disk."""

    _KEEP = 4 * OUTPUT_TAIL_CHARS  # UTF-8: at most 4 bytes a character
    _MOST = 64 << 20  # read by one take: a child that writes on after its reply cannot hold the caller

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.open = True  # False once no one can write to it (her code closed fds 1 and 2), or the pipe closed
        self._kept = bytearray()
        self._cut = False  # bytes were dropped from the front of _kept

    def wanted(self) -> list[int]:
        """The fds to wait on along with a reply: this one while it is open."""
        return [self.fd] if self.open else []

    def take(self) -> None:
        """Move what the pipe holds now into the kept tail."""
        taken = 0
        while self.open and taken < self._MOST:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:  # closed (the sandbox is ending)
                self.open = False
                return
            if not chunk:
                self.open = False
                return
            taken += len(chunk)
            self._kept += chunk
            if len(self._kept) > self._KEEP:
                del self._kept[:len(self._kept) - self._KEEP]
                self._cut = True

    def clear(self) -> None:
        self.take()
        self._kept.clear()
        self._cut = False

    def before(self, traceback_text: str) -> str:
        """``traceback_text``, below the end of what the call printed (if it printed anything)."""
        self.take()
        text = bytes(self._kept).decode("utf-8", "replace")
        printed = text[-OUTPUT_TAIL_CHARS:].rstrip()
        if not printed:
            return traceback_text
        cut = self._cut or len(text) > OUTPUT_TAIL_CHARS
        cut_text = f" (its last {OUTPUT_TAIL_CHARS:,} characters)" if cut else ""
        return f"printed before the error{cut_text}:\n{printed}\n\n{traceback_text}"


def _wait(reading: list[int], writing: list[int], deadline: float, output: _OutputTail | None) -> bool:
    """Wait until ``reading`` or ``writing`` is ready (True), or past
    ``deadline`` (False), draining ``output`` all the while."""
    extra = output.wanted() if output is not None else []
    while True:
        left = deadline - time.time()
        if left <= 0:
            return False
        readable, writable, _ = select.select(reading + extra, writing, [], left)
        if extra and extra[0] in readable:
            output.take()  # type: ignore[union-attr]
            extra = output.wanted()  # type: ignore[union-attr]
        if writable or any(fd in reading for fd in readable):
            return True


def _write_frame(fd: int, data: bytes, deadline: float, output: _OutputTail | None = None) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        if not _wait([], [fd], deadline, output):
            raise TimeoutError
        try:
            view = view[os.write(fd, view[:1 << 20]):]
        except BlockingIOError:
            continue


def _read_frame(fd: int, deadline: float, max_bytes: int, output: _OutputTail | None = None) -> bytearray:
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline, output))
    if size > max_bytes:
        raise ValueError(f"its reply is {size} bytes, expected at most {max_bytes}")
    return _read_exactly(fd, size, deadline, output)


def _read_exactly(fd: int, size: int, deadline: float, output: _OutputTail | None = None) -> bytearray:
    """``size`` bytes from ``fd``, each wait bounded by ``deadline``: TimeoutError
    past it (a child that wrote part of a frame and stopped), EOFError at its end.
    ``output`` is drained while it waits."""
    out = bytearray()
    while len(out) < size:
        if not _wait([fd], [], deadline, output):
            raise TimeoutError
        chunk = os.read(fd, min(size - len(out), 1 << 20))
        if not chunk:
            raise EOFError
        out += chunk
    return out  # not bytes(out): a reply of gigabytes would be held twice


def _child_env() -> dict[str, str]:
    """A minimal environment: the few settings Python, BLAS and locale read,
    and this process's import path (the child imports this package, and the
    user's classes pickled by reference, as this process does); nothing else
    of the service's is handed to it (not a barrier: see the module's docstring)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {key: os.environ[key] for key in CHILD_ENV_KEYS if key in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([root, *filter(None, sys.path)]))
    return env


_SANDBOXES: dict[tuple[float, int], Sandbox] = {}
_LOCK = threading.Lock()
_REAPER: threading.Thread | None = None
_PENDING: list[float] = []  # jobs ended while _LOCK was held (``close_job``)


def for_job(deadline: float) -> Sandbox:
    """This thread's child for the job ending at ``deadline`` (started on
    first use; started again if it ended)."""
    global _REAPER
    key = (float(deadline), threading.get_ident())
    _reap()
    with _LOCK:
        box = _SANDBOXES.get(key)
        if box is not None and box.alive():
            return box
        dead = _SANDBOXES.pop(key, None)
    if dead is not None:  # ended since the reaper looked: free its pipes and folder
        dead.close()
    box = Sandbox(deadline)  # not under _LOCK: a slow start holds back no other job's calls
    with _LOCK:
        _SANDBOXES[key] = box  # the key is this thread's: no other thread starts one for it
        if _REAPER is None:
            _log_confinement()
            _REAPER = threading.Thread(target=_reap_forever, name="easeml-user-model-reaper", daemon=True)
            _REAPER.start()
    return box


def _log_confinement() -> None:
    abi = abi_version()
    if abi:
        log.info("users' code runs confined by Landlock (ABI %d; docs/models.md, \"Trust\")", abi)
    else:
        log.warning("users' code runs unconfined: this kernel has no Landlock, so it can read and write "
                    "whatever this worker can (docs/models.md, \"Trust\")")


def _reap() -> None:
    """Close the children whose job's deadline has passed, that ended, or
    that had no call for ``IDLE_SECONDS``; never one in the middle of a call."""
    pending = []
    while _PENDING:
        pending.append(_PENDING.pop())
    for deadline in pending:  # one that still finds the lock taken waits for the next look
        close_job(deadline)
    now, idle_since = time.time(), time.monotonic() - IDLE_SECONDS
    with _LOCK:
        stale = [(k, s) for k, s in _SANDBOXES.items()
                 if k[0] < now or s.last_used < idle_since or not s.alive()]
        taken = []
        for key, box in stale:
            if box.lock.acquire(blocking=False):  # a call in progress keeps its child
                del _SANDBOXES[key]
                taken.append(box)
    for box in taken:
        try:
            box.close()
        finally:
            box.lock.release()


def _reap_forever() -> None:
    while True:
        time.sleep(REAP_SECONDS)
        _reap()


def close_job(deadline: float) -> None:
    """Close every child of the job ending at ``deadline`` (all threads'):
    its job is over, so a call still running in one is ended too. Called
    from a finalizer, which may run while this thread holds ``_LOCK``: then
    the reaper closes them at its next look instead."""
    if not _LOCK.acquire(blocking=False):
        _PENDING.append(float(deadline))
        return
    try:
        boxes = [_SANDBOXES.pop(k) for k in [k for k in _SANDBOXES if k[0] == float(deadline)]]
    finally:
        _LOCK.release()
    for box in boxes:
        if box.lock.acquire(blocking=False):
            try:
                box.close()
            finally:
                box.lock.release()
        else:
            box.proc.kill()  # its caller's read then ends, and that call reaps it


class JobScope:
    """A job's hold on its children: when the last reference to it goes (the
    job's candidate is dropped as its job ends), ``close_job`` closes them."""

    def __init__(self, deadline: float):
        self.deadline = float(deadline)
        self._finalizer = weakref.finalize(self, close_job, self.deadline)

    def close(self) -> None:
        self._finalizer()

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy sent to another process (a Dask worker) holds that process's children of the job."""
        return JobScope, (self.deadline,)


def run_user_code(fn: Callable[..., Any], *args: Any, deadline: float, what: str, returns: str = "object",
                  **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in this job's child process (``for_job``, ``Sandbox.call``)."""
    if deadline - time.time() <= 0:
        raise UserModelTimeout(f"{what}: the job's time limit had passed before it started")
    try:
        box = for_job(deadline)
    except UserModelTimeout as error:
        raise UserModelTimeout(f"{what}: {error}") from None
    return box.call(fn, *args, what=what, returns=returns, **kwargs)


# -- what runs in the child (by reference: this module is all it imports) ----------------------------


def load_code(data: bytes) -> Any:
    """A user model's object from its cloudpickled bytes."""
    import cloudpickle  # noqa: F401 - objects pickled by value need it to load

    return pickle.loads(data)


def fit_estimator(estimator: Any, options: dict[str, Any], X: Any, y: Any) -> Any:
    """A fitted copy of ``estimator`` with ``options`` set: scikit-learn's
    ``clone``, ``set_params`` and ``fit`` (whatever ``fit`` returns: the
    fitted estimator is the copy itself)."""
    from sklearn.base import clone

    fitted = clone(estimator)
    if options:
        fitted.set_params(**options)
    fitted.fit(X, y)
    return fitted


def checked_estimator(data: bytes) -> Any:
    """Her estimator's bytes loaded and checked to fit and predict: a packed
    reply (``fitted_calls.packed``) with its type's name, or the error."""
    from .fitted_calls import packed

    estimator = load_code(data)
    if not (hasattr(estimator, "fit") and hasattr(estimator, "predict")):
        return packed({"error": {"field": "model", "found": type(estimator).__name__,
                                 "expected": "a scikit-learn estimator (fit and predict)"}})
    return packed({"type": type(estimator).__name__})


def fit_sealed(data: bytes, options: dict[str, Any], X: Any, y: Any) -> Any:
    """``fit_estimator`` on her estimator's bytes; the fitted copy comes back
    as the bytes of its cloudpickle (packed), which the parent keeps without
    loading: a reply it unpickled would run whatever her objects name there."""
    import cloudpickle

    from .fitted_calls import packed

    return packed({}, cloudpickle.dumps(fit_estimator(load_code(data), options, X, y)))


def predict_sealed(data: bytes, X: Any) -> Any:
    """``predict`` of her fitted estimator's bytes (loaded once per child)."""
    from .fitted_calls import load_fitted

    return load_fitted(data).predict(X)


def build_net(factory: Callable[..., Any], input_shape: tuple[int, ...], output_shape: tuple[int, ...],
              options: dict[str, Any], seed: int | None = None) -> Any:
    """``factory(input_shape, output_shape, **options)``, checked to be an
    ``nn.Module`` and run once on a batch of two zero examples, so that a
    factory or a forward pass that hangs does so here, where it can be killed.
    With ``seed``, torch's, numpy's and ``random``'s global generators are
    seeded with it first: the child's own are random (``user_zygote._reseed``),
    and her net's first weights must be the same in every run of its trial."""
    import torch
    from torch import nn

    if seed is not None:
        import random

        import numpy as np

        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
    net = factory(input_shape, output_shape, **options)
    if isinstance(net, nn.Module):
        was_training = net.training
        with torch.no_grad():
            net.eval()(torch.zeros((2, *input_shape), dtype=torch.float32))
        net.train(was_training)
    return net


# -- the child ---------------------------------------------------------------------------------------


def _output_to(fd: int) -> None:
    """Send this child's stdout and stderr (file descriptors 1 and 2, so C
    libraries' writes too) into ``fd``, the pipe the parent drains."""
    _flush_output()  # what was written before goes where it was meant to
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):  # her prints in the order she made them, C writes among them
        if stream is not None and hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)


def _flush_output() -> None:
    """Python's buffers into the pipe, before the reply: the parent reads all
    she printed up to it."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - her code closed or replaced it
                pass


def _user_traceback(error: BaseException) -> str:
    """The traceback from the user's frames on (this module's own frames dropped)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


def _array_bytes(value: Any) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    try:
        np.save(buffer, np.asarray(value), allow_pickle=False)
    except ValueError:
        raise TypeError(f"returned a {type(value).__name__} of objects, expected numbers or strings") from None
    return buffer.getvalue()


def _child_read(fd: int, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = os.read(fd, size - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def _child_write(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


class _ChildThreads:
    """The child's limits on its thread pools. One ``ThreadpoolController``
    serves while no module was imported since it was made (making one scans
    every loaded shared library); her code's imports (numpy, scipy,
    scikit-learn's OpenMP) get a new one."""

    def __init__(self) -> None:
        self._controller: Any = None
        self._modules = -1

    def controller(self) -> Any:
        if self._controller is None or len(sys.modules) != self._modules:
            from threadpoolctl import ThreadpoolController

            self._controller = ThreadpoolController()
            self._modules = len(sys.modules)
        return self._controller

    def run(self, threads: int | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` at ``threads`` threads (None: as it is)."""
        if threads is None:
            return fn(*args, **kwargs)
        torch = sys.modules.get("torch")
        before = torch.get_num_threads() if torch is not None else None
        if torch is not None:
            torch.set_num_threads(threads)
        try:
            with self.controller().limit(limits=threads):
                return fn(*args, **kwargs)
        finally:
            if torch is not None:
                torch.set_num_threads(before)


def child_main(refusal: str | None = None) -> None:
    """Serve calls from the parent until it closes the pipe or the deadline
    passes; with a ``refusal``, answer each call with it instead of running it."""
    import cloudpickle

    inbox, outbox, output, deadline = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])

    def end_at_deadline() -> None:
        time.sleep(max(deadline - time.time(), 0.0) + 1.0)
        os._exit(124)  # her code may still be running: end the process, not the call

    threading.Thread(target=end_at_deadline, daemon=True).start()
    pools = _ChildThreads()
    _output_to(output)
    while True:
        try:
            (size,) = _HEADER.unpack(_child_read(inbox, _HEADER.size))
            request = _child_read(inbox, size)
        except (EOFError, OSError):
            return
        try:
            if refusal is not None:
                raise PermissionError(refusal)
            fn, args, kwargs, returns, threads = pickle.loads(request)
            value = pools.run(threads, fn, *args, **kwargs)
            reply = _ARRAY + _array_bytes(value) if returns == "array" else _OBJECT + cloudpickle.dumps(value)
        except BaseException as error:  # noqa: BLE001 - sent to the parent with her traceback
            reply = _ERROR + _user_traceback(error).encode("utf-8", "replace")
        _flush_output()
        try:
            _child_write(outbox, reply)
        except OSError:
            return
