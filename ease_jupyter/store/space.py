"""Recognising a full disk, wherever the write that found it came from.

A blob write or an upload append fails with ``ENOSPC`` (no space left on
the filesystem) or ``EDQUOT`` (the service's OS user is over its disk
quota); SQLite fails with ``SQLITE_FULL`` ("database or disk is full"),
which SQLAlchemy wraps as the ``orig`` of its own error. ``storage_full``
turns any of them into a ``StorageFullError`` that names the limit (the
filesystem's size) and never a path, so that every layer answers a full
disk the same way (HTTP 507 ``storage_full``).
"""

from __future__ import annotations

import errno
import os
import sqlite3

from ..errors import StorageFullError

_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


def human_size(n: float) -> str:
    """``1.5 MiB``: sizes in messages and reports."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _causes(error: BaseException):
    """``error``, what it wraps (SQLAlchemy's ``orig``) and its causes."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        wrapped = getattr(current, "orig", None)
        current = wrapped if isinstance(wrapped, BaseException) else (current.__cause__ or current.__context__)


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or what it wraps) says the disk is full."""
    for cause in _causes(error):
        if isinstance(cause, StorageFullError):
            return True
        if isinstance(cause, OSError) and cause.errno in _NO_SPACE:
            return True
        if isinstance(cause, sqlite3.OperationalError) and getattr(cause, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return True
    return False


def storage_full(error: BaseException, directory: str | os.PathLike[str] | None) -> StorageFullError | None:
    """A ``StorageFullError`` naming the size of ``directory``'s filesystem
    (when given) if ``error`` says the disk is full; None for any other error."""
    if not is_disk_full(error):
        return None
    if isinstance(error, StorageFullError):
        return error
    quota = any(isinstance(c, OSError) and c.errno == errno.EDQUOT for c in _causes(error))
    total = free = None
    if directory is not None:
        try:
            info = os.statvfs(directory)
            total, free = info.f_blocks * info.f_frsize, info.f_bavail * info.f_frsize
        except (OSError, AttributeError):  # gone, or no statvfs (Windows)
            pass
    if quota:
        message = "the data dir's disk quota (of the service's OS user) is used up; free space or raise it"
    elif total is None:
        message = "the data dir's filesystem is full; free space or grow it"
    else:
        message = (f"the data dir's filesystem is full: {human_size(free)} free of {human_size(total)}; "
                   "free space (e.g. `easeml gc`) or grow it")
    return StorageFullError(message, field="data_dir",
                            found="no space left" if free is None else f"{free} bytes free of {total}",
                            expected="free space on the data dir's filesystem")
