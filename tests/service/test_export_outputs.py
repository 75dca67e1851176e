"""What an exported model takes and gives, as its card says: ONNX inputs
named as the table's columns (whatever skl2onnx made of them), per-class
columns named by the classes training saw, decision scores marked as such,
None as a missing value in a joblib pipeline, the empty-string category
refused for ONNX, the stored config as the best one, a torch export that
outlives its wait as a typed timeout, and files written whole or not at all.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import os

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.errors import DataError, UserModelCallTimeout
from ease_jupyter.service import export, export_bundle
from ease_jupyter.service.testing import train_now

from .conftest import start


def _table_model(frame, target, estimator, kinds=None):
    from ease_jupyter.tabular import infer_schema
    from ease_jupyter.zoo.preprocess import table_pipeline

    schema = infer_schema(frame, target, kinds=kinds or {})
    X = frame.drop(columns=target)
    model = table_pipeline(schema, estimator).fit(X, frame[target])
    columns = tuple((c.name, c.kind.value) for c in schema.columns)
    return model, X, export.SklearnInputs(columns=columns)


def _session(data: bytes):
    import onnxruntime

    return onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------- ONNX inputs by column name


def test_onnx_inputs_are_named_as_the_columns_and_a_clashing_output_moves_aside():
    """Columns that are no identifiers or that skl2onnx's outputs would take
    ("label", "probabilities") are fed by their own names; the outputs they
    clash with are renamed, and the card says so."""
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"bill length (mm)": rng.normal(size=120), "label": rng.normal(size=120),
                          "probabilities": rng.choice(["a", "b"], 120).astype(object),
                          "größe": rng.normal(size=120)})
    frame["y"] = (frame["bill length (mm)"] + frame["label"] > 0).astype(int)
    model, X, inputs = _table_model(frame, "y", LogisticRegression())
    artifact = export.with_onnx_outputs(export.sklearn_artifact(model, "onnx", inputs, classification=True))
    session = _session(artifact.data)
    names = [name for name, _ in inputs.columns]
    assert [i.name for i in session.get_inputs()] == names
    assert [row["name"] for row in artifact.inputs] == names
    assert [(row["kind"], row["dtype"], row["shape"]) for row in artifact.inputs] == [
        ("numeric", "float32", [None, 1]), ("numeric", "float32", [None, 1]),
        ("categorical", "string", [None, 1]), ("numeric", "float32", [None, 1])]
    outputs = {row["name"]: row for row in artifact.outputs}
    assert [o.name for o in session.get_outputs()] == list(outputs) == ["label_output", "probabilities_output"]
    assert outputs["label_output"]["renamed_from"] == "label" and "'label'" in outputs["label_output"]["why"]
    assert outputs["probabilities_output"]["renamed_from"] == "probabilities"
    feeds = {name: (X[[name]].to_numpy(object) if kind == "categorical" else X[[name]].to_numpy(np.float32))
             for name, kind in inputs.columns}
    labels, probabilities = session.run(None, feeds)
    np.testing.assert_array_equal(labels, model.predict(X))
    np.testing.assert_allclose(probabilities, model.predict_proba(X), atol=1e-5)


def test_a_regressors_output_moves_aside_for_a_column_of_its_name():
    import pandas as pd
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"variable": rng.normal(size=60), "x": rng.normal(size=60)})
    frame["y"] = frame["variable"] * 2 + frame["x"]
    model, X, inputs = _table_model(frame, "y", Ridge())
    artifact = export.with_onnx_outputs(export.sklearn_artifact(model, "onnx", inputs, classification=False))
    session = _session(artifact.data)
    assert [i.name for i in session.get_inputs()] == ["variable", "x"]
    assert [(row["name"], row["renamed_from"]) for row in artifact.outputs] == [("variable_output", "variable")]
    out = session.run(None, {c: X[[c]].to_numpy(np.float32) for c in ("variable", "x")})[0]
    np.testing.assert_allclose(out.ravel(), model.predict(X), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- the empty-string category


def test_an_empty_string_category_is_refused_for_onnx_naming_the_column():
    """ONNX reads "" as a missing value: a model that learnt "" as a
    category of its own would predict it as a missing one."""
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"num": rng.normal(size=90), "cat": rng.choice(["a", "b", ""], 90).astype(object)})
    frame["y"] = (frame["cat"] == "").astype(int)
    model, _, inputs = _table_model(frame, "y", LogisticRegression())
    with pytest.raises(DataError) as error:
        export.sklearn_artifact(model, "onnx", inputs, classification=True)
    assert error.value.field == "format" and "'cat'" in error.value.found and "empty string" in error.value.found
    assert "joblib" in error.value.expected
    assert export.sklearn_artifact(model, "joblib", inputs, classification=True).data


# ---------------------------------------------------------------- per-class columns and decision scores


def test_probability_columns_name_the_classes_training_saw():
    """A class that never reached training has no column: the card gives
    the columns' classes, for joblib's predict_proba and ONNX's probabilities."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3)).astype("float32")
    y = np.where(X[:, 0] > 0, 2, 0)  # class 1 of the task's three never seen
    model = LogisticRegression().fit(X, y)
    inputs = export.SklearnInputs(n_features=3)
    joblib_outputs = export.sklearn_artifact(model, "joblib", inputs, classification=True).outputs
    proba = next(row for row in joblib_outputs if row["name"] == "predict_proba")
    assert proba["columns"] == [0, 2] and "class index order" not in proba["returns"]
    onnx = export.with_onnx_outputs(export.sklearn_artifact(model, "onnx", inputs, classification=True))
    rows = {row["name"]: row for row in onnx.outputs}
    assert rows["probabilities"]["columns"] == [0, 2] and rows["probabilities"]["shape"] == [None, 2]
    assert "holds" not in rows["probabilities"]
    assert rows["label"]["returns"] == "class indices into class_names"


