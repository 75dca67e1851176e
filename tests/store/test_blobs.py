"""The ``BlobStore`` contract (memory and directory backends), and the directory
backend's atomic writes."""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np
import pytest

from ease_jupyter.errors import DataError, NotFoundError
from ease_jupyter.store import BlobCorruptedError, BlobStore, DirectoryBlobStore, MemoryBlobStore
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

    def observing_fsync(fd: int) -> None:
        if "exists" not in seen:
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
