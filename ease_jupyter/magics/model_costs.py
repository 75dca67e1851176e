"""``%easeml models NAME``: the task's jobs (predicted beside measured
seconds) and, in a second table, the predicted cost of each candidate's next
pick with the configuration the provisioner chose (``Task.profile()``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..jobspec import describe_job
from ..profile_rows import CANDIDATE_COLUMNS, candidate_rows, prices_line
from .display import Result

JOB_COLUMNS = ("model", "config", "status", "accuracy", "seconds", "predicted_s", "source", "version")


def job_rows(jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The jobs, best accuracy first: measured ``seconds`` beside ``predicted_s``."""
    rows = ({"model": j["model"], "config": describe_job(j["model"], j["config"]), "status": j["status"],
             "accuracy": j["accuracy"], "seconds": j["cost_seconds"], "predicted_s": j.get("predicted_seconds"),
             "source": j.get("source"), "version": j["dataset_version"]} for j in jobs)
    return sorted(rows, key=lambda r: -(r["accuracy"] if r["accuracy"] is not None else -1e9))


class ModelsResult(Result):
    """A ``Result`` whose ``rows`` are the jobs and whose ``candidates`` are
    the predicted costs per candidate; ``profile`` is the raw profile."""

    def __init__(self, name: str, jobs: list[dict[str, Any]], profile: Mapping[str, Any]):
        super().__init__(f"{name}: {len(jobs)} model(s) trained or queued", jobs, job_rows(jobs), list(JOB_COLUMNS))
        self.profile = profile
        self.candidates = candidate_rows(profile)
        self._costs = Result(f"predicted cost of each candidate's next pick ({profile.get('examples', 0)} examples; "
                             f"{prices_line(profile)})" if self.candidates else
                             "no candidate costs yet (the task has no data)", profile, self.candidates,
                             list(CANDIDATE_COLUMNS))

    def __repr__(self) -> str:
        return super().__repr__() + "\n\n" + repr(self._costs)

    def _repr_html_(self) -> str:
        return super()._repr_html_() + self._costs._repr_html_()

