"""``easeml users``: user accounts on the service's database (ACAI §3.1).

    easeml users add ada --admin      # prints ada's token, once
    easeml users list
"""

from __future__ import annotations

from pathlib import Path

import click

_db = click.option("--db", "db_url", default=None, help="SQLAlchemy URL (default: SQLite in the data dir).")
_dir = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                    help="Default: $EASEML_DATA_DIR or ~/.easeml.")


def _open(db_url, data_dir):
    from ease_jupyter.store import open_store

    return open_store(db_url, data_dir)[0]


@click.group("users")
def command() -> None:
    """Add and list users of the service."""


@command.command("add")
@click.argument("name")
@click.option("--admin", is_flag=True, help="May create users and see everyone's progress.")
@_db
@_dir
def add(name, admin, db_url, data_dir) -> None:
    """Create user NAME and print its token (shown only this once)."""
    from ease_jupyter.errors import AlreadyExistsError, DataError
    from ease_jupyter.service.auth import create_user

    store = _open(db_url, data_dir)
    try:
        _, token = create_user(store, name, admin=admin)
    except DataError as error:
        raise click.BadParameter(f"found {error.found}, expected {error.expected}", param_hint="NAME") from None
    except AlreadyExistsError:
        raise click.ClickException(f"user {name!r} already exists") from None
    finally:
        store.close()
    click.echo(token)


@command.command("list")
@_db
@_dir
def list_(db_url, data_dir) -> None:
    """List users: name, admin flag, creation time."""
    store = _open(db_url, data_dir)
    try:
        for user in store.list_users():
            click.echo(f"{user.name}\t{'admin' if user.is_admin else 'user'}\t{user.created_at.isoformat()}")
    finally:
        store.close()
