"""Auto-provisioning a pick in the service (ACAI §4.2.4; the chooser is
``selection/provisioner.py``).

:func:`provision_pick` is what the control loop calls for a pick before it
starts the job: it turns the owner's budget state (``service/budget.py``)
into the provisioner's constraints, asks the predictor for every
configuration of the pool and returns the choice with where its predictions
came from. How the constraints map:

- her ``deadline`` becomes seconds from ``now``;
- what is left of her ``seconds`` budget (the measured seconds of her jobs,
  ``budget.Spent``) caps this job's runtime too, so the tighter of the two
  is the provisioner's deadline; what is left of ``gpu_seconds`` caps the
  runtime of GPU configurations only;
- a money ``budget`` (in the prices' currency) is the provisioner's cost
  budget; the store keeps none yet, so the caller passes it or None;
- neither: the least runtime within her fair share of the pool
  (:func:`fair_share`).

A predictor that raises, or answers something that is not a number of
seconds, is replaced by ``fallback`` (the FLOPs proxy, ``loop/costs.py``)
for the whole search, and the result says so (``source="flops"``, ``note``)
for the job's record. The chosen :class:`ResourceConfig` has the fields of
``profiling.Resources`` (``Resources(**choice.config.json())``).

Bad input (a deadline already past, a budget below one profiling run's cost,
bad prices) raises :class:`DataError` naming the field; nothing is stored
here.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from ..errors import DataError
from ..selection.provisioner import (
    Choice,
    Pool,
    Prices,
    ResourceConfig,
    candidate_configs,
    check_budget,
    choose,
)
from .budget import Limits, Spent

__all__ = ["Provisioned", "fair_share", "provision_pick"]

Predictor = Callable[[ResourceConfig], float]


@dataclass(frozen=True)
class Provisioned:
    """A pick's configuration and the provenance of its prediction:
    ``source`` is ``"profiler"`` or ``"flops"`` (the fallback was used)."""

    choice: Choice
    source: str
    note: str = ""

    def json(self) -> dict:
        out = self.choice.json()
        out.update(source=self.source, note="; ".join(n for n in (self.choice.note, self.note) if n))
        return out


def fair_share(pool: Pool, active_users: int) -> tuple[int, int]:
    """(most CPUs, most workers) one of ``active_users`` users may hold:
    an equal share of the workers (at least one), all their cores (ACAI
    §3.3 shares the cluster equally among users)."""
    if isinstance(active_users, bool) or not isinstance(active_users, int) or active_users < 1:
        raise DataError("active_users", repr(active_users), "an integer >= 1")
    workers = max(1, pool.workers // active_users)
    return workers * pool.cores, workers


def provision_pick(*, pool: Pool, memory_bytes: int, predict: Predictor, prices: Prices,
                   fallback: Predictor | None = None, limits: Limits | None = None, spent: Spent | None = None,
                   budget: float | None = None, profiling_cost: float | None = None,
                   active_users: int = 1, now: datetime | None = None) -> Provisioned:
    """Choose a pick's resources on ``pool`` (module docstring).

    ``memory_bytes`` is the task's Seneca reservation (``execution/memory.py``,
    ``gpu_memory.py``), taken as given. ``profiling_cost``: what one
    profiling run of this family costs; a money ``budget`` below it is
    refused (the profiler could not even learn the family's runtime)."""
    budget = check_budget(budget)
    if budget is not None and profiling_cost is not None and budget < profiling_cost:
        raise DataError("budget", f"{budget:g}", f"at least one profiling run's cost ({profiling_cost:g})")
    limits, spent = limits or Limits(), spent or Spent()
    now = now or datetime.now(timezone.utc)
    deadline = _tighter((limits.deadline - now).total_seconds() if limits.deadline is not None else None,
                        None if limits.seconds is None else limits.seconds - spent.seconds)
    gpu_left = None if limits.gpu_seconds is None else limits.gpu_seconds - spent.gpu
    max_cpus, max_workers = fair_share(pool, active_users)
    configs = candidate_configs(pool, memory_bytes)
    # Her deadline passed or her seconds are spent: no configuration can meet
    # it (the loop holds her new picks); the fastest is the nearest miss.
    too_late = deadline is not None and deadline <= 0

    def search(predictor: Predictor) -> Choice:
        seconds = {c: predictor(c) for c in configs}
        allowed = [c for c in configs if c.device != "gpu" or gpu_left is None or seconds[c] <= gpu_left]
        choice = choose(allowed or configs, seconds.__getitem__, prices, budget=budget,
                        deadline=None if too_late else deadline, max_cpus=max_cpus, max_workers=max_workers)
        if too_late:
            return replace(choice, feasible=False, note="her deadline has passed or her seconds budget is spent")
        if not allowed:  # a GPU-only pool and her GPU seconds would not cover any configuration
            choice = replace(choice, feasible=False, note=f"no configuration runs within her {gpu_left:g} GPU "
                                                          "seconds left")
        return choice

    try:
        return Provisioned(search(_checked(predict)), "profiler")
    except _PredictionFailed as failure:
        if fallback is None:
            raise DataError("predict", str(failure.__cause__ or failure), "predicted seconds (or a fallback)") from None
        note = f"the profiler's prediction failed ({failure.__cause__ or failure}); used the FLOPs proxy"
    try:
        return Provisioned(search(_checked(fallback)), "flops", note)
    except _PredictionFailed as failure:
        raise DataError("fallback", str(failure.__cause__ or failure), "predicted seconds") from None


class _PredictionFailed(Exception):
    pass


def _checked(predict: Predictor) -> Predictor:
    def checked(config: ResourceConfig) -> float:
        try:
            seconds = predict(config)
        except Exception as error:
            raise _PredictionFailed() from error
        if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not math.isfinite(seconds) \
                or seconds < 0:
            raise _PredictionFailed(f"{seconds!r} seconds for {config}")
        return float(seconds)
    return checked


def _tighter(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)
