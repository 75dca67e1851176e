"""Stored arrays are read from many request threads: numpy parses each
header with ``ast.literal_eval``, which on CPython 3.11 can fail with a
``SystemError`` when two threads build an AST at once, so no two reads may
parse a header at the same time."""

from __future__ import annotations

import ast
import io
import threading
import time

import numpy as np

from ease_jupyter import npy_bytes


def _npz_bytes(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_reads_round_trip():
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    np.testing.assert_array_equal(npy_bytes.load_npy(_npy_bytes(array)), array)
    read = npy_bytes.load_npz(_npz_bytes(X=array, y=np.array(["a", "bé"])))
    assert sorted(read) == ["X", "y"]
    np.testing.assert_array_equal(read["X"], array)
    assert read["y"].tolist() == ["a", "bé"]


def test_no_two_threads_parse_a_header_at_once(monkeypatch):
    parse, inside, overlaps, lock = ast.literal_eval, [0], [], threading.Lock()

    def slow_parse(text):
        with lock:
            inside[0] += 1
            overlaps.append(inside[0])
        time.sleep(0.002)  # a thread switch here is what the CPython race needs
        try:
            return parse(text)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(ast, "literal_eval", slow_parse)
    npy, npz = _npy_bytes(np.arange(3)), _npz_bytes(X=np.zeros((2, 2)), y=np.arange(2))
    start = threading.Barrier(6)

    def work(i: int) -> None:
        start.wait()
        for _ in range(5):
            npy_bytes.load_npy(npy) if i % 2 else npy_bytes.load_npz(npz)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(overlaps) == 3 * 5 + 3 * 5 * 2  # every header was parsed through the patched function
    assert max(overlaps) == 1


def test_the_package_reads_npy_bytes_only_here():
    package = npy_bytes.__file__.rsplit("/", 1)[0]
    from pathlib import Path

    readers = [str(path.relative_to(package)) for path in sorted(Path(package).rglob("*.py"))
               if "np.load(" in path.read_text() and path.name != "npy_bytes.py"]
    assert readers == []
