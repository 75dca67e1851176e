"""The pure helpers of benchmarks/mop.py (no cluster, no training)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "mop.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("mop_benchmark", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_summarize_grid_means_per_cell_and_overall(bench):
    rows = [
        {"setting": "homogeneous", "configs": 16, "workers": 8, "ratio": 1.0},
        {"setting": "homogeneous", "configs": 16, "workers": 8, "ratio": 1.2},
        {"setting": "heterogeneous", "configs": 256, "workers": 16, "ratio": 1.05},
    ]
    s = bench.summarize_grid(rows)
    assert s["cells"]["homogeneous/16x8"] == {"mean": pytest.approx(1.1), "min": 1.0, "max": 1.2, "runs": 2}
    assert s["cells"]["heterogeneous/256x16"]["runs"] == 1
    assert s["mean"] == pytest.approx((1.0 + 1.2 + 1.05) / 3)
    assert s["max"] == 1.2


def test_shift_tile_keeps_copy_zero_and_shifts_the_others(bench):
    X = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3, 1) + 1
    out = bench.shift_tile(X, 4)
    assert out.shape == (8, 3, 3, 1)
    np.testing.assert_array_equal(out[:2], X)
    right = out[2:4]  # copy 1: one pixel right, zero fill on the left
    np.testing.assert_array_equal(right[:, :, 1:], X[:, :, :2])
    assert not right[:, :, 0].any()
    down = out[4:6]  # copy 2: one pixel down
    np.testing.assert_array_equal(down[:, 1:, :], X[:, :2, :])
    assert not down[:, 0].any()
    with pytest.raises(ValueError):
        bench.shift_tile(X, 0)


def test_accuracy_gap_and_noise(bench):
    gap = bench.accuracy_gap({"a": 0.9, "b": 0.8, "c": 0.5}, {"a": 0.85, "b": 0.9})
    assert gap["per_config"] == {"a": pytest.approx(0.05), "b": pytest.approx(0.1)}
    assert gap["mean"] == pytest.approx(0.075)
    assert math.isnan(bench.accuracy_gap({}, {"a": 1.0})["mean"])
    noise = bench.accuracy_noise({"a": 0.5}, 200)
    assert noise == pytest.approx(math.sqrt(2 * 0.25 / 200))
    assert bench.accuracy_noise({"a": 1.0}, 100) == 0.0


def test_allreduce_bytes_ring_formula(bench):
    # 2 ranks: each sends the full gradient once per step (2 (p-1)/p = 1)
    assert bench.allreduce_bytes(1000, steps=10, ranks=2) == 2 * 1000 * 4 * 10
    assert bench.allreduce_bytes(1000, steps=10, ranks=1) == 0
    assert bench.allreduce_bytes(100, steps=1, ranks=4, dtype_bytes=2) == int(2 * 3 / 4 * 100 * 2 * 4)


def test_hop_share(bench):
    assert bench.hop_share(1.0, 0.9, 0.02) == pytest.approx(0.12)
    assert bench.hop_share(1.0, 1.2, 0.0) == 0.0  # a unit timed slower in-worker than seen: no negative overhead
    assert bench.hop_share(1.0, 0.0, 5.0) == 1.0
    assert math.isnan(bench.hop_share(0.0, 0.1, 0.0))


def test_nbytes_counts_arrays_and_bytes_in_containers(bench):
    a = np.zeros((10, 4), dtype=np.float32)
    assert bench.nbytes(((a, a[:, 0]), {"k": b"xyz"}, "ignored", 3)) == 160 + 40 + 3
