"""Early stopping inside a pick: successive halving over the pick's configs
(Cerebro §4.2), in the pure procedure and in a real MOP pick of the service."""

from __future__ import annotations

import json
import math

import pytest

from ease_jupyter.execution.automl import (
    ProcedureArgumentError,
    pick_procedure,
    pick_schedule,
    pick_survivors,
    run_procedure,
)


def test_the_schedule_gives_more_epochs_only_to_configs_that_rank_well():
    s = pick_schedule(3, 12)
    assert s.rungs == (1, 3, 12) and s.sizes == (3, 1, 1)
    assert s.config_epochs == 3 + 11 < 3 * 12  # the pick's work, against every config for 12 epochs
    assert s.describe() == "3 configs to epoch 1, 1 to epoch 12"
    assert pick_schedule(3, 2).sizes == (3,)  # a single rung: nothing stops early
    assert pick_schedule(6, 9).sizes == (6, 2, 1)
    for bad in ({"n_configs": 0, "max_epochs": 3}, {"n_configs": 3, "max_epochs": 0}):
        with pytest.raises(ProcedureArgumentError) as e:
            pick_schedule(**bad)
        assert e.value.field in bad


def test_halving_stops_the_worst_configs_at_each_rung():
    configs = [{"lr": lr} for lr in (0.1, 0.01, 0.001, 0.3, 0.03, 0.003)]
    quality = {0.1: 0.9, 0.01: 0.5, 0.001: 0.2, 0.3: 0.7, 0.03: 0.8, 0.003: 0.1}

    def train(live, epoch):  # a config's score rises with epochs, ranked by its quality
        return {t: quality[s.params["lr"]] * (1 - 0.5 ** (epoch + 1)) for t, s in live.items()}

    proc = pick_procedure("mlp", configs, max_epochs=9)
    history = run_procedure(proc, train)
    trained = history.epochs_trained()
    lr_of = {t: s.params["lr"] for t, s in proc.trials.items()}
    by_lr = {lr_of[t]: n for t, n in trained.items()}
    assert by_lr[0.1] == 9  # the best reaches the last rung
    assert by_lr[0.03] == 3  # second best: stopped at rung 3
    assert {by_lr[lr] for lr in (0.01, 0.001, 0.3, 0.003)} == {1}  # the rest after one epoch
    assert pick_survivors(trained, 9) == [t for t in trained if lr_of[t] == 0.1]
    assert sum(trained.values()) == 6 + 2 * 2 + 1 * 6 == pick_schedule(6, 9).config_epochs
    assert history.n_epochs == 9


@pytest.fixture(scope="module")
def stopped_pick():
    """A real torch pick (lenet, three learning rates, at most 3 epochs) on a
    local engine: the service's own job runner, as the control loop runs it."""
    from sklearn.datasets import load_digits

    from ease_jupyter import datasets
    from ease_jupyter.execution.engine import LocalEngine
    from ease_jupyter.schema import format_program, program_from_shapes
    from ease_jupyter.service.mop import run_torch_job
    from ease_jupyter.store import InMemoryStore, MemoryBlobStore

    d = load_digits()
    X = (d.images[:240] / 16.0).astype("float32")[..., None]
    y = d.target[:240].astype("int64")
    store, blobs = InMemoryStore(), MemoryBlobStore()
    user = store.create_user("ada", "h" * 64)
    task = store.create_task(user.id, "digits", format_program(program_from_shapes([8, 8, 1], [10])))
    datasets.feed(store, blobs, task, X, y)
    version = store.latest_dataset_version(task.id)
    # 1e-6 learns nothing in 3 epochs: it must not be the one that goes on
    job = store.create_job(task.id, version.id, "lenet", {"lrs": [0.1, 1e-6, 0.03], "epochs": 3})
    engine = LocalEngine(1)
    try:
        done = run_torch_job(store, blobs, engine, job.id, partitions=2)
    finally:
        engine.close()
    return store, done


def test_a_pick_stops_its_worst_configs_early_and_records_how_far_each_went(stopped_pick):
    from ease_jupyter.service.mop import STOPPED_TAG

    store, job = stopped_pick
    assert job.status.value == "succeeded", job.error
    per_config: dict[str, dict[int, float]] = {}
    for m in store.list_metrics(job.id):
        if m.name.startswith("val_accuracy[lr="):
            per_config.setdefault(m.name[len("val_accuracy["):-1], {})[m.epoch] = m.value
    epochs = {label: max(scores) for label, scores in per_config.items()}
    assert sorted(epochs.values()) == [1, 1, 3]  # halving at rung 1 keeps 3 // 3 = 1 config
    best = max(epochs, key=epochs.get)
    assert best != "lr=1e-06"
    stopped = json.loads(store.tags("job", job.id)[STOPPED_TAG])
    assert stopped == {label: n for label, n in epochs.items() if label != best}
    # the survivor ranked first at the rung
    assert per_config[best][1] == max(scores[1] for scores in per_config.values())
    # the job's accuracy is the best survivor's best epoch, not a stopped config's
    assert job.accuracy == pytest.approx(max(per_config[best].values()))
    job_level = {m.epoch: m.value for m in store.list_metrics(job.id) if m.name == "val_accuracy"}
    assert sorted(job_level) == [1, 2, 3]  # every epoch of the pick is complete, stopped configs or not
    assert all(math.isfinite(v) for v in job_level.values())
