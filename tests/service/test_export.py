"""The best model out: every export format loads with its own runtime
(joblib + scikit-learn, onnxruntime, torch.jit, torch.load) in a fresh
process where ease_jupyter cannot be imported, and predicts what
``task.infer`` does on the same rows; the model card says what the store
says; bad formats, wrong engines, missing models and paths are named errors.

The models are trained here, behind the control loop, on cancelled tasks
(``train_now``, ``run_torch_job``), so that the best model cannot change
between an export and the ``infer`` it is compared with.
"""

from __future__ import annotations

import io
import json
import os
import site
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.client import NoModelError
from ease_jupyter.errors import DataError
from ease_jupyter.service import export
from ease_jupyter.service.testing import train_now

from .conftest import serving, start, train_lenet_once

# Runs in the fresh process: loads each exported file with its own runtime
# and saves what it predicts. Argument: a JSON list of [format, model, X.npy, out.npy].
LOADER = r"""
import json, sys
import numpy as np
try:
    import ease_jupyter  # noqa: F401
    importable = True
except ImportError:
    importable = False
out = {"ease_jupyter_importable": importable, "modules": {}}
for fmt, model, x_path, out_path in json.loads(sys.argv[1]):
    if x_path.endswith(".pkl"):  # a table: a DataFrame, as its owner has it
        import pandas as pd
        X = pd.read_pickle(x_path)
    else:
        X = np.load(x_path)
    if fmt == "onnx" and not isinstance(X, np.ndarray):  # one input per column: strings ("" if missing), floats
        import onnxruntime
        session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
        feeds = {}
        for i in session.get_inputs():
            column = X[i.name]
            feeds[i.name] = (column.astype(object).where(column.notna(), "").astype(str).to_numpy(dtype=object)
                             if i.type == "tensor(string)" else column.to_numpy(dtype=np.float32)).reshape(-1, 1)
        np.save(out_path, session.run(None, feeds)[0])
    elif fmt == "joblib":
        import joblib
        estimator = joblib.load(model)
        np.save(out_path, estimator.predict(X))
        out["modules"][model] = type(estimator).__module__
    elif fmt == "onnx":
        import onnxruntime
        session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
        np.save(out_path, session.run(None, {session.get_inputs()[0].name: X})[0])
    elif fmt == "torchscript":
        import torch
        net = torch.jit.load(model)
        with torch.no_grad():
            np.save(out_path, net(torch.from_numpy(X)).numpy())
    elif fmt == "state_dict":
        import torch
        state = torch.load(model, weights_only=True)
        np.save(out_path, np.concatenate([v.detach().numpy().ravel().astype("float64") for v in state.values()]))
print(json.dumps(out))
"""


def bare_python() -> list[str]:
    """A Python that sees site-packages but not ease_jupyter: isolated (-I:
    no current directory, no PYTHON* variables) and without the site module
    (-S: no .pth files, so not the editable install's path hook either), the
    site-packages directories added by hand."""
    paths = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if os.path.isdir(p)]
    prelude = f"import sys; sys.path.extend({paths!r}); exec(sys.argv.pop(1))"
    return [sys.executable, "-I", "-S", "-c", prelude]


def with_idle_sklearn(data_dir):
    """A running service with user alice whose loop's scikit-learn picks start
    and never finish: the one model of a test is the one it trains itself."""
    from ease_jupyter.zoo import Engine

    from .conftest import ManualExecutor

    running = start(data_dir)
    executors = running.service.loop.executors
    executors[Engine.SKLEARN], before = ManualExecutor(running.service.store, workers=1), executors[Engine.SKLEARN]
    before.shutdown()
    running.user("alice")
    return running


