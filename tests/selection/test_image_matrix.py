"""The committed image matrix (benchmarks/data/image_*) and the task makers
and cell measurement of benchmarks/image_matrix.py, on tiny inputs."""

import json
from pathlib import Path

import numpy as np
import pytest

from ease_jupyter.jobspec import DEFAULT_EPOCHS, TorchWorkload
from ease_jupyter.schema import program_from_shapes
from ease_jupyter.service.config import ServiceConfig
from ease_jupyter.zoo import Engine, candidates

from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data"


@pytest.fixture(scope="module")
def im():
    return load_benchmark("image_matrix")


@pytest.fixture(scope="module")
def committed(im):
    users, models, q = im.read_csv(DATA / "image_quality.csv")
    users_c, models_c, c = im.read_csv(DATA / "image_cost.csv")
    meta = json.loads((DATA / "image_meta.json").read_text())
    assert (users_c, models_c) == (users, models)
    return users, models, q, c, meta


def zoo_columns(im):
    """Every (torch candidate, rate) the service trains for an image program."""
    cands = [c for c in candidates(program_from_shapes((8, 8, 1), [10])) if c.engine is Engine.TORCH]
    return [im.column(c.name, lr) for c in cands for lr in TorchWorkload.of(c).lrs]


# -- the committed matrix -----------------------------------------------------------------
def test_committed_matrix_is_well_formed(im, committed):
    users, models, q, c, meta = committed
    assert len(users) >= 12 and len(set(users)) == len(users)
    assert models == zoo_columns(im)
    assert {m.split("@")[0] for m in models} >= {"lenet", "resnet_small", "vgg_small", "mobilenet_small"}
    assert q.shape == c.shape == (len(users), len(models))
    assert np.isfinite(q).all() and ((q >= 0) & (q <= 1)).all()
    assert np.isfinite(c).all() and (c > 0).all()
    assert [t["name"] for t in meta["tasks"]] == users
    assert meta["epochs"] == (ServiceConfig().torch_epochs or DEFAULT_EPOCHS)  # the benchmark's --epochs default
    for key in ("quality_source", "cost_source", "model_source", "columns", "machine", "load", "date", "versions"):
        assert key in meta


def test_committed_noisy_tasks_score_below_their_clean_ones(committed):
    """Validation labels are noisy too, so a 30%-noise task cannot reach its clean twin's accuracy."""
    users, _, q, _, meta = committed
    best = dict(zip(users, q.max(axis=1)))
    rates = {t["name"]: t["noise_rate"] for t in meta["tasks"] if "noise_rate" in t}
    assert rates == {"digits_all_noise20": 0.2, "digits_3v8_noise30": 0.3}
    assert best["digits_3v8_noise30"] < best["digits_3v8"] - 0.15
    assert best["digits_all_noise20"] < best["digits_all"] - 0.1


def test_per_candidate_takes_the_best_rate_and_the_whole_grids_cost(im):
    models = ["a@lr=0.1", "a@lr=0.01", "b@lr=0.1", "b@lr=0.01"]
    q = np.array([[0.5, 0.9, 0.7, 0.6], [0.2, 0.1, 0.3, 0.8]])
    c = np.array([[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0]])
    names, qa, ca = im.per_candidate(models, q, c)
    assert names == ["a", "b"]
    assert qa.tolist() == [[0.9, 0.7], [0.2, 0.8]]
    assert ca.tolist() == [[3.0, 7.0], [2.0, 2.0]]


# -- task makers ----------------------------------------------------------------------------
def tiny_digits(per_class=6, size=8):
    rng = np.random.default_rng(1)
    y = np.repeat(np.arange(10), per_class)
    X = rng.random((len(y), size, size, 1)).astype(np.float32)
    return X, y


@pytest.mark.parametrize("rate", [0.0, 0.2, 0.3])
def test_label_noise_changes_exactly_the_stated_fraction_to_other_classes(im, rate):
    y = np.repeat(np.arange(3), 20)
    noisy = im.with_label_noise(y, rate, 3, np.random.default_rng(0))
    assert np.mean(noisy != y) == pytest.approx(rate)
    assert set(noisy) <= {0, 1, 2}


