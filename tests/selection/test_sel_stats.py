"""Bootstrap intervals of ratios of mean times, on distributions whose answer is known."""

import numpy as np
import pytest

from ease_jupyter.selection.stats import censored_times, ratio_of_means, verdict


def test_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    # paired repetitions: a shared difficulty d times independent exponential noise;
    # E[num] = 2 E[d], E[den] = E[d], so the true ratio of means is 2
    rng = np.random.default_rng(0)
    trials, n, hits, widths = 300, 60, 0, []
    for _ in range(trials):
        d = rng.uniform(0.5, 1.5, n)
        num, den = d * rng.exponential(2.0, n), d * rng.exponential(1.0, n)
        ci = ratio_of_means(num, den, n_resamples=499, random_state=rng)
        hits += ci["low"] <= 2.0 <= ci["high"]
        widths.append(ci["high"] - ci["low"])
        assert ci["low"] <= ci["value"] <= ci["high"] and ci["n"] == n
    assert 0.90 <= hits / trials <= 0.985  # 95 % nominal; 300 trials give a standard error of about 0.013
    # more repetitions, narrower intervals (about 1/sqrt(n))
    d = rng.uniform(0.5, 1.5, 960)
    big = ratio_of_means(d * rng.exponential(2.0, 960), d * rng.exponential(1.0, 960), n_resamples=999)
    assert big["high"] - big["low"] < 0.5 * np.median(widths)


def test_a_constant_ratio_has_a_point_interval():
    ci = ratio_of_means([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert ci == {"value": 2.0, "low": pytest.approx(2.0), "high": pytest.approx(2.0), "n": 3}


def test_verdict_needs_the_whole_interval_to_clear_the_target():
    assert verdict({"value": 1.8, "low": 1.55, "high": 2.1}, 1.5) == "met"
    assert verdict({"value": 1.8, "low": 1.45, "high": 2.1}, 1.5) == "missed"
    assert verdict({"value": 1.6, "low": 1.2, "high": 1.95}, 2.0, at_least=False) == "met"
    assert verdict({"value": 1.6, "low": 1.2, "high": 2.05}, 2.0, at_least=False) == "missed"
    # a policy that missed the level in some repetition has only a bound: a clearing ratio is not met
    assert verdict({"value": 1.8, "low": 1.55, "high": 2.1}, 1.5, censored=0.1) == "unresolved"
    assert verdict({"value": 1.3, "low": 1.1, "high": 2.1}, 1.5, censored=0.1) == "missed"
    # no room to gain: a miss is reported as saturated, a clear win still as met
    assert verdict({"value": 1.1, "low": 0.9, "high": 1.3}, 1.5, saturated=True) == "saturated"
    assert verdict({"value": 1.8, "low": 1.55, "high": 2.1}, 1.5, saturated=True) == "met"
    assert verdict(None, 1.5) == "n/a"


def test_censored_times_count_a_miss_as_the_budget():
    t, missed = censored_times([1.0, None, 3.0], [5.0, 6.0, 7.0])
    assert t.tolist() == [1.0, 6.0, 3.0] and missed.tolist() == [False, True, False]
    with pytest.raises(ValueError, match="budgets"):
        censored_times([1.0], [1.0, 2.0])


def test_bad_samples_name_the_argument():
    with pytest.raises(ValueError, match="num, den"):
        ratio_of_means([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="den"):
        ratio_of_means([1.0], [0.0])