def load_elsewhere(items: list[tuple[str, str, np.ndarray]], directory) -> tuple[dict, list[np.ndarray]]:
    """Run LOADER on (format, model path, X) items; its report and outputs."""
    jobs = []
    for i, (fmt, model, X) in enumerate(items):
        out_path = directory / f"out{i}.npy"
        if isinstance(X, np.ndarray):
            x_path = directory / f"x{i}.npy"
            np.save(x_path, X)
        else:
            x_path = directory / f"x{i}.pkl"
            X.to_pickle(x_path)
        jobs.append([fmt, str(model), str(x_path), str(out_path)])
    done = subprocess.run([*bare_python(), LOADER, json.dumps(jobs)], check=False, capture_output=True, text=True,
                          cwd=directory, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report, [np.load(out, allow_pickle=False) for _, _, _, out in jobs]


def _stored(svc, user: str, name: str):
    store = svc.service.store
    return store.task_by_name(store.user_by_name(user).id, name)


def _behind_the_loop(svc, client, name: str, X, y, *, input, output):
    """A task of the client's, cancelled (the loop trains nothing of it), fed here."""
    task = client.task(name, input=input, output=output)
    task.cancel()
    stored = _stored(svc, "alice", name)
    datasets.feed(svc.service.store, svc.service.blobs, stored, X, y)
    return task, stored


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A live service with four trained tasks of alice's: iris (a scaled
    logistic regression, one of our one-thread pipelines), boost (gradient
    boosting, our one-thread wrapper), reg (a random-forest regressor) and
    digits (a LeNet, one epoch)."""
    from sklearn.datasets import load_digits, load_iris

    with serving(tmp_path_factory.mktemp("service"), "alice", "bob", torch_epochs=1) as running:
        client = running.client("alice")
        store, blobs = running.service.store, running.service.blobs
        X, y = load_iris(return_X_y=True)
        X = X.astype("float32")
        tasks = {}
        for name, model, options in (("iris", "logreg", {"C": 1.0}), ("boost", "hist_gboost", {"learning_rate": 0.1})):
            tasks[name], stored = _behind_the_loop(running, client, name, X, y, input=[4], output=[3])
            assert train_now(store, blobs, stored, model, options).status.value == "succeeded"
        target = (X[:, 0] * 2 - X[:, 2]).astype("float32")
        tasks["reg"], stored = _behind_the_loop(running, client, "reg", X[:, [1, 3]], target, input=[2], output=[1])
        assert train_now(store, blobs, stored, "random_forest", {"max_features": 1.0}).status.value == "succeeded"
        digits = load_digits()
        images = (digits.images[:240] / 16.0).astype("float32")[..., None]
        tasks["digits"], stored = _behind_the_loop(running, client, "digits", images, digits.target[:240],
                                                   input=[8, 8, 1], output=[10])
        train_lenet_once(store, blobs, stored.id)
        yield running, client, tasks, {"iris": X, "boost": X, "reg": X[:, [1, 3]], "digits": images}


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """Every task exported in every format of its engine, loaded in one
    fresh process: {(task, format): (card, what the loader predicted)}."""
    _, _, tasks, inputs = trained
    out_dir = tmp_path_factory.mktemp("exported")
    formats = {"iris": ("joblib", "onnx"), "boost": ("joblib", "onnx"), "reg": ("joblib", "onnx"),
               "digits": ("torchscript", "onnx", "state_dict")}
    items, cards, keys = [], {}, []
    for name, fmts in formats.items():
        for fmt in fmts:
            path = out_dir / f"{name}-{fmt}{export.SUFFIXES[fmt]}"
            cards[name, fmt] = tasks[name].export(path, format=fmt)
            items.append((fmt, path, inputs[name]))
            keys.append((name, fmt))
    report, outputs = load_elsewhere(items, tmp_path_factory.mktemp("bare"))
    return report, {key: (cards[key], output) for key, output in zip(keys, outputs)}


def test_the_fresh_process_cannot_import_ease_jupyter(exported):
    report, _ = exported
    assert report["ease_jupyter_importable"] is False


def test_scikit_learn_exports_predict_what_infer_does(trained, exported):
    _, _, tasks, inputs = trained
    report, results = exported
    for name in ("iris", "boost"):
        expected = tasks[name].infer(inputs[name])
        for fmt in ("joblib", "onnx"):
            _, predicted = results[name, fmt]
            np.testing.assert_array_equal(predicted.ravel(), expected, err_msg=f"{name} {fmt}")
    # A plain scikit-learn pipeline and estimator: our one-thread wrappers were replaced by their parents.
    modules = {os.path.basename(path).split("-")[0]: module for path, module in report["modules"].items()}
    assert modules["iris"] == "sklearn.pipeline" and modules["boost"].startswith("sklearn.ensemble")
    expected = tasks["reg"].infer(inputs["reg"]).ravel()
    np.testing.assert_array_equal(results["reg", "joblib"][1].ravel(), expected)
    np.testing.assert_allclose(results["reg", "onnx"][1].ravel(), expected, rtol=1e-4, atol=1e-4)


def test_torch_exports_predict_what_infer_does(trained, exported):
    running, _, tasks, inputs = trained
    _, results = exported
    expected = tasks["digits"].infer(inputs["digits"])
    scripted = results["digits", "torchscript"][1]
    assert scripted.shape == (240, 10)
    np.testing.assert_array_equal(scripted.argmax(axis=1), expected)
    onnx_logits = results["digits", "onnx"][1]
    np.testing.assert_allclose(onnx_logits, scripted, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(onnx_logits.argmax(axis=1), expected)
    # The state dict holds the best checkpoint's weights: the net the service infers with.
    from ease_jupyter.service import models

    store, blobs = running.service.store, running.service.blobs
    stored = _stored(running, "alice", "digits")
    net = models.torch_net(store, blobs, stored, models.best_job(store, stored))
    weights = np.concatenate([v.detach().numpy().ravel().astype("float64") for v in net.state_dict().values()])
    np.testing.assert_array_equal(results["digits", "state_dict"][1], weights)


def test_the_model_card_says_what_the_store_says(trained, exported):
    running, _, tasks, _ = trained
    _, results = exported
    store, blobs = running.service.store, running.service.blobs
    for (name, fmt), (card, _) in results.items():
        best = tasks[name].best()
        stored = _stored(running, "alice", name)
        job = store.get_job(best["job_id"])
        assert card["format"] == fmt and card["file"] == "model" + export.SUFFIXES[fmt]
        assert card["task"] == {"name": name, "id": stored.id, "program": stored.program, "table_schema": None}
        assert card["training"]["model"] == best["model"] and card["training"]["config"] == best["config"]
        assert card["training"]["best_config"] == best["best_config"]
        assert card["metrics"]["value"] == best["accuracy"]
        version = store.get_dataset_version(job.dataset_version_id)
        assert card["dataset"]["version"] == best["dataset_version"] == version.number
        assert card["dataset"]["n_examples"] == version.n_examples
        data = datasets.load(store, blobs, version)
        from ease_jupyter.execution.holdout import validation_mask

        assert card["metrics"]["validation_size"] == int(validation_mask(data.split_keys).sum()) > 0
        assert card["metrics"]["validation_size"] == best["validation_size"]
        edges = {e["id"]: e for e in tasks[name].provenance(direction="all")["edges"]}
        assert card["provenance"]["job_id"] == job.id and card["provenance"]["dataset_version_id"] == version.id
        assert sorted(card["provenance"]["edge_ids"]) == sorted(
            i for i, e in edges.items() if e["job_id"] == job.id or e["kind"] in ("feed", "refine"))
        assert {edges[i]["kind"] for i in card["provenance"]["edge_ids"]} == {"feed", "train"}
        classification = name != "reg"
        assert card["kind"] == ("classification" if classification else "regression")
        assert card["num_classes"] == {"iris": 3, "boost": 3, "digits": 10, "reg": None}[name]
        assert card["class_names"] == store_class_names(store, stored)
        assert card["engine"] == ("torch" if name == "digits" else "sklearn")
    iris_onnx = results["iris", "onnx"][0]
    assert iris_onnx["inputs"] == [{"name": "X", "dtype": "float32", "shape": [None, 4]}]
    assert {o["name"] for o in iris_onnx["outputs"]} == {"label", "probabilities"}
    assert [step["class"] for step in iris_onnx["preprocessing"]] == ["sklearn.preprocessing.StandardScaler"]
    assert results["digits", "torchscript"][0]["inputs"][0]["shape"] == [None, 8, 8, 1]
    assert results["digits", "torchscript"][0]["outputs"][0]["shape"] == [None, 10]


def store_class_names(store, task):
    from ease_jupyter.service.task_schema import class_names

    return class_names(store, task)


def _download(running, path: str, who: str) -> tuple[int, bytes, object]:
    request = urllib.request.Request(running.url + "/api/v1" + path,
                                     headers={"Authorization": f"token {running.tokens[who]}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read(), answer.headers
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers


def test_the_route_answers_a_zip_with_the_card(trained):
    running, _, _, _ = trained
    status, body, headers = _download(running, "/tasks/iris/model?format=onnx", "alice")
    assert status == 200 and headers["Content-Type"] == "application/zip"
    assert headers["Content-Disposition"].startswith('attachment; filename="iris-job')
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        assert sorted(archive.namelist()) == ["model.onnx", "model_card.json"]
        card = json.loads(archive.read("model_card.json"))
    assert card["format"] == "onnx" and card["task"]["name"] == "iris"
    # No format: the engine's default (torchscript for a torch model).
    status, body, headers = _download(running, "/tasks/digits/model", "alice")
    assert status == 200 and headers["Content-Disposition"].endswith('.pt.zip"')
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        assert json.loads(archive.read("model_card.json"))["format"] == "torchscript"
    # Another user's task is not found, exactly like a missing one.
    status, body, _ = _download(running, "/tasks/iris/model", "bob")
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"


def test_bad_formats_are_named_and_listed(trained, tmp_path):
    running, _, tasks, _ = trained
    answer = running.call("GET", "/tasks/iris/model?format=pickle", "alice")
    assert answer.status == 400 and answer.body["error"]["field"] == "format"
    assert all(f in answer.body["error"]["expected"] for f in export.ALL_FORMATS)
    with pytest.raises(DataError) as error:
        tasks["iris"].export(tmp_path / "iris.pt", format="torchscript")
    assert error.value.field == "format" and "torchscript" in error.value.found
    assert "joblib or onnx" in error.value.expected and "scikit-learn" in error.value.expected
    with pytest.raises(DataError) as error:
        tasks["digits"].export(tmp_path / "digits.joblib", format="joblib")
    assert error.value.field == "format" and "torchscript or onnx or state_dict" in error.value.expected
    assert not list(tmp_path.iterdir())  # nothing written


def test_no_model_and_bad_paths_are_named(trained, tmp_path):
    running, client, tasks, _ = trained
    empty = client.task("empty", input=[4], output=[3])
    empty.cancel()
    with pytest.raises(NoModelError, match="no trained model"):
        empty.export(tmp_path / "empty.joblib")
    assert running.call("GET", "/tasks/empty/model", "alice").body["error"]["code"] == "no_model"
    with pytest.raises(DataError) as error:
        tasks["iris"].export(tmp_path / "missing" / "iris.joblib")
    assert error.value.field == "path" and "does not exist" in error.value.expected
    with pytest.raises(DataError) as error:
        tasks["iris"].export(tmp_path)
    assert error.value.field == "path"
    assert not list(tmp_path.iterdir())


def test_the_suffix_picks_the_format_and_the_card_lies_beside(trained, tmp_path):
    _, _, tasks, _ = trained
    card = tasks["iris"].export(tmp_path / "iris.onnx")
    assert card["format"] == "onnx"
    assert json.loads((tmp_path / "iris.onnx.card.json").read_text()) == card
    assert (tmp_path / "iris.onnx").read_bytes()[:2] != b"PK"  # the model itself, not the zip


def test_the_export_magic(trained, tmp_path):
    from IPython.core.interactiveshell import InteractiveShell

    running, _, _, _ = trained
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "ease_jupyter")
        shell.run_line_magic("easeml", f"connect {running.url} --token {running.tokens['alice']}")
        result = shell.run_line_magic("easeml", f"export iris {tmp_path / 'iris.model'} --format onnx")
        assert result.data["format"] == "onnx" and (tmp_path / "iris.model.card.json").exists()
        assert "exported as onnx" in repr(result)
        with pytest.raises(DataError):
            shell.run_line_magic("easeml", f"export iris {tmp_path / 'x.bin'} --format zip")
    finally:
        InteractiveShell.clear_instance()


# A note's words per species: they differ only in the case of non-ASCII
# letters, or are split by ASCII punctuation, where ONNX's and Python's text
# rules would part if the export did not keep them the same.
NOTE_WORDS = {"Adelie": ["CAFÉ", "Éclair-DOCK"], "Chinstrap": ["café", "éclair;dock"], "Gentoo": ["naïve", "ΣΟΦΙΑ"]}


def penguins(n: int = 150, seed: int = 0):
    """A penguins-like table: a numeric and a categorical column with missing
    values, a boolean one, a free-text note (mixed case, non-ASCII, missing)
    and class names as the target."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    species = rng.choice(["Adelie", "Chinstrap", "Gentoo"], n)
    bill = np.where(species == "Adelie", 38.0, np.where(species == "Gentoo", 47.0, 49.0)) + rng.normal(0, 1.5, n)
    island = np.where(species == "Gentoo", "Biscoe", rng.choice(["Dream", "Torgersen"], n)).astype(object)
    note = [f"{rng.choice(NOTE_WORDS[s])} Seen NEAR the pier" for s in species]
    frame = pd.DataFrame({"bill_length": bill, "island": island, "male": rng.integers(0, 2, n).astype(bool),
                          "note": note, "species": species})
    frame.loc[::9, "bill_length"] = np.nan
    frame.loc[::13, "island"] = np.nan
    frame.loc[::11, "note"] = np.nan
    return frame


