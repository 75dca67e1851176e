"""Slots kept for short jobs: one user's picks predicted to run long may not
fill an engine, so a user who arrives while they run gets her models
trained within about their own cost, not after the long jobs end.

After Hawk (Delgado, Dinu, Kermarrec, Zwaenepoel, "Hawk: Hybrid Datacenter
Scheduling", USENIX ATC 2015, §3: a small part of the cluster is reserved
for short jobs, and long jobs may not run there), with "short" and "long"
told apart by the selector's own cost estimate ``c_k``. Unlike Hawk's, the
reserve is kept per user: a user's first long job may take any slot (a
newcomer's first pick is never held, even where every candidate is long,
as a torch task's may all be), and her further long jobs may run on at most
``slots - reserved`` slots. It gives up some work conservation on purpose:
while one user's long picks alone are waiting, the kept slot idles, which
delays her long jobs and no one else's. A user may always run one long
job on an engine (``max(1, slots - reserved)``), so an engine of one slot
takes any pick. It is off by default: on the workload benchmark it did not
change the time to a good model measurably, and a user alone on the service
would lose a slot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import DataError

LONG_SECONDS = 30.0  # a pick predicted to take longer is long: a wait a user at her notebook feels
RESERVED_SLOTS = 0  # per engine, slots that one user's long picks may not fill (0: off, the default; docs/selection.md)


@dataclass(frozen=True)
class ShortLane:
    """Which picks may start: a long pick (predicted seconds over
    ``long_seconds``) only while its owner runs fewer than
    ``slots - reserved`` long jobs on its engine (at least one).
    ``long_seconds=inf`` or ``reserved=0`` turns the rule off."""

    long_seconds: float = LONG_SECONDS
    reserved: int = RESERVED_SLOTS

    def __post_init__(self) -> None:
        if not (isinstance(self.long_seconds, (int, float)) and not math.isnan(self.long_seconds)
                and self.long_seconds > 0):
            raise DataError("long_seconds", repr(self.long_seconds), "a number of seconds > 0 (inf: no lane)")
        if isinstance(self.reserved, bool) or not isinstance(self.reserved, int) or self.reserved < 0:
            raise DataError("reserved", repr(self.reserved), "an integer, 0 or more")

    @property
    def active(self) -> bool:
        """Whether the rule can ever hold a pick (off: nothing to count or check)."""
        return self.reserved > 0 and math.isfinite(self.long_seconds)

    def is_long(self, predicted_seconds: float) -> bool:
        return predicted_seconds > self.long_seconds

    def admits(self, predicted_seconds: float, slots: int, long_running: int) -> bool:
        """Whether a pick predicted to take ``predicted_seconds`` may start on
        an engine of ``slots`` slots where its owner runs ``long_running`` long jobs."""
        if not self.is_long(predicted_seconds):
            return True
        return long_running < max(1, slots - self.reserved)
