"""Starts the child processes that run users' code (``user_sandbox``) by
forking them from one waiting process, the zygote, which has already
imported the libraries her models use.

A fresh interpreter that unpickles a scikit-learn estimator spends seconds
importing scikit-learn and SciPy (a net: torch) before her code runs, on
every job's first call and again after every kill. The zygote pays those
imports once per parent process; a forked child starts with them in memory.
It imports the modules of ``PRELOAD_PACKAGES`` that its parent has imported
(her models run where other users' models of that kind run), as each fork
request names the ones loaded since the last. It imports them after it has
forked, one at a time while no request waits: a child never waits for
modules it may not need (the first child imports what it needs itself, as a
fresh interpreter would), and later children start with them loaded.

The zygote is what a child would otherwise be: it starts with the child's
minimal environment and an empty folder of its own, never runs user code,
and holds nothing of the service. So a child forked from it sees what a
freshly started child would, and each child works in its own empty folder.

Protocol: a ``SOCK_SEQPACKET`` socket pair. The parent sends the child's
deadline, folder and the modules to import next, with its two pipe ends
(``SCM_RIGHTS``); the zygote forks, closes its copies and answers the child's
pid with a pidfd of it (or the fork's error number). It reaps its children
and sends each one's exit code, so a :class:`ForkedChild` answers as
``subprocess.Popen`` does. The pidfd is the parent's own handle on the
child: it kills through it (a pid the zygote has reaped may already name
another process) and sees through it when the child has exited, without
waiting for the zygote, which may be busy with an import. When the parent
closes its side, the zygote forks no more and exits once its children have
ended. When the zygote dies (a child can kill it), its children run on and
the parent sees each one's end through its pidfd (no exit code then).

This module imports nothing from the service: the zygote starts with it alone.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import queue
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

PRELOAD_PACKAGES = ("numpy", "scipy", "pandas", "sklearn", "torch", "cloudpickle", "threadpoolctl")
_MAIN = "from ease_jupyter.user_zygote import zygote_main; zygote_main()"
_MAX_REQUEST_BYTES = 1 << 20
_MAX_IMPORT_CHARS = 64 << 10  # module names per request (a datagram must fit the socket's buffer); the rest next time
_REPLY = struct.Struct("!cqq")  # kind (P: forked, F: the fork failed, X: exited), pid, exit code or errno
_FORKED, _FAILED, _EXITED = b"P", b"F", b"X"


class ForkFailed(OSError):
    """The zygote could not fork (``errno``: why); its other children are unharmed."""


class ForkedChild:
    """A child forked by the zygote, with ``subprocess.Popen``'s ``pid``,
    ``returncode``, ``poll``, ``wait`` and ``kill``; ``pidfd`` (ours to
    close, :meth:`release`) refers to this process and no other."""

    def __init__(self, pid: int, pidfd: int | None = None):
        self.pid = pid
        self.returncode: int | None = None
        self._ended = threading.Event()
        self._pidfd = pidfd
        self._fd_lock = threading.Lock()  # a kill from another thread never signals through a closed fd
        self._released = False

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"user code process {self.pid}", timeout or 0.0)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        with self._fd_lock:
            if self._ended.is_set() or self._released:  # released: its pid may name another process now
                return
            with contextlib.suppress(ProcessLookupError):
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                else:  # a kernel without pidfds
                    os.kill(self.pid, signal.SIGKILL)

    def exited(self, timeout: float) -> bool:
        """Whether the process has exited within ``timeout`` seconds, reported
        by the zygote or not (it may be busy importing)."""
        if self._ended.is_set():
            return True
        with self._fd_lock:
            fd = self._pidfd
        if fd is None:
            return self._ended.wait(timeout)
        return bool(select.select([fd], [], [], max(timeout, 0.0))[0]) or self._ended.is_set()

    def release(self) -> None:
        """Close the pidfd: the caller is done with this child."""
        with self._fd_lock:
            fd, self._pidfd = self._pidfd, None
            self._released = True
        if fd is not None:
            os.close(fd)

    def watch(self) -> int | None:
        """A copy of the pidfd (the caller's to close), readable once the
        process exits; None when there is no pidfd or it was released."""
        with self._fd_lock:
            return None if self._pidfd is None else os.dup(self._pidfd)

    def ended(self, code: int | None) -> None:
        """The process has exited; ``code`` None when no one can tell how
        (its zygote was gone, so nothing reaped it for us)."""
        self.returncode = code
        self._ended.set()


def preloaded() -> list[str]:
    """The modules the zygote imports: those of ``PRELOAD_PACKAGES`` loaded
    here, parents before their submodules."""
    tops = {name for name in PRELOAD_PACKAGES if name in sys.modules}
    return sorted(name for name in list(sys.modules) if name.partition(".")[0] in tops
                  and not any(part.startswith("_") for part in name.split(".")[1:]))


class Zygote:
    """The parent's end of one zygote process, started with ``env``."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.owner = os.getpid()
        self.folder = tempfile.mkdtemp(prefix="easeml-user-zygote-")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", _MAIN, str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env,
                                         cwd=self.folder)
        except BaseException:
            ours.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.lost = False
        self.retired = False
        self._children: dict[int, ForkedChild] = {}
        self._forked: queue.Queue[ForkedChild | ForkFailed | None] = queue.Queue()  # None: the zygote ended
        self._lock = threading.Lock()  # one fork request in flight: its answer is the next one
        self._sent: set[str] = set()  # modules the zygote was asked to import
        threading.Thread(target=self._listen, name="easeml-user-zygote", daemon=True).start()

    def usable(self) -> bool:
        return not (self.lost or self.retired) and self.owner == os.getpid()

    def fork(self, deadline: float, folder: str, fds: tuple[int, int, int], timeout: float) -> ForkedChild:
        """A child running ``user_sandbox.child_main`` in ``folder`` on the
        pipe ends ``fds`` (inbox, outbox, output: its stdout and stderr). ``TimeoutError`` if the zygote does
        not answer within ``timeout`` (it is then retired), ``OSError`` if it
        has ended."""
        # Another caller's request may hold the lock up to its own deadline
        # (a stopped zygote): wait no longer than this caller's own timeout.
        end = time.monotonic() + timeout
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            raise TimeoutError("the process for her code did not start in time")
        try:
            if self.lost:
                raise ConnectionError("the zygote ended before it forked")
            imports, chars = [], 0
            for name in preloaded():
                if name not in self._sent and chars + len(name) + 4 <= _MAX_IMPORT_CHARS:
                    imports.append(name)
                    chars += len(name) + 4
            socket.send_fds(self.sock, [json.dumps([deadline, folder, imports]).encode()], list(fds))
            self._sent.update(imports)
            try:
                child = self._forked.get(timeout=max(end - time.monotonic(), 0.0))
            except queue.Empty:
                self.retire()  # a late answer must not be taken for the next request's
                raise TimeoutError("the process for her code did not start in time") from None
            if child is None:
                raise ConnectionError("the zygote ended before it forked")
            if isinstance(child, ForkFailed):
                raise child
            return child
        finally:
            self._lock.release()

    def retire(self) -> None:
        """Fork no more; the zygote exits once its children have ended (their
        exit codes still arrive)."""
        if not self.retired:
            self.retired = True
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)

    def _listen(self) -> None:
        while True:
            try:
                reply, fds, _, _ = socket.recv_fds(self.sock, _REPLY.size, 1)
            except OSError:
                reply, fds = b"", []
            if len(reply) != _REPLY.size:
                for fd in fds:
                    os.close(fd)
                break
            kind, pid, code = _REPLY.unpack(reply)
            if kind == _FORKED:
                child = self._children[pid] = ForkedChild(pid, fds[0] if fds else None)
                self._forked.put(child)
                continue
            for fd in fds:
                os.close(fd)
            if kind == _FAILED:
                self._forked.put(ForkFailed(code, os.strerror(code)))
            elif (child := self._children.pop(pid, None)) is not None:
                child.ended(code)
        # The zygote is gone (her code may have killed it): its children need
        # nothing of it and run on, other users' calls among them. No one
        # reports their ends now, so their pidfds tell when each exits.
        self.lost = True
        orphans: dict[int, ForkedChild] = {}
        for child in self._children.values():
            fd = child.watch()
            if fd is not None:
                orphans[fd] = child
            else:  # released (the caller is done with it), or no pidfds: nothing can tell when it exits
                child.kill()
                child.ended(None)
        self._children.clear()
        self._forked.put(None)
        self.sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        shutil.rmtree(self.folder, ignore_errors=True)
        watching = select.poll()
        for fd in orphans:
            watching.register(fd, select.POLLIN)
        while orphans:
            for fd, _ in watching.poll():
                watching.unregister(fd)
                os.close(fd)
                orphans.pop(fd).ended(None)