def test_a_table_task_exports_a_dataframe_pipeline_and_per_column_onnx(tmp_path):
    """A table task's model takes the DataFrame as its owner has it (joblib),
    or one ONNX input per column (a missing string as ""), and both predict
    what infer does, as class indices into the card's class names, free
    text (mixed case, non-ASCII, missing) included."""
    import pandas as pd

    running = with_idle_sklearn(tmp_path / "service")
    try:
        store, blobs = running.service.store, running.service.blobs
        frame = penguins()
        task = running.client("alice").task("penguins", like=frame, target="species")
        task.feed(frame)
        stored = _stored(running, "alice", "penguins")
        assert train_now(store, blobs, stored, "logreg", {"C": 100.0}).status.value == "succeeded"
        # and rows where only the note tells Adelie from Chinstrap
        notes = [f"{w} Seen NEAR the pier" for words in NOTE_WORDS.values() for w in words] + [
            "Café seen near THE PIER", "ÉCLAIR dock", None, ""]
        only_notes = pd.DataFrame({"bill_length": np.nan, "island": "Dream", "male": False, "note": notes})
        features = pd.concat([frame.drop(columns="species"), only_notes], ignore_index=True)
        expected = task.infer(features)
        # ("CAFÉ" and "café" differ: a Unicode-lowercasing ONNX graph would read them as one word)
        assert list(expected[-len(notes):][:4]) == ["Adelie", "Adelie", "Chinstrap", "Chinstrap"]
        cards = {fmt: task.export(tmp_path / f"penguins.{fmt}", format=fmt) for fmt in ("joblib", "onnx")}
        report, (from_joblib, from_onnx) = load_elsewhere(
            [(fmt, tmp_path / f"penguins.{fmt}", features) for fmt in ("joblib", "onnx")], tmp_path)
        names = np.asarray(cards["onnx"]["class_names"], dtype=object)
        assert list(names) == ["Adelie", "Chinstrap", "Gentoo"]
        np.testing.assert_array_equal(names[from_joblib.astype(int)], expected)
        np.testing.assert_array_equal(names[from_onnx.ravel().astype(int)], expected)
        assert report["ease_jupyter_importable"] is False
        card = cards["onnx"]
        assert card["task"]["table_schema"]["target"] == "species"
        assert [(i["name"], i["dtype"]) for i in card["inputs"]] == [
            ("bill_length", "float32"), ("island", "string"), ("male", "float32"), ("note", "string")]
        assert [c["name"] for c in card["preprocessing"][0]["columns"]] == ["numeric", "categorical", "text_2"]
    finally:
        running.thread.stop()