def test_select_classes_keeps_those_classes_relabelled_in_order(im):
    X, y = tiny_digits()
    Xs, ys = im.select_classes(X, y, [7, 2])
    assert len(ys) == 12 and sorted(set(ys)) == [0, 1]
    assert np.array_equal(Xs[ys == 0], X[y == 7]) and np.array_equal(Xs[ys == 1], X[y == 2])


def test_random_rotations_and_flips_are_the_ones_reported(im):
    X, _ = tiny_digits()
    rng = np.random.default_rng(3)
    Xr, turns = im.rotate_random(X, rng)
    assert set(turns) == {0, 1, 2, 3}
    for a, b, k in zip(X, Xr, turns):
        assert np.array_equal(b, np.rot90(a, k, axes=(0, 1)))
    Xf, flags = im.flip_random(X, rng)
    assert 0 < flags.sum() < len(X)
    assert np.array_equal(Xf[flags], X[flags][:, :, ::-1]) and np.array_equal(Xf[~flags], X[~flags])


def test_down_and_upsampling(im):
    X = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1) / 16
    small = im.downsample(X, 2)
    assert small.shape == (1, 2, 2, 1)
    assert small[0, 0, 0, 0] == pytest.approx(np.mean([0, 1, 4, 5]) / 16)
    big = im.upsample(X, 4)
    assert big.shape == (1, 16, 16, 1) and big.dtype == np.float32
    assert big.min() >= 0 and big.max() <= 1
    assert big[0, 0, 0, 0] == pytest.approx(X[0, 0, 0, 0]) and big[0, -1, -1, 0] == pytest.approx(X[0, -1, -1, 0])


def test_imbalance_keeps_the_stated_share_of_each_class(im):
    X, y = tiny_digits(per_class=20)
    Xi, yi = im.imbalance(X, y, [1.0, 0.1] + [0.5] * 8, np.random.default_rng(0))
    counts = np.bincount(yi)
    assert counts[0] == 20 and counts[1] == 2 and (counts[2:] == 10).all()
    assert len(Xi) == len(yi)


def test_make_tasks_produce_what_their_names_and_facts_claim(im):
    X, y = tiny_digits(per_class=10)
    tasks = im.make_tasks(X, y, seed=0)
    by = {t.name: t for t in tasks}
    assert len(tasks) >= 12 and len(by) == len(tasks)
    for t in tasks:
        assert t.X.dtype == np.float32 and t.X.ndim == 4 and len(t.X) == len(t.y)
        assert sorted(set(t.y.tolist())) == list(range(t.n_classes))  # every class present, labels 0..K-1
    assert by["digits_3v8"].n_classes == 2 and by["digits_all"].n_classes == 10
    assert by["digits_all_4x4"].X.shape[1:] == (4, 4, 1)
    assert by["digits_0-4_16x16"].X.shape[1:] == (16, 16, 1) and by["digits_0-4_16x16"].n_classes == 5
    assert by["digits_all_32x32"].X.shape[1:] == (32, 32, 1)
    assert by["digits_all_rgb"].X.shape[1:] == (8, 8, 3)
    for clean, noisy in (("digits_3v8", "digits_3v8_noise30"), ("digits_all", "digits_all_noise20")):
        assert np.array_equal(by[clean].X, by[noisy].X)
        assert np.mean(by[clean].y != by[noisy].y) == pytest.approx(by[noisy].facts["noise_rate"])
    assert np.bincount(by["digits_1v7_imb10"].y).tolist() == [10, 2]
    assert by["digits_1v7_imb10"].facts["class_counts"] == [10, 2]
    turns = by["digits_all_rot90"].facts["quarter_turns"]
    assert sum(turns) == 100 and turns[0] < 100


def test_train_grid_measures_every_rate_of_the_candidates_grid(im):
    from ease_jupyter.execution.engine import make_engine

    X, y = tiny_digits(per_class=6)
    task = im.ImageTask("tiny", *im.select_classes(X, y, [0, 1]), "tiny")
    lenet = next(c for c in im.image_candidates(task) if c.name == "lenet")
    engine = make_engine("local", n_workers=1)
    try:
        run = im.train_grid(engine, lenet, task, epochs=1)
    finally:
        engine.close()
    assert run.lrs == TorchWorkload.of(lenet).lrs
    assert all(0.0 <= a <= 1.0 for a in run.accuracy)
    assert all(s > 0 for s in run.seconds)
    assert sum(run.seconds) == pytest.approx(run.wall_seconds)
