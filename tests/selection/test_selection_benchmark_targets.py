"""benchmarks/selection.py's target verdicts: a speed-up over a baseline that
is itself within 1.5x of the oracle (the exact lower bound) is out of any
rule's reach, and is reported as saturated, not as a miss; a baseline with
room, or one that missed the level (its time only a bound), stays a miss."""

import numpy as np
import pytest

from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def sel():
    return load_benchmark("selection")


def policy(times, budget=100.0):
    """A policy's per-repetition times to 0.02 (None: missed within ``budget``); loss 0.1 at the start."""
    return {"per_rep": {"time_to_loss": {"0.1": [0.0] * len(times), "0.02": list(times)},
                        "budget": [budget] * len(times)}}


def doc(**times):
    return {"policies": {name: policy(t) for name, t in times.items()}}


def test_a_baseline_near_the_oracle_is_saturated_and_one_far_from_it_missed(sel):
    rng = np.random.default_rng(0)
    oracle = 10 + rng.uniform(0, 1, 20)
    d = doc(default=oracle * 1.25, oracle=oracle, spearmint=oracle * 1.3, round_robin=oracle * 1.6)
    targets = sel.analyse(d, "sklearn-measured", "cost_aware")["targets"]
    spearmint, rr = targets["spearmint / default >= 1.5"], targets["round_robin / default >= 1.5"]
    assert spearmint["baseline_over_oracle"]["high"] <= 1.5
    assert spearmint["status"] == "saturated"  # even the oracle would be only 1.3x faster
    assert rr["baseline_over_oracle"]["low"] > 1.5 and rr["status"] == "missed"  # room to gain: a miss


def test_a_baseline_that_missed_the_level_is_not_called_out_of_reach(sel):
    oracle = np.full(6, 10.0)
    spearmint = [12.0, 12.0, 12.0, 12.0, 12.0, None]  # its mean counts the budget: a lower bound only
    d = doc(default=oracle * 1.1, oracle=oracle, spearmint=spearmint, round_robin=oracle * 3)
    d["policies"]["spearmint"]["per_rep"]["budget"] = [13.0] * 6
    target = sel.analyse(d, "sklearn-measured", "cost_aware")["targets"]["spearmint / default >= 1.5"]
    assert target["baseline_over_oracle"]["high"] <= 1.5
    assert target["status"] == "missed"
    assert not sel.out_of_reach(None)
