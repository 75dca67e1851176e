"""A store that cannot take writes now (unavailable, or full) is waited out,
not treated as a bug: the loop's turns back off and the outage is logged once
when it starts and once when it ends."""

from __future__ import annotations

import logging
import time

from ...errors import StorageError, StorageFullError, StoreUnavailableError
from ...store import Store

log = logging.getLogger(__package__)  # one logger for the whole loop

MAX_BACKOFF_SECONDS = 30.0  # the longest wait between turns while the store cannot be written
# Errors that mean the store cannot take writes now (not a bug): the loop waits them out.
STORE_OUTAGES = (StoreUnavailableError, StorageFullError)


def backoff_seconds(tick: float, failed_turns: int) -> float:
    """The wait before the next turn: ``tick``, doubled per turn failed in a
    row for an outage, at most ``MAX_BACKOFF_SECONDS`` (or ``tick`` if longer)."""
    return min(tick * 2 ** min(failed_turns, 20), max(tick, MAX_BACKOFF_SECONDS))


class StoreOutage:
    """The store outage that blocks the loop now (None while writes work), and since when."""

    def __init__(self):
        self.error: StorageError | None = None
        self.since: float | None = None

    def failed(self, error: StorageError) -> None:
        """Log an outage once, when it starts; the turns that fail during it are quiet."""
        if self.error is None:
            self.since = time.time()
            log.warning("the store cannot be written (%s); the control loop is blocked and retries with backoff",
                        error)
        self.error = error

    @staticmethod
    def check(store: Store) -> None:
        """During an outage: a turn may have nothing to write, so only a
        successful write ends it (stores without the check have no outages)."""
        check = getattr(store, "check_writable", None)
        if check is not None:
            check()

    def recovered(self) -> None:
        if self.error is not None:
            log.warning("the store can be written again after %.0f s; the control loop goes on",
                        time.time() - (self.since or time.time()))
            self.error, self.since = None, None

    @property
    def blocked(self) -> str | None:
        """Why the loop cannot go on: ``store_unavailable``, ``storage_full``, or None."""
        error = self.error
        if error is None:
            return None
        return "storage_full" if isinstance(error, StorageFullError) else "store_unavailable"

    def status(self) -> dict:
        """The store as the loop last met it: writable, or blocked since when and why."""
        error = self.error
        return {"writable": error is None, "blocked": self.blocked,
                "since": None if error is None else self.since,
                "message": None if error is None else str(error)}
