"""A table task whose categorical columns hold numbers, and one read from a
headerless CSV, through the real service: ``task.infer`` answers from the
numbers' category text ("8000"), and the exported joblib model, loaded in a
process without ease_jupyter, answers the same on the DataFrame its owner
has (a ``category`` column of ints, int zip codes declared categorical,
float doses, int column names), not every row as an unseen category. The
ONNX model answers the same from strings spelled as its card says."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ease_jupyter.service.testing import train_now

from .test_export import _stored, load_elsewhere, with_idle_sklearn


def grades(n: int = 240, seed: int = 0) -> pd.DataFrame:
    """A class that follows three categories, all of them numbers, beside a
    measurement and a site (text, some missing)."""
    rng = np.random.default_rng(seed)
    grade, zips, dose = rng.integers(1, 4, n), rng.choice([8000, 8001], n), rng.choice([0.5, 1.0, 2.0], n)
    frame = pd.DataFrame({"grade": pd.Categorical(grade), "zip": zips, "dose": dose, "size": rng.normal(size=n),
                          "site": rng.choice(["north", "south"], n).astype(object),
                          "label": np.where((grade == 2) * 1 + (zips == 8001) + (dose == 1.0) >= 2, "good", "bad")})
    frame.loc[::17, "site"] = None
    frame.loc[5, "dose"] = np.nan
    return frame


def spelled(value) -> str:
    """A value as the ONNX card says to spell it: a whole number as its
    integer's digits, anything else as its str, "" where missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def test_numbers_in_categorical_columns_export_as_the_service_reads_them(tmp_path):
    running = with_idle_sklearn(tmp_path / "service")
    try:
        frame = grades()
        task = running.client("alice").task("grades", like=frame, target="label",
                                            kinds={"zip": "categorical", "dose": "categorical"})
        assert [c["kind"] for c in task.info["table"]["columns"]] == [
            "categorical", "categorical", "categorical", "numeric", "categorical"]
        task.feed(frame)
        store, blobs = running.service.store, running.service.blobs
        assert train_now(store, blobs, _stored(running, "alice", "grades"), "logreg", {"C": 100.0}).status.value == \
            "succeeded"
        X = frame.drop(columns="label")
        expected = task.infer(X)
        assert np.mean(expected == frame["label"].to_numpy()) == 1.0
        # the same doses as a category column, or as objects: one spelling, the same answers
        assert list(task.infer(X.assign(dose=pd.Categorical(X["dose"])))) == list(expected)
        assert list(task.infer(X.assign(dose=X["dose"].astype(object)))) == list(expected)

        cards = {fmt: task.export(tmp_path / f"grades.{fmt}", format=fmt) for fmt in ("joblib", "onnx")}
        step = cards["onnx"]["input_preprocessing"][0]
        assert step["step"] == "category text" and step["applies_to"] == ["grade", "zip", "dose", "site"]
        assert "'8000', not '8000.0'" in step["feed_the_file"]
        assert cards["joblib"]["input_preprocessing"][0]["applies_to"] == step["applies_to"]
        strings = X.assign(**{c: [spelled(v) for v in X[c].tolist()] for c in step["applies_to"]})
        report, (from_joblib, from_onnx) = load_elsewhere(
            [("joblib", tmp_path / "grades.joblib", X), ("onnx", tmp_path / "grades.onnx", strings)], tmp_path)
        assert report["ease_jupyter_importable"] is False
        names = np.asarray(cards["joblib"]["class_names"], dtype=object)
        assert np.mean(names[from_joblib.astype(int)] == expected) == 1.0  # her own frame, numbers and all
        assert np.mean(names[from_onnx.ravel().astype(int)] == expected) == 1.0
    finally:
        running.thread.stop()


def test_a_headerless_csv_trains_infers_and_exports_under_its_int_column_names(tmp_path):
    rng = np.random.default_rng(1)
    n = 120
    a, b = rng.normal(size=n), rng.normal(size=n)
    kind = rng.choice([3, 7], n)
    species = np.where(a + (kind == 7) * 2.0 > 1.0, "virginica", "setosa")
    path = tmp_path / "iris.csv"
    path.write_text("".join(f"{x:.4f},{y:.4f},{k},{s}\n" for x, y, k, s in zip(a, b, kind, species)))
    frame = pd.read_csv(path, header=None)
    assert list(frame.columns) == [0, 1, 2, 3]

    running = with_idle_sklearn(tmp_path / "service")
    try:
        task = running.client("alice").task("iris", like=frame, target=3, kinds={2: "categorical"})
        assert task.info["table"]["target"] == "3"
        assert [(c["name"], c["kind"]) for c in task.info["table"]["columns"]] == [
            ("0", "numeric"), ("1", "numeric"), ("2", "categorical")]
        task.feed(frame)
        store, blobs = running.service.store, running.service.blobs
        assert train_now(store, blobs, _stored(running, "alice", "iris"), "logreg", {"C": 100.0}).status.value == \
            "succeeded"
        X = frame.drop(columns=3)
        expected = task.infer(X)
        assert list(task.infer(frame)) == list(expected)  # the rows as fed: the target column is left out
        card = task.export(tmp_path / "iris.joblib", format="joblib")
        report, (predicted,) = load_elsewhere([("joblib", tmp_path / "iris.joblib", X)], tmp_path)
        assert report["ease_jupyter_importable"] is False
        names = np.asarray(card["class_names"], dtype=object)
        np.testing.assert_array_equal(names[predicted.astype(int)], expected)
    finally:
        running.thread.stop()
