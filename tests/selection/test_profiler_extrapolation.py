"""A family seen only on small data is not priced as cheap on much larger data."""

import math

import pytest

from ease_jupyter.selection.profiler import JobFeatures, Profiler

# seconds = fixed overhead + work linear in the data read (n × d), per family
LAWS = {"costly": (0.3, 3e-5), "cheap": (0.2, 1e-7)}
SEEN = [(160, 13), (500, 30), (1617, 64)]  # the sizes the families ran at
NEW = (1617, 1024)  # 16 times the largest seen


def seconds(family: str, n: int, d: int) -> float:
    overhead, per_value = LAWS[family]
    return overhead + per_value * n * d


def records() -> list[tuple[JobFeatures, float]]:
    out = []
    for family in LAWS:
        for n, d in SEEN:
            for points in (1, 4):
                out.append((JobFeatures(family, "sklearn", n=n, d=d, points=points),
                            points * seconds(family, n, d)))
    return out


def predicted(profiler: Profiler, family: str, n: int, d: int) -> float:
    return profiler.predict(JobFeatures(family, "sklearn", n=n, d=d, points=4)).seconds


def test_a_much_larger_job_is_priced_at_least_linearly_in_its_data():
    guarded = Profiler().fit(records())
    plain = Profiler(extrapolation_factor=math.inf).fit(records())
    truth = 4 * seconds("costly", *NEW)
    # the power law fitted on overhead-bound jobs prices the 16× larger job far too low
    assert predicted(plain, "costly", *NEW) < truth / 3
    assert predicted(guarded, "costly", *NEW) == pytest.approx(truth, rel=0.5)
    # ... and it keeps the families' order there: the costly one is no longer priced near the cheap one
    assert predicted(guarded, "costly", *NEW) > 10 * predicted(guarded, "cheap", *NEW)
    # the fixed overhead is counted once: the overhead-bound family is not priced as if it grew with the data
    cheap_truth = 4 * seconds("cheap", *NEW)
    assert predicted(guarded, "cheap", *NEW) == pytest.approx(cheap_truth, rel=0.5)
    # the extrapolation is uncertain, and says so
    wide = guarded.predict(JobFeatures("costly", "sklearn", n=NEW[0], d=NEW[1], points=4)).log_sd
    narrow = plain.predict(JobFeatures("costly", "sklearn", n=NEW[0], d=NEW[1], points=4)).log_sd
    assert wide > narrow


def test_within_the_seen_sizes_the_fitted_law_is_kept():
    guarded = Profiler().fit(records())
    plain = Profiler(extrapolation_factor=math.inf).fit(records())
    for n, d in [*SEEN, (1617, 100)]:  # up to twice the largest seen: the fit alone
        assert predicted(guarded, "costly", n, d) == predicted(plain, "costly", n, d)


def test_far_beyond_the_seen_sizes_the_price_follows_the_marginal_cost_not_the_overhead():
    guarded = Profiler().fit(records())
    far = (60000, 784)  # about 450 times the largest seen
    for family in LAWS:
        truth = 4 * seconds(family, *far)
        assert predicted(guarded, family, *far) == pytest.approx(truth, rel=0.5), family


def test_a_family_seen_at_one_size_only_keeps_the_fitted_law():
    one_size = [(JobFeatures(family, "sklearn", n=500, d=30, points=p), p * seconds(family, 500, 30))
                for family in LAWS for p in (1, 2, 4)]
    guarded = Profiler().fit(one_size)
    plain = Profiler(extrapolation_factor=math.inf).fit(one_size)
    for family in LAWS:
        assert predicted(guarded, family, *NEW) == predicted(plain, family, *NEW)
