"""Restart recovery: where a run stands after each unit, and going on from there.

Cerebro §5.6: "the trained model states are always checkpointed between
training units". A process that dies loses the run, not its work, if it
kept :meth:`MOPRunner.resume_state` (or its parts,
:meth:`MOPRunner.trial_progress` and :meth:`MOPRunner.checkpoint`) after
every unit. ``MOPRunner(..., resume=state)`` then goes on from the last
finished unit:

* :func:`replay_procedure` replays the procedure's decisions of the
  completed epochs from the stored scores (procedures are deterministic
  functions of their results, ``automl/base.py``);
* each trial's checkpoint is loaded (``MOPRunner`` admission, checked by
  :func:`check_parent_unmoved` for a trial that copies its parent);
* :func:`restore_epoch` marks the units of the interrupted epoch that
  finished as completed (:meth:`MOPScheduler.mark_completed`), so they are
  never trained again, and restores the epoch's train-loss sums, so its
  ``train_loss`` is that of all its units. If every train unit had
  finished, only validation runs again (it changes no weights).

The resumed units are seeded as before (unit seeds depend only on trial,
epoch and partition); the order in which the rest of the epoch visits
partitions is drawn afresh unless ``visit_order`` replays the interrupted
run's log, in which case the weights equal those of an uninterrupted run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, MutableMapping, Sequence

from ease_jupyter.errors import InvalidStateError, NotFoundError
from ease_jupyter.execution.automl.base import Procedure, TrialResult, TrialSpec
from ease_jupyter.execution.mop.results import RunnerError
from ease_jupyter.execution.mop.scheduler import MOPScheduler, Unit

__all__ = [
    "TrialProgress", "ResumeState", "EpochSoFar", "replay_procedure", "restore_epoch", "check_parent_unmoved",
]


@dataclass(frozen=True)
class TrialProgress:
    """Where one trial stands in a run: what a restart needs besides its
    checkpoint (Cerebro §5.6). :meth:`to_dict` / :meth:`from_dict` give a
    JSON-ready form."""

    scores: tuple[float, ...] = ()  # validation score of each epoch it completed, oldest first
    visited: tuple[int, ...] = ()  # partitions of the current epoch it trained on, in that order
    loss_sum: float = 0.0  # sum of train loss x examples over those units
    examples: float = 0.0  # training examples in those units
    seconds: float = 0.0  # compute spent in those units

    @property
    def epochs(self) -> int:
        """Epochs the trial completed (under its own id, ``automl/base.py``)."""
        return len(self.scores)

    def to_dict(self) -> dict[str, Any]:
        return {"scores": list(self.scores), "visited": list(self.visited), "loss_sum": self.loss_sum,
                "examples": self.examples, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TrialProgress":
        return cls(tuple(float(x) for x in data.get("scores", ())), tuple(int(p) for p in data.get("visited", ())),
                   float(data.get("loss_sum", 0.0)), float(data.get("examples", 0.0)), float(data.get("seconds", 0.0)))


@dataclass(frozen=True)
class ResumeState:
    """A run interrupted after some unit, for ``MOPRunner(..., resume=state)``.

    ``MOPRunner.resume_state()`` makes one; a service may also assemble it
    from what it stored after each unit.

    Attributes:
        epoch: the scheduler epoch that was running (0-based); epochs
            ``0..epoch-1`` are complete (trained, validated, and handed to
            ``procedure.epoch_end``).
        trials: trial id -> its :class:`TrialProgress`. A trial that is
            missing counts as one with no completed epoch and no unit (e.g.
            one added at the last epoch boundary that had not trained yet).
        checkpoints: trial id -> its weights after its last finished train
            unit. A trial without one gets its weights as at admission: fresh
            ones (deterministic under the run's seed) or, with ``init_from``,
            its parent's, which is possible only when the parent trained no
            unit since the trial was added.
        best_checkpoints: trial id -> (score, checkpoint) of its best epoch so
            far; it seeds ``RunResult.best_checkpoints`` (optional).
        partitions: the interrupted run's partition count (p, §3.1). A
            trial's ``visited`` partitions mean something only for the same
            p and data; give the resumed runner ``n_partitions=partitions``.
    """

    epoch: int
    trials: Mapping[str, TrialProgress]
    checkpoints: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    best_checkpoints: Mapping[str, tuple[float, bytes]] = field(default_factory=dict, repr=False)
    partitions: int | None = None

    @property
    def units_done(self) -> int:
        """Train units of the interrupted epoch that finished (and are not run again)."""
        return sum(len(p.visited) for p in self.trials.values())


@dataclass
class EpochSoFar:
    """One trial's train units in the current epoch: the running part of its
    :class:`TrialProgress`."""

    visited: list[int] = field(default_factory=list)
    loss_sum: float = 0.0
    examples: float = 0.0
    seconds: float = 0.0

    def add(self, partition: int, metrics: Mapping[str, Any]) -> None:
        """Count a finished train unit on ``partition`` with its ``metrics``
        (``loss`` is weighted by ``examples``; a unit with none adds no loss)."""
        self.visited.append(partition)
        n = float(metrics.get("examples", 0.0))
        if n > 0:
            self.loss_sum += float(metrics.get("loss", float("nan"))) * n
            self.examples += n
        self.seconds += float(metrics.get("seconds", 0.0))

    @property
    def train_loss(self) -> float:
        """Mean train loss per example over the epoch's units so far (NaN if none)."""
        return self.loss_sum / self.examples if self.examples else float("nan")

    def progress(self, scores: Sequence[float]) -> TrialProgress:
        """The trial's :class:`TrialProgress`, given its scores so far."""
        return TrialProgress(tuple(scores), tuple(self.visited), self.loss_sum, self.examples, self.seconds)

    @classmethod
    def of(cls, progress: TrialProgress) -> "EpochSoFar":
        return cls(list(progress.visited), progress.loss_sum, progress.examples, progress.seconds)


def replay_procedure(
    state: ResumeState,
    procedure: Procedure,
    live: list[str],
    epochs: MutableMapping[str, int],
    scores: MutableMapping[str, list[float]],
    admit: Callable[[Sequence[TrialSpec], int], None],
) -> tuple[list[str], bool]:
    """Bring a started ``procedure`` to the resume point: feed it the stored
    score of every completed epoch and admit the trials it adds then.

    Args:
        state: the resume point.
        procedure: started; ``live`` are the trials ``start()`` gave.
        epochs, scores: each admitted trial's completed epochs and scores,
            updated in place (the runner's books).
        admit: ``admit(specs, epoch)`` admits the trials that the decision
            after completed ``epoch`` added.

    Returns:
        The live trials, and whether the procedure had finished.

    Raises:
        RunnerError: ``state`` does not fit the procedure's decisions.
    """
    for epoch in range(state.epoch):
        results: dict[str, TrialResult] = {}
        for t in live:
            stored = state.trials.get(t, TrialProgress()).scores
            n = epochs[t]
            if n >= len(stored):
                raise RunnerError(f"resume.trials[{t!r}].scores: found {len(stored)}, expected a score for "
                                  f"its epoch {n + 1} (scheduler epoch {epoch})")
            epochs[t] = n + 1
            scores[t].append(stored[n])
            results[t] = TrialResult(t, n + 1, stored[n])
        decision = procedure.epoch_end(results)
        stopped = set(decision.stop)
        admit(decision.add, epoch)
        live = [t for t in live if t not in stopped] + [s.id for s in decision.add]
        if decision.finished or not live:
            return live, True
    for t, progress in state.trials.items():
        if t not in epochs:
            raise RunnerError(f"resume.trials: found trial {t!r}, expected only trials of the replayed procedure "
                              f"({sorted(epochs)})")
        if progress.epochs != epochs[t]:
            raise RunnerError(f"resume.trials[{t!r}].scores: found {progress.epochs}, expected "
                              f"{epochs[t]} (its completed epochs before scheduler epoch {state.epoch})")
    return live, False


def check_parent_unmoved(state: ResumeState, trial: str, parent: str, replaying: int) -> None:
    """A trial added with ``init_from=parent`` after completed epoch
    ``replaying`` has no stored checkpoint: the parent's restored checkpoint
    is the one to copy only if it has not moved since the trial was added
    (at the last epoch boundary).

    Raises:
        RunnerError: it has moved, so the trial's weights are lost.
    """
    if replaying != state.epoch - 1 or state.trials.get(parent, TrialProgress()).visited:
        raise RunnerError(f"resume.checkpoints: found none for trial {trial!r}, expected one "
                          f"(its parent {parent!r} has trained since it was added)")


def restore_epoch(state: ResumeState, train: MOPScheduler, live: Sequence[str], partitions: int) -> dict[str, EpochSoFar]:
    """Take the interrupted epoch's finished train units as completed in
    ``train`` (§5.6: only unfinished units run again) and return each
    trial's restored train-loss sums.

    Raises:
        RunnerError: ``state`` was cut with another partition count, or
            names units the scheduler cannot take as completed.
    """
    if state.units_done and state.partitions is not None and state.partitions != partitions:
        raise RunnerError(f"resume.partitions: found {state.partitions}, expected this run's {partitions} "
                          f"(give n_partitions={state.partitions})")
    out: dict[str, EpochSoFar] = {}
    for t, progress in sorted(state.trials.items()):
        if not progress.visited:
            continue
        if t not in live:
            raise RunnerError(f"resume.trials[{t!r}].visited: found {list(progress.visited)}, expected none "
                              f"for a trial not live in scheduler epoch {state.epoch}")
        for pid in progress.visited:
            try:
                train.mark_completed(Unit(t, pid, state.epoch))
            except (InvalidStateError, NotFoundError) as error:
                raise RunnerError(f"resume.trials[{t!r}].visited: {error}") from error
        out[t] = EpochSoFar.of(progress)
    return out
