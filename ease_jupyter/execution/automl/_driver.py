"""A tiny in-process driver: runs a procedure on simulated MOP epochs."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable, Mapping

from .base import EpochDecision, Procedure, ProtocolError, TrialResult, TrialSpec

TrainEpoch = Callable[[dict[str, TrialSpec], int], Mapping[str, float]]
"""``train_epoch(live, epoch) -> {trial id: score}``: trains every live trial
for one epoch (``epoch`` is the 0-based MOP epoch index) and returns each
one's validation score, higher is better (NaN allowed)."""


@dataclass(frozen=True)
class EpochRecord:
    """One simulated MOP epoch."""

    epoch: int  # 0-based MOP epoch index
    trained: tuple[str, ...]  # the live trials trained in it
    results: Mapping[str, TrialResult]
    decision: EpochDecision


@dataclass(frozen=True)
class RunHistory:
    """Everything :func:`run_procedure` saw and decided."""

    trials: Mapping[str, TrialSpec]  # every trial, in the order it was proposed
    epochs: tuple[EpochRecord, ...]
    best: tuple[str, float] | None

    @property
    def n_epochs(self) -> int:
        """MOP epochs run (the elapsed time, in epochs)."""
        return len(self.epochs)

    def epochs_trained(self) -> dict[str, int]:
        """Epochs each trial trained under its own id."""
        counts = {tid: 0 for tid in self.trials}
        for record in self.epochs:
            for tid in record.trained:
                counts[tid] += 1
        return counts

    @property
    def trial_epochs(self) -> int:
        """Total compute: the sum over trials of epochs trained."""
        return sum(len(r.trained) for r in self.epochs)

    def scores(self, trial_id: str) -> list[float]:
        """A trial's learning curve: its score after each of its epochs."""
        return [r.results[trial_id].score for r in self.epochs if trial_id in r.results]


def run_procedure(procedure: Procedure, train_epoch: TrainEpoch, *, max_epochs: int = 10_000) -> RunHistory:
    """Run ``procedure`` to the end on simulated MOP epochs.

    Follows the protocol of :mod:`ease_jupyter.execution.automl.base` exactly
    as the MOP runner does, with ``train_epoch`` in place of a real MOP
    epoch: ``start()``, then per epoch ``train_epoch(live, epoch)``, one
    :class:`TrialResult` per live trial, ``epoch_end``, apply the decision --
    until a decision is finished. It checks the procedure's side of the
    contract on every decision, so it doubles as a contract check in tests.

    Args:
        procedure: a procedure that has not been started.
        train_epoch: ``(live trials by id, 0-based epoch) -> {id: score}``
            for exactly the live ids.
        max_epochs: the most MOP epochs to run.

    Returns:
        The :class:`RunHistory`.

    Raises:
        ProtocolError: ``train_epoch`` returned missing, extra or non-numeric
            scores, or the procedure broke the contract, or it did not finish
            within ``max_epochs`` epochs.

    >>> from ease_jupyter.execution.automl import LearningRateGrid
    >>> h = run_procedure(LearningRateGrid("cnn", epochs=2),
    ...                   lambda live, e: {t: 1 - abs(s.params["lr"] - 0.01) for t, s in live.items()})
    >>> h.n_epochs, h.best
    (2, ('t1', 1.0))
    """
    if isinstance(max_epochs, bool) or not isinstance(max_epochs, numbers.Integral) or max_epochs < 1:
        raise ValueError(f"max_epochs: found {max_epochs!r}, expected an integer >= 1")
    trials: dict[str, TrialSpec] = {}
    live: dict[str, TrialSpec] = {}
    counts: dict[str, int] = {}

    def admit(specs, where: str) -> None:
        known = set(trials)
        for spec in specs:
            if not isinstance(spec, TrialSpec):
                raise ProtocolError(f"{where}: found {type(spec).__name__}, expected TrialSpec")
            if spec.id in trials:
                raise ProtocolError(f"{where}: duplicate trial id {spec.id!r}")
            if spec.init_from is not None and spec.init_from not in known:
                raise ProtocolError(f"{where}: {spec.id!r} has init_from {spec.init_from!r}, not an earlier trial")
            trials[spec.id] = live[spec.id] = spec
            counts[spec.id] = 0

    admit(procedure.start(), "start()")
    if not live:
        raise ProtocolError("start() proposed no trials")
    records: list[EpochRecord] = []
    for epoch in range(max_epochs):
        scores = train_epoch(dict(live), epoch)
        if not isinstance(scores, Mapping) or set(scores) != set(live):
            got = sorted(scores) if isinstance(scores, Mapping) else type(scores).__name__
            raise ProtocolError(f"train_epoch at epoch {epoch}: found scores for {got}, expected {sorted(live)}")
        results = {}
        for tid in live:
            score = scores[tid]
            if isinstance(score, bool) or not isinstance(score, numbers.Real):
                raise ProtocolError(f"train_epoch at epoch {epoch}: score of {tid!r} is {score!r}, expected a number")
            counts[tid] += 1
            results[tid] = TrialResult(tid, counts[tid], float(score))
        decision = procedure.epoch_end(results)
        where = f"epoch_end at epoch {epoch}"
        unknown = set(decision.stop) - set(live)
        if unknown:
            raise ProtocolError(f"{where}: stops trials that are not live: {sorted(unknown)}")
        trained = tuple(live)
        for tid in decision.stop:
            del live[tid]
        admit(decision.add, where)
        if decision.finished != (not live):
            state = "finished with live trials" if decision.finished else "not finished with no live trial"
            raise ProtocolError(f"{where}: decision {state} {sorted(live)}")
        records.append(EpochRecord(epoch, trained, results, decision))
        if decision.finished:
            return RunHistory(dict(trials), tuple(records), procedure.best())
    raise ProtocolError(f"the procedure did not finish within max_epochs={max_epochs} epochs")
