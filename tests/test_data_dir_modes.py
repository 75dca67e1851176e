"""What the service writes in a data dir is its owner's alone, whatever the
umask, even in a data dir an admin made beforehand with the usual ``mkdir``
(mode 755): the SQLite database and its -wal/-shm files, the blob and upload
directories, the blobs, the embedded service's log. ``easeml serve`` warns
(and starts anyway) when the data dir itself is open to group or others."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ease_jupyter.store import SQLITE_FILE, open_store

OPEN_TO_OTHERS = 0o077  # any group or other permission bit


@pytest.fixture
def umask_022():
    """The usual umask, under which a file made with the default mode is 0644 and a directory 0755."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def premade_dir(tmp_path, umask_022) -> Path:
    """A data dir made beforehand, as ``mkdir /srv/easeml`` makes it: 0755."""
    directory = tmp_path / "srv-easeml"
    directory.mkdir()
    directory.chmod(0o755)
    return directory


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _private(path: Path) -> None:
    assert _mode(path) & OPEN_TO_OTHERS == 0, f"{path} has mode {_mode(path):o}"


def test_the_database_and_the_blobs_of_a_premade_0755_data_dir_are_private(premade_dir):
    store, blobs = open_store(data_dir=premade_dir)
    try:
        store.create_user("ada", "h")  # a write: the -wal and -shm files exist while the store is open
        digest = blobs.put_bytes(b"the rows of a task")
        database = premade_dir / SQLITE_FILE
        wal, shm = Path(f"{database}-wal"), Path(f"{database}-shm")
        assert wal.is_file() and shm.is_file()
        for path in (database, wal, shm):
            _private(path)
            assert _mode(path) == 0o600
        blob = blobs.path(digest)
        for path in (premade_dir / "blobs", blob.parent, blob):
            _private(path)
    finally:
        store.close()
    assert _mode(premade_dir) == 0o755  # the operator's directory keeps its mode (see the serve warning)


def test_a_blob_store_made_below_a_missing_parent_is_private(tmp_path, umask_022):
    from ease_jupyter.store import DirectoryBlobStore

    blobs = DirectoryBlobStore(tmp_path / "made" / "here" / "blobs")
    digest = blobs.put_bytes(b"x")
    for path in (tmp_path / "made", tmp_path / "made" / "here", blobs.root, blobs.path(digest).parent):
        assert _mode(path) == 0o700, f"{path} has mode {_mode(path):o}"


def test_a_new_sqlite_database_named_by_its_url_is_private(premade_dir):
    from ease_jupyter.store.sql import SQLStore

    database = premade_dir / "elsewhere.sqlite"
    store = SQLStore(f"sqlite:///{database}")
    try:
        store.create_user("ada", "h")
        assert _mode(database) == 0o600
        assert _mode(Path(f"{database}-wal")) == 0o600
    finally:
        store.close()


def test_an_existing_database_keeps_its_mode_and_still_opens(premade_dir):
    store, _ = open_store(data_dir=premade_dir)
    store.create_user("ada", "h")
    store.close()
    database = premade_dir / SQLITE_FILE
    database.chmod(0o640)  # the operator's choice, e.g. a group that backs it up
    store, _ = open_store(data_dir=premade_dir)
    try:
        assert [u.name for u in store.list_users()] == ["ada"]
    finally:
        store.close()
    assert _mode(database) == 0o640


def test_the_uploads_dir_is_private(premade_dir):
    from ease_jupyter.service.arrays import Uploads

    uploads = Uploads(premade_dir / "uploads")
    uploads.create(7)
    for path in (premade_dir / "uploads", premade_dir / "uploads" / "7"):
        assert _mode(path) == 0o700, f"{path} has mode {_mode(path):o}"
    (part,) = (premade_dir / "uploads" / "7").glob("*.part")
    _private(part)


def test_the_embedded_service_log_is_private_and_warns_of_an_open_data_dir(premade_dir):
    from ease_jupyter.service.embedded import open_log

    with open_log(premade_dir) as log:
        log.write(b"a line\n")
    log_path = premade_dir / "service.log"
    assert _mode(log_path) == 0o600
    text = log_path.read_text()
    assert f"the data dir {premade_dir} has mode 755" in text and f"chmod 700 {premade_dir}" in text
    assert text.endswith("a line\n")
    with open_log(premade_dir) as log:  # appends
        log.write(b"another\n")
    assert log_path.read_text().startswith(text)


def test_the_embedded_service_log_of_a_private_data_dir_has_no_warning(tmp_path, umask_022):
    from ease_jupyter.service.embedded import open_log

    directory = tmp_path / "private"
    directory.mkdir(mode=0o700)
    with open_log(directory):
        pass
    assert _mode(directory / "service.log") == 0o600
    assert (directory / "service.log").read_text() == ""


def _serve(monkeypatch, directory: Path):
    from click.testing import CliRunner

    from ease_jupyter import service
    from ease_jupyter.cli import main

    served = []
    monkeypatch.setattr(service, "serve", lambda config, **kw: served.append(config))
    result = CliRunner().invoke(main, ["serve", "--data-dir", str(directory), "--port", "0"])
    assert result.exit_code == 0, result.output
    assert len(served) == 1  # a warning does not stop the start
    return result


def test_serve_warns_once_of_a_data_dir_open_to_others(premade_dir, monkeypatch):
    result = _serve(monkeypatch, premade_dir)
    warning = (f"easeml serve: warning: the data dir {premade_dir} has mode 755: group or others may read or "
               "write it")
    assert result.stderr.count(warning) == 1, result.stderr
    assert f"run: chmod 700 {premade_dir}" in result.stderr
    assert warning not in result.stdout  # stdout stays the service's own lines


@pytest.mark.parametrize("mode", [0o750, 0o701], ids=["750", "701"])
def test_serve_warns_of_group_or_other_bits_alone(tmp_path, umask_022, monkeypatch, mode):
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(mode)
    assert f"has mode {mode:o}" in _serve(monkeypatch, directory).stderr


def test_serve_says_nothing_of_a_private_or_new_data_dir(tmp_path, umask_022, monkeypatch):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert "warning" not in _serve(monkeypatch, private).stderr
    new = tmp_path / "new"  # made by the store: 0700
    assert "warning" not in _serve(monkeypatch, new).stderr
    assert _mode(new) == 0o700


def test_a_real_embedded_service_in_a_premade_0755_data_dir_leaves_nothing_open_to_others(premade_dir, monkeypatch):
    """End to end: a Client starts the embedded service (it inherits the
    umask 022) in a 0755 data dir, declares, feeds (through an upload too)
    and trains; every file and folder it leaves there is the owner's alone."""
    import numpy as np

    from ease_jupyter.client import Client
    from ease_jupyter.service import embedded

    for name in ("EASEML_URL", "EASEML_TOKEN", "KERNEL_EASEML_URL", "KERNEL_EASEML_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    rng = np.random.default_rng(0)
    try:
        client = Client(data_dir=premade_dir)
        task = client.task("modes", input=[4], output=[2])
        task.feed(rng.normal(size=(40, 4)).astype("float32"), rng.integers(0, 2, 40))
        task.wait(timeout=120)
        client.close()
    finally:
        embedded.stop(premade_dir, timeout=10)
    made = [path for path in premade_dir.rglob("*") if not path.is_symlink()]
    assert any(p.name == SQLITE_FILE for p in made) and any(p.name == "service.log" for p in made)
    open_ones = [f"{p.relative_to(premade_dir)} {_mode(p):o}" for p in made if _mode(p) & OPEN_TO_OTHERS]
    assert not open_ones, open_ones