_ZYGOTE: Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def _zygote(env: dict[str, str]) -> Zygote:
    """This process's zygote for children with environment ``env``; a new
    one when the environment changed (the old one retires) or it was lost."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        current = _ZYGOTE
        if current is None or not current.usable() or current.env != env:
            if current is not None and current.owner == os.getpid():
                current.retire()
            current = _ZYGOTE = Zygote(env)
        return current


def fork_child(env: dict[str, str], deadline: float, folder: str, fds: tuple[int, int, int],
               timeout: float) -> ForkedChild:
    """A child with environment ``env`` (``Zygote.fork``) from this process's
    zygote. ``ConnectionError`` when that zygote has ended: the caller may
    try again with new pipe ends (a zygote that ended after it forked may
    have left a child holding these), and then gets a new zygote."""
    current = _zygote(env)
    try:
        return current.fork(deadline, folder, fds, timeout)
    except (TimeoutError, ForkFailed):
        raise
    except OSError as error:  # its socket is closed: it ended between the look and the answer
        current.lost = True
        raise ConnectionError(f"the process that starts her code's processes ended: {error}") from None


def zygote_main() -> None:
    """The zygote: fork a child per request, report each child's end, and
    import the requested modules while idle; until the parent closes its side
    and the last child has ended."""
    sock = socket.socket(fileno=int(sys.argv[1]))
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live: set[int] = set()
    accepting = True
    to_import: list[str] = []
    while accepting or live:
        ready, _, _ = select.select([sock, wake_r] if accepting else [wake_r], [], [], 0 if to_import else None)
        if not ready:
            with contextlib.suppress(Exception):  # one that fails here fails in her code, with its own error
                importlib.import_module(to_import.pop(0))
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock, live)
        if accepting and sock in ready:
            try:
                message, fds, _, _ = socket.recv_fds(sock, _MAX_REQUEST_BYTES, 3)
            except OSError:
                message, fds = b"", []
            if not message:
                accepting = False
                to_import.clear()
            else:
                deadline, folder, imports = json.loads(message)
                to_import.extend(imports)
                try:
                    pid = os.fork()
                except OSError as error:  # that request fails; the children it has keep running
                    _send(sock, _FAILED, 0, error.errno or 0)
                else:
                    if pid == 0:
                        _become_child(sock, (wake_r, wake_w), fds, float(deadline), folder)
                    live.add(pid)
                    _send_forked(sock, pid)
            for fd in fds:
                os.close(fd)
    os._exit(0)


def _reap(sock: socket.socket, live: set[int]) -> None:
    while live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            live.clear()
            return
        if pid == 0:
            return
        live.discard(pid)
        _send(sock, _EXITED, pid, os.waitstatus_to_exitcode(status))


def _send(sock: socket.socket, kind: bytes, pid: int, code: int) -> None:
    with contextlib.suppress(OSError):  # the parent is gone: its children end at their pipes' end
        sock.send(_REPLY.pack(kind, pid, code))


def _send_forked(sock: socket.socket, pid: int) -> None:
    """Answer a fork with the child's pid and a pidfd of it, opened before
    the child can be reaped, so it names this child and no later process."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfds here: the parent kills by pid
        _send(sock, _FORKED, pid, 0)
        return
    try:
        with contextlib.suppress(OSError):
            socket.send_fds(sock, [_REPLY.pack(_FORKED, pid, 0)], [pidfd])
    finally:
        os.close(pidfd)


