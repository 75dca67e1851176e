"""Restart recovery at the granularity of MOP units (Cerebro §3.1, §5.6).

A reference run snapshots ``MOPRunner.resume_state()`` after every unit: what
a process would have stored just before it was killed there. A new runner
resumed from a snapshot must train exactly the train units that had not
finished (never one that had), and, replaying the reference's visit order,
end with the same weights and the same per-epoch metrics as the
uninterrupted run (units are seeded by trial, epoch and partition)."""

from __future__ import annotations

import io
import json
import math
from dataclasses import replace
from typing import Mapping

import numpy as np
import pytest
import torch

from ease_jupyter.execution.automl import PBT, GridSearch
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.mop.runner import (
    MOPRunner,
    ResumeState,
    RunnerError,
    RunResult,
    TrialProgress,
    UnitRecord,
)
from ease_jupyter.zoo.templates import TorchBuilder

MODELS = {"lenet": TorchBuilder("lenet", "LeNet", ((8, 8), 10))}
P = 3  # partitions: finer units than epochs
SEED = 5


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:300].astype(np.float32) / 16.0, d.target[:300]


@pytest.fixture(scope="module")
def engine():
    with LocalEngine(2) as e:
        yield e


def grid() -> GridSearch:
    return GridSearch("lenet", {"lr": [0.1, 0.02]}, epochs=2)  # 2 trials x 3 partitions x 2 epochs = 12 train units


class Snapshots:
    """Runs a procedure and keeps, after each unit, the units done so far and
    the runner's resume state at that moment."""

    def __init__(self, engine, procedure, X, y, **kwargs):
        self.units: list[UnitRecord] = []
        self.states: list[ResumeState] = []
        self.runner = MOPRunner(engine, procedure, MODELS, X, y, n_partitions=P, seed=SEED,
                                on_unit=self._on_unit, **kwargs)
        self.result: RunResult = self.runner.run()

    def _on_unit(self, rec: UnitRecord) -> None:
        self.units.append(rec)
        self.states.append(self.runner.resume_state())

    def at(self, kind: str, n: int) -> tuple[ResumeState, list[UnitRecord]]:
        """The state right after the n-th unit of ``kind`` (1-based), and the units done by then."""
        seen = 0
        for i, rec in enumerate(self.units):
            seen += rec.kind == kind
            if seen == n:
                return self.states[i], self.units[: i + 1]
        raise AssertionError(f"the run has fewer than {n} {kind} units")


@pytest.fixture(scope="module")
def reference(engine, digits):
    return Snapshots(engine, grid(), *digits)


def train_units(records) -> list[tuple[str, int, int]]:
    return [(r.trial, r.mop_epoch, r.partition) for r in records if r.kind == "train"]


def weights(blob: bytes) -> dict[str, torch.Tensor]:
    return torch.load(io.BytesIO(blob), weights_only=True)["model"]


def assert_same_weights(a: Mapping[str, bytes], b: Mapping[str, bytes]) -> None:
    assert set(a) == set(b)
    for t in a:
        wa, wb = weights(a[t]), weights(b[t])
        assert all(torch.equal(wa[k], wb[k]) for k in wa), f"trial {t} differs"


def comparable(history):
    """Per-epoch metrics without the compute seconds (a timing)."""
    return [(m.trial, m.epoch, m.mop_epoch, m.score, m.val_loss, m.examples, m.visits) for m in history]


def resume(engine, procedure, digits, state, **kwargs) -> tuple[RunResult, list[UnitRecord]]:
    units: list[UnitRecord] = []
    res = MOPRunner(engine, procedure, MODELS, *digits, n_partitions=state.partitions, seed=SEED,
                    resume=state, on_unit=units.append, **kwargs).run()
    return res, units


# -- mid-epoch, after the train phase, during validation ---------------------------------------
@pytest.mark.parametrize("kind,n,expected_done", [
    ("train", 2, 2),  # inside epoch 0
    ("train", 6, 6),  # epoch 0 trained, its validation not started
    ("val", 3, 6),  # epoch 0 trained, in the middle of its validation
    ("train", 8, 8),  # inside epoch 1
    ("val", 12, 12),  # the last unit of the run: only the last validation is redone
])
def test_resume_trains_only_the_unfinished_units_and_matches_the_uninterrupted_run(
        engine, digits, reference, kind, n, expected_done):
    ref = reference.result
    state, before = reference.at(kind, n)
    assert state.partitions == P
    done_before = set(train_units(before))
    assert len(done_before) == expected_done
    assert state.epoch * 2 * P + state.units_done == expected_done

    res, units = resume(engine, grid(), digits, state, visit_order=ref.visit_log)
    after = train_units(units)
    assert len(after) == 2 * P * 2 - expected_done  # total - k: nothing finished is trained again
    assert not done_before & set(after)
    assert done_before | set(after) == set(train_units(reference.units))
    # validation of the interrupted epoch runs in full again (it changes no weights)
    assert sum(u.kind == "val" for u in units) == 2 * P * (2 - state.epoch)

    assert_same_weights(ref.checkpoints, res.checkpoints)
    tail = [m for m in ref.history if m.mop_epoch >= state.epoch]
    assert comparable(res.history) == comparable(tail)
    assert [m.train_loss for m in res.history] == pytest.approx([m.train_loss for m in tail], rel=1e-9)
    assert res.visit_log == {k: v for k, v in ref.visit_log.items() if k[1] >= state.epoch}
    assert res.best == ref.best and res.epochs == 2 - state.epoch
    assert_same_weights({t: c for t, (_, c) in ref.best_checkpoints.items()},
                        {t: c for t, (_, c) in res.best_checkpoints.items()})