def test_an_svc_without_probabilities_says_its_onnx_output_holds_decision_scores():
    from sklearn.svm import SVC

    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 3)).astype("float32")
    y = np.digitize(X[:, 0], [-0.4, 0.4])
    model = SVC().fit(X, y)
    onnx = export.with_onnx_outputs(export.sklearn_artifact(model, "onnx", export.SklearnInputs(n_features=3), True))
    scores = next(row for row in onnx.outputs if row["name"] == "probabilities")
    assert scores["holds"] == "decision scores" and "not probabilities" in scores["returns"]
    assert scores["columns"] == [0, 1, 2]
    out = _session(onnx.data).run(None, {"X": X})[1]
    assert not np.allclose(out.sum(axis=1), 1.0)  # scores indeed, not probabilities
    # a binary one: one score and its negative, so no per-class columns are claimed
    binary = SVC().fit(X, (y > 0).astype(int))
    onnx = export.with_onnx_outputs(export.sklearn_artifact(binary, "onnx", export.SklearnInputs(n_features=3), True))
    scores = next(row for row in onnx.outputs if row["name"] == "probabilities")
    assert scores["holds"] == "decision scores" and "columns" not in scores


# ---------------------------------------------------------------- None as a missing value


def test_none_is_missing_in_the_exported_pipeline_as_in_infer(tmp_path):
    """A DataFrame with None where a category or a text is missing predicts
    as with NaN, in the service and in the joblib file; the ONNX file
    (one string input per column, "" for missing) still converts."""
    import pandas as pd

    from .test_export import load_elsewhere, with_idle_sklearn

    running = with_idle_sklearn(tmp_path / "service")
    try:
        store, blobs = running.service.store, running.service.blobs
        rng = np.random.default_rng(0)
        n = 300
        frame = pd.DataFrame({"num": rng.normal(size=n), "cat": rng.choice(["a", "b", "c"], n, p=[0.4, 0.35, 0.25]),
                              "note": rng.choice(["red fish", "blue bird", "green tree"], n)})
        frame["y"] = np.where(frame["cat"] == "a", "A", "B")
        task = running.client("alice").task("tab", like=frame, target="y", kinds={"note": "text"})
        task.feed(frame)
        stored = store.task_by_name(store.user_by_name("alice").id, "tab")
        assert train_now(store, blobs, stored, "logreg", {"C": 100.0}).status.value == "succeeded"
        rows = pd.DataFrame({"num": [0.0] * 4, "cat": pd.Series(["b", None, np.nan, "a"], dtype=object),
                             "note": pd.Series(["blue bird", None, np.nan, None], dtype=object)})
        expected = task.infer(rows)
        assert expected[1] == expected[2]  # None as NaN in the service
        card = task.export(tmp_path / "tab.joblib")
        names = np.asarray(card["class_names"], dtype=object)
        nullable = rows.astype({"cat": "string", "note": "string"})  # pd.NA where missing (convert_dtypes' kind)
        report, predicted = load_elsewhere([("joblib", tmp_path / "tab.joblib", rows),
                                            ("joblib", tmp_path / "tab.joblib", nullable)], tmp_path)
        assert report["ease_jupyter_importable"] is False
        for found in predicted:
            np.testing.assert_array_equal(names[found.astype(int)], expected)
        onnx_card = task.export(tmp_path / "tab.onnx")
        probabilities = next(row for row in onnx_card["outputs"] if row["name"] == "probabilities")
        assert probabilities["columns"] == [0, 1] and probabilities["column_names"] == ["A", "B"]
    finally:
        running.thread.stop()