# ---------------------------------------------------------------- the conversions alone


def test_a_model_that_holds_other_classes_of_ours_is_refused():
    """Only our wrappers (same constructor, overriding only the parent's
    methods) are swapped for their parents; anything else of this package
    in a model would make the joblib file need ease_jupyter."""
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    class Shifter(StandardScaler):
        def shift(self, X):
            return X + 1

    Shifter.__module__ = "ease_jupyter.zoo.fake"
    model = Pipeline([("shift", Shifter()), ("scale", StandardScaler())]).fit(np.eye(3))
    with pytest.raises(DataError) as error:
        export.plain_sklearn(model)
    assert error.value.field == "format" and "ease_jupyter.zoo.fake" in error.value.found


def test_a_model_skl2onnx_cannot_convert_is_a_named_error():
    """A target transformer other than the zoo's StandardScaler has no
    converter: the error names the format and the model, joblib still works."""
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import MinMaxScaler

    X = np.random.default_rng(0).normal(size=(30, 3)).astype("float32")
    model = TransformedTargetRegressor(Ridge(), transformer=MinMaxScaler()).fit(X, X.sum(axis=1))
    with pytest.raises(DataError) as error:
        export.sklearn_artifact(model, "onnx", export.SklearnInputs(n_features=3), classification=False)
    assert error.value.field == "format" and "TransformedTargetRegressor" in error.value.found
    assert error.value.expected == "joblib for this model"
    assert export.sklearn_artifact(model, "joblib", export.SklearnInputs(n_features=3), False).data


