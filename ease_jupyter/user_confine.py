"""Confine the process that runs a user's code with Landlock (Linux 5.13 and
later): what it may open on the file system, whether it may use TCP, and
whether it may signal or reach processes outside itself.

The child that runs her code (``user_sandbox``) is a process of the worker,
run as the same OS user. Unconfined, her code there could read and write
whatever the worker can: the data directory with every user's data and
models, the SQLite database, the ``/proc`` entries of the service's
processes, the Dask scheduler (which runs any function it is sent on the
workers). Landlock lets an unprivileged process give up those rights for
itself and every process it starts, for good. This confines the calls that
run in the child, not her code as a whole: parts of it run in the worker
(``docs/models.md``, "Trust").

What a confined child keeps:

* reading (and running) the Python installation and import path it was
  started with, and the system's libraries and settings (``/usr``, ``/lib*``,
  ``/bin``, ``/etc`` less its ``SECRETS``), ``/sys``, its own ``/proc/self`` and the few
  ``/proc`` files that libraries read to count CPUs and memory;
* reading and writing its own empty folder (also its ``HOME`` and
  ``TMPDIR``; no device files) and the ``/dev`` files that carry no data
  (``null``, ``zero``, ``urandom``, ``random``, ``full``) and GPUs
  (``nvidia*``, ``dri``);
* what the worker's environment names in ``EASEML_USER_CODE_READABLE``
  (read) and ``EASEML_USER_CODE_WRITABLE`` (read and write), directories
  separated by ``os.pathsep``: a deployment's shared weights or scratch space.

Nothing else on the file system: not the data directory or the database
(``protect``), not other users' children's folders, not ``/tmp``, not
``HOME``, not ``/dev/shm`` (where other processes' shared memory lives;
Python's ``multiprocessing`` locks need it, so her code cannot start process
pools). With Landlock ABI 4 or later no TCP connection or listening socket;
with ABI 6 or later no signal to, and no abstract UNIX socket of, a process
outside the child (the worker, the zygote, other users' children). Landlock
does not cover UDP, UNIX sockets reached by a path, MPTCP, or changes to
the metadata of files the child cannot open.

The kernel decides: a system without Landlock (another OS, an older kernel,
or Landlock left out of the ``lsm=`` boot list) runs her code unconfined, as
before; ``abi_version`` says which.

The syscalls are called through ``ctypes``: the PyPI binding covers the file
system rules only, not TCP or scoping.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import stat
import sys

# Syscall numbers: the same on every architecture Linux added them to at once.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# File-system rights by the ABI that introduced them (Documentation/userspace-api/landlock.rst).
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_V1 = (1 << 13) - 1  # execute, write, read, read_dir, remove_dir/file, make_char/dir/reg/sock/fifo/block/sym
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV  # the rights a rule on a file may grant

_READ = _EXECUTE | _READ_FILE | _READ_DIR
_MAKE_CHAR, _MAKE_BLOCK = 1 << 6, 1 << 11  # device files: never, not even in her own folder
IMPORTABLE_SUFFIXES = (".py", ".pyc", ".so", ".pth", ".zip", ".egg")
READABLE_ENV, WRITABLE_ENV = "EASEML_USER_CODE_READABLE", "EASEML_USER_CODE_WRITABLE"
PROTECTED_ENV = "EASEML_USER_CODE_PROTECTED"  # set by ``protect``: what no rule may reach
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/sys")
# Left out of the system's settings: readable to a service run as root, and no library needs them.
SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
           "/etc/ssh", "/etc/ssl/private")
PROC_FILES = ("/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys/kernel/osrelease", "/proc/driver/nvidia")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/dri")
DEVICE_PATTERNS = ("/dev/nvidia*",)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The Landlock ABI this kernel offers; 0 where there is none."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _handled(abi: int) -> _RulesetAttr:
    fs = _FS_V1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0) | (_IOCTL_DEV if abi >= 5 else 0)
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    return _RulesetAttr(fs, net, scoped)


def _attr_size(abi: int) -> int:
    # The struct grew with the ABI: an older kernel refuses the fields it does not know.
    return 24 if abi >= 6 else 16 if abi >= 4 else 8


class Exposed(PermissionError):
    """A place a confined child would read holds a protected path."""


def protect(*paths: str | os.PathLike[str]) -> None:
    """Name ``paths`` (a data directory, a database file) in this process's
    environment as places no confined child may reach: children of this
    process, and of the processes it starts afterwards, inherit it. A
    readable place that holds one is left out (an import path such as the
    folder the service was started from), or, where her code cannot run
    without it, the child refuses to run her code (``Exposed``)."""
    listed = _listed(PROTECTED_ENV)
    for path in paths:
        real = os.path.realpath(path)
        if real not in listed:
            listed.append(real)
    os.environ[PROTECTED_ENV] = os.pathsep.join(listed)


def code_env() -> dict[str, str | None]:
    """This process's settings for users' code (None: unset), to hand to a
    worker it starts: one forked from a fork server has the environment the
    server started with, which may predate them (``adopt_code_env``)."""
    return {key: os.environ.get(key) for key in (READABLE_ENV, WRITABLE_ENV, PROTECTED_ENV)}


def adopt_code_env(env: dict[str, str | None]) -> None:
    """Take ``code_env()`` of the process that started this one."""
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _holding(root: str, protected: list[str]) -> str | None:
    """The first protected path at or beneath ``root``, or that holds it."""
    return next((p for p in protected if os.path.commonpath([root, p]) in (root, p)), None)


def _importable(folder: str, protected: list[str]) -> list[str]:
    """What Python may import from ``folder``, an import path that holds a
    protected path (the folder the service was started in: a notebook's
    own modules beside the data directory): its modules and packages, not
    hidden entries, not what holds a protected path."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            path = os.path.realpath(entry.path)
            if entry.name.startswith(".") or _holding(path, protected) is not None:
                continue
            if os.path.isdir(path) or entry.name.endswith(IMPORTABLE_SUFFIXES):
                found.append(path)
    return found


