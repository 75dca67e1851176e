"""Our backends pass the ``Store`` contract (ease_jupyter.testing.store_contract).

The ``store`` fixture (conftest.py) gives each test an empty store of each
backend: memory, SQLite (a file) and PostgreSQL (a fresh schema; skipped
without a server).
"""

from ease_jupyter.testing.store_contract import *  # noqa: F401,F403 - the suite's tests and fixtures