def test_the_missing_step_leaves_training_as_it_was():
    """The stored rows carry NaN: the preprocessing with the step fits and
    transforms them exactly as without it."""
    import pandas as pd

    from ease_jupyter.tabular import infer_schema
    from ease_jupyter.zoo.preprocess import preprocessor

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"num": rng.normal(size=80), "cat": rng.choice(["a", "b"], 80).astype(object),
                          "note": rng.choice(["x y", "yy zz"], 80).astype(object), "y": rng.integers(0, 2, 80)})
    frame.loc[::5, "cat"] = np.nan
    frame.loc[::7, "note"] = np.nan
    frame.loc[::3, "num"] = np.nan
    schema = infer_schema(frame, "y", kinds={"note": "text"})
    X = frame.drop(columns="y")
    with_step = preprocessor(schema)
    without = preprocessor(schema)
    without.transformers = [(name, _without_missing_step(pipe), cols) for name, pipe, cols in without.transformers]
    assert any(name == "missing" for _, pipe, _ in with_step.transformers for name, _ in pipe.steps)
    np.testing.assert_array_equal(with_step.fit_transform(X), without.fit_transform(X))


def _without_missing_step(pipeline):
    from sklearn.pipeline import Pipeline

    return Pipeline([(name, step) for name, step in pipeline.steps if name not in ("objects", "missing")])


# ---------------------------------------------------------------- the config the job stored


def _metric(name, value):
    from ease_jupyter.store import Metric

    return Metric(1, 0, name, value, datetime.datetime.now(datetime.timezone.utc))


def test_the_best_config_is_the_one_the_job_stored_on_a_tie():
    """The grid keeps its earliest point on a tie, a torch job its earliest
    surviving config: the job's record says which, the scores alone do not."""
    from ease_jupyter.service.model_card import best_config
    from ease_jupyter.service.models import BEST_TRIAL_TAG
    from ease_jupyter.service.runner import GRID_BEST_TAG

    grid = [_metric("val_score[C=1]", 0.9), _metric("val_score[C=10]", 0.9), _metric("val_score", 0.9)]
    assert best_config({GRID_BEST_TAG: json.dumps({"params": {"C": 1.0}, "errors": {}})}, grid) == "C=1"
    # a config stopped early scored higher at its last rung than the survivor the job stored
    mop = [_metric("val_accuracy[lr=0.1]", 0.8), _metric("val_accuracy[lr=0.01]", 0.85)]
    record = {"trial": "t0", "lr": 0.1, "params": {"lr": 0.1}}
    assert best_config({BEST_TRIAL_TAG: json.dumps(record)}, mop) == "lr=0.1"
    assert best_config({BEST_TRIAL_TAG: json.dumps({"trial": "t0", "lr": 0.1})}, mop) == "lr=0.1"
    assert best_config({}, mop) == "lr=0.01"  # a job without a record: its best score


def test_the_card_and_best_name_the_stored_config(tmp_path):
    """iris's logistic regression ties at C=10 and C=100: the card and
    ``best()`` name the one whose model was stored and exported."""
    from sklearn.datasets import load_iris

    from ease_jupyter.jobspec import point_label
    from ease_jupyter.service.runner import GRID_BEST_TAG

    running = start(tmp_path / "service")
    try:
        running.user("alice")
        client = running.client("alice")
        X, y = load_iris(return_X_y=True)
        task = client.task("iris", input=[4], output=[3])
        task.cancel()
        store, blobs = running.service.store, running.service.blobs
        stored = store.task_by_name(store.user_by_name("alice").id, "iris")
        datasets.feed(store, blobs, stored, X.astype("float32"), y)
        version = store.latest_dataset_version(stored.id)
        job = store.create_job(stored.id, version.id, "logreg", {"grid": {"C": [1.0, 10.0, 100.0]}})
        from ease_jupyter.service.runner import grid_engine, run_sklearn_job

        engine = grid_engine("local")
        try:
            assert run_sklearn_job(store, blobs, job.id, engine).status.value == "succeeded"
        finally:
            engine.close()
        scores = {m.name: m.value for m in store.list_metrics(job.id)}
        assert scores["val_score[C=10]"] == scores["val_score[C=100]"] == scores["val_score"]  # the tie
        stored_point = point_label(json.loads(store.tags("job", job.id)[GRID_BEST_TAG])["params"])
        card = task.export(tmp_path / "iris.joblib")
        assert card["training"]["best_config"] == task.best()["best_config"] == stored_point == "C=10"
        assert client.leaderboard()[0]["best"]["best_config"] == "C=10"  # the leaderboard reads it the same way
        import joblib

        assert joblib.load(tmp_path / "iris.joblib").get_params()["model__C"] == 10.0
    finally:
        running.thread.stop()