def _reseed() -> None:
    """Give this child random states of its own, as a fresh interpreter has:
    numpy's global state and torch's default generator are seeded once, at
    import, from the OS, and a fork copies the zygote's (Python's ``random``
    reseeds itself after a fork)."""
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


def _keep_priority() -> None:
    """Keep the worker's priority in a new session: where the kernel groups
    sessions for scheduling (autogroup), a session's group competes at nice
    0 with the service's whole group, whatever its processes' own nice. Its
    group gets this process's nice instead (raising it needs no privilege)."""
    with contextlib.suppress(OSError):  # no autogroups here: the process's own nice orders it
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(os.nice(0)))


def _become_child(sock: socket.socket, wake: tuple[int, int], fds: list[int], deadline: float, folder: str) -> None:
    """In the forked child: drop the zygote's ends and serve calls, as a
    freshly started child would (``user_sandbox.child_main``); never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for fd in wake:
            os.close(fd)
        os.setsid()  # a signal she sends to her process group reaches her child alone
        _keep_priority()
        os.chdir(folder)
        from ease_jupyter.user_confine import Exposed, confine

        refusal = None
        try:
            confine(folder)  # before any of her code
        except Exposed as error:  # fails closed: each call of hers is answered with why
            refusal = f"her code was not run: {error}"
        _reseed()
        inbox, outbox, output = fds
        sys.argv = ["-c", str(inbox), str(outbox), str(output), repr(deadline)]
        from ease_jupyter.user_sandbox import child_main

        child_main(refusal)
        code = 0
    finally:
        os._exit(code)
