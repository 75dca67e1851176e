"""Shared fixtures. Keep this file small: package-specific fixtures live in
their own tests/<package>/conftest.py."""

from __future__ import annotations

import os
import uuid
from typing import Iterator

import pytest

POSTGRES_URL_ENV = "EASEML_TEST_POSTGRES_URL"
POSTGRES_SKIP_REASON = (
    "PostgreSQL not available: run scripts/postgres.sh start and export EASEML_TEST_POSTGRES_URL"
)


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database for this test module, dropped afterwards.

    Skips when ``EASEML_TEST_POSTGRES_URL`` is unset. Mark tests that use it
    ``@pytest.mark.postgres``.
    """
    server_url = os.environ.get(POSTGRES_URL_ENV)
    if not server_url:
        pytest.skip(POSTGRES_SKIP_REASON)
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    name = f"easeml_test_{uuid.uuid4().hex[:12]}"
    # CREATE/DROP DATABASE cannot run inside a transaction.
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as connection:
            # FORCE (PostgreSQL 13+) ends connections a test may have leaked.
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()
