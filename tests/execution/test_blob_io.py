"""Checkpoints and partitions through a path or an fsspec URL (file://, memory://)."""

from __future__ import annotations

import io
import os
import pickle
import uuid

import fsspec
import numpy as np
import pytest
import torch

from ease_jupyter.errors import DataError
from ease_jupyter.execution import blob_io
from ease_jupyter.execution.blob_io import StagedPartition, read_bytes, remove, stage_partition, write_atomic
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.units import (
    Hooks,
    UnitSpec,
    default_input_fn,
    initial_checkpoint,
    read_checkpoint,
    train_unit,
)
from ease_jupyter.zoo.templates import TorchBuilder

LENET = TorchBuilder("lenet", "LeNet", ((8, 8), 10))


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:200].astype(np.float32) / 16.0, d.target[:200]


@pytest.fixture
def memory_url():
    """A fresh folder on fsspec's in-process memory file system, removed afterwards."""
    url = f"memory://easeml-test-{uuid.uuid4().hex[:8]}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


def spec():
    return UnitSpec.of("t0", "lenet", {"lr": 0.05}, LENET, seed=7)


def weights(ref):
    return torch.load(io.BytesIO(read_checkpoint(ref)), weights_only=True)["model"]


def same_weights(a, b) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


# -- single objects -----------------------------------------------------------------------------


def test_local_write_is_atomic_and_returns_a_path(tmp_path):
    ref = write_atomic(str(tmp_path), "a/b/c.pt", b"xyz")
    assert ref == str(tmp_path / "a" / "b" / "c.pt") and read_bytes(ref) == b"xyz"
    assert not list(tmp_path.rglob("*.tmp"))
    assert write_atomic(str(tmp_path), "a/b/c.pt", b"new") == ref and read_bytes(ref) == b"new"
    remove(ref)
    assert not os.path.exists(ref)
    with pytest.raises(FileNotFoundError):
        remove(ref)
    remove(ref, missing_ok=True)


def test_file_url_round_trip(tmp_path):
    base = tmp_path.as_uri()  # file:///...
    ref = write_atomic(base, "x/y.bin", b"\x00\x01")
    assert ref == base + "/x/y.bin"
    assert (tmp_path / "x" / "y.bin").read_bytes() == b"\x00\x01"
    assert read_bytes(ref) == b"\x00\x01"
    assert not list(tmp_path.rglob("*.tmp"))
    remove(ref)
    assert not (tmp_path / "x" / "y.bin").exists()


def test_memory_url_round_trip(memory_url):
    ref = write_atomic(memory_url + "/", "/ck/1.pt", b"abc")
    assert ref == memory_url + "/ck/1.pt"
    assert fsspec.filesystem("memory").cat_file(ref) == b"abc"
    assert read_bytes(ref) == b"abc"
    remove(ref)
    with pytest.raises(FileNotFoundError):
        read_bytes(ref)
    with pytest.raises(FileNotFoundError):
        remove(ref)
    remove(ref, missing_ok=True)
    assert blob_io.is_url(ref) and not blob_io.is_url("/tmp/x")


# -- staged partitions ---------------------------------------------------------------------------


def test_staged_partition_is_read_once_per_process(memory_url, monkeypatch, digits):
    X, y = digits
    staged = stage_partition((X[:50], y[:50]), memory_url, "part-0")
    assert staged.examples == 50 and staged.nbytes == X[:50].nbytes + y[:50].nbytes
    assert staged.url.endswith("part-0.npz")
    copy = pickle.loads(pickle.dumps(staged))
    assert copy == staged
    reads = []
    original = blob_io.read_bytes
    monkeypatch.setattr(blob_io, "read_bytes", lambda ref: reads.append(ref) or original(ref))
    Xs, ys = copy.load()
    np.testing.assert_array_equal(Xs, X[:50])
    np.testing.assert_array_equal(ys, y[:50])
    assert Xs.dtype == X.dtype and ys.dtype == y.dtype
    again = staged.load()
    assert again[0] is Xs and reads == [staged.url]


def test_staged_cache_is_bounded():
    cache = blob_io._StagedCache(capacity=1000)
    urls = []
    for i in range(3):
        url = f"memory://easeml-cache-{uuid.uuid4().hex[:8]}/{i}"
        fsspec.filesystem("memory").pipe_file(url, _npz(np.zeros(100, np.float32), np.zeros(10, np.int64)))  # 480 bytes
        urls.append(url)
    for url in urls:
        cache.get(url)
    assert list(cache._items) == urls[1:]  # two fit in 1000 bytes; the least recently used went
    for url in urls:
        fsspec.filesystem("memory").rm_file(url)


def _npz(X, y) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, X=X, y=y)
    return buf.getvalue()


def test_stage_partition_rejects_what_npz_cannot_hold_without_pickles(tmp_path):
    with pytest.raises(DataError, match="X"):
        stage_partition((np.array([{"a": 1}], dtype=object), np.array([0])), str(tmp_path), "p")
    with pytest.raises(DataError, match="rows"):
        stage_partition((np.zeros((3, 2)), np.zeros(2)), str(tmp_path), "p")


# -- units over URLs ---------------------------------------------------------------------------------


def test_units_hop_through_urls_and_read_staged_partitions(tmp_path, memory_url, digits):
    X, y = digits
    init = initial_checkpoint(spec(), X, y)
    by_bytes = train_unit((X[:100], y[:100]), init, spec().at(0, 0))
    staged = stage_partition((X[:100], y[:100]), memory_url, "p0")
    Xt, yt = default_input_fn(staged)
    assert Xt.dtype == torch.float32 and yt.dtype == torch.int64 and len(Xt) == 100
    for base in (memory_url + "/checkpoints", tmp_path.as_uri()):
        start = write_atomic(base, "init.pt", init)
        out = train_unit(staged, start, spec().at(0, 0), Hooks(), base)
        assert isinstance(out.checkpoint, str) and out.checkpoint.startswith(base + "/")
        assert same_weights(out.checkpoint, by_bytes.checkpoint)
        assert out.metrics["hop_seconds"] > 0 and out.metrics["train_seconds"] > 0


def test_local_engine_runs_units_on_staged_partitions(memory_url, digits):
    X, y = digits
    parts = [stage_partition((X[i::2], y[i::2]), memory_url, f"p{i}") for i in range(2)]
    init = write_atomic(memory_url, "init.pt", initial_checkpoint(spec(), X, y))
    expected = train_unit(parts[1], train_unit(parts[0], init, spec().at(0, 0)).checkpoint, spec().at(0, 1))
    with LocalEngine(2) as engine:
        workers = engine.workers()
        for i, part in enumerate(parts):
            engine.place(f"p{i}", part, [workers[i]])
        ref = init
        for i in range(2):
            h = engine.submit_pinned(train_unit, f"p{i}", ref, spec().at(0, i), Hooks(), memory_url + "/ck",
                                     worker=workers[i], timeout=120)
            ev = engine.wait_all([h], timeout=120)[h]
            ref = ev.result.checkpoint
    assert isinstance(ref, str) and ref.startswith(memory_url + "/ck/")
    assert same_weights(ref, expected.checkpoint)
    assert isinstance(parts[0], StagedPartition)
