"""Alembic migrations: they build exactly the schema of the ORM models, on every
SQL backend, and ship inside the package."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")
pytest.importorskip("alembic")

from alembic.autogenerate import compare_metadata  # noqa: E402
from alembic.migration import MigrationContext  # noqa: E402
from alembic.script import ScriptDirectory  # noqa: E402
from sqlalchemy import inspect  # noqa: E402

from ease_jupyter.store.sql import Base, SQLStore, downgrade, upgrade  # noqa: E402
from ease_jupyter.store.sql.engine import MIGRATIONS_DIR, alembic_config  # noqa: E402

from .helpers import feed  # noqa: E402


def schema_diffs(store: SQLStore) -> list:
    with store.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return compare_metadata(context, Base.metadata)


def current_revision(store: SQLStore) -> str | None:
    with store.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def test_the_migrated_schema_matches_the_models(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        assert schema_diffs(store) == []
        head = ScriptDirectory.from_config(alembic_config(store.engine)).get_current_head()
        assert current_revision(store) == head


def test_the_sqlite_settings_are_on(tmp_path) -> None:
    with SQLStore(f"sqlite:///{tmp_path / 'db.sqlite'}") as store, store.engine.connect() as connection:
        pragma = lambda name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()  # noqa: E731
        assert pragma("foreign_keys") == 1
        assert pragma("journal_mode") == "wal"
        assert pragma("busy_timeout") > 0


def test_reopening_is_a_no_op_and_keeps_the_data(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        ada = store.create_user("ada", "h")
    with SQLStore(sql_url) as store:
        assert store.list_users() == (ada,)
        assert schema_diffs(store) == []


def test_downgrade_to_base_and_back(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        downgrade(store.engine, "base")
        assert set(inspect(store.engine).get_table_names()) == {"alembic_version"}
        assert current_revision(store) is None
        upgrade(store.engine)
        assert schema_diffs(store) == []
        owner = store.create_user("ada", "h")
        t = store.create_task(owner.id, "galaxy", "")
        assert feed(store, t.id, 2).number == 1


def test_concurrent_opens_of_a_new_database_migrate_once(sql_url: str) -> None:
    stores: list[SQLStore] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_one() -> None:
        barrier.wait()
        try:
            stores.append(SQLStore(sql_url))
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert schema_diffs(stores[0]) == []
    for store in stores:
        store.close()


def test_the_migration_scripts_ship_inside_the_package() -> None:
    package = Path(__file__).resolve().parents[2] / "ease_jupyter" / "store"
    assert MIGRATIONS_DIR == package / "migrations"
    for name in ("env.py", "script.py.mako", "versions/0001_initial.py"):
        assert (MIGRATIONS_DIR / name).is_file(), name
    # That a built wheel carries them is checked on a real wheel in tests/lab/test_labextension.py.


def test_the_revision_history_is_linear(tmp_path) -> None:
    with SQLStore(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        scripts = ScriptDirectory.from_config(alembic_config(store.engine))
    assert len(scripts.get_heads()) == 1
    assert len(scripts.get_bases()) == 1


def test_in_memory_sqlite_is_one_shared_database() -> None:
    # sqlite:// must not give each pooled connection its own empty database.
    with SQLStore("sqlite://") as store:
        ada = store.create_user("ada", "h")
        errors: list[BaseException] = []

        def read() -> None:
            try:
                assert store.get_user(ada.id) == ada
            except BaseException as error:  # noqa: BLE001
                errors.append(error)

        threads = [threading.Thread(target=read) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []


def test_upgrading_0001_data_makes_every_user_local_and_keeps_their_tasks(sql_url: str) -> None:
    from sqlalchemy import text

    from ease_jupyter.store.base import HUB, LOCAL
    from ease_jupyter.store.sql.engine import make_engine

    engine = make_engine(sql_url)
    try:
        upgrade(engine, "0001")
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO users (name, token_hash, is_admin, created_at) VALUES "
                                    "('ada', 'hash-ada', true, '2025-01-01 00:00:00'), "
                                    "('carol', 'hash-carol', false, '2025-01-01 00:00:00')"))
            connection.execute(text("INSERT INTO tasks (owner_id, name, program, created_at, cancelled) "
                                    "SELECT id, 'diary', '', '2025-01-01 00:00:00', false FROM users "
                                    "WHERE name = 'carol'"))
    finally:
        engine.dispose()
    with SQLStore(sql_url) as store:  # migrates to head
        assert schema_diffs(store) == []
        carol = store.user_by_token_hash("hash-carol")
        assert (carol.name, carol.origin) == ("carol", LOCAL)
        assert store.user_by_name("ada").is_admin and store.user_by_name("ada").origin == LOCAL
        assert [t.name for t in store.list_tasks(carol.id)] == ["diary"]
        # the hub's carol is another user, and revoking leaves the row (and its tasks) in place
        hub_carol = store.create_user("carol", None, origin=HUB)
        assert hub_carol.id != carol.id and store.list_tasks(hub_carol.id) == ()
        store.set_user_token_hash(carol.id, None)
        assert [t.name for t in store.list_tasks(carol.id)] == ["diary"]
        with store.engine.connect() as connection:  # the rebuilt table still anchors foreign keys
            with pytest.raises(Exception, match="(?i)foreign key"):
                connection.execute(text("INSERT INTO tasks (owner_id, name, program, created_at, cancelled) "
                                        "VALUES (9999, 'orphan', '', '2025-01-01 00:00:00', false)"))
                connection.commit()
        downgrade(store.engine, "0002")
        with pytest.raises(RuntimeError, match="'carol' is both a local and a hub user"):
            downgrade(store.engine, "0001")  # 0001's names are unique across origins
        assert current_revision(store) == "0002"
        upgrade(store.engine)
        assert schema_diffs(store) == []


def test_upgrading_0003_data_keeps_every_row_under_its_id_and_stops_reusing_ids(sql_url: str) -> None:
    from sqlalchemy import text

    from ease_jupyter.store.sql.engine import make_engine
    from ease_jupyter.testing.store_contract import _a_task_with_history, _everything_of, _ids_of_task, user

    engine = make_engine(sql_url)
    try:
        upgrade(engine, "0003")
    finally:
        engine.dispose()
    with SQLStore(sql_url, migrate=False) as old:  # the store's code on 0003's schema
        ada, bob = user(old, "ada"), user(old, "bob")
        kept = _a_task_with_history(old, ada, "stars", "s")
        newest = _a_task_with_history(old, bob, "galaxy", "g")
        before = {t.id: _everything_of(old, t.id) for t in (kept, newest)}
        users = old.list_users()
    with SQLStore(sql_url) as store:  # migrates to head
        assert schema_diffs(store) == []
        assert store.list_users() == users
        assert {t.id: _everything_of(store, t.id) for t in (kept, newest)} == before
        with store.engine.connect() as connection:  # the rebuilt tables still anchor foreign keys
            with pytest.raises(Exception, match="(?i)foreign key"):
                connection.execute(text("INSERT INTO tasks (owner_id, name, program, created_at, cancelled) "
                                        "VALUES (9999, 'orphan', '', '2025-01-01 00:00:00', false)"))
                connection.commit()
        gone = _ids_of_task(store, newest.id)
        store.delete_task(newest.id)
        store.delete_user(bob.id)
        again = _ids_of_task(store, _a_task_with_history(store, ada, "galaxy", "again").id)
        assert all(min(again[kind]) > max(ids) for kind, ids in gone.items())
        assert user(store, "carol").id > bob.id
        kept_rows = _everything_of(store, kept.id)
        downgrade(store.engine, "0003")
        assert _everything_of(store, kept.id) == kept_rows
        upgrade(store.engine)
        assert schema_diffs(store) == [] and _everything_of(store, kept.id) == kept_rows


def test_on_sqlite_every_table_keyed_by_id_is_an_autoincrement_table(tmp_path) -> None:
    with SQLStore(f"sqlite:///{tmp_path / 'db.sqlite'}") as store, store.engine.connect() as connection:
        ddl = dict(connection.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type = 'table'").all())
    keyed_by_id = {table.name for table in Base.metadata.sorted_tables if list(table.primary_key.columns.keys()) == ["id"]}
    assert keyed_by_id == {"users", "tasks", "dataset_versions", "example_chunks", "jobs", "provenance_edges"}
    assert {name for name, sql in ddl.items() if "AUTOINCREMENT" in sql} == keyed_by_id
    assert all(Base.metadata.tables[name].kwargs.get("sqlite_autoincrement") for name in keyed_by_id)
