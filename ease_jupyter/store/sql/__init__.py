"""The SQL backend of the store (SQLAlchemy 2; SQLite and PostgreSQL)."""

from .engine import downgrade, make_engine, upgrade
from .models import Base
from .store import SQLStore

__all__ = ["Base", "SQLStore", "downgrade", "make_engine", "upgrade"]