@pytest.mark.parametrize("maker,option", [("make_ridge", 1.0), ("make_svr", 1.0), ("make_knn_regressor", 3),
                                          ("make_mlp_regressor", 1e-3)])
def test_the_zoos_standardised_target_regressors_export_to_onnx(maker, option):
    """Their ONNX graph scales the inner regressor's output back (y * scale + mean)."""
    import onnxruntime

    from ease_jupyter.zoo import estimators

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3)).astype("float32")
    model = getattr(estimators, maker)(option, 1).fit(X, X.sum(axis=1) * 3 + 10)
    artifact = export.sklearn_artifact(model, "onnx", export.SklearnInputs(n_features=3), classification=False)
    session = onnxruntime.InferenceSession(artifact.data, providers=["CPUExecutionProvider"])
    out = session.run(None, {session.get_inputs()[0].name: X})[0]
    assert out.shape == (60, 1)
    np.testing.assert_allclose(out.ravel(), model.predict(X), rtol=1e-4, atol=1e-4)


def test_a_text_columns_onnx_splits_and_lowercases_as_scikit_learn_does():
    """The zoo's text step in onnxruntime: the same TF-IDF features, hence
    the same probabilities, on text that Python's Unicode rules and
    onnxruntime's would treat differently (non-ASCII capitals, the Kelvin
    sign and dotted I that Python lowercases to ASCII, punctuation, emoji,
    empty and missing notes)."""
    import onnxruntime
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    from ease_jupyter.tabular import infer_schema
    from ease_jupyter.zoo.preprocess import table_pipeline

    rng = np.random.default_rng(0)
    words = ["CAFÉ", "café", "Café", "\u212aelvin", "kelvin", "xİ", "ÉCLAIR-dock", "naïve", "ΣΟΦΙΑ", "σοφια",
             "bird_ROCK", "Ω😀", "x9", "a.b", "\u00a0nbsp", "ﬁne"]
    notes = [" ".join(rng.choice(words, size=rng.integers(0, 4))) for _ in range(120)]
    notes[::17] = [None] * len(notes[::17])
    frame = pd.DataFrame({"bill": rng.normal(size=120), "note": notes})
    y = rng.integers(0, 3, 120)
    schema = infer_schema(frame.assign(y=y), "y", kinds={"note": "text"})
    model = table_pipeline(schema, LogisticRegression(C=100.0)).fit(frame, y)
    assert len(model["preprocess"].named_transformers_["text_1"]["tfidf"].vocabulary_) > 15
    artifact = export.sklearn_artifact(model, "onnx", export.SklearnInputs(columns=(("bill", "numeric"),
                                                                                     ("note", "text"))), True)
    session = onnxruntime.InferenceSession(artifact.data, providers=["CPUExecutionProvider"])
    labels, probabilities = session.run(None, {"bill": frame[["bill"]].to_numpy(np.float32),
                                               "note": frame[["note"]].fillna("").to_numpy(object)})
    np.testing.assert_array_equal(labels, model.predict(frame))
    np.testing.assert_allclose(probabilities, model.predict_proba(frame), atol=1e-5)


