"""What a MOP run reports, and how it fails.

:class:`EpochMetrics` and :class:`UnitRecord` stream out of a running
:class:`~ease_jupyter.execution.mop.runner.MOPRunner` (Cerebro §4.2: the
AutoML procedure sees each trial's score after each epoch);
:class:`RunResult` is what the run returns; :class:`RunnerError` is raised
when the run cannot go on; :class:`StopRun` is what a listener raises to end
the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ease_jupyter.errors import EaseMLError
from ease_jupyter.execution.automl.base import TrialSpec
from ease_jupyter.execution.units import Hooks, UnitSpec, load_model

__all__ = ["RunnerError", "StopRun", "EpochMetrics", "UnitRecord", "RunResult"]


class RunnerError(EaseMLError, RuntimeError):
    """The run cannot go on: a unit kept failing, no worker is left, or the
    procedure did not finish within ``max_epochs``."""


class StopRun(Exception):
    """Raised by a listener of a run (``on_unit``, ``on_metrics``) to end it:
    the run fails with :attr:`error`, the listener's reason, as it is (so a
    caller that sorts failures by type sees the listener's own error). Any
    other error of a listener is logged and the run goes on: only the
    listener knows whether its failure makes the run wrong (a limit passed,
    a progress record that could not be stored) or is cosmetic (a progress
    bar, an event nobody reads).

    Args:
        error: the error the run fails with, or its reason in words (then a
            :class:`RunnerError` that quotes it).
    """

    def __init__(self, error: BaseException | str):
        if isinstance(error, str):
            error = RunnerError(f"a listener stopped the run: {error}")
        super().__init__(error)
        self.error = error


@dataclass(frozen=True)
class EpochMetrics:
    """One trial's metrics after one of its epochs (streamed to ``on_metrics``)."""

    trial: str
    epoch: int  # epochs this trial has completed (1 after its first)
    mop_epoch: int  # the scheduler's epoch (0-based)
    score: float  # validation score, higher is better (NaN if diverged)
    train_loss: float
    val_loss: float
    examples: int  # training examples seen this epoch
    unit_seconds: float  # compute spent in this trial's units this epoch
    visits: tuple[int, ...]  # partitions in the order the trial trained on them


@dataclass(frozen=True)
class UnitRecord:
    """A completed unit (streamed to ``on_unit``)."""

    kind: str  # "train" or "val"
    trial: str
    mop_epoch: int
    partition: int
    worker: str
    metrics: Mapping[str, Any]


@dataclass
class RunResult:
    """What a run produced."""

    trials: dict[str, TrialSpec]
    history: list[EpochMetrics]
    best: tuple[str, float] | None
    visit_log: dict[tuple[str, int], tuple[int, ...]]
    checkpoints: dict[str, bytes] = field(repr=False)  # each trial's last checkpoint
    best_checkpoints: dict[str, tuple[float, bytes]] = field(repr=False)  # each trial's best-scoring one
    requeued: int = 0  # units run again after a loss
    faults: list[str] = field(default_factory=list)
    epochs: int = 0  # scheduler epochs run
    seconds: float = 0.0
    _builders: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict, repr=False)
    _hooks: Hooks = field(default_factory=Hooks, repr=False)

    def model(self, trial: str | None = None, *, best: bool = True) -> Any:
        """The trained net of ``trial`` (default: the procedure's best),
        from its best-scoring checkpoint (or its last with ``best=False``)."""
        if trial is None:
            if self.best is None:
                raise RunnerError("best: no trial has a score, expected at least one finished epoch")
            trial = self.best[0]
        if trial not in self.trials:
            raise RunnerError(f"trial: found {trial!r}, expected one of {sorted(self.trials)}")
        spec = self.trials[trial]
        ckpt = self.best_checkpoints[trial][1] if best and trial in self.best_checkpoints else self.checkpoints[trial]
        return load_model(ckpt, UnitSpec.of(trial, spec.model, spec.params, self._builders[spec.model]), self._hooks)
