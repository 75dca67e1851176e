"""The store of an existing data dir, for the commands that act on one
offline (``easeml gc``, ``easeml fsck``)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import click


@contextlib.contextmanager
def existing_store(db_url: str | None, data_dir: Path | None, doing: str) -> Iterator[tuple[Any, Any, Path]]:
    """(store, blobs, directory) of the data dir (default: $EASEML_DATA_DIR or
    ~/.easeml), closed on exit. A usage error for ``memory://`` (such a store
    lives in its service's process) and for a data dir that does not exist."""
    from ease_jupyter.store import default_data_dir, open_store

    if db_url == "memory://":
        raise click.BadParameter(f"a memory:// store lives in its service's process; nothing to {doing} here",
                                 param_hint="--db")
    directory = (data_dir or default_data_dir()).expanduser()
    if not directory.is_dir():
        raise click.ClickException(f"no data dir at {directory}")
    store, blobs = open_store(db_url, directory)
    try:
        yield store, blobs, directory
    finally:
        store.close()
