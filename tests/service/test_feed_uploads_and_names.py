"""Feeds against a real service: pandas frames of any numeric dtype feed a
tensor task; a refused feed fixes no class names; every upload a feed or
infer names (a table's columns too) is consumed whatever the answer, and
the client drops the uploads of a request it could not finish."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ease_jupyter import client as client_module
from ease_jupyter import tabular
from ease_jupyter.errors import DataError, EaseMLError, QuotaExceededError
from ease_jupyter.service.arrays import to_npy_bytes

from .conftest import start


def parts(svc) -> list:
    return sorted(svc.service.uploads.directory.rglob("*.part"))


def names_of(task) -> list | None:
    return task.refresh().get("class_names")


def test_a_frame_with_booleans_and_nullable_numbers_feeds_a_tensor_task(svc):
    task = svc.client("alice").task("mixed", input=[3], output=[2])
    frame = pd.DataFrame({"flag": [True, False, True, False],
                          "count": pd.array([1, 2, 3, 4], dtype="Int64"),
                          "mass": pd.Series([0.5, 1.5, 2.5, 3.5], dtype="float64[pyarrow]")})
    labels = pd.Series([0, 1, 0, 1], dtype=object)
    assert task.feed(frame, labels)["n_examples"] == 4
    _, X, y = task.data()
    np.testing.assert_array_equal(X, [[1, 1, 0.5], [0, 2, 1.5], [1, 3, 2.5], [0, 4, 3.5]])
    np.testing.assert_array_equal(y, [0, 1, 0, 1])
    with pytest.raises(DataError) as caught:  # strings in X: named, not a numpy traceback
        task.feed(frame.assign(mass=["a", "b", "c", "d"]), labels)
    assert caught.value.field.startswith("X[0]")


def test_a_feed_refused_for_its_inputs_stores_no_class_names(svc):
    alice = svc.client("alice")
    wide = np.ones((6, 5))
    task = alice.task("spam", input=[4], output=[2])
    with pytest.raises(DataError) as caught:
        task.feed(wide, np.array(["yes", "no"] * 3))
    assert caught.value.field == "X"
    assert names_of(task) is None and task.versions() == []
    assert task.feed(np.ones((6, 4)), np.array(["ham", "spam"] * 3))["n_examples"] == 6
    assert names_of(task) == ["ham", "spam"]

    birds = alice.task("birds", input=[4], output=[3])
    with pytest.raises(DataError):
        birds.feed(wide, np.array(["cat", "dog"] * 3))
    birds.feed(np.arange(24.0).reshape(6, 4), np.array(["bird", "cat", "dog"] * 2))
    assert names_of(birds) == ["bird", "cat", "dog"]  # sorted, not the refused feed's order


def test_a_feed_refused_by_the_quota_stores_no_class_names(tmp_path):
    running = start(tmp_path, torch=False, quota_bytes=2048)
    try:
        running.user("alice")
        task = running.client("alice").task("big", input=[4], output=[2])
        with pytest.raises(QuotaExceededError):
            task.feed(np.random.default_rng(0).normal(size=(200, 4)), np.array(["a", "b"] * 100))
        assert names_of(task) is None
    finally:
        running.thread.stop()


def _table_body(svc, frame: pd.DataFrame) -> dict:
    """A table as the client sends it, every column array through an upload of alice's."""
    def upload(array: np.ndarray) -> dict:
        made = svc.call("POST", "/uploads", "alice").body["id"]
        assert svc.call("PUT", f"/uploads/{made}?offset=0", "alice", raw=to_npy_bytes(array)).status == 200
        return {"upload": made}

    return tabular.table_wire(frame, upload)


