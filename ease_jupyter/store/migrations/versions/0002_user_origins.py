"""Users get an origin: local accounts and hub logins are separate namespaces;
a token hash may be cleared (revoked).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25

* ``users.origin`` ("local" or "hub"). Every existing row becomes "local":
  the rows JupyterHub mode created cannot be told from ``easeml users add``
  ones (both hold a random token hash).
* Names are unique per origin (``uq_users_origin_name``) instead of globally
  (``uq_users_name``), so a hub login never lands on a local account of the
  same name.
* ``users.token_hash`` may be NULL: a revoked token, or a hub user.

SQLite cannot drop a table constraint, so there the table is rebuilt. Other
tables reference ``users``, and a rebuild inside the migration's transaction
cannot switch foreign keys off (``PRAGMA foreign_keys`` is a no-op inside a
transaction); instead the checks are deferred to the commit, the old rows go
to a scratch table, and they are inserted into the new ``users`` table under
the same ids, which satisfies every reference again before the commit.

Self-contained on purpose, like 0001: never edit it; add a revision instead.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

NAME = sa.String(200)
SCRATCH = "_users_before_0002"
ORIGIN_CHECK = "origin IN ('local', 'hub')"


def _users_table(*, with_origin: bool) -> None:
    """``users`` as of this revision (with_origin) or of 0001, with its index."""
    columns = [
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", NAME, nullable=False),
        sa.Column("token_hash", sa.String(128), nullable=with_origin),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
    ]
    if with_origin:
        columns += [
            sa.Column("origin", sa.String(16), server_default="local", nullable=False),
            sa.UniqueConstraint("origin", "name", name=op.f("uq_users_origin_name")),
            sa.CheckConstraint(ORIGIN_CHECK, name=op.f("ck_users_origin")),
        ]
    else:
        columns.append(sa.UniqueConstraint("name", name=op.f("uq_users_name")))
    op.create_table("users", *columns)
    op.create_index(op.f("ix_users_token_hash"), "users", ["token_hash"], unique=True)


def _rebuild_sqlite_users(*, with_origin: bool) -> None:
    op.execute("PRAGMA defer_foreign_keys = ON")  # until the commit; reset by SQLite after it
    op.execute(f"CREATE TABLE {SCRATCH} AS SELECT * FROM users")
    op.drop_table("users")
    _users_table(with_origin=with_origin)
    shared = "id, name, token_hash, is_admin, created_at"
    if with_origin:
        op.execute(f"INSERT INTO users ({shared}, origin) SELECT {shared}, 'local' FROM {SCRATCH}")
    else:
        op.execute(f"INSERT INTO users ({shared}) SELECT {shared} FROM {SCRATCH}")
    op.drop_table(SCRATCH)


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        _rebuild_sqlite_users(with_origin=True)
        return
    op.add_column("users", sa.Column("origin", sa.String(16), server_default="local", nullable=False))
    op.drop_constraint(op.f("uq_users_name"), "users", type_="unique")
    op.create_unique_constraint(op.f("uq_users_origin_name"), "users", ["origin", "name"])
    op.create_check_constraint(op.f("ck_users_origin"), "users", ORIGIN_CHECK)
    op.alter_column("users", "token_hash", existing_type=sa.String(128), nullable=True)


def downgrade() -> None:
    users = sa.table("users", sa.column("id", sa.Integer()), sa.column("name", NAME),
                     sa.column("origin", sa.String(16)), sa.column("token_hash", sa.String(128)))
    clash = op.get_bind().execute(
        sa.select(users.c.name).group_by(users.c.name).having(sa.func.count() > 1).limit(1)).scalar()
    if clash is not None:
        raise RuntimeError(f"cannot downgrade below 0002: the name {clash!r} is both a local and a hub user")
    # 0001 needs a token hash on every row: one no token can hash to (a sha256 is 64 hex digits).
    op.execute(users.update().where(users.c.token_hash.is_(None))
               .values(token_hash=sa.literal("revoked-") + sa.cast(users.c.id, sa.String(16))))
    if op.get_context().dialect.name == "sqlite":
        _rebuild_sqlite_users(with_origin=False)
        return
    op.alter_column("users", "token_hash", existing_type=sa.String(128), nullable=False)
    op.drop_constraint(op.f("ck_users_origin"), "users", type_="check")
    op.drop_constraint(op.f("uq_users_origin_name"), "users", type_="unique")
    op.create_unique_constraint(op.f("uq_users_name"), "users", ["name"])
    op.drop_column("users", "origin")
