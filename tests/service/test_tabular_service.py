"""Data in as scientists have it, through the real service: a penguins-like
DataFrame with text columns and missing values fed as is, CSV and Parquet
files, an image folder, string labels kept as class names, and bad input
refused with nothing stored."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ease_jupyter.datasets import load
from ease_jupyter.errors import AlreadyExistsError, DataError
from ease_jupyter.execution.holdout import validation_mask
from ease_jupyter.service import models
from ease_jupyter.service.task_schema import class_names, table_schema

SPECIES = ("Adelie", "Chinstrap", "Gentoo")
ISLAND = {"Adelie": "Torgersen", "Chinstrap": "Dream", "Gentoo": "Biscoe"}


def penguins(n: int = 150, seed: int = 0) -> pd.DataFrame:
    """Palmer-penguins-like rows: numbers with NaN, string columns with
    missing values, a string target."""
    rng = np.random.default_rng(seed)
    species = rng.choice(SPECIES, n)
    bill = {"Adelie": 38.8, "Chinstrap": 48.8, "Gentoo": 47.5}
    flipper = {"Adelie": 190.0, "Chinstrap": 196.0, "Gentoo": 217.0}
    frame = pd.DataFrame({
        "bill_length_mm": [bill[s] + rng.normal(0, 1.5) for s in species],
        "flipper_length_mm": [flipper[s] + rng.normal(0, 4) for s in species],
        "island": [ISLAND[s] if rng.random() > 0.1 else rng.choice(list(ISLAND.values())) for s in species],
        "sex": rng.choice(["male", "female"], n).astype(object),
        "species": species,
    })
    frame.loc[rng.random(n) < 0.15, "bill_length_mm"] = np.nan
    frame.loc[rng.random(n) < 0.1, "island"] = None
    frame.loc[rng.random(n) < 0.1, "sex"] = None
    return frame


def task_record(svc, name: str):
    store = svc.service.store
    user = store.user_by_name("alice")
    return store.task_by_name(user.id, name)


def stored_versions(svc, name: str) -> int:
    return len(svc.service.store.list_dataset_versions(task_record(svc, name).id))


def test_a_penguins_dataframe_trains_as_is_and_infer_names_the_species(svc):
    frame = penguins()
    alice = svc.client("alice")
    task = alice.task("penguins", like=frame, target="species")
    assert task.info["table"]["classes"] == list(SPECIES)
    assert {c["name"]: c["kind"] for c in task.info["table"]["columns"]} == {
        "bill_length_mm": "numeric", "flipper_length_mm": "numeric", "island": "categorical", "sex": "categorical"}
    version = task.feed(frame)  # the target column goes along; nothing mapped, imputed or encoded by hand
    assert version["n_examples"] == len(frame)
    assert task.wait(timeout=120)

    best = task.best()
    assert best["class_names"] == list(SPECIES)
    assert best["accuracy"] > 0.8
    row = next(r for r in alice.leaderboard() if r["task"] == "penguins")
    assert row["best"]["class_names"] == list(SPECIES)

    features = frame.drop(columns=["species"])
    predicted = task.infer(features)
    assert predicted.dtype.kind == "U" and set(predicted) <= set(SPECIES)
    assert np.mean(predicted == frame["species"].to_numpy()) > 0.8

    # The preprocessing is the model's first step, fitted on the training rows only.
    store, blobs = svc.service.store, svc.service.blobs
    record = task_record(svc, "penguins")
    job = models.best_job(store, record)
    pipeline = models.load_estimator(blobs, record, job)
    assert [name for name, _ in pipeline.steps] == ["preprocess", "model"]
    data = load(store, blobs, store.get_dataset_version(job.dataset_version_id))
    training = ~validation_mask(data.split_keys)
    columns = table_schema(store, record).columns_of(data.X)
    numeric = pipeline.named_steps["preprocess"].named_transformers_["numeric"].named_steps["impute"]
    train_means = [np.nanmean(columns[c][training]) for c in ("bill_length_mm", "flipper_length_mm")]
    all_means = [np.nanmean(columns[c]) for c in ("bill_length_mm", "flipper_length_mm")]
    np.testing.assert_allclose(numeric.statistics_, train_means)
    assert not np.allclose(numeric.statistics_, all_means)


def test_csv_and_parquet_paths_feed_and_infer(svc, tmp_path):
    frame = penguins(60, seed=1)
    csv, parquet = tmp_path / "penguins.csv", tmp_path / "penguins.parquet"
    frame.to_csv(csv, index=False)
    frame.to_parquet(parquet, index=False)
    alice = svc.client("alice")
    task = alice.task("from_files", like=csv, target="species")
    assert task.feed(csv)["n_examples"] == 60
    more = penguins(40, seed=2)
    more.to_parquet(parquet, index=False)
    assert task.feed(parquet)["n_examples"] == 100
    assert task.wait(timeout=120)
    assert set(task.infer(parquet)) <= set(SPECIES)


def test_bad_table_input_is_named_and_stores_nothing(svc, tmp_path):
    frame = penguins(40, seed=3)
    alice = svc.client("alice")
    task = alice.task("strict", like=frame, target="species")
    task.feed(frame)
    before = stored_versions(svc, "strict")

    with pytest.raises(DataError) as info:
        task.feed(frame.drop(columns=["island"]))
    assert info.value.field == "X['island']" and "no such column" in info.value.found

    other_type = frame.assign(flipper_length_mm=["long"] * len(frame))
    with pytest.raises(DataError) as info:
        task.feed(other_type)
    assert info.value.field == "X['flipper_length_mm']" and "numeric" in info.value.expected

    with pytest.raises(DataError) as info:
        task.feed(frame.assign(colour="red"))
    assert info.value.field == "X['colour']"

    with pytest.raises(DataError) as info:
        task.feed(frame.assign(species=["Emperor"] + list(frame["species"][1:])))
    assert info.value.field == "y[0]" and "Emperor" in info.value.found and "Adelie" in info.value.expected

    with pytest.raises(DataError) as info:
        task.feed(tmp_path / "nowhere.csv")
    assert info.value.field == "X" and "does not exist" in info.value.found

    assert stored_versions(svc, "strict") == before
    assert class_names(svc.service.store, task_record(svc, "strict")) == list(SPECIES)

    with pytest.raises(DataError) as info:
        alice.task("no_target", like=frame, target="beak")
    assert info.value.field == "target"
    with pytest.raises(AlreadyExistsError):
        alice.task("strict", like=frame.drop(columns=["sex"]), target="species")


def test_string_labels_of_a_tensor_task_are_class_names(svc, iris):
    X, y = iris
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    alice = svc.client("alice")
    task = alice.task("iris_names", input=[4], output=[3])
    task.feed(X[::2], names[::2])
    assert task.info is not None and task.refresh()["class_names"] == ["setosa", "versicolor", "virginica"]
    task.feed(X[1::2], names[1::2])
    assert task.wait(timeout=120)
    predicted = task.infer(X)
    assert np.mean(predicted == names) > 0.8
    before = stored_versions(svc, "iris_names")
    with pytest.raises(DataError) as info:
        task.feed(X[:2], np.array(["setosa", "rosa"]))
    assert info.value.field == "y[1]" and "rosa" in info.value.found and "virginica" in info.value.expected
    assert stored_versions(svc, "iris_names") == before


def _draw(path, pixels) -> None:
    from PIL import Image

    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(path)


def test_an_image_folder_feeds_with_its_subfolders_as_classes(svc, tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "shapes"
    for label in ("dark", "light"):
        (root / label).mkdir(parents=True)
        for i in range(12):
            level = 40 if label == "dark" else 210
            _draw(root / label / f"{i}.png", np.clip(rng.normal(level, 20, (16, 16)), 0, 255))
    alice = svc.client("alice")
    task = alice.task("shapes", input=[8, 8, 1], output=[2])
    version = task.feed(root)
    assert version["n_examples"] == 24
    _, X, y = task.data()
    assert X.shape == (24, 8, 8, 1) and 0.0 <= X.min() and X.max() <= 1.0  # resized to the input shape
    assert task.refresh()["class_names"] == ["dark", "light"]
    assert task.wait(timeout=120)
    assert list(task.infer(root / "light")) == ["light"] * 12

    (root / "light" / "notes.txt").write_text("not an image")
    with pytest.raises(DataError) as info:
        task.feed(root)
    assert info.value.field == "X" and "notes.txt" in info.value.found
    with pytest.raises(DataError) as info:
        task.feed(tmp_path / "missing_folder")
    assert "does not exist" in info.value.found
    assert stored_versions(svc, "shapes") == 1


def test_the_magic_declares_a_table_task_from_a_dataframe_and_feeds_it(svc):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "ease_jupyter")
        frame = penguins(30, seed=4)
        shell.user_ns.update(df=frame)
        shell.run_line_magic("easeml", f"connect {svc.url} --token {svc.tokens['alice']}")
        r = shell.run_line_magic("easeml", "task birds --from df --target species")
        assert r.data["table"]["target"] == "species" and r.data["class_names"] == list(SPECIES)
        v = shell.run_line_magic("easeml", "feed birds df")  # one table, its target column in it
        assert v.data["n_examples"] == 30
        assert table_schema(svc.service.store, task_record(svc, "birds")).names == (
            "bill_length_mm", "flipper_length_mm", "island", "sex")
    finally:
        InteractiveShell.clear_instance()


def test_a_tables_examples_come_back_whole_across_pages(svc, monkeypatch):
    from ease_jupyter.service import core

    frame = penguins(40, seed=2)
    task = svc.client("alice").task("paged", like=frame, target="species")
    task.feed(frame)
    whole_ids, whole, whole_y = task.data()  # one page
    monkeypatch.setattr(core, "EXAMPLES_PAGE_BYTES", 1)  # one row a page
    first = svc.call("GET", "/tasks/paged/examples", "alice").body
    assert first["next_offset"] == 1 and first["total"] == 40
    ids, X, y = task.data()
    assert list(ids) == list(whole_ids) == list(range(40)) and list(y) == list(whole_y)
    pd.testing.assert_frame_equal(X, whole)


def test_columns_declared_another_kind_feed_as_declared(svc):
    """Integer-coded categories declared categorical (zip codes, a class
    number) and Decimal prices declared numeric feed from the very frame the
    task was declared from, and read back as their kinds say."""
    import decimal

    frame = pd.DataFrame({"zip": [8000, 8001, None, 8000] * 5, "pclass": [1, 2, 3, 1] * 5,
                          "price": [decimal.Decimal("1.5"), decimal.Decimal("2"), None, decimal.Decimal("7.25")] * 5,
                          "survived": ["yes", "no", "no", "yes"] * 5})
    task = svc.client("alice").task("titanic", like=frame, target="survived",
                                     kinds={"zip": "categorical", "pclass": "categorical", "price": "numeric"})
    assert task.feed(frame)["n_examples"] == 20
    _, X, _ = task.data()
    assert list(X["zip"][:2]) == ["8000", "8001"] and pd.isna(X["zip"][2]) and X["zip"][3] == "8000"
    assert list(X["pclass"][:3]) == ["1", "2", "3"]
    np.testing.assert_allclose(X["price"][:4].astype(float), [1.5, 2.0, np.nan, 7.25])
