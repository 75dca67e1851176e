"""The leaderboard shows each model's winning config and the number of
held-out examples behind its accuracy, and the class names of the labels."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ease_jupyter.datasets import load
from ease_jupyter.execution.holdout import validation_mask
from ease_jupyter.jobspec import split_metric
from ease_jupyter.widgets import Leaderboard
from ease_jupyter.widgets._hub import wait_until

NAMES = np.array(["setosa", "versicolor", "virginica"])


@pytest.fixture(scope="module")
def trained(service, iris):
    X, y = iris
    task = service.client("alice").task("iris_winners", input=[4], output=[3])
    task.feed(X, NAMES[y])  # named labels
    assert task.wait(timeout=120)
    return task


def held_out(service, task, number: int) -> int:
    """What the service's split holds out of version ``number``, counted from the store."""
    store, blobs = service.service.store, service.service.blobs
    version = next(v for v in store.list_dataset_versions(task.info["id"]) if v.number == number)
    return int(validation_mask(load(store, blobs, version).split_keys).sum())


def winner(job: dict) -> str:
    """The grid point with the highest held-out score, read from the job's per-config metrics."""
    scores = [(value, label) for row in job["metrics"] for key, value in row.items()
              for metric, label in [split_metric(key)] if metric == "val_score" and label is not None]
    return max(scores)[1]


def test_rows_carry_the_winning_config_and_the_validation_size(service, trained):
    board = Leaderboard(trained, live=False)
    size = held_out(service, trained, 1)
    assert 0 < size < 150
    history = {j["id"]: j for j in trained.history()}
    grids = 0
    for row in board.rows:
        job = history[row["job_id"]]
        assert row["validation_size"] == size
        # an accuracy is a count of right answers over the held-out examples
        assert abs(row["accuracy"] * size - round(row["accuracy"] * size)) < 1e-6, row
        if len(job["metrics"]) and any("[" in k for k in job["metrics"][0]):
            grids += 1
            assert row["best_config"] == winner(job), row
    assert grids >= 2  # scikit-learn grids with several points
    best = trained.best()
    assert best["validation_size"] == size
    best_row = next(r for r in board.rows if r["job_id"] == board.best_job_id)
    assert best_row["best_config"] == best["best_config"]
    # what the browser gets (the synced state as JSON) and the text form
    state = json.loads(json.dumps(board.get_state()["rows"], default=str))
    assert {(r["job_id"], r["best_config"], r["validation_size"]) for r in state} == {
        (r["job_id"], r["best_config"], r["validation_size"]) for r in board.rows}
    assert board.class_names == ["setosa", "versicolor", "virginica"] == best["class_names"]
    text = repr(board)
    assert "classes: setosa, versicolor, virginica" in text and "best config" in text
    assert f"{best_row['best_config']}" in text and f" {size} " in text
    board.close()


def test_a_refine_gives_the_new_jobs_their_own_validation_size(service, trained):
    board = Leaderboard(trained)
    version = trained.refine(drop=list(range(30)))
    size2 = held_out(service, trained, version["number"])
    assert size2 != held_out(service, trained, 1)  # 30 rows fewer: a smaller held-out set
    assert wait_until(lambda: any(r["version"] == version["number"] and r["state"] == "done" for r in board.rows), 120)
    for row in board.rows:
        if row["state"] == "done":  # filled in live, from the job's event
            assert row["validation_size"] == size2 and row["best_config"], row
    trained.cancel()
    assert trained.wait(timeout=60)
    board.close()
