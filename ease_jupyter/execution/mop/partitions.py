"""The data side of MOP: the split into partitions, and who holds each one.

Pure: numpy only, no engine, no clock, no I/O.

* :func:`split_validation` and :func:`partition` cut the data the way
  Cerebro §3.1 asks: shuffle the training data once, cut it into p
  partitions, and cut the validation data into p partitions too.
* :class:`PartitionMap` is the one record of which worker holds which
  partition (replica-aware placement, §5.5; repair after a loss, §5.6). The
  runner changes it as it places, moves and loses copies, and hands each
  scheduler the availability map it reads from it.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ease_jupyter.errors import EaseMLError, NotFoundError
from ease_jupyter.execution.holdout import validation_mask

__all__ = ["TRAIN", "VAL", "KINDS", "split_validation", "partition", "data_bytes", "PartitionMap"]

#: The two kinds of partitions: training units read TRAIN, validation units VAL.
TRAIN, VAL = "train", "val"
KINDS = (TRAIN, VAL)

Data = tuple[np.ndarray, np.ndarray]


def split_validation(
    X: Any,
    y: Any,
    *,
    validation: tuple[Any, Any] | None = None,
    val_fraction: float = 0.2,
    example_ids: Sequence[int] | None = None,
    seed: int = 0,
) -> tuple[Data, Data]:
    """``((X, y), (X_val, y_val))``: the given validation data, or the
    examples that ``holdout.validation_mask(example_ids, val_fraction, seed)``
    holds out, so that a split is stable across runs. ``example_ids`` are
    the split's keys, one per example: the service passes content keys
    (``LoadedData.split_keys``), so copies of a row stay on one side;
    default ``0..n-1``.

    Raises:
        EaseMLError: lengths that do not match, or fewer than two training
            examples left.
    """
    X = np.asarray(X)
    y = np.asarray(y)
    if len(X) != len(y):
        raise EaseMLError(f"y: found {len(y)} labels, expected one per example of X ({len(X)})")
    if validation is None:
        ids = np.arange(len(X)) if example_ids is None else np.asarray(example_ids)
        if len(ids) != len(X):
            raise EaseMLError(f"example_ids: found {len(ids)} ids, expected {len(X)}")
        held = validation_mask(ids, val_fraction, seed)
        X_val, y_val, X, y = X[held], y[held], X[~held], y[~held]
    else:
        X_val, y_val = (np.asarray(a) for a in validation)
        if len(X_val) != len(y_val):
            raise EaseMLError(f"validation[1]: found {len(y_val)} labels, expected {len(X_val)}")
    if len(X) < 2:
        raise EaseMLError(f"X: found {len(X)} training examples, expected at least 2")
    return (X, y), (X_val, y_val)


def partition(train: Data, val: Data, parts: int, seed: int) -> dict[str, dict[int, Data]]:
    """Cut both data sets into ``parts`` partitions: kind -> partition id ->
    ``(X, y)``. The training data are shuffled once under ``seed`` first
    (§3.1); the validation data keep their order."""
    X, y = train
    X_val, y_val = val
    order = np.random.default_rng(seed).permutation(len(X))
    return {
        TRAIN: {i: (X[order[idx]], y[order[idx]]) for i, idx in enumerate(np.array_split(np.arange(len(X)), parts))},
        VAL: {i: (X_val[idx], y_val[idx]) for i, idx in enumerate(np.array_split(np.arange(len(X_val)), parts))},
    }


def data_bytes(parts: Mapping[str, Mapping[int, Data]]) -> int:
    """Bytes of every partition's arrays: what one copy of a run's data holds."""
    return sum(np.asarray(a).nbytes for by_id in parts.values() for data in by_id.values() for a in data)


class PartitionMap:
    """Which workers hold a copy of each partition, per kind.

    The partitions are fixed at construction; workers come and go. A
    partition may have several holders (replication, §5.5) or none (its
    holders were lost and it waits to be placed again, §5.6).

    Args:
        partitions: kind -> its partition ids.

    Raises:
        NotFoundError: (from every method) a kind or partition id that the
            map was not built with.
    """

    def __init__(self, partitions: Mapping[str, Iterable[int]]):
        self._holders: dict[str, dict[int, set[str]]] = {k: {int(p): set() for p in ps} for k, ps in partitions.items()}

    def _of(self, kind: str) -> dict[int, set[str]]:
        try:
            return self._holders[kind]
        except KeyError:
            raise NotFoundError(f"kind: found {kind!r}, expected one of {sorted(self._holders)}") from None

    def _set(self, kind: str, pid: int) -> set[str]:
        held = self._of(kind)
        try:
            return held[pid]
        except KeyError:
            raise NotFoundError(f"partition: found {pid!r} of kind {kind!r}, expected one of {sorted(held)}") from None

    # -- reading -------------------------------------------------------------------------------
    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._holders)

    def partitions(self, kind: str) -> tuple[int, ...]:
        """The partition ids of ``kind``, sorted."""
        return tuple(sorted(self._of(kind)))

    def holders(self, kind: str, pid: int) -> frozenset[str]:
        """The workers that hold partition ``pid`` of ``kind``."""
        return frozenset(self._set(kind, pid))

    def held_by(self, kind: str, worker: str) -> set[int]:
        """The partitions of ``kind`` that ``worker`` holds (empty for a worker the map does not know)."""
        return {p for p, h in self._of(kind).items() if worker in h}

    def availability(self, kind: str, workers: Iterable[str]) -> dict[str, set[int]]:
        """The availability map a :class:`MOPScheduler` takes (§5.5): each of
        ``workers`` -> the partitions of ``kind`` it holds (possibly none).
        Holders not among ``workers`` are left out."""
        av: dict[str, set[int]] = {w: set() for w in workers}
        for pid, held in self._of(kind).items():
            for w in held:
                if w in av:
                    av[w].add(pid)
        return av

    def under_replicated(self, kind: str, replication: int) -> list[int]:
        """Partitions of ``kind`` with fewer than ``replication`` holders, sorted."""
        return sorted(p for p, h in self._of(kind).items() if len(h) < replication)

    def orphans(self) -> dict[str, list[int]]:
        """Kind -> its partitions that no worker holds (sorted), for the kinds that have any."""
        out = {k: sorted(p for p, h in held.items() if not h) for k, held in self._holders.items()}
        return {k: ps for k, ps in out.items() if ps}

    # -- changing ------------------------------------------------------------------------------
    def add(self, kind: str, pid: int, worker: str) -> None:
        """``worker`` now holds a copy of partition ``pid`` of ``kind``."""
        self._set(kind, pid).add(worker)

    def discard(self, kind: str, pid: int, worker: str) -> None:
        """``worker`` no longer holds partition ``pid`` of ``kind`` (no error if it did not)."""
        self._set(kind, pid).discard(worker)

    def move(self, kind: str, pid: int, donor: str, target: str) -> None:
        """The copy of ``pid`` moved from ``donor`` to ``target``."""
        held = self._set(kind, pid)
        held.discard(donor)
        held.add(target)

    def place(self, kind: str, availability: Mapping[str, Iterable[int]]) -> None:
        """Record an engine's placement (worker -> partitions it now holds,
        as ``Engine.place_partitions`` returns it) on top of what is known."""
        for w, pids in availability.items():
            for pid in pids:
                self.add(kind, pid, w)

    def remove_worker(self, worker: str) -> None:
        """``worker`` is gone: it holds nothing of any kind."""
        for held in self._holders.values():
            for h in held.values():
                h.discard(worker)
