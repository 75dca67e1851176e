"""A task's profile (``Task.profile()``) as table rows, for ``%easeml models``
and ``easeml models --task``: per candidate, the predicted seconds of its
next pick, who predicted them, the configuration the provisioner chose and
its money cost at the admin's prices (ACAI §4.2.2-4.2.3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CANDIDATE_COLUMNS = ("candidate", "engine", "predicted_s", "source", "resources", "cost", "goal", "feasible")


def describe_resources(res: Mapping[str, Any] | None) -> str:
    """``2 threads, 1 worker, cpu, 512 MiB``: a plan's chosen configuration in
    a few words (partitions only where a torch pick uses more than one)."""
    if not res:
        return ""
    plural = lambda n, word: f"{n} {word}" + ("" if n == 1 else "s")
    parts = [plural(res.get("threads", 1), "thread"), plural(res.get("workers", 1), "worker")]
    if res.get("partitions", 1) != 1:
        parts.append(plural(res["partitions"], "partition"))
    parts.append(str(res.get("device", "cpu")))
    memory = res.get("memory_bytes") or 0
    if memory:
        parts.append(f"{memory / 2**20:.0f} MiB")
    return ", ".join(parts)


def candidate_rows(profile: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per candidate of the profile, in its order (cheapest predicted first)."""
    return [{"candidate": plan.get("model"), "engine": plan.get("engine"),
             "predicted_s": plan.get("predicted_seconds"), "source": plan.get("source"),
             "resources": describe_resources(plan.get("resources")), "cost": plan.get("cost"),
             "goal": plan.get("goal"), "feasible": plan.get("feasible")}
            for plan in profile.get("candidates") or []]


def prices_line(profile: Mapping[str, Any]) -> str:
    """What the money costs are in: the admin's unit prices, per hour."""
    prices = profile.get("prices") or {}
    return ("prices per hour: " + ", ".join(f"{prices[k]:g} per {unit}" for k, unit in
                                            (("cpu", "CPU"), ("gb", "GB"), ("gpu", "GPU")) if k in prices))
