"""``open_store``: URL and data-dir defaults, permissions, lazy SQLAlchemy."""

from __future__ import annotations

import stat
import subprocess
import sys

import pytest

from ease_jupyter.store import (
    DirectoryBlobStore,
    InMemoryStore,
    MemoryBlobStore,
    default_data_dir,
    open_store,
)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """Never touch the real ~/.easeml."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EASEML_DATA_DIR", raising=False)


def test_memory_url_gives_the_in_memory_pair(tmp_path) -> None:
    store, blobs = open_store("memory://", data_dir=tmp_path / "unused")
    assert isinstance(store, InMemoryStore) and isinstance(blobs, MemoryBlobStore)
    assert not (tmp_path / "unused").exists()


def test_the_default_is_sqlite_in_home(tmp_path) -> None:
    assert default_data_dir() == tmp_path / "home" / ".easeml"
    store, blobs = open_store()
    try:
        home = tmp_path / "home" / ".easeml"
        assert str(store.url) == f"sqlite:///{home / 'easeml.sqlite'}"
        assert isinstance(blobs, DirectoryBlobStore) and blobs.root == home / "blobs"
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
    finally:
        store.close()


def test_the_environment_chooses_the_data_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EASEML_DATA_DIR", str(tmp_path / "from-env"))
    store, _ = open_store()
    store.close()
    assert (tmp_path / "from-env" / "easeml.sqlite").is_file()
    # An explicit argument wins over the environment.
    store, blobs = open_store(data_dir=tmp_path / "explicit")
    store.close()
    assert blobs.root == tmp_path / "explicit" / "blobs"


def test_an_existing_data_dir_keeps_its_permissions(tmp_path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o750)
    shared.chmod(0o750)
    store, _ = open_store(data_dir=shared)
    store.close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o750


def test_data_survives_reopening(tmp_path) -> None:
    store, blobs = open_store(data_dir=tmp_path)
    ada = store.create_user("ada", "h")
    key = blobs.put_bytes(b"x")
    store.close()
    store, blobs = open_store(data_dir=tmp_path)
    try:
        assert store.user_by_name("ada") == ada
        assert blobs.get_bytes(key) == b"x"
    finally:
        store.close()


def test_an_explicit_url_keeps_blobs_in_the_data_dir(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'elsewhere.sqlite'}"
    store, blobs = open_store(url, data_dir=tmp_path / "data")
    store.close()
    assert (tmp_path / "elsewhere.sqlite").is_file()
    assert blobs.root == tmp_path / "data" / "blobs"
    assert not (tmp_path / "data" / "easeml.sqlite").exists()


def test_importing_the_store_does_not_import_sqlalchemy() -> None:
    code = (
        "import sys, ease_jupyter.store as s\n"
        "s.open_store('memory://')\n"
        "assert 'sqlalchemy' not in sys.modules, 'sqlalchemy imported'\n"
        "assert 'alembic' not in sys.modules, 'alembic imported'\n"
        "s.SQLStore\n"
        "assert 'sqlalchemy' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_store_imports_nothing_from_outer_layers() -> None:
    code = (
        "import sys, ease_jupyter.store, ease_jupyter.store.sql\n"
        "outer = ('service', 'widgets', 'magics', 'client', 'zoo', 'selection', 'execution')\n"
        "bad = [m for m in sys.modules if m.startswith('ease_jupyter.') and m.split('.')[1] in outer]\n"
        "bad += [m for m in sys.modules if m.split('.')[0] in ('IPython', 'ipywidgets', 'jupyter_server')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
