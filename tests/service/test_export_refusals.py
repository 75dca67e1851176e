"""What an export refuses, before anything is converted or written:

* a path that names no file (``""``, ``"."``, ``"/"``, ``"models/"``): a
  ``DataError`` on ``path`` asking for a file name, before the service is
  asked (pathlib's own ``ValueError`` said nothing of what to pass, and
  ``"missing/"`` was read as the file ``missing``);
* a ``format`` that contradicts the path's suffix (``m.onnx`` with
  ``joblib``): a ``DataError`` on ``format`` naming the suffix's format and
  the suffix of the one asked for, and no file written; a suffix that names
  no format (``.bin``, ``.pt``) takes any;
* on ``GET /tasks/{name}/model``, a query key other than ``format``, or
  ``format`` given twice: 400 ``bad_data`` naming the parameter, not a
  download in a format nobody asked for.

The model is trained here on a cancelled task (as in ``test_export.py``)."""

from __future__ import annotations

import io
import urllib.error
import urllib.request
import zipfile

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell

from ease_jupyter import datasets
from ease_jupyter.errors import DataError
from ease_jupyter.service.testing import train_now

from .conftest import start


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A service with alice's ``iris`` (a trained logistic regression) and
    ``empty`` (no model)."""
    from sklearn.datasets import load_iris

    running = start(tmp_path_factory.mktemp("svc"))
    try:
        running.user("alice")
        client = running.client("alice")
        X, y = load_iris(return_X_y=True)
        task = client.task("iris", input=[4], output=[3])
        task.cancel()  # the loop trains nothing of it
        store, blobs = running.service.store, running.service.blobs
        stored = store.task_by_name(store.user_by_name("alice").id, "iris")
        datasets.feed(store, blobs, stored, X.astype("float32"), y)
        assert train_now(store, blobs, stored, "logreg", {"C": 1.0}).status.value == "succeeded"
        client.task("empty", input=[4], output=[3])
        yield running
    finally:
        running.thread.stop()


def _no_requests(task, monkeypatch):
    monkeypatch.setattr(task.client, "request", lambda *a, **k: pytest.fail(f"asked the service: {a}"))


@pytest.mark.parametrize("path", ["", ".", "/", "..", "models/", "models/.", "missing/", "missing/."])
def test_a_path_that_names_no_file_is_a_data_error_on_path(served, path, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    task = served.client("alice").task("iris")
    _no_requests(task, monkeypatch)
    with pytest.raises(DataError) as error:
        task.export(path)
    assert error.value.field == "path" and "a file name, e.g. model.onnx" in error.value.expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"] and not any((tmp_path / "models").iterdir())


@pytest.mark.parametrize("name, fmt, named, wanted", [
    ("m.onnx", "joblib", "onnx", ".joblib"),
    ("m.joblib", "onnx", "joblib", ".onnx"),
    ("M.ONNX", "joblib", "onnx", ".joblib"),
    ("m.joblib", "torchscript", "joblib", ".pt"),
])
def test_a_format_that_contradicts_the_suffix_is_refused_before_the_request(served, tmp_path, monkeypatch, name,
                                                                             fmt, named, wanted):
    task = served.client("alice").task("iris")
    _no_requests(task, monkeypatch)
    with pytest.raises(DataError) as error:
        task.export(tmp_path / name, format=fmt)
    assert error.value.field == "format"
    assert f"{fmt!r}" in error.value.found and f"names the format {named!r}" in error.value.found
    assert f"format={named!r}" in error.value.expected and f"ending in {wanted} for {fmt!r}" in error.value.expected
    assert list(tmp_path.iterdir()) == []


def test_a_suffix_that_names_no_format_takes_any_and_one_that_agrees_is_fine(served, tmp_path):
    task = served.client("alice").task("iris")
    assert task.export(tmp_path / "m.bin", format="onnx")["format"] == "onnx"
    assert task.export(tmp_path / "m.zip", format="joblib")["format"] == "joblib"
    assert task.export(tmp_path / "m.onnx", format="onnx")["format"] == "onnx"
    assert task.export(tmp_path / "m.joblib")["format"] == "joblib"
    with pytest.raises(DataError) as error:  # a format that does not exist is still the service's to name
        task.export(tmp_path / "m.onnx", format="pickle")
    assert error.value.field == "format" and "one of joblib, onnx" in error.value.expected


def test_the_magic_says_the_same(served, tmp_path):
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "ease_jupyter")
        shell.run_line_magic("easeml", f"connect {served.url} --token {served.tokens['alice']}")
        with pytest.raises(DataError) as error:
            shell.run_line_magic("easeml", f"export iris {tmp_path / 'm.joblib'} --format=onnx")
        assert error.value.field == "format" and "'joblib'" in error.value.found
        for path in (f"{tmp_path}/new/", "''"):
            with pytest.raises(DataError) as error:
                shell.run_line_magic("easeml", f"export iris {path}")
            assert error.value.field == "path" and "a file name" in error.value.expected
        assert list(tmp_path.iterdir()) == []
    finally:
        InteractiveShell.clear_instance()


def _get(served, query: str):
    request = urllib.request.Request(f"{served.url}/api/v1/tasks/iris/model{query}",
                                     headers={"Authorization": f"token {served.tokens['alice']}"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        import json

        return error.code, json.loads(error.read())


@pytest.mark.parametrize("query, field", [
    ("?format=onnx&format=joblib", "format"),
    ("?format=joblib&format=joblib", "format"),
    ("?fmt=onnx", "fmt"),
    ("?format=onnx&version=1", "version"),
])
def test_the_model_route_refuses_unknown_and_repeated_parameters(served, query, field):
    status, body = _get(served, query)
    assert status == 400, (status, body if status != 200 else "a zip")
    error = body["error"]
    assert error["code"] == "bad_data" and error["field"] == field
    assert error["found"] and error["expected"]


def test_the_model_route_still_answers_its_one_parameter(served):
    for query, member in (("", "model.joblib"), ("?format=onnx", "model.onnx")):
        status, data = _get(served, query)
        assert status == 200
        assert member in zipfile.ZipFile(io.BytesIO(data)).namelist()
