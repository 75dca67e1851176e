"""Feeds in processes of their own (docs/service.md, "Feeds in their own processes").

The service's process is bound by one core (the GIL) when many clients
call at once, and a feed is its most expensive request: JSON of arrays to
parse, arrays to hash and write, a write transaction. ``FeedProcesses``
runs that work (``feeding.Feeder``) in ``n`` processes (``worker_context``), each with
its own store connection, so feeds use another core and no longer queue
behind reads for the GIL. A user's feeds always go to the same process (by
owner id): its per-task lock keeps one feed of a task at a time, and her
quota is checked and spent by one process, so two feeds of hers cannot
each find the same room.
Each process exits when the service is gone (``exit_with_parent``).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..errors import StoreUnavailableError
from ..store import Task, User, open_store
from .executors import exit_with_parent, ignore_interrupts, worker_context
from .feeding import Fed, Feeder, json_object
from .quota import forget_usage

_feeder: Feeder | None = None  # in a feed process: set by _open


def _open(db_url: str | None, data_dir: str, quota_bytes: int | None, parent_pid: int) -> None:
    global _feeder
    ignore_interrupts()
    exit_with_parent(parent_pid)
    store, blobs = open_store(db_url, Path(data_dir))
    _feeder = Feeder.at(store, blobs, Path(data_dir), quota_bytes)


def _feed(caller: User, task: Task, raw: bytes) -> Fed:
    assert _feeder is not None
    return _feeder.feed(caller, task, json_object(raw))


def _forget(owner_id: int) -> None:
    assert _feeder is not None
    forget_usage(_feeder.store, owner_id)


def _ready() -> int:
    return os.getpid()


class FeedProcesses:
    """``n`` feed processes of the service whose store is ``db_url`` (not
    ``memory://``: a process of its own cannot share it) and data ``data_dir``."""

    def __init__(self, n: int, db_url: str | None, data_dir: str | Path, quota_bytes: int | None):
        if n < 1:
            raise ValueError(f"feed_processes: found {n}, expected >= 1")
        self._args = (db_url, str(data_dir), quota_bytes, os.getpid())
        self._ctx = worker_context()
        self._lock = threading.Lock()
        self._pools = [self._start() for _ in range(n)]

    def _start(self) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(1, mp_context=self._ctx, initializer=_open, initargs=self._args)
        pool.submit(_ready)  # spawned now: a spawn and its imports take seconds the first feed need not wait
        return pool

    def shard(self, task: Task) -> int:
        """The process that stores the task's feeds: its owner's."""
        return task.owner_id % len(self._pools)

    def feed(self, caller: User, task: Task, raw: bytes) -> Fed:
        """Parse the body ``raw`` and store the feed in its owner's process."""
        shard = self.shard(task)
        pool = self._pools[shard]
        try:
            future = pool.submit(_feed, caller, task, raw)
        except BrokenProcessPool:  # it stopped before this feed reached it (killed while idle): a new one stores it
            self._replace(shard, pool)
            pool = self._pools[shard]
            future = pool.submit(_feed, caller, task, raw)
        try:
            return future.result()
        except BrokenProcessPool:
            self._replace(shard, pool)
            raise StoreUnavailableError("the feed's process stopped before it answered; whether the feed was "
                                        "stored is unknown: read the task's versions, then feed again",
                                        field="feed") from None

    def forget(self, owner_id: int) -> None:
        """Every process counts ``owner_id``'s stored bytes again (``quota.forget_usage``)."""
        for shard, pool in enumerate(list(self._pools)):
            try:
                pool.submit(_forget, owner_id).result()
            except BrokenProcessPool:  # its replacement starts with no count to forget
                self._replace(shard, pool)

    def pids(self) -> list[int]:
        return [pool.submit(_ready).result() for pool in self._pools]

    def _replace(self, shard: int, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pools[shard] is broken:
                self._pools[shard] = self._start()
        broken.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)
