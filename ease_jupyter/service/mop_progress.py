"""A torch job's MOP progress, as it is stored after every unit and epoch.

One typed record (``JobProgress``) is kept as the job's tag
``easeml.mop.progress`` (JSON, the format of ``mop.py``'s docstring) and
turns itself into the runner's ``ResumeState`` on a restart (Cerebro §5.6:
model states are checkpointed between units, so only unfinished units run
again). Checkpoints are blob digests here; the runner gets their bytes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..execution.mop.resume import ResumeState, TrialProgress
from ..store import BlobStore


@dataclass
class UnitsSoFar:
    """A trial's train units of the unfinished epoch, and its weights after the last one."""

    progress: TrialProgress  # visited partitions, loss sums, seconds (its scores live in JobProgress)
    checkpoint: str  # blob digest


@dataclass
class JobProgress:
    epoch: int = 0  # epochs every config has completed
    checkpoints: dict[str, str] = field(default_factory=dict)  # trial -> digest at the end of ``epoch``
    scores: dict[str, list[float]] = field(default_factory=dict)  # trial -> validation score per epoch
    best: dict[str, tuple[float, str, int]] = field(default_factory=dict)  # trial -> (score, digest, epoch)
    units: dict[str, UnitsSoFar] = field(default_factory=dict)  # trial -> its units of epoch ``epoch + 1``
    partitions: int | None = None  # the job keeps them across restarts: its units refer to them
    trained_units: int = 0  # over the job's life: configs x partitions x epochs once finished
    seconds: float = 0.0  # compute so far

    # ------------------------------------------------------------ storage
    def to_json(self) -> str:
        units = {t: {"visited": list(u.progress.visited), "loss_sum": u.progress.loss_sum,
                     "examples": u.progress.examples, "seconds": u.progress.seconds, "ckpt": u.checkpoint}
                 for t, u in self.units.items()}
        return json.dumps({"epoch": self.epoch, "ckpts": self.checkpoints, "scores": self.scores,
                           "best": {t: list(b) for t, b in self.best.items()}, "seconds": self.seconds,
                           "partitions": self.partitions, "units": units, "trained_units": self.trained_units})

    @classmethod
    def from_json(cls, text: str) -> "JobProgress":
        data = json.loads(text)
        units = {t: UnitsSoFar(TrialProgress.from_dict(u), u["ckpt"]) for t, u in data.get("units", {}).items()}
        return cls(int(data.get("epoch", 0)), dict(data.get("ckpts", {})),
                   {t: list(v) for t, v in data.get("scores", {}).items()},
                   {t: (float(b[0]), str(b[1]), int(b[2])) for t, b in data.get("best", {}).items()},
                   units, data.get("partitions"), int(data.get("trained_units", 0)), float(data.get("seconds", 0.0)))

    # ------------------------------------------------------------ updates
    def record_unit(self, trial: str, progress: TrialProgress, checkpoint: str) -> None:
        self.units[trial] = UnitsSoFar(progress, checkpoint)
        self.trained_units += 1

    def record_epoch(self, trial: str, epoch: int, score: float, checkpoint: str) -> None:
        self.checkpoints[trial] = checkpoint
        self.scores.setdefault(trial, []).append(score)
        if not math.isnan(score) and (trial not in self.best or score > self.best[trial][0]):
            self.best[trial] = (score, checkpoint, epoch)

    def complete(self, trials: list[str], epoch: int) -> bool:
        """Whether every trial has its score of ``epoch``; if so, the epoch is done."""
        if any(len(self.scores.get(t, ())) < epoch for t in trials):
            return False
        self.epoch = epoch
        self.units.clear()
        return True

    # ------------------------------------------------------------ resume
    def resume_state(self, blobs: BlobStore) -> ResumeState:
        """The runner's state: each trial's scores, its units of the unfinished
        epoch and its latest checkpoint (its last unit's, else its last epoch's)."""
        trials = {}
        for t in set(self.scores) | set(self.units):
            so_far = self.units[t].progress if t in self.units else TrialProgress()
            trials[t] = TrialProgress(tuple(float(s) for s in self.scores.get(t, ())), so_far.visited,
                                      so_far.loss_sum, so_far.examples, so_far.seconds)
        digests = {**self.checkpoints, **{t: u.checkpoint for t, u in self.units.items()}}
        checkpoints = {t: blobs.get_bytes(d) for t, d in digests.items()}
        return ResumeState(self.epoch, trials, checkpoints, partitions=self.partitions)
