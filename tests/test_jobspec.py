"""The typed job spec: one parse of a stored job config, and what each kind knows about itself."""

from __future__ import annotations

import json

import pytest

from ease_jupyter.errors import DataError
from ease_jupyter.jobspec import (SingleConfig, SklearnGrid, TorchWorkload, best_point, describe_job, metric_name,
                                  parse_job, point_label, split_metric)
from ease_jupyter.schema import program_from_shapes
from ease_jupyter.zoo import Engine, candidates


def _candidate(name: str, inp, out):
    return next(c for c in candidates(program_from_shapes(inp, out)) if c.name == name)


def test_a_grid_spec_round_trips_through_its_stored_config():
    cand = _candidate("logreg", [4], [3])
    spec = SklearnGrid.of(cand)
    stored = json.loads(json.dumps(spec.config()))  # as the store keeps it
    assert stored == {"grid": {"C": [0.1, 1.0, 10.0]}}
    again = parse_job("logreg", stored)
    assert again == spec and again.engine is Engine.SKLEARN and again.arm == "logreg"
    assert again.points() == [c.options for c in cand.configs]
    assert again.describe() == "grid C=0.1|1|10"


def test_a_torch_spec_round_trips_and_takes_the_candidates_rates():
    cand = _candidate("lenet", [8, 8, 1], [10])
    spec = TorchWorkload.of(cand, epochs=2)
    assert spec.lrs == tuple(float(c.options["lr"]) for c in cand.configs) and spec.epochs == 2
    again = parse_job("lenet", json.loads(json.dumps(spec.config())))
    assert again == spec and again.engine is Engine.TORCH and again.arm == "lenet"
    assert again.points() == [{"lr": lr} for lr in spec.lrs]
    assert again.describe() == "lr=" + "|".join(f"{lr:g}" for lr in spec.lrs) + ", up to 2 epochs"


def test_a_job_stored_before_picks_trained_grids_is_one_config_and_no_arm():
    spec = parse_job("knn", {"n_neighbors": 7})
    assert isinstance(spec, SingleConfig) and spec.engine is Engine.SKLEARN
    assert spec.arm == "knn[n_neighbors=7]"  # a config key: not one of the selector's models
    assert spec.options == {"n_neighbors": [7]} and spec.points() == [{"n_neighbors": 7}]
    assert spec.config() == {"n_neighbors": 7} and describe_job("knn", {"n_neighbors": 7}) == "n_neighbors=7"


@pytest.mark.parametrize("config", [
    {"grid": {}}, {"grid": {"C": []}}, {"grid": [1, 2]}, {"lrs": [], "epochs": 2}, {"lrs": [0.1], "epochs": 0},
])
def test_a_malformed_config_is_refused_naming_the_field(config):
    with pytest.raises(DataError) as info:
        parse_job("m", config)
    assert info.value.field == "config"


def test_metric_names_are_built_and_parsed_in_one_place():
    label = point_label({"C": 0.1, "kernel": "rbf"})
    assert label == "C=0.1,kernel=rbf"
    assert split_metric(metric_name("val_score", label)) == ("val_score", label)
    assert split_metric(metric_name("val_accuracy", point_label({"lr": 0.01}))) == ("val_accuracy", "lr=0.01")
    assert split_metric("val_score") == ("val_score", None)


def test_best_point_is_the_highest_held_out_score_of_any_config():
    rows = [{"val_score[C=0.1]": 0.7}, {"val_score[C=1]": 0.9}, {"train_score[C=10]": 1.0},
            {"val_score": 0.95}, {"val_score[C=10]": float("nan")}]
    assert best_point(rows) == "C=1"
    assert best_point([{"val_accuracy[lr=0.1]": 0.2, "val_accuracy[lr=0.01]": 0.6}]) == "lr=0.01"
    assert best_point([{"val_score": 0.9}]) is None


def test_a_user_grid_whose_config_labels_the_store_could_not_keep_is_refused():
    """Every config's label names its metrics, which the store keeps up to
    1,000 bytes: a grid with a longer one is refused when the model is added,
    not after its job trained (non-ASCII counted in bytes)."""
    from ease_jupyter.jobspec import MAX_LABEL_BYTES, check_user_grid, metric_name, point_label
    from ease_jupyter.store._validate import MAX_KEY_BYTES, check_key

    fits = {"clf__memory": ["/tmp/" + "x" * 800, "short"], "C": [1.0]}
    assert check_user_grid(fits, "estimator") == fits
    longest = metric_name("val_accuracy", point_label({"clf__memory": fits["clf__memory"][0], "C": 1.0, "lr": 0.001}))
    check_key("name", longest)  # stored as it is
    assert MAX_LABEL_BYTES < MAX_KEY_BYTES
    for grid in ({"clf__memory": ["/tmp/" + "x" * 1000]}, {"name": ["é" * 460]}):
        with pytest.raises(DataError) as refused:
            check_user_grid(grid, "estimator")
        assert refused.value.field == "grid" and "bytes" in refused.value.found
