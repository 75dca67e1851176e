"""What users see of the profiler (ACAI §4.2.2-4.2.3): each job's predicted
seconds beside its measured ones, and a task's predicted cost per candidate.

The predictions are the job tags ``profiling.ProfileBook`` keeps; the
per-candidate plans are the control loop's (``ControlLoop.profile``).
"""

from __future__ import annotations

from typing import Any

from ..store import Store
from .profiling import prediction_in, profiling_runs

# The fields a job's row gains: what was predicted before it ran, by which
# model (``family``, ``pooled``, or ``flops`` where the FLOPs proxy did), and
# once it finished ``log(actual / predicted)``.
PREDICTION_FIELDS = ("predicted_seconds", "source", "log_error")


def with_predictions(store: Store, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (``core.job_json`` dicts) with each job's stored prediction
    added, and ``profiling_seconds``: what its profiling runs took, part of
    its ``cost_seconds`` (None where it was not profiled; the prediction is
    for the rest)."""
    for row in rows:
        tags = store.tags("job", row["id"])
        found = prediction_in(tags)
        row.update({key: found[key] for key in PREDICTION_FIELDS})
        runs = profiling_runs(tags)
        row["profiling_seconds"] = sum(r["seconds"] for r in runs) if runs else None
    return rows