def penguins(n: int = 20) -> pd.DataFrame:
    return pd.DataFrame({"mass": np.linspace(3000, 5000, n), "island": ["Dream", "Biscoe"] * (n // 2),
                         "species": ["Adelie", "Gentoo"] * (n // 2)})


def test_a_feed_consumes_its_tables_column_uploads_whatever_its_answer(svc):
    frame = penguins()
    svc.client("alice").task("tab", like=frame, target="species")
    features = frame.drop(columns="species")
    labels = frame["species"].tolist()

    body = {"X": _table_body(svc, features), "y": labels}
    assert len(parts(svc)) == 3  # mass, island and its missing mask
    assert svc.call("POST", "/tasks/tab/feed", "alice", body=body).status == 201
    assert parts(svc) == []

    refused = {"X": _table_body(svc, features), "y": ["Emperor"] + labels[1:]}
    answer = svc.call("POST", "/tasks/tab/feed", "alice", body=refused)
    assert answer.status == 400 and answer.body["error"]["field"] == "y[0]"
    assert parts(svc) == []

    missing_column = {"X": _table_body(svc, features.drop(columns="island")), "y": labels}
    assert svc.call("POST", "/tasks/tab/feed", "alice", body=missing_column).status == 400
    assert parts(svc) == []

    nowhere = {"X": _table_body(svc, features), "y": labels}  # no such task: refused before any feeder
    assert svc.call("POST", "/tasks/nosuch/feed", "alice", body=nowhere).status == 404
    assert parts(svc) == []


def test_an_infer_consumes_its_tables_column_uploads_whatever_its_answer(svc):
    frame = penguins()
    svc.client("alice").task("tab", like=frame, target="species")
    answer = svc.call("POST", "/tasks/tab/infer", "alice", body={"X": _table_body(svc, frame.drop(columns="species"))})
    assert answer.status == 404 and "no trained model" in answer.body["error"]["message"]
    assert parts(svc) == []
    answer = svc.call("POST", "/tasks/nosuch/infer", "alice", body={"X": _table_body(svc, frame)})
    assert answer.status == 404 and "no task by that name" in answer.body["error"]["message"]
    assert parts(svc) == []


def test_the_client_drops_the_column_uploads_of_a_table_it_could_not_encode(svc, monkeypatch):
    monkeypatch.setattr(client_module, "INLINE_BYTES", 0)  # every array goes through an upload
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [5.0, 6.0, 7.0, 8.0], "y": ["p", "q"] * 2})
    task = svc.client("alice").task("dated", like=frame, target="y")
    dated = frame.assign(b=pd.to_datetime(["2024-01-01"] * 4))  # column a is uploaded before b is refused
    with pytest.raises(DataError) as caught:
        task.feed(dated)
    assert caught.value.field == "X['b']"
    assert parts(svc) == []
    with pytest.raises(DataError):
        task.infer(dated.drop(columns="y"))
    assert parts(svc) == []

    def unreachable(*args, **kwargs):
        raise ConnectionResetError("the service went away")

    real = client_module.Client.request
    monkeypatch.setattr(client_module.Client, "request", lambda self, method, path, *a, **kw: (
        unreachable() if path.endswith(("/feed", "/infer")) else real(self, method, path, *a, **kw)))
    with pytest.raises(ConnectionResetError):
        task.feed(frame)
    assert parts(svc) == []
    with pytest.raises((ConnectionResetError, EaseMLError)):
        task.infer(frame.drop(columns="y"))
    assert parts(svc) == []


def test_the_magic_takes_a_quoted_target_column(svc):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "ease_jupyter")
        shell.run_line_magic("easeml", f"connect {svc.url} --token {svc.tokens['alice']}")
        shell.user_ns["df"] = pd.DataFrame({"bill length (mm)": np.arange(10.0), "penguin species": ["a", "b"] * 5})
        made = shell.run_line_magic("easeml", """task p --from df --target "penguin species\"""")
        assert made.data["table"]["target"] == "penguin species" and made.data["class_names"] == ["a", "b"]
        fed = shell.run_line_magic("easeml", "feed 'p' df")
        assert fed.data["n_examples"] == 10
    finally:
        InteractiveShell.clear_instance()


def test_a_table_of_many_small_columns_is_fed_past_the_json_limit(tmp_path):
    """Each column of a 10,000 x 14 table is small (80 KB), together over the
    service's JSON limit (1 MiB): the client sends half a MiB inline and the
    rest as uploads, so the feed is accepted and leaves no upload open."""
    running = start(tmp_path, max_json_bytes=1024 * 1024)
    running.user("alice")
    try:
        rng = np.random.default_rng(0)
        frame = pd.DataFrame({f"c{i}": rng.normal(size=10_000) for i in range(14)})
        frame["y"] = np.where(frame["c0"] > 0, "up", "down")
        task = running.client("alice").task("wide", like=frame, target="y")
        assert task.feed(frame)["n_examples"] == 10_000
        assert parts(running) == []
        _, X, _ = task.data()
        assert len(X) == 10_000
    finally:
        running.thread.stop()
