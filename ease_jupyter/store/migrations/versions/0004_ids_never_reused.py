"""Ids are never given again on SQLite: the tables with an ``id`` key become
AUTOINCREMENT tables.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-28

SQLite gives a new row the largest id in use plus one, so deleting the
newest user, task, version or job let the next one take its id, and
anything that still named the old row by id (a cached token's user, a
quota count, a card cached by version id) could be read as the new one's.
AUTOINCREMENT makes SQLite remember the largest id ever given
(``sqlite_sequence``) and never go below it. PostgreSQL's sequences never
give an id twice already, so it has nothing to do. Rows deleted before this
revision, with ids above every row left, can still have their ids taken once.

SQLite cannot alter a primary key, so each table is rebuilt as in 0002: its
rows go to a scratch table, it is dropped and created again from its own
``CREATE TABLE`` text with ``PRIMARY KEY (id AUTOINCREMENT)`` (SQLite's
table-constraint form of the column keyword), its rows go back under the
same ids, and its indexes are made again from their saved text. Foreign-key
checks are deferred to the commit, by which time every reference is
satisfied again.

Self-contained on purpose, like 0001–0003: never edit it; add a revision instead.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# Parents before children, so that a child's rows go back once its parents' have.
TABLES = ("users", "tasks", "dataset_versions", "example_chunks", "jobs", "provenance_edges")


def _key(table: str, *, autoincrement: bool) -> str:
    return f"CONSTRAINT pk_{table} PRIMARY KEY (id{' AUTOINCREMENT' if autoincrement else ''})"


def _rebuild(table: str, *, autoincrement: bool) -> None:
    bind = op.get_bind()
    (create,) = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).one()
    old, new = _key(table, autoincrement=not autoincrement), _key(table, autoincrement=autoincrement)
    if create.count(old) != 1:
        raise RuntimeError(f"table {table!r}: expected its key as {old!r} in {create!r}")
    indexes = [sql for (sql,) in bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", (table,))]
    scratch = f"_{table}_before_0004"
    op.execute(f"CREATE TABLE {scratch} AS SELECT * FROM {table}")
    op.execute(f"DROP TABLE {table}")
    op.execute(create.replace(old, new))
    op.execute(f"INSERT INTO {table} SELECT * FROM {scratch}")  # same columns, same order
    op.execute(f"DROP TABLE {scratch}")
    for sql in indexes:
        op.execute(sql)


def _rebuild_all(*, autoincrement: bool) -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    op.execute("PRAGMA defer_foreign_keys = ON")  # until the commit; reset by SQLite after it
    for table in TABLES:
        _rebuild(table, autoincrement=autoincrement)


def upgrade() -> None:
    _rebuild_all(autoincrement=True)  # the sequences start at each table's largest id


def downgrade() -> None:
    _rebuild_all(autoincrement=False)
    if op.get_context().dialect.name == "sqlite":
        op.execute("DELETE FROM sqlite_sequence")  # nothing uses it any more