def test_a_text_step_onnxruntime_would_read_differently_is_a_named_error():
    """A TF-IDF step with scikit-learn's Unicode defaults (a user's own
    pipeline, say) has no faithful ONNX form: the error names the step and
    the setting, and joblib as the way out."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    model = Pipeline([("words", TfidfVectorizer()), ("clf", LogisticRegression())])
    model.fit(["Café au lait", "CAFÉ noir", "the bird", "a BIRD"], [0, 0, 1, 1])
    with pytest.raises(DataError) as error:
        export.sklearn_artifact(model, "onnx", export.SklearnInputs(n_features=1), classification=True)
    assert error.value.field == "format" and "'words'" in error.value.found and "preprocessor" in error.value.found
    assert "joblib" in error.value.expected


def test_unknown_formats_list_the_valid_ones():
    for bad in ("pickle", "", None, 3, "ONNX"):
        with pytest.raises(DataError) as error:
            export.check_format(bad)
        assert error.value.field == "format"
        assert "joblib or onnx for a scikit-learn model" in error.value.expected
        assert "torchscript or onnx or state_dict for a torch model" in error.value.expected


def _small_net(input_shape, output_shape, hidden=8):
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), hidden), nn.ReLU(),
                         nn.Linear(hidden, output_shape[0]))


# A class as a notebook cell defines it: in ``__main__``, so it travels by value.
NOTEBOOK_CELL = """
from sklearn.linear_model import LogisticRegression

