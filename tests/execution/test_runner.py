"""The MOP runner on the local engine: procedures, metrics, replay, faults."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from ease_jupyter.errors import EaseMLError
from ease_jupyter.execution.automl import PBT, GridSearch
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.holdout import validation_mask
from ease_jupyter.execution.mop.runner import EpochMetrics, MOPRunner, RunnerError, StopRun, UnitRecord, run_mop
from ease_jupyter.execution.units import Hooks, default_train_fn
from ease_jupyter.zoo.templates import TorchBuilder

LENET = TorchBuilder("lenet", "LeNet", ((8, 8), 10))
MODELS = {"lenet": LENET}


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:400].astype(np.float32) / 16.0, d.target[:400]


@pytest.fixture
def engine():
    with LocalEngine(2) as e:
        yield e


def grid(epochs=2, lrs=(0.1, 0.01)):
    return GridSearch("lenet", {"lr": list(lrs)}, epochs=epochs)


def weights(blob: bytes) -> dict[str, torch.Tensor]:
    return torch.load(io.BytesIO(blob), weights_only=True)["model"]


def assert_same_weights(a, b):
    assert set(a.checkpoints) == set(b.checkpoints)
    for t in a.checkpoints:
        wa, wb = weights(a.checkpoints[t]), weights(b.checkpoints[t])
        assert all(torch.equal(wa[k], wb[k]) for k in wa), f"trial {t} differs"


def test_grid_search_runs_and_streams_metrics(engine, digits):
    X, y = digits
    streamed: list[EpochMetrics] = []
    units: list[UnitRecord] = []
    proc = grid()
    res = run_mop(engine, proc, MODELS, X, y, on_metrics=streamed.append, on_unit=units.append)
    assert streamed == res.history and len(streamed) == 4
    assert [m.epoch for m in streamed] == [1, 1, 2, 2]
    assert {m.trial for m in streamed} == {"t0", "t1"}
    assert all(0.0 <= m.score <= 1.0 and m.examples > 0 and np.isfinite(m.train_loss) for m in streamed)
    assert res.best == proc.best() and res.epochs == 2
    # every config visits every partition once per epoch (completeness)
    assert set(res.visit_log) == {(t, e) for t in ("t0", "t1") for e in (0, 1)}
    assert all(sorted(v) == [0, 1] for v in res.visit_log.values())
    assert all(m.visits == res.visit_log[(m.trial, m.mop_epoch)] for m in streamed)
    assert sum(u.kind == "train" for u in units) == 8 and sum(u.kind == "val" for u in units) == 8
    net = res.model()  # the best trial's best checkpoint
    assert (net.predict(X).numpy() == y).mean() > 0.3  # far above chance (0.1)
    assert res.requeued == 0 and res.faults == []
    assert engine.holders("train-0") == set()  # partitions are dropped at the end


def test_replay_reproduces_visits_and_weights(engine, digits):
    X, y = digits
    a = run_mop(engine, grid(), MODELS, X, y, seed=3)
    b = run_mop(engine, grid(), MODELS, X, y, seed=3, visit_order=a.visit_log)
    assert b.visit_log == a.visit_log
    assert_same_weights(a, b)
    assert [m.score for m in a.history] == [m.score for m in b.history]


def test_both_hop_modes_give_the_same_weights(engine, digits, tmp_path):
    X, y = digits
    a = run_mop(engine, grid(), MODELS, X, y, hop="bytes")
    b = run_mop(engine, grid(), MODELS, X, y, hop="directory", checkpoint_dir=str(tmp_path), visit_order=a.visit_log)
    assert_same_weights(a, b)
    # only each trial's last checkpoint is left in the directory
    left = [p for p in tmp_path.rglob("*.pt")]
    assert len(left) == 2 and not list(tmp_path.rglob("*.tmp"))
    c = run_mop(engine, grid(), MODELS, X, y, visit_order=a.visit_log)  # "auto": directory, temporary
    assert_same_weights(a, c)


def test_more_partitions_than_workers_and_replication(engine, digits):
    X, y = digits
    res = run_mop(engine, grid(epochs=1), MODELS, X, y, n_partitions=3, replication=2)
    assert all(sorted(v) == [0, 1, 2] for v in res.visit_log.values())
    n_train = int((~validation_mask(np.arange(len(X)))).sum())
    assert all(m.examples == n_train for m in res.history)


@pytest.mark.parametrize("limit, copies", [(None, 2), (0, 1)])
def test_auto_replication_copies_small_data_to_every_worker(engine, digits, monkeypatch, limit, copies):
    from ease_jupyter.execution.mop import placement
    from ease_jupyter.execution.mop.partitions import KINDS

    if limit is not None:  # every data set is "large": one copy, Cerebro's layout
        monkeypatch.setattr(placement, "FULL_REPLICATION_BYTES", limit)
    X, y = digits
    seen: list[int] = []

    def holders(rec: UnitRecord) -> None:
        pm = runner.partition_map
        seen.extend(len(pm.holders(kind, pid)) for kind in KINDS for pid in pm.partitions(kind))

    runner = MOPRunner(engine, grid(epochs=1), MODELS, X, y, n_partitions=2, replication="auto", on_unit=holders)
    res = runner.run()
    assert len(res.history) == 2 and seen and set(seen) == {copies}


def test_auto_replication_gives_a_worker_that_joins_later_every_partition(digits):
    from ease_jupyter.execution.mop.partitions import KINDS

    X, y = digits
    with LocalEngine(2) as engine:
        first = set(engine.workers())
        added: list[str] = []
        holders: dict = {}

        def grow(rec: UnitRecord) -> None:
            if not added:
                added.append(engine.add_worker())
            pm = runner.partition_map
            holders.update({(kind, pid): pm.holders(kind, pid) for kind in KINDS for pid in pm.partitions(kind)})

        runner = MOPRunner(engine, grid(epochs=3), MODELS, X, y, n_partitions=2, replication="auto", on_unit=grow)
        res = runner.run()
    assert len(res.history) == 6 and any("worker added" in f for f in res.faults)
    assert holders and all(h == first | {added[0]} for h in holders.values()), holders


def test_replication_names_what_it_takes():
    from ease_jupyter.execution.mop.placement import resolve_replication

    assert resolve_replication("auto", 10, 3) == 3 and resolve_replication(2, 10, 3) == 2
    assert resolve_replication("auto", 2**40, 3) == 1
    for bad in (0, 4, True, "all", 1.0):
        with pytest.raises(EaseMLError, match=r"replication: found .*expected 'auto' or an integer in \[1, 3\]"):
            resolve_replication(bad, 10, 3)


@dataclass(frozen=True)
class HangOnce:
    """A train_fn that hangs (longer than the unit deadline) the first time it
    trains ``trial`` on ``partition``; a marker file records that."""

    marker: str
    trial: str = "t0"
    partition: int = 1
    seconds: float = 2.5

    def __call__(self, net, opt, X, y, spec, generator):
        if spec.trial == self.trial and spec.partition == self.partition and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            import time

            time.sleep(self.seconds)
        return default_train_fn(net, opt, X, y, spec, generator)


def test_a_unit_past_its_deadline_is_requeued(engine, digits, tmp_path):
    X, y = digits
    ref = run_mop(engine, grid(), MODELS, X, y)
    hooks = Hooks(train_fn=HangOnce(str(tmp_path / "hung")))
    res = run_mop(engine, grid(), MODELS, X, y, hooks=hooks, unit_timeout=1.0,
                  first_unit_timeout=1.0, visit_order=ref.visit_log)
    assert os.path.exists(tmp_path / "hung")
    assert res.requeued >= 1
    assert any("deadline" in f for f in res.faults)
    assert res.visit_log == ref.visit_log
    assert_same_weights(ref, res)


@pytest.mark.parametrize("replication", [1, 2])
def test_a_worker_killed_mid_epoch_changes_nothing(digits, replication):
    X, y = digits
    with LocalEngine(2) as engine:
        ref = run_mop(engine, grid(lrs=(0.1, 0.03, 0.01)), MODELS, X, y, replication=replication)
        killed = []

        def kill(rec: UnitRecord):
            if not killed and rec.kind == "train":
                victim = next(w for w in engine.workers() if w != rec.worker)
                killed.append(victim)
                engine.kill_worker(victim)

        res = run_mop(engine, grid(lrs=(0.1, 0.03, 0.01)), MODELS, X, y, replication=replication,
                      visit_order=ref.visit_log, on_unit=kill)
        assert killed and any("worker lost" in f for f in res.faults)
        assert res.visit_log == ref.visit_log
        assert_same_weights(ref, res)


class VanishingReplacement(LocalEngine):
    """The worker spawned to replace a killed one dies again while its data is
    being placed (seen on Dask under load: a restarted worker's nanny closes)."""

    def __init__(self, n_workers):
        super().__init__(n_workers)
        self.first = set(self.workers())
        self.vanished: list[str] = []

    def place(self, key, data, workers):
        fresh = [w for w in workers if w not in self.first and w not in self.vanished]
        if fresh and not self.vanished:  # once
            self.vanished.append(fresh[0])
            self.kill_worker(fresh[0])
        return super().place(key, data, workers)


def test_a_replacement_worker_that_vanishes_while_placing_is_treated_as_lost(digits):
    X, y = digits
    with LocalEngine(2) as clean:
        ref = run_mop(clean, grid(), MODELS, X, y)
    with VanishingReplacement(2) as engine:
        killed = []

        def kill(rec: UnitRecord):
            if not killed and rec.kind == "train":
                killed.append(next(w for w in engine.workers() if w != rec.worker))
                engine.kill_worker(killed[0])

        res = run_mop(engine, grid(), MODELS, X, y, visit_order=ref.visit_log, on_unit=kill)
    assert killed and engine.vanished
    assert any("left while its data was placed" in f for f in res.faults)
    assert_same_weights(ref, res)


def test_init_from_starts_from_the_parents_latest_checkpoint(engine, digits, exploit_once):
    X, y = digits
    res = run_mop(engine, exploit_once(1e-12), MODELS, X, y)
    a, b = weights(res.checkpoints["A"]), weights(res.checkpoints["B"])
    assert all(torch.allclose(a[k].float(), b[k].float(), atol=1e-6) for k in a)
    sa = next(m.score for m in res.history if m.trial == "A")
    sb = next(m.score for m in res.history if m.trial == "B")
    assert sb == pytest.approx(sa, abs=0.02)
    assert [m.epoch for m in res.history] == [1, 1]  # B counts its own epochs


def test_pbt_procedure_runs_end_to_end(engine, digits):
    X, y = digits
    proc = PBT("lenet", {"lr": (0.005, 0.2, "log")}, population=3, interval=1, max_epochs=3, seed=0)
    res = run_mop(engine, proc, MODELS, X, y)
    assert res.best == proc.best() and res.best[0] in res.trials
    children = {t: s.init_from for t, s in res.trials.items() if s.init_from}
    assert children and children == proc.parents
    # every epoch keeps the population at three live trials
    assert [sum(m.mop_epoch == e for m in res.history) for e in range(res.epochs)] == [3, 3, 3]


@dataclass(frozen=True)
class FailOnce:
    marker: str
    always: bool = False

    def __call__(self, net, opt, X, y, spec, generator):
        if self.always or self._first():
            raise RuntimeError("injected failure")
        return default_train_fn(net, opt, X, y, spec, generator)

    def _first(self) -> bool:
        """True for exactly one unit: creating the marker is atomic (O_EXCL),
        so two units training at once on two workers cannot both fail."""
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


def test_a_failing_unit_is_retried_then_reported(engine, digits, tmp_path):
    X, y = digits
    res = run_mop(engine, grid(epochs=1), MODELS, X, y, hooks=Hooks(train_fn=FailOnce(str(tmp_path / "once"))))
    assert res.requeued == 1 and any("injected failure" in f for f in res.faults)
    with pytest.raises(RunnerError, match="failed 3 times.*injected failure"):
        run_mop(engine, grid(epochs=1), MODELS, X, y, max_unit_retries=2,
                hooks=Hooks(train_fn=FailOnce(str(tmp_path / "always"), always=True)))


def test_listener_errors_do_not_stop_training(engine, digits):
    X, y = digits

    def bad(_):
        raise ValueError("widget bug")

    res = run_mop(engine, grid(epochs=1), MODELS, X, y, on_metrics=bad, on_unit=bad)
    assert len(res.history) == 2


class PastTheLimit(Exception):
    pass


def test_a_listener_that_raises_stop_run_ends_the_run_with_its_error(engine, digits):
    X, y = digits
    seen: list[UnitRecord] = []

    def stops_at_the_second_unit(rec):
        seen.append(rec)
        if len(seen) == 2:
            raise StopRun(PastTheLimit("her limit"))

    with pytest.raises(PastTheLimit, match="her limit") as caught:  # the listener's own error, not a wrapper
        run_mop(engine, grid(epochs=2), MODELS, X, y, on_unit=stops_at_the_second_unit)
    assert not isinstance(caught.value.__context__, StopRun)
    assert len(seen) == 2  # no unit was taken in after it: the run ended there (of 16 units)
    assert engine.holders("train-0") == set()  # and it cleaned up as any failed run

    def stops_after_the_first_epoch(m):
        raise StopRun("enough")

    with pytest.raises(RunnerError, match="a listener stopped the run: enough"):
        run_mop(engine, grid(epochs=2), MODELS, X, y, on_metrics=stops_after_the_first_epoch)


def test_validation_split_and_explicit_validation(engine, digits):
    X, y = digits
    res = run_mop(engine, grid(epochs=1, lrs=(0.1,)), MODELS, X, y, validation=(X[:50], y[:50]))
    assert res.history[0].examples == len(X)
    res = run_mop(engine, grid(epochs=1, lrs=(0.1,)), MODELS, X, y, example_ids=np.arange(1000, 1400))
    assert 0 < len(X) - res.history[0].examples < len(X) // 2


def test_bad_arguments_name_the_field(engine, digits):
    X, y = digits
    with pytest.raises(EaseMLError, match="hop"):
        MOPRunner(engine, grid(), MODELS, X, y, hop="ftp")
    with pytest.raises(EaseMLError, match="unit_timeout"):
        MOPRunner(engine, grid(), MODELS, X, y, unit_timeout=0)
    with pytest.raises(EaseMLError, match="y"):
        MOPRunner(engine, grid(), MODELS, X, y[:-1])
    with pytest.raises(RunnerError, match="no builder"):
        run_mop(engine, GridSearch("resnet", {"lr": [0.1]}, epochs=1), MODELS, X, y)
    with pytest.raises(RunnerError, match="max_epochs"):
        run_mop(engine, grid(epochs=3), MODELS, X, y, max_epochs=1)
