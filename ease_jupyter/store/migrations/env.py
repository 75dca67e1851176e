"""Alembic environment for the ease_jupyter store.

``ease_jupyter.store.sql.engine.upgrade`` passes an open connection in
``config.attributes["connection"]`` (so migrations run on the store's own
engine, in its transaction). The ``alembic`` command line works too, with
``ease_jupyter/store/alembic.ini`` and ``-x url=...`` (or ``sqlalchemy.url``).
Logging is left alone on purpose: a library must not reconfigure its host's
logging.
"""

from __future__ import annotations

from alembic import context

from ease_jupyter.store.sql.engine import make_engine
from ease_jupyter.store.sql.models import Base

config = context.config
target_metadata = Base.metadata


def _configure_and_run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds tables instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no database: pass -x url=... (e.g. -x url=sqlite:////tmp/dev.sqlite)")
    return url


def run_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure_and_run(connection)
        return
    engine = make_engine(_url())
    try:
        with engine.begin() as connection:
            _configure_and_run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
