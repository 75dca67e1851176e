"""A full data dir: writes answer 507 ``storage_full`` naming the limit,
reads keep working, nothing half-written stays, and writes work again once
space is freed. On a real small filesystem (an 8 MiB tmpfs)."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess

import numpy as np
import pytest
from sqlalchemy import event

from ease_jupyter import datasets
from ease_jupyter.errors import StorageFullError
from ease_jupyter.store import DirectoryBlobStore, SQLStore

from .conftest import start

MIB = 1024 * 1024


@pytest.fixture
def small_data_dir(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount an 8 MiB tmpfs as the data dir (needs root): {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(s, who: str) -> tuple[str, int]:
    """Append to one upload until not even 4 KiB more fits; (upload id, its size)."""
    uid = s.call("POST", "/uploads", who).body["id"]
    size = 0
    for chunk in (MIB, 64 * 1024, 4096):
        while True:
            reply = s.call("PUT", f"/uploads/{uid}?offset={size}", who, raw=b"x" * chunk)
            if reply.status != 200:
                assert reply.status == 507, reply.body
                break
            size = reply.body["size"]
    return uid, size


def _files(directory) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if p.is_file())


def _storage_full(reply, data_dir) -> None:
    assert reply.status == 507, reply.body
    error = reply.body["error"]
    assert error["code"] == "storage_full" and error["field"] == "data_dir"
    assert "of 8.0 MiB" in error["message"]  # the limit: the filesystem's size
    assert str(data_dir) not in error["message"]


def test_a_full_data_dir(small_data_dir, iris):
    s = start(small_data_dir, torch=False, quota_bytes=None, blob_gc_seconds=None)
    try:
        s.user("alice")
        s.user("bob")
        assert s.call("POST", "/tasks", "alice", body={"name": "iris", "input": [4], "output": [3]}).status == 201
        alice = s.client("alice").task("iris")
        alice.feed(*iris)
        assert alice.wait(timeout=120)
        versions = s.call("GET", "/tasks/iris/versions", "alice").body

        uid, size = _fill(s, "bob")  # bob fills the disk with an upload

        # The failed chunk was cut off: the upload is as before and can go on.
        last = s.call("PUT", f"/uploads/{uid}?offset={size}", "bob", raw=b"x" * 4096)
        _storage_full(last, small_data_dir)
        assert s.call("GET", f"/uploads/{uid}", "bob").body["size"] == size
        # alice's writes fail cleanly: no version, no blob, no temporary file.
        blobs_before = _files(small_data_dir / "blobs")
        X = np.random.default_rng(1).normal(size=(2000, 4)).astype("float32")
        _storage_full(s.call("POST", "/tasks/iris/feed", "alice", body={"X": X.tolist(), "y": [0] * 2000}),
                      small_data_dir)
        assert s.call("GET", "/tasks/iris/versions", "alice").body == versions
        assert _files(small_data_dir / "blobs") == blobs_before  # temporaries included
        # Her reads keep working.
        assert s.call("GET", "/tasks/iris", "alice").status == 200
        assert s.call("GET", "/tasks/iris/examples", "alice").status == 200
        assert s.call("GET", "/tasks/iris/best", "alice").status == 200
        assert s.call("POST", "/tasks/iris/infer", "alice", body={"X": iris[0][:3].tolist()}).status == 200

        s.service.uploads.delete(s.service.store.user_by_name("bob").id, uid)  # space is freed

        reply = s.call("POST", "/tasks/iris/feed", "alice", body={"X": X.tolist(), "y": [0] * 2000})
        assert reply.status == 201, reply.body
        assert reply.body["number"] == versions[-1]["number"] + 1
    finally:
        s.thread.stop()


def test_a_full_database_fails_a_feed_without_leaving_its_blobs(tmp_path, iris):
    """SQLite's own "database or disk is full" (its page limit reached, as
    on a full disk; needs no mount) after the blobs were written: the blobs go again."""
    store = SQLStore(f"sqlite:///{tmp_path / 'easeml.sqlite'}")
    blobs = DirectoryBlobStore(tmp_path / "blobs")
    try:
        user = store.create_user("alice", "h" * 64)
        task = store.create_task(user.id, "t", "input: [4] output: [3]")

        @event.listens_for(store.engine, "connect")
        def no_more_pages(connection, record):  # noqa: ARG001 - SQLAlchemy's signature
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            connection.execute(f"PRAGMA max_page_count = {pages}")

        store.engine.dispose()  # new connections, each with the limit
        rng = np.random.default_rng(0)
        for fed in range(500):  # until the pages it has are full
            X = rng.normal(size=(3, 4)).astype("float32")
            try:
                datasets.feed(store, blobs, task, X, np.array([0, 1, 2]))
            except StorageFullError as error:
                assert "full" in str(error)
                break
        else:
            pytest.fail("the database never filled up")
        assert len(store.list_dataset_versions(task.id)) == fed
        assert not blobs.exists(hashlib.sha256(datasets.npy_bytes(X)).hexdigest())  # the failed feed's X went
    finally:
        store.close()


def test_sqlite_full_is_recognised():
    from ease_jupyter.store.space import is_disk_full

    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE t (x)")
    connection.execute("PRAGMA max_page_count = 2")
    with pytest.raises(sqlite3.OperationalError) as raised:
        connection.executemany("INSERT INTO t VALUES (?)", [(b"x" * 4096,)] * 10)
    assert is_disk_full(raised.value)
    assert not is_disk_full(sqlite3.OperationalError("no such table: t"))


def test_a_blob_put_on_a_full_disk_leaves_no_temporary(small_data_dir):
    blobs = DirectoryBlobStore(small_data_dir / "blobs")
    filler = small_data_dir / "filler"
    with open(filler, "wb", buffering=0) as handle, pytest.raises(OSError):
        while True:  # fill the filesystem
            handle.write(b"\0" * MIB)
    with pytest.raises(StorageFullError, match="0 B free of 8.0 MiB"):
        blobs.put_bytes(b"x" * 100_000)
    assert [p.name for p in (small_data_dir / "blobs").rglob("*") if p.is_file()] == []
    filler.unlink()
    assert blobs.get_bytes(blobs.put_bytes(b"x" * 100_000)) == b"x" * 100_000
