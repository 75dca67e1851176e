"""Profiling runs for a family with no history (ACAI §4.2.2).

ACAI's profiler learns a job's runtime from profiling runs "over a subset of
the configuration space" before it predicts: a few small runs of the job at
different input sizes and resources, whose measured seconds fit the runtime
model. Here the first job of a family the profiler has never seen trains one
grid point on subsamples of its task's examples at a few configurations
before its full grid: a small and a larger subsample (an eighth and a
quarter of the examples, at least :data:`MIN_ROWS`, at most
:data:`MAX_ROWS`, always fewer than the task has), each at one thread and at
the threads the job itself runs with. Two sizes give the data-size exponent,
two thread counts the thread exponent; the full job adds the grid points'.
At most :data:`MAX_RUNS` runs, so the profiling cost stays a fraction of the
job's. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import DataError

FRACTIONS = (1 / 8, 1 / 4)  # of the task's examples
MIN_ROWS = 32  # a fit on fewer rows measures set-up, not the model
MAX_ROWS = 4096  # profiling must stay cheap beside the full job
MAX_RUNS = 4


@dataclass(frozen=True)
class ProfileRun:
    """One profiling run: the pick's first grid point on ``n`` examples
    (a subsample of the task's, training and held-out rows alike) at
    ``threads`` threads per fit."""

    n: int
    threads: int

    def __post_init__(self) -> None:
        for name in ("n", "threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DataError(name, repr(value), "an integer, 1 or more")


def plan_runs(n: int, threads: int = 1, *, fractions: Sequence[float] = FRACTIONS, min_rows: int = MIN_ROWS,
              max_rows: int = MAX_ROWS, max_runs: int = MAX_RUNS) -> tuple[ProfileRun, ...]:
    """The profiling runs of a family's first job on a task of ``n``
    examples that runs at ``threads`` threads per fit: subsample sizes
    (``fractions`` of ``n``, clipped to [min_rows, max_rows], distinct,
    below ``n``) × threads {1, ``threads``}, smallest first, at most
    ``max_runs``. Empty where the task is too small to subsample (a
    profiling run would cost what the job does)."""
    for name, value in (("n", n), ("threads", threads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "n" else 1):
            raise DataError(name, repr(value), "an integer, 1 or more" if name == "threads" else "a count, 0 or more")
    sizes = sorted({min(max(int(n * f), min_rows), max_rows) for f in fractions})
    sizes = [s for s in sizes if s < n]
    counts = sorted({1, threads})
    runs = [ProfileRun(s, t) for s in sizes for t in counts]
    return tuple(runs[:max_runs])


def plan_to_json(family: str, runs: Sequence[ProfileRun]) -> str:
    return json.dumps({"family": family, "runs": [{"n": r.n, "threads": r.threads} for r in runs]}, sort_keys=True)


def plan_from_json(text: str) -> tuple[ProfileRun, ...]:
    """The runs of a stored plan; empty where it cannot be read."""
    try:
        return tuple(ProfileRun(int(r["n"]), int(r["threads"])) for r in json.loads(text)["runs"])
    except (ValueError, TypeError, KeyError, DataError):
        return ()
