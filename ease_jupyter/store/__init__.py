"""Persistence: a metadata ``Store`` (SQL or memory) and a content-addressed ``BlobStore``.

``open_store()`` gives the pair the service uses. The SQL backend (and with it
SQLAlchemy and Alembic) is imported only when asked for, so the memory backend
works with neither installed.

.. code-block:: python

    store, blobs = open_store("memory://")
    user = store.create_user("ada", token_hash="...")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._frozen import FrozenDict
from .base import (
    JOB_TRANSITIONS,
    BlobStore,
    DatasetVersion,
    Edge,
    EdgeKind,
    ExampleChunk,
    Job,
    JobStatus,
    JobUpdate,
    Metric,
    NewChunk,
    Node,
    NodeKind,
    OwnerBlobsStamp,
    Store,
    Task,
    Toggle,
    User,
    VersionKind,
)
from .blobs import BlobCorruptedError, DirectoryBlobStore
from .memory import InMemoryStore, MemoryBlobStore

if TYPE_CHECKING:
    from .sql import SQLStore

__all__ = [
    "JOB_TRANSITIONS",
    "BlobCorruptedError",
    "BlobStore",
    "DatasetVersion",
    "DirectoryBlobStore",
    "Edge",
    "EdgeKind",
    "ExampleChunk",
    "FrozenDict",
    "InMemoryStore",
    "Job",
    "JobStatus",
    "JobUpdate",
    "MemoryBlobStore",
    "Metric",
    "NewChunk",
    "Node",
    "NodeKind",
    "OwnerBlobsStamp",
    "SQLStore",
    "Store",
    "Task",
    "Toggle",
    "User",
    "VersionKind",
    "create_private_file",
    "default_data_dir",
    "ensure_private_dir",
    "exposed_dir_warning",
    "open_store",
]

MEMORY_URL = "memory://"
DATA_DIR_ENV = "EASEML_DATA_DIR"


def __getattr__(name: str) -> Any:
    # SQLStore on first use only: importing it pulls in SQLAlchemy.
    if name == "SQLStore":
        from .sql import SQLStore

        return SQLStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_data_dir() -> Path:
    """``$EASEML_DATA_DIR``, or ``~/.easeml`` when it is unset or empty."""
    return Path(os.environ.get(DATA_DIR_ENV) or Path.home() / ".easeml").expanduser()


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` readable by its owner only (it holds every user's data and
    token hashes). An existing directory keeps its permissions: they are the
    operator's choice."""
    if not path.is_dir():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
    return path


def create_private_file(path: Path) -> bool:
    """Create ``path``, empty and with mode 0600, unless it exists; True if
    created. An existing file keeps its mode (the operator's choice, or a
    file from before this was done: ``exposed_dir_warning`` tells of the
    data dir)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def exposed_dir_warning(path: Path) -> str | None:
    """A one-line warning where the data dir ``path`` is open to group or
    others (e.g. made by hand with the usual mode 755): every local user of
    that group (or all of them) may then read its database (task names,
    tags, table schemas, class names) and files made under the umask. None
    where it is closed, or missing."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return None
    if mode & 0o077 == 0:
        return None
    return (f"warning: the data dir {path} has mode {mode:o}: group or others may read or write it, and it holds "
            f"every user's data and token hashes; run: chmod 700 {path}")


SQLITE_FILE = "easeml.sqlite"  # the database in a data dir when no URL is given


def open_store(url: str | None = None, data_dir: str | os.PathLike[str] | None = None) -> tuple[Store, BlobStore]:
    """The metadata store and blob store for ``url`` and ``data_dir``.

    Args:
        url: ``"memory://"`` for an in-process pair that forgets everything on
            exit; any SQLAlchemy URL (``postgresql+psycopg2://...``); or None
            for SQLite at ``<data_dir>/easeml.sqlite``.
        data_dir: Where the SQLite file and the blobs (``<data_dir>/blobs``)
            live. Defaults to ``default_data_dir()``; created with mode 0700.
            Ignored for ``"memory://"``.

    Returns:
        ``(store, blobs)``. The SQL store is migrated to the latest schema.
    """
    if url == MEMORY_URL:
        return InMemoryStore(), MemoryBlobStore()
    directory = ensure_private_dir(Path(data_dir).expanduser() if data_dir is not None else default_data_dir())
    if url is None:
        url = f"sqlite:///{directory / SQLITE_FILE}"
    from .sql import SQLStore

    return SQLStore(url), DirectoryBlobStore(directory / "blobs")
