"""Database failures as storage errors: the one place SQLAlchemy errors are mapped.

A database that cannot be written (read-only file or transaction, a lock held
past the busy timeout, an I/O error, a server that went away) is
``StoreUnavailableError`` (HTTP 503: try again later); one whose disk is full
is ``StorageFullError`` (HTTP 507); a SQLite file that cannot be opened at all
is ``StoreUnavailableError`` too, and one that is no SQLite database or is
damaged a plain ``StorageError``: waiting mends neither, so their messages
say what to look at instead of "try again later". Everything else
(constraint violations, bugs) passes through unchanged. Messages say what
happened to the database, never the SQL or the driver's text.

SQLite opens a database read-only for good when its file cannot be opened for
writing, so after an outage ``SQLStore`` writes on fresh connections (see its
``_writing``): they fail alike while the outage lasts (no write succeeds on one
pooled connection while failing on another) and write once it is over.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Iterator

from sqlalchemy import exc

from ease_jupyter.errors import StorageError, StorageFullError, StoreUnavailableError

# What happened, where waiting does not mend it: no "try again later" after these.
_CANNOT_OPEN = ("the database file cannot be opened (its directory is missing or not readable, or the file is not "
                "readable)")
_NOT_A_DATABASE = "the database file is not an SQLite database, or is damaged"
_DAMAGED = "the database file is damaged (malformed)"
_LASTING = frozenset({_CANNOT_OPEN, _NOT_A_DATABASE, _DAMAGED})
# SQLite primary result codes (the low byte of an extended code) -> (error, what happened).
_SQLITE = {
    sqlite3.SQLITE_READONLY: (StoreUnavailableError, "the database is read-only"),
    sqlite3.SQLITE_PERM: (StoreUnavailableError, "the database is read-only"),
    sqlite3.SQLITE_BUSY: (StoreUnavailableError, "the database is locked by another writer"),
    sqlite3.SQLITE_LOCKED: (StoreUnavailableError, "the database is locked by another writer"),
    sqlite3.SQLITE_IOERR: (StoreUnavailableError, "the database could not be read or written (I/O error)"),
    sqlite3.SQLITE_CANTOPEN: (StoreUnavailableError, _CANNOT_OPEN),
    sqlite3.SQLITE_FULL: (StorageFullError, "the database's disk is full"),
    sqlite3.SQLITE_NOTADB: (StorageError, _NOT_A_DATABASE),
    sqlite3.SQLITE_CORRUPT: (StorageError, _DAMAGED),
}
# PostgreSQL SQLSTATE codes and classes (their first two characters).
_POSTGRES = {
    "25006": (StoreUnavailableError, "the database is read-only"),  # read_only_sql_transaction
    "53100": (StorageFullError, "the database's disk is full"),  # disk_full
    "55P03": (StoreUnavailableError, "the database is locked by another writer"),  # lock_not_available
    "57P01": (StoreUnavailableError, "the database server is shutting down"),  # admin_shutdown
    "57P02": (StoreUnavailableError, "the database server is shutting down"),  # crash_shutdown
    "57P03": (StoreUnavailableError, "the database server is not accepting connections"),  # cannot_connect_now
    "08": (StoreUnavailableError, "the database server cannot be reached"),  # connection exceptions
    "53": (StoreUnavailableError, "the database server is out of resources"),  # insufficient resources
}
RETRY_HINT = "; try again later"


def storage_error(error: BaseException) -> StorageError | None:
    """The storage error that a SQLAlchemy or DB-API ``error`` means, or None."""
    if isinstance(error, exc.TimeoutError):  # no pooled connection came free in time
        kind = (StoreUnavailableError, "the database is busy: no connection came free")
    elif isinstance(error, exc.DisconnectionError):
        kind = _POSTGRES["08"]
    else:
        kind = _classify(error.orig if isinstance(error, exc.DBAPIError) else error)
    if kind is None and isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        kind = (StoreUnavailableError, "the database connection was lost")
    if kind is None:
        return None
    cls, what = kind
    transient = cls is not StorageFullError and what not in _LASTING
    return cls(what + (RETRY_HINT if transient else ""), field="database", found=what,
               expected="a database the service can write")


def _classify(orig: BaseException | None) -> tuple[type[StorageError], str] | None:
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        if code is None:  # an error raised by the sqlite3 module itself, not by SQLite
            return None
        return _SQLITE.get(code & 0xFF)
    state = getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)  # psycopg2 / psycopg 3
    if isinstance(state, str):
        return _POSTGRES.get(state) or _POSTGRES.get(state[:2])
    if type(orig).__name__ == "OperationalError" and type(orig).__module__.startswith("psycopg"):
        return _POSTGRES["08"]  # no SQLSTATE: the client library could not talk to the server
    return None


@contextlib.contextmanager
def mapped_errors() -> Iterator[None]:
    """Raise database outages as ``StorageError`` subclasses; anything else as it was."""
    try:
        yield
    except exc.SQLAlchemyError as error:
        mapped = storage_error(error)
        if mapped is None:
            raise
        raise mapped from error
