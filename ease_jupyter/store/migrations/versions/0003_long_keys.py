"""Tag values and keys may be long: the tags index leaves out the value,
and on PostgreSQL job model names, metric names and tag keys become TEXT.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28

* ``ix_tags_entity_key_value`` becomes ``ix_tags_entity_key``. PostgreSQL
  refuses an index row over 2704 bytes, so a tag value of a few KB (a torch
  job's progress record with a dozen configs, a long list of class names)
  could not be stored there, while SQLite took it.
* ``jobs.model``, ``metrics.name`` and ``tags.key`` were VARCHAR(200), which
  PostgreSQL enforces (a per-config metric name carries a user's grid and
  may be longer); SQLite ignores the length, so its columns stay as they are.
  The store bounds the three at ``_validate.MAX_KEY_BYTES`` on every backend.

Self-contained on purpose, like 0001 and 0002: never edit it; add a revision instead.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

KEY_COLUMNS = (("jobs", "model"), ("metrics", "name"), ("tags", "key"))


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    op.drop_index(op.f("ix_tags_entity_key_value"), table_name="tags")
    op.create_index(op.f("ix_tags_entity_key"), "tags", ["entity", "key"])
    if _postgresql():
        for table, column in KEY_COLUMNS:
            op.alter_column(table, column, type_=sa.Text(), existing_type=sa.String(200), existing_nullable=False)


def downgrade() -> None:
    # Fails on PostgreSQL if a key longer than 200 characters or a tag value
    # longer than an index row was stored meanwhile: such rows need 0003.
    if _postgresql():
        for table, column in KEY_COLUMNS:
            op.alter_column(table, column, type_=sa.String(200), existing_type=sa.Text(), existing_nullable=False)
    op.drop_index(op.f("ix_tags_entity_key"), table_name="tags")
    op.create_index(op.f("ix_tags_entity_key_value"), "tags", ["entity", "key", "value"])
