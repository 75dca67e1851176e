"""The database option of every command that opens a service's store, and
the store of an existing data dir for the commands that act on one offline
(``easeml gc``, ``easeml fsck``)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator

import click

def db_option(help: str = "SQLAlchemy URL (default: SQLite in the data dir).") -> Callable[[Any], Any]:
    """``--db``, also read from $EASEML_DB: the variable that ``easeml serve``
    reads, so a command run in the service's environment opens its database."""
    return click.option("--db", "db_url", default=None, envvar="EASEML_DB", show_envvar=True, help=help)


@contextlib.contextmanager
def existing_store(db_url: str | None, data_dir: Path | None, doing: str, *,
                   force: bool = False) -> Iterator[tuple[Any, Any, Path]]:
    """(store, blobs, directory) of the data dir (default: $EASEML_DATA_DIR or
    ~/.easeml), closed on exit. A usage error for ``memory://`` (such a store
    lives in its service's process), for a data dir that does not exist, for
    no ``--db`` where the data dir has no SQLite database (none is created:
    the service's database is elsewhere), and, unless ``force``, for a
    database with no users beside a data dir that holds blobs (another
    service's database, or a new one: its rows reference none of them)."""
    from ease_jupyter.store import SQLITE_FILE, default_data_dir, open_store

    if db_url == "memory://":
        raise click.BadParameter(f"a memory:// store lives in its service's process; nothing to {doing} here",
                                 param_hint="--db")
    directory = (data_dir or default_data_dir()).expanduser()
    if not directory.is_dir():
        raise click.ClickException(f"no data dir at {directory}")
    if db_url is None and not (directory / SQLITE_FILE).is_file():
        raise click.BadParameter(f"no SQLite database at {directory / SQLITE_FILE}, expected the service's "
                                 "database: pass the URL that easeml serve uses (--db or $EASEML_DB)",
                                 param_hint="--db")
    store, blobs = open_store(db_url, directory)
    try:
        if not force and not store.list_users() and next(iter(blobs.iter_blobs()), None) is not None:
            raise click.BadParameter(
                f"the database holds no users, but {directory / 'blobs'} holds blobs, expected the database of "
                f"the service that wrote them: pass its URL (--db or $EASEML_DB), or --force to {doing} anyway",
                param_hint="--db")
        yield store, blobs, directory
    finally:
        store.close()
