"""The profiler recovers a known runtime law from a synthetic job log."""

import math

import numpy as np
import pytest

from ease_jupyter.errors import DataError
from ease_jupyter.selection.profiler import FEATURE_NAMES, JobFeatures, Profiler

# seconds = a · n^b · points · epochs / threads^0.7, per family its own a and b
LAW = {"logreg": (1e-4, 0.9), "rf": (5e-4, 0.9), "svc": (2e-6, 1.6)}
NOISE = 0.05  # std of log seconds


def law(f: JobFeatures, laws=LAW) -> float:
    a, b = laws[f.family]
    return a * f.n**b * f.points * f.epochs / f.threads**0.7


def draw(rng, family: str) -> JobFeatures:
    return JobFeatures(family, "sklearn", n=int(rng.integers(100, 20000)), d=int(rng.choice([8, 64, 784])),
                       k=int(rng.choice([2, 10])), points=int(rng.integers(1, 9)), epochs=int(rng.integers(1, 6)),
                       threads=int(rng.choice([1, 2, 4, 8])))


def log(rng, family: str, count: int) -> list[tuple[JobFeatures, float]]:
    out = []
    for _ in range(count):
        f = draw(rng, family)
        out.append((f, law(f) * math.exp(rng.normal(0, NOISE))))
    return out


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_recovers_the_law_per_family(rng):
    records = [r for fam in LAW for r in log(rng, fam, 30)]
    profiler = Profiler().fit(records)
    for family, (_, b) in LAW.items():
        exps = profiler.exponents(family)
        assert exps["log_n"] == pytest.approx(b, abs=0.1)
        assert exps["log_points"] == pytest.approx(1.0, abs=0.1)
        assert exps["log_epochs"] == pytest.approx(1.0, abs=0.1)
        assert exps["log_threads"] == pytest.approx(-0.7, abs=0.1)
        assert abs(exps["log_d"]) < 0.1 and abs(exps["log_k"]) < 0.1
        held_out = [draw(rng, family) for _ in range(20)]
        preds = [profiler.predict(f) for f in held_out]
        assert {p.source for p in preds} == {"family"}
        errors = [abs(math.log(p.seconds / law(f))) for p, f in zip(preds, held_out)]
        assert np.median(errors) < 0.1
        assert max(errors) < 0.3
        # the uncertainty is about the noise, not wildly off
        assert all(0.01 < p.log_sd < 0.5 for p in preds)


def test_family_with_few_records_is_predicted_by_the_pooled_model(rng):
    laws = {**LAW, "newcomer": (LAW["rf"][0] * 3.0, LAW["rf"][1])}  # rf's exponents, 3× slower
    few = [(f, law(f, laws)) for f in (draw(rng, "newcomer") for _ in range(2))]
    profiler = Profiler().fit(log(rng, "logreg", 30) + log(rng, "rf", 30) + few)
    f = draw(rng, "newcomer")
    pred = profiler.predict(f)
    assert pred.source == "pooled" and profiler.source("newcomer") == "pooled"
    assert abs(math.log(pred.seconds / law(f, laws))) < 0.3  # the shared exponents, its own offset
    assert profiler.predict(draw(rng, "rf")).source == "family"


def test_no_records_or_unknown_family_cannot_predict(rng):
    empty = Profiler().fit([])
    pred = empty.predict(draw(rng, "logreg"))
    assert pred.source is None and math.isnan(pred.seconds)
    assert empty.exponents() == {}
    trained = Profiler().fit(log(rng, "logreg", 10))
    assert trained.predict(draw(rng, "rf")).source is None  # never seen: the caller's FLOPs proxy
    too_few = Profiler().fit(log(rng, "logreg", 2))
    assert too_few.predict(draw(rng, "logreg")).source is None


def test_design_row_and_bad_features():
    f = JobFeatures("m", "torch", n=1000, d=64, k=10, points=3, epochs=4, partitions=2, threads=2, workers=4,
                    device="gpu", memory_bytes=2 * 2**30)
    row = dict(zip(FEATURE_NAMES, f.row()))
    assert row["log_n"] == pytest.approx(math.log(1000)) and row["log_workers"] == pytest.approx(math.log(4))
    assert row["gpu"] == 1.0 and row["log1p_memory_gib"] == pytest.approx(math.log(3))
    assert JobFeatures("m", "sklearn", n=0, d=5).row()[0] == 0.0  # counts below 1 count as 1
    with pytest.raises(DataError, match="device"):
        JobFeatures("m", "sklearn", n=10, d=5, device="tpu")
    with pytest.raises(DataError, match="threads"):
        JobFeatures("m", "sklearn", n=10, d=5, threads=-1)


def test_a_refit_predicts_from_the_new_records_only(rng):
    """Predictions are kept per fit (the service asks for the same features
    many times after each refit); a refit must not answer from the last one."""
    records = log(rng, "rf", 60)
    asked = records[0][0]
    profiler = Profiler().fit(records)
    first = profiler.predict(asked)
    assert profiler.predict(asked) == first
    later = [(f, 5.0 * s) for f, s in records]  # the same jobs, five times slower
    profiler.fit(later)
    again = profiler.predict(asked)
    assert again == Profiler().fit(later).predict(asked)
    assert again.seconds == pytest.approx(5.0 * first.seconds, rel=0.05)
