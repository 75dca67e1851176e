"""What users see of the profiler (ACAI §4.2.2-4.2.3): each job's predicted
seconds beside its measured ones, and a task's predicted cost per candidate.

The predictions are the job tags ``profiling.ProfileBook`` keeps; the
per-candidate plans are the control loop's (``ControlLoop.profile``).
What the profiler has learned is shown per family, the zoo's and the
viewer's own models' only (``profiler_families``).
"""

from __future__ import annotations

from typing import Any, Mapping

from .profiling import USER_FAMILY_PREFIX, prediction_in, profiling_runs

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


def profiler_families(profiler: Any, viewer_id: int) -> dict[str, Any]:
    """What the profiler (``selection.profiler.Profiler``) has learned, as
    user ``viewer_id`` may see it: ``families`` (jobs and source per family)
    holds the zoo's families and her own models' (``user:<her id>:...``),
    and ``records`` counts the jobs of those only. Another user's family is
    left out, even its count: its key names that user and the digest of her
    code (docs/profiler.md)."""
    own = f"{USER_FAMILY_PREFIX}{viewer_id}:"
    shown = {family: count for family, count in sorted(profiler.counts.items())
             if not family.startswith(USER_FAMILY_PREFIX) or family.startswith(own)}
    return {"records": sum(shown.values()),
            "families": {family: {"jobs": count, "source": profiler.source(family)} for family, count in shown.items()}}
