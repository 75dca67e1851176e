"""What users see of the profiler (ACAI §4.2.2-4.2.3): each job's predicted
seconds beside its measured ones, and a task's predicted cost per candidate.

The predictions are the job tags ``profiling.ProfileBook`` keeps; the
per-candidate plans are the control loop's (``ControlLoop.profile``).
"""

from __future__ import annotations

from typing import Any, Mapping

from .profiling import prediction_in, profiling_runs

# The fields a job's row gains: what was predicted before it ran, by which
# model (``family``, ``pooled``, or ``flops`` where the FLOPs proxy did), and
# once it finished ``log(actual / predicted)``.
PREDICTION_FIELDS = ("predicted_seconds", "source", "log_error")


def prediction_fields(tags: Mapping[str, str]) -> dict[str, Any]:
    """What a job's row (``core.job_json``) adds from its tags: its stored
    prediction, and ``profiling_seconds``: what its profiling runs took,
    part of its ``cost_seconds`` (None where it was not profiled; the
    prediction is for the rest)."""
    found = prediction_in(tags)
    runs = profiling_runs(tags)
    return {**{key: found[key] for key in PREDICTION_FIELDS},
            "profiling_seconds": sum(r["seconds"] for r in runs) if runs else None}
