"""Fixtures for the store tests: a ``store`` parametrized over every backend."""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from ease_jupyter.store import InMemoryStore, Store

BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture
def pg_schema_url(postgres_url: str) -> str:
    """The module's database, seen through a fresh schema (first on the search_path).

    A schema is much cheaper than a database, and gives each test an empty store.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = create_engine(postgres_url)
    with engine.begin() as connection:
        connection.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    engine.dispose()
    url = make_url(postgres_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


def make_store(backend: str, request: pytest.FixtureRequest, tmp_path) -> Store:
    if backend == "memory":
        return InMemoryStore()
    from ease_jupyter.store.sql import SQLStore

    if backend == "sqlite":
        return SQLStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    return SQLStore(request.getfixturevalue("pg_schema_url"))


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:
    """An empty store of each backend: memory, SQLite (a file in tmp_path), PostgreSQL."""
    backend = make_store(request.param, request, tmp_path)
    yield backend
    backend.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sql_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A URL of an empty SQL database of each SQL backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("pg_schema_url")