def test_resume_with_a_fresh_visit_order_keeps_the_finished_prefix(engine, digits, reference):
    state, before = reference.at("train", 3)
    res, units = resume(engine, grid(), digits, state)  # no visit_order: the rest of the epoch is drawn afresh
    assert len(train_units(units)) == 2 * P * 2 - 3
    assert not set(train_units(before)) & set(train_units(units))
    for t, progress in state.trials.items():
        order = res.visit_log[(t, state.epoch)]
        assert order[: len(progress.visited)] == progress.visited
        assert sorted(order) == list(range(P))  # completeness (§3.1)
    assert [m.examples for m in res.history] == [m.examples for m in reference.result.history]


def test_resume_state_survives_json(engine, digits, reference):
    """What a service stores: the progress as JSON (NaN scores allowed), the
    checkpoints as bytes elsewhere."""
    state, before = reference.at("train", 9)
    text = json.dumps({t: p.to_dict() for t, p in state.trials.items()})
    trials = {t: TrialProgress.from_dict(d) for t, d in json.loads(text).items()}
    assert trials == dict(state.trials)
    assert TrialProgress.from_dict(json.loads(json.dumps(TrialProgress((math.nan,)).to_dict()))).epochs == 1
    res, units = resume(engine, grid(), digits, ResumeState(state.epoch, trials, dict(state.checkpoints),
                                                            partitions=P),
                        visit_order=reference.result.visit_log)
    assert len(train_units(units)) == 12 - 9
    assert_same_weights(reference.result.checkpoints, res.checkpoints)


# -- procedures whose decisions change the trial set ------------------------------------------
def test_resume_replays_a_procedure_that_adds_trials_from_checkpoints(engine, digits):
    def pbt():
        return PBT("lenet", {"lr": (0.005, 0.2, "log")}, population=2, interval=1, max_epochs=3, seed=1)

    ref = Snapshots(engine, pbt(), *digits)
    assert any(s.init_from for s in ref.result.trials.values())
    state, before = ref.at("train", 2 * 2 * P + 1)  # epoch 2 (0-based), after two decisions
    assert state.epoch == 2 and state.units_done == 1
    res, units = resume(engine, pbt(), digits, state, visit_order=ref.result.visit_log)
    assert len(train_units(units)) == 2 * P - 1
    assert set(res.trials) == set(ref.result.trials) and res.best == ref.result.best
    assert_same_weights(ref.result.checkpoints, res.checkpoints)


def test_a_trial_added_at_the_last_boundary_starts_from_its_parent(engine, digits, exploit_once):
    ref = Snapshots(engine, exploit_once(0.05), *digits)
    state, _ = ref.at("val", P)  # A's epoch is validated; B does not exist yet
    boundary = ResumeState(1, {"A": replace(state.trials["A"], scores=(ref.result.history[0].score,), visited=(),
                                            loss_sum=0.0, examples=0.0, seconds=0.0)},
                           {"A": state.checkpoints["A"]}, partitions=P)
    res, units = resume(engine, exploit_once(0.05), digits, boundary, visit_order=ref.result.visit_log)
    assert [u.trial for u in units if u.kind == "train"] == ["B"] * P
    assert_same_weights(ref.result.checkpoints, res.checkpoints)
    # B missing although A (its parent) trained on after B was added: refuse
    moved = replace(boundary, trials={"A": replace(boundary.trials["A"], visited=(0,))})
    with pytest.raises(RunnerError, match="has trained since"):
        resume(engine, exploit_once(0.05), digits, moved)


def test_a_resumed_finished_run_trains_nothing(engine, digits, reference):
    final = reference.runner  # its last snapshot is before the final epoch_end; build the finished state
    last = reference.states[-1]
    trials = {t: replace(p, scores=p.scores + (next(m.score for m in reference.result.history
                                                    if m.trial == t and m.mop_epoch == 1),), visited=(),
                         loss_sum=0.0, examples=0.0, seconds=0.0) for t, p in last.trials.items()}
    assert final.partitions == P
    res, units = resume(engine, grid(), digits, replace(last, epoch=2, trials=trials))
    assert units == [] and res.history == [] and res.epochs == 0 and res.best == reference.result.best


# -- bad resume states name the field ---------------------------------------------------------
def test_inconsistent_resume_states_are_refused(engine, digits, reference):
    state, _ = reference.at("train", 8)
    with pytest.raises(RunnerError, match="resume.partitions"):
        MOPRunner(engine, grid(), MODELS, *digits, n_partitions=2, seed=SEED, resume=state).run()
    short = replace(state, trials={**state.trials, "t0": replace(state.trials["t0"], scores=())})
    with pytest.raises(RunnerError, match=r"resume.trials\['t0'\].scores"):
        resume(engine, grid(), digits, short)
    extra = replace(state, trials={**state.trials, "zz": TrialProgress()})
    with pytest.raises(RunnerError, match="found trial 'zz'"):
        resume(engine, grid(), digits, extra)
    twice = replace(state, trials={**state.trials, "t0": replace(state.trials["t0"], visited=(0, 0))})
    with pytest.raises(RunnerError, match="visited"):
        resume(engine, grid(), digits, twice)
    with pytest.raises(Exception, match="resume: found dict"):
        MOPRunner(engine, grid(), MODELS, *digits, resume={"epoch": 1})