def readable_roots() -> list[str]:
    """The directories a confined child may read beneath (not including
    its folder and devices): the Python installation, its import path and
    the system's (``confine`` leaves out those that hold a protected path)."""
    return _existing([*_needed(), *filter(None, sys.path)])


def _needed() -> list[str]:
    """What her code cannot run without: the interpreter, this package, the system."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
            package_root, *SYSTEM_READ]


def _existing(paths: list[str]) -> list[str]:
    return list(dict.fromkeys(os.path.realpath(p) for p in paths if os.path.exists(p)))


def _around(root: str, hidden: list[str]) -> list[str]:
    """``root``'s entries but the ``hidden`` paths beneath it (an entry that
    holds one is split the same way), or ``root`` itself when it holds none."""
    if not any(os.path.commonpath([root, h]) == root for h in hidden):
        return [root]
    found = []
    with os.scandir(root) as entries:
        for entry in entries:
            if os.path.realpath(entry.path) not in hidden:  # a link to a secret is the secret: rules follow links
                found.extend(_around(entry.path, hidden) if entry.is_dir(follow_symlinks=False) else [entry.path])
    return found


def _granted(protected: list[str]) -> tuple[list[str], list[str]]:
    """The places to read and to write beneath; ``Exposed`` where one that
    her code needs, or that the worker's environment names, holds a protected path."""
    needed = set(_existing(_needed()))
    listed = {path: variable for variable in (READABLE_ENV, WRITABLE_ENV) for path in _existing(_listed(variable))}
    read, write = [], []
    for root in [*readable_roots(), *listed]:
        inside = _holding(root, protected)
        if inside is None and root in needed and root not in listed:
            read.extend(_around(root, [os.path.realpath(p) for p in SECRETS]))
        elif inside is None:
            (write if listed.get(root) == WRITABLE_ENV else read).append(root)
        elif root in needed or root in listed:
            named = f"{listed[root]} names {root}" if root in listed else f"her code must read {root}"
            relation = "lies in" if os.path.commonpath([root, inside]) == inside else "holds"
            raise Exposed(f"{named}, which {relation} {inside}, where every user's data is: keep the data "
                          f"directory apart from it")
        elif os.path.commonpath([root, inside]) == root:  # an import path around the data directory
            read.extend(_importable(root, protected))
    return read, write


def confine(folder: str) -> int:
    """Confine this process (and every process it starts) to the rights
    listed in the module's docstring, with ``folder`` as its own place to
    write; returns the ABI enforced, 0 when the kernel has no Landlock (then
    nothing changed). Call it single-threaded: the kernel confines the
    calling thread and the threads and processes it starts later."""
    abi = abi_version()
    if abi == 0:
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    handled = _handled(abi)
    fd = libc.syscall(_CREATE_RULESET, ctypes.byref(handled), ctypes.c_size_t(_attr_size(abi)), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        everything = handled.handled_access_fs & ~(_MAKE_CHAR | _MAKE_BLOCK)
        read, write = _granted(_listed(PROTECTED_ENV))
        for path in (*read, os.path.realpath("/proc/self"), *PROC_FILES):
            _allow(libc, fd, path, _READ & everything)
        for path in (*DEVICES, *(p for pattern in DEVICE_PATTERNS for p in glob.glob(pattern)), *write, folder):
            _allow(libc, fd, path, everything)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_RESTRICT_SELF, fd, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    for key in ("HOME", "TMPDIR"):  # caches and temporary files of her libraries go to her folder
        os.environ[key] = folder
    import tempfile

    tempfile.tempdir = None  # chosen again, from TMPDIR
    return abi


def _listed(variable: str) -> list[str]:
    return [path for path in os.environ.get(variable, "").split(os.pathsep) if path]


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    """Grant ``access`` beneath ``path`` (on a file: its file rights only); a
    path that does not exist or cannot be opened is skipped."""
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(target).st_mode):
            access &= _FILE_RIGHTS
        rule = _PathBeneathAttr(access, target)
        if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            error = ctypes.get_errno()
            if error not in (errno.EINVAL, errno.ENOMSG):  # a file system that takes no rules: left closed
                raise OSError(error, f"landlock_add_rule {path}: {os.strerror(error)}")
    finally:
        os.close(target)
