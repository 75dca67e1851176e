"""A table with an identifier column (a sample id per row) through the real
service: declaring and feeding it warn, naming the column; the trained
model leaves the column out of its features (a few columns, not one per
row) yet infer takes it, unseen ids and all; the exported joblib and ONNX
models take the same columns the user feeds, the id included, and predict
what infer does in a process without ease_jupyter. A table row given as a
Series is refused, naming what it is, before anything is sent."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from ease_jupyter.errors import DataError
from ease_jupyter.service import models
from ease_jupyter.service.testing import train_now
from ease_jupyter.tabular import IdentifierColumnWarning

from .test_export import _stored, load_elsewhere, with_idle_sklearn

N = 400


def samples(n: int = N, seed: int = 0) -> pd.DataFrame:
    """Measurements with a site, a file name per row and the class."""
    rng = np.random.default_rng(seed)
    signal = rng.normal(size=n)
    return pd.DataFrame({"signal": signal, "site": rng.choice(["north", "south"], n).astype(object),
                         "file": [f"scan_{i:05d}.tif" for i in range(n)],
                         "label": np.where(signal > 0, "high", "low")})


def identifier_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, IdentifierColumnWarning)]


def test_an_identifier_column_trains_infers_and_exports_without_its_one_hot_columns(tmp_path):
    running = with_idle_sklearn(tmp_path / "service")
    try:
        frame = samples()
        client = running.client("alice")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            task = client.task("scans", like=frame, target="label")
            task.feed(frame)
        said = identifier_warnings(caught)
        assert len(said) == 2 and said[0].startswith("like['file'] looks like an identifier")
        assert said[1].startswith("X['file']") and "kinds={'file': 'text'}" in said[1]
        assert [c["kind"] for c in task.info["table"]["columns"]] == ["numeric", "categorical", "categorical"]

        store, blobs = running.service.store, running.service.blobs
        stored = _stored(running, "alice", "scans")
        assert train_now(store, blobs, stored, "logreg", {"C": 1.0}).status.value == "succeeded"
        pipeline = models.load_estimator(blobs, stored, models.best_job(store, stored))
        preprocess = pipeline.named_steps["preprocess"]
        assert preprocess.transformers_[-1] == ("remainder", "drop", ["file"])
        features = frame.drop(columns="label")
        assert preprocess.transform(features).shape == (N, 3)  # signal, north, south (not 3 + ~320 file names)

        new = samples(20, seed=1).drop(columns="label")  # files never seen, one of them missing
        new["signal"] += np.sign(new["signal"])  # well away from the boundary, whatever was fitted
        new.loc[3, "file"] = None
        expected = task.infer(new)
        assert list(expected) == list(np.where(new["signal"] > 0, "high", "low"))

        cards = {fmt: task.export(tmp_path / f"scans.{fmt}", format=fmt) for fmt in ("joblib", "onnx")}
        assert [i["name"] for i in cards["onnx"]["inputs"]] == ["signal", "site", "file"]
        described = {c["name"]: c["columns"] for c in cards["onnx"]["preprocessing"][0]["columns"]}
        assert described["remainder"] == ["file"] and described["categorical"] == ["site"]
        report, outputs = load_elsewhere([(fmt, tmp_path / f"scans.{fmt}", new) for fmt in ("joblib", "onnx")],
                                         tmp_path)
        assert report["ease_jupyter_importable"] is False
        names = np.asarray(cards["onnx"]["class_names"], dtype=object)
        for output in outputs:
            np.testing.assert_array_equal(names[output.ravel().astype(int)], expected)
    finally:
        running.thread.stop()


@pytest.mark.parametrize("feed", ["row with its label", "row", "unnamed"])
def test_a_row_as_a_series_is_refused_by_name_and_nothing_is_stored(tmp_path, feed):
    running = with_idle_sklearn(tmp_path / "service")
    try:
        frame = samples(40)  # under the identifier floor: no warning here
        task = running.client("alice").task("rows", like=frame, target="label")
        X, y = {"row with its label": (frame.iloc[0], None), "row": (frame.drop(columns="label").iloc[0], "low"),
                "unnamed": (pd.Series([0.5, 1.5]), ["low", "high"])}[feed]
        with pytest.raises(DataError) as caught:
            task.feed(X, y)
        assert caught.value.field == "X" and caught.value.found.startswith("a pandas Series")
        assert "one row" in caught.value.found and "df.iloc[[i]]" in caught.value.expected
        if feed != "unnamed":
            assert "'signal', 'site'" in caught.value.found  # the columns its index holds
            with pytest.raises(DataError) as caught:
                task.infer(X)
            assert caught.value.field == "X" and "one row of a table" in caught.value.found
        assert task.versions() == []
        assert task.feed(frame.iloc[[0, 1]])["n_examples"] == 2  # as the error says: a list of rows
        assert task.feed(frame.drop(columns="label").iloc[[2]], frame["label"].iloc[[2]])["n_examples"] == 3
    finally:
        running.thread.stop()