# ---------------------------------------------------------------- a torch export past its wait


class _Stuck:
    """A torch executor whose calls never finish."""

    def __init__(self):
        self.futures = []

    def call(self, fn, *args):
        future = concurrent.futures.Future()
        self.futures.append(future)
        return future


def test_a_torch_export_past_its_wait_is_a_typed_timeout_and_is_cancelled(tmp_path):
    from ease_jupyter.service.handlers import error_of

    running = start(tmp_path / "service")
    try:
        running.user("alice")
        task = running.client("alice").task("digits", input=[8, 8, 1], output=[10])
        task.cancel()
        store, blobs = running.service.store, running.service.blobs
        stored = store.task_by_name(store.user_by_name("alice").id, "digits")
        rng = np.random.default_rng(0)
        datasets.feed(store, blobs, stored, rng.random((20, 8, 8, 1), dtype=np.float32), rng.integers(0, 10, 20))
        from ease_jupyter.store import JobStatus, JobUpdate

        job = store.create_job(stored.id, store.latest_dataset_version(stored.id).id, "lenet",
                               {"lrs": [0.05], "epochs": 1})
        store.update_job(job.id, JobStatus.RUNNING)
        store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=1.0,
                                                                artifact_blob=blobs.put_bytes(b"weights")))
        stuck = _Stuck()
        with pytest.raises(UserModelCallTimeout) as error:
            export.export_best(store, blobs, stored, "torchscript", stuck, 0.05)
        assert "'digits'" in str(error.value) and "0.05 s" in str(error.value)
        assert stuck.futures[0].cancelled()  # still queued: it never runs
        answer = error_of(error.value)
        assert answer.status == 422 and answer.code == "user_model_timeout"
        # an infer of the same model waits the same way where the torch jobs run
        from ease_jupyter.service import core
        from ease_jupyter.zoo import Engine

        executors = running.service.loop.executors
        real, executors[Engine.TORCH] = executors.get(Engine.TORCH), stuck
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(core, "MODEL_CALL_SECONDS", 0.05)
                with pytest.raises(UserModelCallTimeout, match="'digits': predicting"):
                    running.service._torch_outputs(stored, store.get_job(job.id), np.zeros((1, 8, 8, 1), "float32"))
            assert stuck.futures[-1].cancelled()
        finally:
            if real is None:
                del executors[Engine.TORCH]
            else:
                executors[Engine.TORCH] = real
    finally:
        running.thread.stop()


# ---------------------------------------------------------------- the files, whole or not at all


def _bundle():
    return export_bundle.pack("model.onnx", b"the model", {"file": "model.onnx", "format": "onnx"})


def test_the_card_path_is_checked_before_anything_is_written(tmp_path):
    (tmp_path / "m.onnx.card.json").mkdir()
    with pytest.raises(DataError) as error:
        export_bundle.check_target(tmp_path / "m.onnx")
    assert error.value.field == "path" and "card" in error.value.found
    with pytest.raises(DataError):
        export_bundle.write(_bundle(), tmp_path / "m.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx.card.json"]
    long_name = "m" * (255 - len(".onnx") - 2) + ".onnx"  # fits; its card's name does not
    with pytest.raises(DataError) as error:
        export_bundle.write(_bundle(), tmp_path / long_name)
    assert error.value.field == "path" and ".card.json" in error.value.expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx.card.json"]


def test_both_files_are_written_whole_card_first(tmp_path, monkeypatch):
    target = tmp_path / "m.onnx"
    target.write_bytes(b"the old model")
    replaced = []
    real_replace = os.replace

    def failing_replace(source, destination):
        replaced.append(os.path.basename(destination))
        if os.fspath(destination) == os.fspath(target):
            raise OSError("disk gone")
        return real_replace(source, destination)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk gone"):
        export_bundle.write(_bundle(), target)
    assert replaced == ["m.onnx.card.json", "m.onnx"]
    assert target.read_bytes() == b"the old model"  # never half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.card.json"]  # no temporary left
    monkeypatch.setattr(os, "replace", real_replace)
    card = export_bundle.write(_bundle(), target)
    assert target.read_bytes() == b"the model" and card["format"] == "onnx"
    assert json.loads((tmp_path / "m.onnx.card.json").read_text()) == card
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.card.json"]