class NotebookLogReg(LogisticRegression):
    def predict(self, X):
        return super().predict(X)
"""


def notebook_class():
    namespace = {"__name__": "__main__"}
    exec(NOTEBOOK_CELL, namespace)  # noqa: S102 - the test's own source
    cls = namespace["NotebookLogReg"]
    assert cls.__module__ == "__main__"
    return cls


def test_her_own_models_export_like_the_zoos(tmp_path):
    """A user's scikit-learn pipeline, an estimator whose class her notebook
    defines, and a torch factory, trained as her tasks' only jobs, export as
    joblib / ONNX / TorchScript that load without ease_jupyter and predict
    what ``infer`` does."""
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from ease_jupyter.execution.engine import LocalEngine
    from ease_jupyter.service.candidates import arm_specs
    from ease_jupyter.service.mop import run_torch_job
    from ease_jupyter.service.runner import grid_engine, run_sklearn_job

    running = start(tmp_path / "svc", torch_epochs=1, allow_user_models=True)
    try:
        running.user("alice")
        client = running.client("alice")
        store, blobs = running.service.store, running.service.blobs
        X, y = load_iris(return_X_y=True)
        X = X.astype("float32")
        flat, flat_stored = _behind_the_loop(running, client, "mine_flat", X, y, input=[4], output=[3])
        flat.add_model(make_pipeline(StandardScaler(), LogisticRegression(max_iter=300)),
                       grid={"logisticregression__C": [1.0]}, name="mypipe")
        nb, nb_stored = _behind_the_loop(running, client, "mine_nb", X, y, input=[4], output=[3])
        nb.add_model(notebook_class()(max_iter=300), name="nbmodel")
        net, net_stored = _behind_the_loop(running, client, "mine_net", X, y, input=[4], output=[3])
        net.add_model(_small_net, grid={"hidden": [8], "lr": [0.05]}, name="mynet")

        for stored, name in ((flat_stored, "mypipe"), (nb_stored, "nbmodel")):
            spec = arm_specs(stored, torch_epochs=1, store=store)[name]
            job = store.create_job(stored.id, store.latest_dataset_version(stored.id).id, spec.model, spec.config())
            engine = grid_engine("local")
            try:
                assert run_sklearn_job(store, blobs, job.id, engine).status.value == "succeeded"
            finally:
                engine.close()
        spec = arm_specs(net_stored, torch_epochs=1, store=store)["mynet"]
        job = store.create_job(net_stored.id, store.latest_dataset_version(net_stored.id).id, spec.model, spec.config())
        engine = LocalEngine(1)
        try:
            assert run_torch_job(store, blobs, engine, job.id, partitions=1).status.value == "succeeded"
        finally:
            engine.close()

        items = [(fmt, tmp_path / f"flat{export.SUFFIXES[fmt]}", X) for fmt in ("joblib", "onnx")]
        items += [(fmt, tmp_path / f"net{export.SUFFIXES[fmt]}", X) for fmt in ("torchscript", "onnx")]
        items += [("joblib", tmp_path / "nb.joblib", X)]
        tasks = {"flat": flat, "net": net, "nb": nb}
        cards = {}
        for fmt, path, _ in items:
            cards[path.name] = tasks[path.stem].export(path, format=fmt)
            assert cards[path.name]["training"]["model"] in ("mypipe", "mynet", "nbmodel")
        # her notebook's class is inside the file, and the card says what loads it
        assert "cloudpickle" in cards["nb.joblib"]["outputs"][0]["loads_with"]
        assert "cloudpickle" not in cards["flat.joblib"]["outputs"][0]["loads_with"]
        report, outputs = load_elsewhere(items, tmp_path)
        assert report["ease_jupyter_importable"] is False
        flat_wanted, net_wanted, nb_wanted = flat.infer(X), net.infer(X), nb.infer(X)
        joblib_out, onnx_flat, script_out, onnx_net, nb_out = outputs
        assert report["modules"][str(tmp_path / "nb.joblib")] == "__main__"  # her class, rebuilt from the file
        assert np.array_equal(nb_out, nb_wanted)
        assert np.array_equal(joblib_out, flat_wanted) and np.array_equal(onnx_flat, flat_wanted)
        assert np.array_equal(script_out.argmax(axis=1), net_wanted)
        assert np.array_equal(onnx_net.argmax(axis=1), net_wanted)
    finally:
        running.thread.stop()
