"""The ``BlobStore`` contract (memory and directory backends), and the directory
backend's atomic writes."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import numpy as np
import pytest

from ease_jupyter.errors import DataError, NotFoundError
from ease_jupyter.store import BlobCorruptedError, BlobStore, DirectoryBlobStore, MemoryBlobStore
from ease_jupyter.store.base import BlobInfo
from ease_jupyter.store.blobs import TEMP_PREFIX


@pytest.fixture(params=["memory", "directory"])
def blobs(request: pytest.FixtureRequest, tmp_path) -> BlobStore:
    return MemoryBlobStore() if request.param == "memory" else DirectoryBlobStore(tmp_path / "blobs")


def files_under(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# -- contract -------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"hello", bytes(range(256)) * 1000])
def test_a_blob_is_keyed_by_its_sha256(blobs: BlobStore, data: bytes) -> None:
    key = blobs.put_bytes(data)
    assert key == hashlib.sha256(data).hexdigest()
    assert blobs.exists(key)
    assert blobs.get_bytes(key) == data


def test_writing_the_same_content_twice_is_a_no_op(blobs: BlobStore) -> None:
    first = blobs.put_bytes(b"same")
    assert blobs.put_bytes(bytearray(b"same")) == first
    assert blobs.get_bytes(first) == b"same"


def test_a_missing_blob_is_not_found(blobs: BlobStore) -> None:
    missing = hashlib.sha256(b"never stored").hexdigest()
    assert not blobs.exists(missing)
    with pytest.raises(NotFoundError):
        blobs.get_bytes(missing)


@pytest.mark.parametrize(
    "bad",
    [
        "../x",
        "../../etc/passwd",
        "/etc/passwd",
        "ab/" + "c" * 61,
        "A" * 64,  # digests are lowercase
        "a" * 63,
        "a" * 65,
        "g" * 64,
        "..",
        "",
        None,
        42,
    ],
)
def test_malformed_digests_are_refused_before_any_file_access(blobs: BlobStore, bad) -> None:
    with pytest.raises(DataError) as info:
        blobs.get_bytes(bad)
    assert info.value.field == "digest"
    with pytest.raises(DataError):
        blobs.exists(bad)


def test_arrays_round_trip(blobs: BlobStore) -> None:
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, ::2]  # not contiguous
    key = blobs.put_array(array)
    back = blobs.get_array(key)
    assert back.dtype == np.float32 and back.shape == (2, 2, 4)
    np.testing.assert_array_equal(back, array)
    assert blobs.put_array(array.copy()) == key  # same content, same key


def test_object_arrays_are_refused(blobs: BlobStore) -> None:
    # allow_pickle=False: a blob can never smuggle code into whoever loads it.
    with pytest.raises(ValueError):
        blobs.put_array(np.array([{"a": 1}], dtype=object))


def test_concurrent_writers_of_the_same_content(blobs: BlobStore) -> None:
    data = os.urandom(1 << 16)
    keys: list[str] = []
    threads = [threading.Thread(target=lambda: keys.append(blobs.put_bytes(data))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(keys)) == 1
    assert blobs.get_bytes(keys[0]) == data


# -- the directory backend --------------------------------------------------------------


def test_blobs_fan_out_by_the_first_two_hex_digits(tmp_path) -> None:
    store = DirectoryBlobStore(tmp_path / "new" / "blobs")  # created on demand
    key = store.put_bytes(b"layout")
    assert store.path(key) == tmp_path / "new" / "blobs" / key[:2] / key[2:]
    assert files_under(store.root) == [f"{key[:2]}/{key[2:]}"]
    store.put_bytes(b"layout")
    assert files_under(store.root) == [f"{key[:2]}/{key[2:]}"]


@pytest.mark.parametrize("failing", ["os.replace", "os.fsync"])
def test_a_failed_write_leaves_no_file_behind(tmp_path, monkeypatch, failing: str) -> None:
    store = DirectoryBlobStore(tmp_path)
    key = hashlib.sha256(b"payload").hexdigest()

    def boom(*args, **kwargs):
        raise OSError("simulated failure")

    monkeypatch.setattr(os, failing.split(".")[1], boom)
    with pytest.raises(OSError, match="simulated"):
        store.put_bytes(b"payload")
    monkeypatch.undo()
    assert not store.path(key).exists()
    assert not store.exists(key)
    assert [f for f in files_under(tmp_path)] == []  # no final file, no temporary one
    # Nothing is poisoned: the next attempt works.
    assert store.put_bytes(b"payload") == key
    assert files_under(tmp_path) == [f"{key[:2]}/{key[2:]}"]


def test_an_interrupted_write_is_invisible_to_readers(tmp_path, monkeypatch) -> None:
    """While the content is being written, the final name does not exist yet."""
    store = DirectoryBlobStore(tmp_path)
    key = hashlib.sha256(b"slow").hexdigest()
    seen: dict[str, object] = {}
    real_fsync = os.fsync

    def observing_fsync(fd: int) -> None:  # the content's (a new fan-out folder's entry is synced first)
        if "exists" not in seen and any(tmp_path.rglob(f"{TEMP_PREFIX}*")):
            seen["exists"] = store.exists(key)
            seen["temporaries"] = [p.name for p in tmp_path.rglob(f"{TEMP_PREFIX}*")]
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", observing_fsync)
    store.put_bytes(b"slow")
    assert seen["exists"] is False
    assert len(seen["temporaries"]) == 1  # the data went to a temporary file in the same directory
    assert list(tmp_path.rglob(f"{TEMP_PREFIX}*")) == []


def test_a_corrupted_blob_is_detected(tmp_path) -> None:
    store = DirectoryBlobStore(tmp_path)
    key = store.put_bytes(b"original")
    store.path(key).write_bytes(b"tampered")
    with pytest.raises(BlobCorruptedError):
        store.get_bytes(key)
    # Verification can be turned off when the cost of hashing matters more.
    assert DirectoryBlobStore(tmp_path, verify=False).get_bytes(key) == b"tampered"


def test_two_directory_stores_share_one_root(tmp_path) -> None:
    writer, reader = DirectoryBlobStore(tmp_path), DirectoryBlobStore(tmp_path)
    key = writer.put_bytes(b"shared")
    assert reader.get_bytes(key) == b"shared"


# -- delete and listing (garbage collection) -------------------------------------------


def backdate(blobs: BlobStore, digest: str, seconds: float) -> float:
    """Make a blob look written ``seconds`` ago; its new written_at."""
    when = time.time() - seconds
    if isinstance(blobs, DirectoryBlobStore):
        os.utime(blobs.path(digest), (when, when))
    else:
        blobs._written[digest] = when
    return when


def test_delete_removes_a_blob_and_a_missing_blob_is_a_no_op(blobs: BlobStore) -> None:
    key = blobs.put_bytes(b"doomed")
    other = blobs.put_bytes(b"survivor")
    assert blobs.delete(key) is True
    assert not blobs.exists(key)
    with pytest.raises(NotFoundError):
        blobs.get_bytes(key)
    assert blobs.delete(key) is False  # already gone
    assert blobs.delete(hashlib.sha256(b"never stored").hexdigest()) is False
    assert blobs.get_bytes(other) == b"survivor"
    assert blobs.put_bytes(b"doomed") == key and blobs.get_bytes(key) == b"doomed"  # can come back


def test_delete_refuses_malformed_digests(blobs: BlobStore) -> None:
    for bad in ("../x", "A" * 64, None):
        with pytest.raises(DataError):
            blobs.delete(bad)


def test_iter_blobs_lists_every_blob_with_its_size_and_write_time(blobs: BlobStore) -> None:
    assert list(blobs.iter_blobs()) == []
    before = time.time() - 5  # slack for coarse file-system clocks
    data = {blobs.put_bytes(d): d for d in (b"", b"a", bytes(1000))}
    listed = {info.digest: info for info in blobs.iter_blobs()}
    assert set(listed) == set(data)
    for key, info in listed.items():
        assert isinstance(info, BlobInfo) and info.size == len(data[key])
        assert before <= info.written_at <= time.time() + 5
    blobs.delete(next(iter(data)))
    assert len(list(blobs.iter_blobs())) == 2


def test_delete_if_older_than_keeps_recent_blobs(blobs: BlobStore) -> None:
    key = blobs.put_bytes(b"recent")
    assert blobs.delete(key, if_older_than=time.time() - 3600) is False  # written after the cut-off
    assert blobs.exists(key)
    written = backdate(blobs, key, 7200)
    assert blobs.delete(key, if_older_than=written + 1) is True
    assert not blobs.exists(key)


def test_putting_existing_content_again_refreshes_its_write_time(blobs: BlobStore) -> None:
    key = blobs.put_bytes(b"reused")
    old = backdate(blobs, key, 7200)
    assert blobs.put_bytes(b"reused") == key  # e.g. a feed of data that is already stored
    (info,) = [i for i in blobs.iter_blobs() if i.digest == key]
    assert info.written_at > old + 3600
    assert blobs.delete(key, if_older_than=old + 1) is False
    assert blobs.get_bytes(key) == b"reused"


def test_a_put_racing_with_delete_keeps_the_blob(tmp_path, monkeypatch) -> None:
    """The put touches the file after delete checked its age, before the
    rename: delete sees the fresh mtime on what it took and puts it back."""
    store = DirectoryBlobStore(tmp_path)
    key = store.put_bytes(b"contested")
    cutoff = backdate(store, key, 7200) + 1
    real_rename = os.rename

    def put_then_rename(src, dst):
        assert store.put_bytes(b"contested") == key
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", put_then_rename)
    assert store.delete(key, if_older_than=cutoff) is False
    monkeypatch.undo()
    assert store.get_bytes(key) == b"contested"
    assert files_under(tmp_path) == [f"{key[:2]}/{key[2:]}"]  # no tombstone left


def test_a_put_just_after_the_delete_writes_the_blob_afresh(tmp_path, monkeypatch) -> None:
    store = DirectoryBlobStore(tmp_path)
    key = store.put_bytes(b"contested")
    cutoff = backdate(store, key, 7200) + 1
    real_rename = os.rename

    def rename_then_put(src, dst):
        real_rename(src, dst)
        assert store.put_bytes(b"contested") == key  # finds no file: writes a new one

    monkeypatch.setattr(os, "rename", rename_then_put)
    assert store.delete(key, if_older_than=cutoff) is True  # the old copy went
    monkeypatch.undo()
    assert store.get_bytes(key) == b"contested"  # the put's copy stays
    assert files_under(tmp_path) == [f"{key[:2]}/{key[2:]}"]


def test_listing_skips_temporaries_and_old_ones_can_be_removed(tmp_path) -> None:
    store = DirectoryBlobStore(tmp_path)
    key = store.put_bytes(b"real")
    fan_out = store.path(key).parent
    old_tmp, new_tmp = fan_out / f"{TEMP_PREFIX}crashed", fan_out / f"{TEMP_PREFIX}in-flight"
    old_tmp.write_bytes(b"12345")
    new_tmp.write_bytes(b"1")
    two_hours_ago = time.time() - 7200
    os.utime(old_tmp, (two_hours_ago, two_hours_ago))
    (tmp_path / "README").write_text("not a blob")
    assert [i.digest for i in store.iter_blobs()] == [key]
    cutoff = time.time() - 3600
    assert store.remove_temporaries(cutoff, dry_run=True) == (1, 5)
    assert old_tmp.exists()
    assert store.remove_temporaries(cutoff) == (1, 5)
    assert not old_tmp.exists() and new_tmp.exists() and store.exists(key)


def test_delete_unless_keeps_a_blob_the_question_says_is_in_use_and_takes_it_out_of_reach_meanwhile(
        blobs: BlobStore) -> None:
    key = blobs.put_bytes(b"shared")
    seen = []

    def in_use() -> bool:
        seen.append(blobs.exists(key))  # while asked, the blob is out of reach: a writer would put it again
        return True

    assert blobs.delete(key, unless=in_use) is False
    assert seen == [False] and blobs.get_bytes(key) == b"shared"
    assert blobs.delete(key, unless=lambda: False) is True
    assert not blobs.exists(key)


def test_a_question_that_fails_keeps_the_blob(blobs: BlobStore) -> None:
    key = blobs.put_bytes(b"unsure")

    def store_down() -> bool:
        raise RuntimeError("the database is unavailable")

    with pytest.raises(RuntimeError, match="unavailable"):
        blobs.delete(key, unless=store_down)
    assert blobs.get_bytes(key) == b"unsure"
    assert [i.digest for i in blobs.iter_blobs()] == [key]  # no tombstone left either


def test_a_new_fan_out_folder_is_made_durable_in_the_root_before_its_first_blob_counts(tmp_path, monkeypatch) -> None:
    from ease_jupyter.store import blobs as directory

    synced = []
    real = directory._fsync_directory
    monkeypatch.setattr(directory, "_fsync_directory", lambda path: (synced.append(path), real(path))[1])
    store = DirectoryBlobStore(tmp_path / "b")
    key = store.put_bytes(b"first")
    assert synced == [tmp_path / "b", (tmp_path / "b") / key[:2]]  # the new folder's entry, then the blob's
    synced.clear()
    store.put_bytes(b"first, again")  # another folder (most likely) or the same: the root only for a new one
    other = hashlib.sha256(b"first, again").hexdigest()
    assert (tmp_path / "b" in synced) == (other[:2] != key[:2])
