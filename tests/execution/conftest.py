"""Shared fixtures of the execution tests."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import pytest

from ease_jupyter.execution.automl import EpochDecision, Procedure, TrialResult, TrialSpec
from ease_jupyter.execution.mop import Unit


class ExploitOnce(Procedure):
    """Epoch 1 trains A; then A stops and B starts from A's weights with
    learning rate ``b_lr``; B's first epoch finishes the run (PBT's exploit, once)."""

    def __init__(self, b_lr: float):
        self.b_lr = b_lr
        self._best = None

    def start(self):
        return [TrialSpec("A", "lenet", {"lr": 0.1})]

    def epoch_end(self, results: Mapping[str, TrialResult]) -> EpochDecision:
        for r in results.values():
            if self._best is None or r.score > self._best[1]:
                self._best = (r.id, r.score)
        if "A" in results:
            return EpochDecision(stop=frozenset({"A"}), add=(TrialSpec("B", "lenet", {"lr": self.b_lr}, init_from="A"),))
        return EpochDecision(stop=frozenset(results), finished=True)

    def best(self):
        return self._best


@pytest.fixture
def exploit_once() -> Callable[[float], ExploitOnce]:
    return ExploitOnce


def assert_same_output_under_hash_seeds(script: str) -> None:
    """``script`` prints the same under three ``PYTHONHASHSEED`` values: no
    decision depends on the iteration order of a set of strings."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    outputs = set()
    for hash_seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(repo)}
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=repo)
        assert run.returncode == 0, run.stderr
        outputs.add(run.stdout)
    assert len(outputs) == 1


def assert_queues_cover_the_epoch(sched: Any, flight: Any) -> None:
    """Cerebro §5.6's bookkeeping of one scheduler (or one workload's view):
    every unit of the epoch is in exactly one of Q, Q' (``flight``) and done,
    and each config's visit log lists its done partitions once each."""
    universe = {Unit(c, p, sched.epoch) for c in sched.configs for p in sched.partitions}
    q, qq, done = sched.pending, set(flight), sched.completed
    assert not (q & qq) and not (q & done) and not (qq & done), "a unit in two of Q / Q' / done"
    assert q | qq | done == universe, "a unit lost or invented"
    for c in sched.configs:
        logged = sched.visit_log[(c, sched.epoch)]
        assert len(logged) == len(set(logged))
        assert set(logged) == {u.partition for u in done if u.config == c}
