"""A runtime model per candidate family: predicted seconds of a job from the
task's size, the pick's work and the resources it runs on (ACAI §3.3.2,
§4.2.2: a linear model fitted on profiling runs over a subset of the
configuration space).

The model is linear in the logs of the job's features, so a power law in
each (see :data:`FEATURE_NAMES`)::

    log seconds = b0 + b_n log n + b_d log d + b_k log k + b_p log points
                  + b_e log epochs + b_q log partitions + b_t log threads
                  + b_w log workers + b_g [gpu] + b_m log(1 + memory GiB)

Logs, because runtimes multiply: work grows as a power of the data size
(n^1 for a linear model, up to n^2 for a kernel SVM), as the grid points
and epochs it trains, and shrinks as a power of the threads and workers
below 1 (Amdahl); a GPU is a factor, hence an indicator, and memory beyond
a reservation's need changes little, hence ``log(1 + GiB)``.

:class:`Profiler` fits a pooled model over all families, with one offset per
family (families share the exponents, not the scale), and, for each family
with enough finished jobs, that family's own model: a fit of its residuals
from the pooled one, which shrinks a family with few jobs toward the shared
exponents instead of toward no dependence at all. Fits are scikit-learn's
``BayesianRidge`` on log seconds, whose predictive std is the prediction's
``log_sd``. A family with no finished job at all gets no prediction (its
scale is unknown; the caller's FLOPs proxy knows more). Pure: no I/O.

Beyond the sizes a family was seen at, the power law is not trusted alone:
fitted on small jobs, whose seconds are mostly fixed overhead, it finds
exponents well below 1 and prices a job on 16 times the data at little more
than the small ones. A fit's work beyond its fixed overhead is at least
linear in the data it reads (a scikit-learn estimator, or each epoch of a
net, reads every one of the n × d values), so a job more than
:data:`EXTRAPOLATION_FACTOR` times larger (in n × d) than the family's
largest record is priced at no less than the straight line through the
model's predictions at the family's smallest and largest record sizes,
continued to the job's size: the overhead is counted once, only the
marginal seconds per value grow. Its ``log_sd`` grows by the gap between
the two prices. A family seen at one size only has no such line and keeps
the fitted law.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Literal

import numpy as np
from sklearn.linear_model import BayesianRidge

from ..errors import DataError

MIN_FAMILY_RECORDS = 3  # a family's own model needs this many finished jobs ...
MIN_POOLED_RECORDS = 3  # ... the pooled model this many over all families
EXTRAPOLATION_FACTOR = 2.0  # a job this much larger (n × d) than a family's largest record is extrapolated
DEVICES = ("cpu", "gpu")
GIB = 2.0**30

Source = Literal["family", "pooled"]

FEATURE_NAMES: tuple[str, ...] = (
    "log_n", "log_d", "log_k", "log_points", "log_epochs", "log_partitions",
    "log_threads", "log_workers", "gpu", "log1p_memory_gib",
)


@dataclass(frozen=True)
class JobFeatures:
    """What a job's runtime depends on: the task's size, the pick's work and
    its resources. Counts below 1 are taken as 1 (they enter as logs)."""

    family: str  # the zoo model's name (a user model: its arm key)
    engine: str  # "sklearn" or "torch"
    n: int  # training examples
    d: int  # input size: features, or pixels × channels
    k: int = 1  # classes (1: regression)
    points: int = 1  # grid points (configs) the job trains
    epochs: int = 1  # torch: the epochs of its longest config; scikit-learn: 1
    partitions: int = 1  # MOP partitions (torch), else 1
    threads: int = 1  # threads per fit
    workers: int = 1  # Dask workers the grid fans out to
    device: str = "cpu"  # "cpu" or "gpu"
    memory_bytes: int = 0  # memory reservation (0: none)

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise DataError("device", repr(self.device), " or ".join(map(repr, DEVICES)))
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                           or value < 0):
                raise DataError(f.name, repr(value), "a count, 0 or more")

    @property
    def size(self) -> int:
        """The data a fit reads: examples × input size."""
        return max(int(self.n), 1) * max(int(self.d), 1)

    def row(self) -> np.ndarray:
        """The numeric design row, in the order of :data:`FEATURE_NAMES`."""
        def lg(v: int) -> float:
            return math.log(max(int(v), 1))

        return np.array([
            lg(self.n), lg(self.d), lg(self.k), lg(self.points), lg(self.epochs), lg(self.partitions),
            lg(self.threads), lg(self.workers), 1.0 if self.device == "gpu" else 0.0,
            math.log1p(self.memory_bytes / GIB),
        ])


@dataclass(frozen=True)
class Prediction:
    """Predicted seconds, the std of log seconds, and which model made it
    (None: the profiler could not predict; ``seconds`` is then NaN and the
    caller falls back to its FLOPs proxy)."""

    seconds: float
    log_sd: float
    source: Source | None

    @classmethod
    def none(cls) -> Prediction:
        return cls(math.nan, math.nan, None)


def log_error(predicted: float, actual: float) -> float:
    """log(actual / predicted): positive when the job took longer than predicted."""
    return math.log(actual / predicted)


class Profiler:
    """Runtime models per family, fitted on (features, measured seconds)."""

    def __init__(self, min_family_records: int = MIN_FAMILY_RECORDS,
                 min_pooled_records: int = MIN_POOLED_RECORDS,
                 extrapolation_factor: float = EXTRAPOLATION_FACTOR):
        self.min_family_records = min_family_records
        self.min_pooled_records = min_pooled_records
        self.extrapolation_factor = float(extrapolation_factor)
        self._largest: dict[str, JobFeatures] = {}  # family -> its record with the most data (n × d)
        self._smallest: dict[str, JobFeatures] = {}  # ... and with the least
        self._families: tuple[str, ...] = ()  # those with a record: the pooled model's offsets
        self._pooled: BayesianRidge | None = None
        self._own: dict[str, BayesianRidge] = {}  # family -> its residuals' model
        self.counts: dict[str, int] = {}  # finished jobs per family
        # Predictions of the current fit: the service prices every tenant's arms at
        # several configurations after each refit, mostly at features seen before.
        self._predicted: dict[JobFeatures, Prediction] = {}

    def fit(self, records: Iterable[tuple[JobFeatures, float]]) -> Profiler:
        """Fit from finished jobs (features, measured seconds > 0); records
        with no positive finite seconds are skipped. Returns self."""
        kept = [(f, float(s)) for f, s in records if math.isfinite(float(s)) and float(s) > 0]
        self._predicted = {}
        self.counts = {}
        self._largest, self._smallest = {}, {}
        for f, _ in kept:
            self.counts[f.family] = self.counts.get(f.family, 0) + 1
            largest = self._largest.get(f.family)
            if largest is None or f.size > largest.size:
                self._largest[f.family] = f
            smallest = self._smallest.get(f.family)
            if smallest is None or f.size < smallest.size:
                self._smallest[f.family] = f
        self._families = tuple(sorted(self.counts))
        self._pooled, self._own = None, {}
        if len(kept) < self.min_pooled_records:
            return self
        y = np.log([s for _, s in kept])
        x = np.vstack([self._pooled_row(f) for f, _ in kept])
        self._pooled = BayesianRidge().fit(x, y)
        residual = y - self._pooled.predict(x)
        for family, count in self.counts.items():
            if count < self.min_family_records:
                continue
            mine = np.array([f.family == family for f, _ in kept])
            rows = np.vstack([f.row() for f, _ in kept])[mine]
            self._own[family] = BayesianRidge().fit(rows, residual[mine])
        return self

    def predict(self, features: JobFeatures) -> Prediction:
        """The job's predicted seconds with the std of its log; source
        "family" (the family's own model), "pooled", or None (no record of
        the family, or too few records over all)."""
        if self._pooled is None or features.family not in self.counts:
            return Prediction.none()
        found = self._predicted.get(features)
        if found is None:
            found = self._predicted[features] = self._predict(features)
        return found

    def _predict(self, features: JobFeatures) -> Prediction:
        fitted = self._fitted(features)
        largest = self._largest.get(features.family)
        if largest is None or features.size <= self.extrapolation_factor * largest.size:
            return fitted
        # Beyond the family's sizes: at least its marginal seconds per value, continued (see the module doc).
        smallest = self._smallest[features.family]
        if smallest.size == largest.size:
            return fitted
        high = self._fitted(replace(features, n=largest.n, d=largest.d)).seconds
        low = self._fitted(replace(features, n=smallest.n, d=smallest.d)).seconds
        per_value = max(high - low, 0.0) / (largest.size - smallest.size)
        linear = high + per_value * (features.size - largest.size)
        if linear <= fitted.seconds:
            return fitted
        return Prediction(linear, fitted.log_sd + math.log(linear / fitted.seconds), fitted.source)

    def _fitted(self, features: JobFeatures) -> Prediction:
        mean, sd = self._pooled.predict(self._pooled_row(features)[None, :], return_std=True)
        own = self._own.get(features.family)
        if own is None:
            return Prediction(float(math.exp(mean[0])), float(sd[0]), "pooled")
        delta, own_sd = own.predict(features.row()[None, :], return_std=True)
        return Prediction(float(math.exp(mean[0] + delta[0])), float(own_sd[0]), "family")

    def exponents(self, family: str | None = None) -> dict[str, float]:
        """The fitted coefficient of each of :data:`FEATURE_NAMES`: the
        pooled model's, plus the family's own correction when it has one.
        Empty before a pooled fit."""
        if self._pooled is None:
            return {}
        coef = np.asarray(self._pooled.coef_[: len(FEATURE_NAMES)], dtype=float)
        own = self._own.get(family) if family is not None else None
        if own is not None:
            coef = coef + own.coef_
        return dict(zip(FEATURE_NAMES, map(float, coef)))

    def source(self, family: str) -> Source | None:
        """Which model would predict this family's jobs."""
        if self._pooled is None or family not in self.counts:
            return None
        return "family" if family in self._own else "pooled"

    def _pooled_row(self, features: JobFeatures) -> np.ndarray:
        offsets = np.array([1.0 if features.family == fam else 0.0 for fam in self._families])
        return np.concatenate([features.row(), offsets])
