"""Engines and migrations: everything that depends on the database dialect.

SQLite needs care to be a good multi-threaded, multi-process store:

* ``foreign_keys=ON`` (off by default), ``journal_mode=WAL`` (readers never
  block the writer), ``synchronous=NORMAL`` (no fsync per commit, which the
  write lock would be held for) and a ``busy_timeout`` (wait for a lock
  instead of failing), set on every new connection.
* Write transactions start with ``BEGIN IMMEDIATE``. A deferred ``BEGIN`` takes
  the write lock only at the first write, so two writers that both read
  ``max(number)`` first would deadlock-fail with "database is locked" instead of
  queueing. pysqlite's own implicit BEGIN is switched off so that we control it.

On PostgreSQL the store locks the rows it is about to change
(``SELECT ... FOR UPDATE``) and the unique constraints catch anything else.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Execution option that marks an engine whose transactions write (see module doc).
WRITE_OPTION = "easeml_write"
# Connections a file SQLite engine keeps open. QueuePool keeps 5 by default
# and closes every connection past them on return, so under many threads (the
# service's request and read threads, the control loop) most checkouts opened
# a connection (its PRAGMAs, the schema parsed again, no prepared statements)
# and closed it again. A SQLite connection is cheap to keep, and the pool opens
# them only as threads use them at once.
SQLITE_POOL_SIZE = 64
PG_POOL_SIZE = 15
# Serialises concurrent schema upgrades of one PostgreSQL database (any constant will do).
_PG_MIGRATION_LOCK = 0x6561_7365  # "ease"


def is_sqlite_memory(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and (
        url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"
    )


def sqlite_file(url: str | URL) -> list[str]:
    """The database file of a SQLite ``url`` ([] for another database or an in-memory one)."""
    try:
        url = make_url(url)
    except ArgumentError:  # not a SQLAlchemy URL: no file
        return []
    if url.get_backend_name() != "sqlite" or is_sqlite_memory(url):
        return []
    return [str(url.database)]


def make_engine(url: str | URL, **kwargs: Any) -> Engine:
    """An engine for ``url`` with our per-dialect settings; ``kwargs`` go to ``create_engine``."""
    url = make_url(url)
    if url.get_backend_name() != "sqlite":
        kwargs.setdefault("pool_pre_ping", True)  # survive a restarted database server
        # QueuePool's default cap (5 kept + 10 overflow), but all 15 kept:
        # an overflow connection was closed on return, and a new server
        # connection costs a backend process.
        if "poolclass" not in kwargs:  # (another pool class may take no size)
            kwargs.setdefault("pool_size", PG_POOL_SIZE)
            kwargs.setdefault("max_overflow", 0)
        return create_engine(url, **kwargs)

    connect_args = kwargs.pop("connect_args", {})
    # Connections move between threads through the pool; each is used by one thread at a time.
    connect_args.setdefault("check_same_thread", False)
    if is_sqlite_memory(url):
        # One shared connection, or every connection would see its own empty database.
        kwargs.setdefault("poolclass", StaticPool)
    else:
        _create_private_sqlite_file(url)
        if "poolclass" not in kwargs:
            kwargs.setdefault("pool_size", SQLITE_POOL_SIZE)
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _create_private_sqlite_file(url: URL) -> None:
    """Create a new SQLite database file with mode 0600 before SQLite does
    (it would follow the umask: 0644 readable by every local user). SQLite
    gives its -wal and -shm files the database file's mode. An existing file
    keeps its mode; a URI filename (``?uri=true``) or a read-only open is left
    to SQLite, and so is a file that cannot be created (SQLite's own error
    then names the database)."""
    if not url.database or url.query.get("uri") or url.query.get("mode"):
        return
    from .. import create_private_file

    try:
        create_private_file(Path(url.database))  # (SQLite reads no ~)
    except OSError:
        pass


def _sqlite_on_connect(dbapi_connection: Any, connection_record: Any) -> None:
    # Autocommit at the driver level: _sqlite_on_begin emits BEGIN itself.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _switch_to_wal(cursor)
        # With WAL, NORMAL syncs at checkpoints, not at every commit: a killed
        # process loses nothing, a power cut at most the last commits, and
        # the database stays consistent either way.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _switch_to_wal(cursor: Any) -> None:
    """``PRAGMA journal_mode=WAL`` (it answers 'memory' for in-memory databases).

    Switching a new database to WAL needs an exclusive lock, and SQLite then
    answers "database is locked" at once instead of calling the busy handler;
    so a connection opened while another one creates or migrates the
    database retries here, for as long as the busy timeout."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
            busy = code & 0xFF == sqlite3.SQLITE_BUSY if code is not None else "locked" in str(error)
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _sqlite_on_begin(connection: Any) -> None:
    immediate = connection.get_execution_options().get(WRITE_OPTION, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def writer(engine: Engine) -> Engine:
    """The same engine (and pool) whose transactions take the write lock up front."""
    return engine.execution_options(**{WRITE_OPTION: True})


def alembic_config(engine: Engine) -> Any:
    """An Alembic ``Config`` for our migrations, without any alembic.ini on disk."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolates '%', which URL-encoded passwords and options contain.
    config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` in one transaction on ``engine``.

    Concurrent callers (several processes opening one database) queue: SQLite
    through the write lock of BEGIN IMMEDIATE, PostgreSQL through an advisory lock.
    """
    from alembic import command

    config = alembic_config(engine)
    with writer(engine).begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
        config.attributes["connection"] = connection  # env.py runs on it instead of connecting
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Undo migrations down to ``revision`` ("base" for an empty schema)."""
    from alembic import command

    config = alembic_config(engine)
    with writer(engine).begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
