"""The pure helpers of benchmarks/mop.py (no cluster, no training)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("mop")


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


def test_seed_stats(bench):
    s = bench.seed_stats([0.5, 0.7, 0.9])
    assert s["n"] == 3 and s["mean"] == pytest.approx(0.7)
    assert s["sd"] == pytest.approx(0.2)  # sample sd (ddof 1)
    assert s["se"] == pytest.approx(0.2 / math.sqrt(3))
    assert (s["min"], s["max"]) == (0.5, 0.9)
    one = bench.seed_stats([0.8])
    assert one["mean"] == 0.8 and math.isnan(one["sd"]) and math.isnan(one["se"])
    assert bench.seed_stats([])["n"] == 0


def test_compare_over_seeds_uses_each_methods_spread(bench):
    mop = {"a": [0.90, 0.92, 0.94], "b": [0.60, 0.80, 1.00], "c": [0.50, 0.50, 0.50]}
    tp = {"a": [0.80, 0.81, 0.82], "b": [0.40, 0.60, 0.80], "c": [0.50, 0.50, 0.50], "only_tp": [0.1, 0.2]}
    r = bench.compare_over_seeds(mop, tp)
    assert set(r["per_config"]) == {"a", "b", "c"}
    a, b, c = (r["per_config"][t] for t in "abc")
    # a: gap 0.11, SE(diff) = sqrt(0.02^2/3 + 0.01^2/3) ~ 0.0129: far outside 2 SE
    assert a["gap"] == pytest.approx(0.11)
    assert a["se_diff"] == pytest.approx(math.sqrt(0.02**2 / 3 + 0.01**2 / 3))
    assert not a["within_k_se"] and not a["mop_mean_in_tp_range"]
    # b: the same gap of 0.2 is within 2 SE because both methods spread widely over seeds
    assert b["gap"] == pytest.approx(0.2)
    assert b["se_diff"] == pytest.approx(math.sqrt(2 * 0.2**2 / 3))
    assert b["within_k_se"] and b["mop_mean_in_tp_range"]
    # c: identical and deterministic: gap 0 with SE 0 counts as within
    assert c["gap"] == 0 and c["se_diff"] == 0 and c["within_k_se"] and c["gap_in_se"] == 0
    assert r["configs_within_k_se"] == 2 and r["configs"] == 3 and not r["all_within_k_se"]
    assert r["mean_gap"] == pytest.approx((0.11 + 0.2 + 0.0) / 3)
    # one seed per method: no spread, never "within"
    single = bench.compare_over_seeds({"a": [0.9]}, {"a": [0.9]})
    assert math.isnan(single["per_config"]["a"]["se_diff"]) and not single["all_within_k_se"]


def test_welch_and_holm(bench):
    from scipy import stats

    m, p = bench.seed_stats([0.9, 0.92, 0.94, 0.91]), bench.seed_stats([0.80, 0.83, 0.81])
    ref = stats.ttest_ind([0.9, 0.92, 0.94, 0.91], [0.80, 0.83, 0.81], equal_var=False).pvalue
    assert bench.welch_p(abs(m["mean"] - p["mean"]), m, p) == pytest.approx(ref)
    flat = bench.seed_stats([0.5, 0.5])
    assert bench.welch_p(0.0, flat, flat) == 1.0
    assert math.isnan(bench.welch_p(0.0, bench.seed_stats([0.5]), flat))
    adj = bench.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": float("nan")})
    assert adj["a"] == pytest.approx(0.03) and adj["c"] == pytest.approx(0.06) and adj["b"] == pytest.approx(0.06)
    assert math.isnan(adj["d"])


def test_compare_over_seeds_verdict_corrects_for_many_configs(bench):
    rng = np.random.default_rng(0)
    same = {f"c{i}": list(0.9 + 0.01 * rng.standard_normal(5)) for i in range(8)}
    other = {f"c{i}": list(0.9 + 0.01 * rng.standard_normal(5)) for i in range(8)}
    r = bench.compare_over_seeds(same, other)
    assert r["no_significant_difference"] and r["configs_significant"] == 0
    shifted = {**other, "c0": [v - 0.2 for v in other["c0"]]}
    r = bench.compare_over_seeds(same, shifted)
    assert not r["no_significant_difference"] and r["per_config"]["c0"]["significant"]
    assert r["configs_significant"] == 1
