"""A user's own fitted model, called after training (``infer``, suspicion,
``export``; ``service/own_model_calls.py``): in a child process killed at her
model's time limit, failing only her request with her traceback, and never
holding the worker that serves other users' models."""

from __future__ import annotations

import contextlib
import os
import threading
import time

import numpy as np
import pandas as pd
import psutil
import pytest
from sklearn.linear_model import LogisticRegression

from ease_jupyter.errors import UserModelCallError, UserModelCallTimeout
from ease_jupyter.service.models import UNUSABLE_TAG
from ease_jupyter.service.suspicion import MAX_TOP_K

from .conftest import serving, start, writable_notes

CLASSES = {"classes_fraction": [0.0, 1.5, 2.0], "classes_twice": [0, 0, 2]}
LIMIT = 20.0  # her model's limit: her training job (child starts, loads, fits) fits in it on a loaded machine (10 s did not, once); a hang ends at it
# The service's wait for a model call while a hanging request of hers arrives, where a test need not wait out
# LIMIT: her deadline is then this wait less its margin, and it still leaves her child time to start and load.
CALL_WAIT = 10.0


class Switch(LogisticRegression):
    """Trains as a logistic regression; after training, ``mode_file`` says how
    its calls misbehave: ``hang`` (predict), ``raise`` (predict), ``shape``
    (predict answers two columns) or ``hang_load`` (unpickling)."""

    def __init__(self, mode_file="", C=1.0, max_iter=200):
        super().__init__(C=C, max_iter=max_iter)
        self.mode_file = mode_file

    def _mode(self):
        with open(self.mode_file) as f:
            return f.read().strip()

    def __setstate__(self, state):
        super().__setstate__(state)
        mode = self._mode() if state.get("mode_file") else ""
        if mode == "hang_load":
            time.sleep(60)
        if mode in CLASSES:  # what suspicion's predict_proba columns stand for, made wrong
            self.classes_ = np.asarray(CLASSES[mode])

    def predict(self, X):
        mode = self._mode()
        if mode == "hang":
            with open(self.mode_file + ".pids", "a") as out:
                out.write(f"{os.getpid()}\n")
            time.sleep(60)
        if mode == "raise":
            raise ValueError("my predict broke on purpose")
        out = super().predict(X)
        return np.stack([out, out], axis=1) if mode == "shape" else out

    def predict_proba(self, X):
        if self._mode() in ("hang", "raise"):
            return self.predict(X)
        return super().predict_proba(X)


def _serve_only(running, owner: str, task_name: str, model: str):
    """Leave only ``model`` usable on the task, so that it is the best."""
    store = running.service.store
    task = store.task_by_name(store.user_by_name(owner).id, task_name)
    for job in store.list_jobs(task.id):
        if job.model != model:
            store.set_tag("job", job.id, UNUSABLE_TAG, "the test serves her model alone")
    return task


def _stored(running, task):
    store = running.service.store
    return ([(j.id, j.status, j.artifact_blob) for j in store.list_jobs(task.id)],
            [v.id for v in store.list_dataset_versions(task.id)], dict(store.tags("task", task.id)))


def _in_thread(fn):
    box = {}

    def run():
        box["started"] = time.monotonic()
        try:
            box["value"] = fn()
        except Exception as error:  # noqa: BLE001 - the test reads it
            box["error"] = error
        box["ended"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, iris):
    """Ada's task served by her ``Switch`` (``LIMIT``), Bob's by his own plain
    model; trained once for the module's tests, each of which leaves her model
    behaving again."""
    X, y = iris
    tmp_path = tmp_path_factory.mktemp("own_calls")
    with writable_notes(tmp_path) as notes, serving(tmp_path / "svc", "ada", "bob", torch=False, workers=1,
                                                    allow_user_models=True) as running:
        mode_file = notes / "mode"  # her code reads it and notes its pids beside it
        mode_file.write_text("")
        ada = running.client("ada").task("iris", input=[4], output=[3])
        bob = running.client("bob").task("flowers", input=[4], output=[3])
        ada.add_model(Switch(str(mode_file)), name="mine", limit=LIMIT)
        bob.add_model(LogisticRegression(max_iter=200), name="his")
        ada.feed(X, y)
        bob.feed(X, y)
        assert ada.wait(timeout=240) and bob.wait(timeout=240)
        jobs = {j["model"]: j for j in ada.jobs()}
        assert jobs["mine"]["status"] == "succeeded", jobs["mine"]["error"]
        _serve_only(running, "ada", "iris", "mine")
        _serve_only(running, "bob", "flowers", "his")
        yield running, ada, bob, mode_file
        mode_file.write_text("")


@pytest.fixture(autouse=True)
def her_model_behaves_after_each_test(request):
    """A test that fails midway leaves her model behaving for the next, which
    shares the module's ``trained`` service."""
    yield
    if "trained" in request.fixturenames:
        request.getfixturevalue("trained")[3].write_text("")


@contextlib.contextmanager
def service_wait(seconds: float):
    """The service waits at most ``seconds`` for a model call whose request
    arrives meanwhile (``core.MODEL_CALL_SECONDS``): her deadline is then that
    wait less its margin (``own_model_calls.request_deadline``), which the
    context gives. A request keeps the deadline fixed as it arrived after
    the wait is restored."""
    from ease_jupyter.service import core
    from ease_jupyter.service.own_model_calls import REPLY_MARGIN_SECONDS

    usual = core.MODEL_CALL_SECONDS
    core.MODEL_CALL_SECONDS = seconds
    try:
        yield seconds - min(REPLY_MARGIN_SECONDS, seconds / 4)
    finally:
        core.MODEL_CALL_SECONDS = usual


def _her_code_started(pid_file, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not (pid_file.exists() and pid_file.read_text().split()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid_file.exists() and bool(pid_file.read_text().split())


def a_hang_at_infer_ends_at_her_limit_and_frees_the_worker(trained, X, field: str, limit: float,
                                                          wait: float | None = None) -> None:
    """Her model hangs at ``infer``: her request answers 422 naming ``field``
    and her deadline, long before her code would return; his request, queued
    behind hers on the same call thread, completes once hers is killed; her
    code's process is gone; her model serves again once it behaves.

    Her deadline is her ``limit`` under the service's usual wait; with
    ``wait``, the service waits that long for her request alone (his arrives
    under the usual wait), so her deadline is that wait less its margin."""
    from ease_jupyter.service import core
    from ease_jupyter.service.own_model_calls import request_deadline

    running, ada, bob, mode_file = trained
    assert len(ada.infer(X[:5])) == 5  # her model serves while it behaves
    assert request_deadline(_hers(running)[3], core.MODEL_CALL_SECONDS).seconds == limit  # her limit decides
    pid_file = mode_file.parent / "mode.pids"
    pid_file.unlink(missing_ok=True)
    mode_file.write_text("hang")
    with service_wait(core.MODEL_CALL_SECONDS if wait is None else wait) as bound:
        bound = min(bound, limit)
        hers, her_box = _in_thread(lambda: running.call("POST", "/tasks/iris/infer", "ada",
                                                        body={"X": X[:5].tolist()}))
        # her code hangs: her request arrived and its deadline is fixed
        assert _her_code_started(pid_file, bound), "her code did not start by her deadline"
    # his request queues behind hers on the one call thread that runs users' models
    his, his_box = _in_thread(lambda: bob.infer(X[:7]))
    hers.join(bound + 30)
    his.join(bound + 30)
    assert not hers.is_alive() and not his.is_alive()
    reply = her_box["value"]
    assert reply.status == 422, reply.body
    error = reply.body["error"]
    assert error["code"] == "user_model_timeout" and error["field"] == field
    assert "'mine'" in error["message"] and f"{bound:g} s after the request arrived" in error["message"]
    assert bound - 1 < her_box["ended"] - her_box["started"] < bound + 10  # at her deadline, not the 60 s her code sleeps
    assert "error" not in his_box, his_box.get("error")
    assert len(his_box["value"]) == 7 and set(np.asarray(his_box["value"]).tolist()) <= {0, 1, 2}
    pids = [int(p) for p in pid_file.read_text().split()]
    assert pids and os.getpid() not in pids
    deadline = time.monotonic() + 5
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(p) for p in pids)
    mode_file.write_text("")
    assert len(ada.infer(X[:3])) == 3


def test_a_predict_that_hangs_at_infer_is_killed_at_her_limit_and_frees_the_worker(trained, iris):
    a_hang_at_infer_ends_at_her_limit_and_frees_the_worker(trained, iris[0], "mine.predict", LIMIT)


def suspicion_and_export_of_a_hang_end_at_the_services_wait(trained, tmp_path, limit: float, fields, export_hang: str,
                                                            file_name: str, wait: float = CALL_WAIT,
                                                            **export_options) -> None:
    """Her model hangs: suspicion answers 422 naming one of ``fields``, and
    export (with her code in mode ``export_hang``) raises, each at her
    deadline under the service's shortened ``wait`` (her ``limit`` under the
    usual wait); nothing is written; once she behaves, export works."""
    from ease_jupyter.service import core
    from ease_jupyter.service.own_model_calls import request_deadline

    running, ada, _, mode_file = trained
    assert request_deadline(_hers(running)[3], core.MODEL_CALL_SECONDS).seconds == limit
    with service_wait(wait) as bound:
        assert bound < limit
        mode_file.write_text("hang")
        started = time.monotonic()
        reply = running.call("GET", f"/tasks/iris/suspicion?k={MAX_TOP_K}", "ada")  # every model: hers among them
        assert reply.status == 422 and reply.body["error"]["code"] == "user_model_timeout", reply.body
        assert reply.body["error"]["field"] in fields
        assert f"{bound:g} s after the request arrived" in reply.body["error"]["message"]
        mode_file.write_text(export_hang)
        with pytest.raises(UserModelCallTimeout, match=f"'mine'.*export.*time limit, {bound:g} s after"):
            ada.export(tmp_path / file_name, **export_options)
        assert time.monotonic() - started < 2 * bound + 20
    assert not (tmp_path / file_name).exists()
    mode_file.write_text("")
    card = ada.export(tmp_path / file_name, **export_options)  # once it behaves, it exports (in the child)
    assert (tmp_path / file_name).exists() and card["outputs"]


def test_suspicion_and_export_of_a_hanging_model_end_at_the_services_wait(trained, tmp_path):
    # predict_proba where hers is the most accurate model (its loss), predict where another is (disagreement);
    # her class's __setstate__ hangs in "hang_load": export loads it in the child too
    suspicion_and_export_of_a_hang_end_at_the_services_wait(
        trained, tmp_path, LIMIT, ("mine.predict_proba", "mine.predict"), "hang_load", "mine.joblib")


def a_raise_or_a_wrong_shape_at_infer_fails_with_her_error(trained, X, what: str, found: str,
                                                          expected_ok) -> None:
    """Her ``what`` (predict, forward) raises at ``infer``: 422 with her
    traceback, also through the suspicion scores; it answers the wrong shape:
    400 naming the call, the shape ``found`` and an expected shape that
    ``expected_ok`` accepts. Nothing stored changes."""
    running, ada, _, mode_file = trained
    field = f"mine.{what}"
    task = running.service.store.task_by_name(running.service.store.user_by_name("ada").id, "iris")
    before = _stored(running, task)
    mode_file.write_text("raise")
    reply = running.call("POST", "/tasks/iris/infer", "ada", body={"X": X[:4].tolist()})
    assert reply.status == 422, reply.body
    error = reply.body["error"]
    assert error["code"] == "user_model_error" and error["field"] == field
    assert "Traceback" in error["message"] and f"my {what} broke on purpose" in error["message"]
    assert f"in {what}" in error["message"]  # her frame
    with pytest.raises(UserModelCallError, match=f"my {what} broke on purpose"):
        ada.suspicion(k=MAX_TOP_K)  # every finished model: hers among them
    mode_file.write_text("shape")
    reply = running.call("POST", "/tasks/iris/infer", "ada", body={"X": X[:4].tolist()})
    assert reply.status == 400, reply.body
    error = reply.body["error"]
    assert error["code"] == "bad_data" and error["field"] == field
    assert error["found"] == found and expected_ok(error["expected"]), error["expected"]
    assert _stored(running, task) == before  # nothing stored changed
    mode_file.write_text("")


def test_a_model_that_raises_or_answers_the_wrong_shape_at_infer_fails_with_her_error(trained, iris):
    a_raise_or_a_wrong_shape_at_infer_fails_with_her_error(
        trained, iris[0], "predict", "shape (4, 2)", lambda expected: "one class index per example" in expected)


def test_a_dataframe_and_series_feed_and_infer_through_her_model(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=60)
    frame = pd.DataFrame({"x": x, "z": rng.normal(size=60), "label": np.where(x > 0, "pos", "neg")})
    running = start(tmp_path / "svc", torch=False, workers=1, allow_user_models=True)
    try:
        running.user("ada")
        client = running.client("ada")
        two = client.task("two_columns", like=frame, target="label")
        two.add_model(LogisticRegression(max_iter=200), name="mine", limit=30)
        assert two.feed(frame.drop(columns="label"), frame["label"])["n_examples"] == 60  # X a DataFrame, y a Series
        one = client.task("one_column", like=frame[["x", "label"]], target="label")
        one.add_model(LogisticRegression(max_iter=200), name="mine", limit=30)
        one.feed(frame["x"], frame["label"])  # X a Series: a one-column table
        assert two.wait(timeout=240) and one.wait(timeout=240)
        _serve_only(running, "ada", "two_columns", "mine")
        _serve_only(running, "ada", "one_column", "mine")
        predicted = one.infer(frame["x"])
        assert len(predicted) == 60 and np.mean(predicted == frame["label"].to_numpy()) > 0.9  # the sign of x
        assert set(two.infer(frame.drop(columns="label"))) <= {"pos", "neg"}
    finally:
        running.thread.stop()


def _hers(running):
    """(store, blobs, task, job) of Ada's task and her model, to call it as a worker does."""
    store = running.service.store
    task = store.task_by_name(store.user_by_name("ada").id, "iris")
    return store, running.service.blobs, task, next(j for j in store.list_jobs(task.id) if j.model == "mine")


def test_her_deadline_is_fixed_as_the_request_arrives_and_ends_before_the_services_wait(trained, iris,
                                                                                         monkeypatch):
    from ease_jupyter.service import core

    running, ada, _, mode_file = trained
    X, _ = iris
    wait = 4.0  # the service waits less than her limit (LIMIT): her call must end first
    monkeypatch.setattr(core, "MODEL_CALL_SECONDS", wait)
    mode_file.write_text("hang")
    started = time.monotonic()
    reply = running.call("POST", "/tasks/iris/infer", "ada", body={"X": X[:5].tolist()})
    elapsed = time.monotonic() - started
    mode_file.write_text("")
    assert reply.status == 422, reply.body  # not the service's 500 when its wait ran out first
    error = reply.body["error"]
    assert error["code"] == "user_model_timeout" and error["field"] == "mine.predict", error
    bound = wait - wait / 4  # the wait less its margin
    assert f"{bound:g} s after the request arrived" in error["message"]
    assert elapsed < wait + 5 < LIMIT  # killed at the bound, not at her limit (slack for a loaded machine)
    # The next call under the usual wait (a new call process may have to start on a busy
    # machine): the call thread is free, nothing of hers still runs.
    monkeypatch.undo()
    assert len(ada.infer(X[:3])) == 3


def test_a_call_queued_past_its_deadline_fails_at_once_without_running_her_code(trained, iris):
    from concurrent.futures import Future

    from ease_jupyter.service.own_model_calls import Deadline, own_predictions_of, waited

    running, _, _, mode_file = trained
    X, _ = iris
    store, blobs, task, job = _hers(running)
    pids = mode_file.parent / "mode.pids"
    pids.unlink(missing_ok=True)
    mode_file.write_text("hang")  # her predict would write its pid, then hang
    started = time.monotonic()
    with pytest.raises(UserModelCallTimeout, match="'mine'.*predict had not started by its time limit"):
        own_predictions_of(store, blobs, task.id, job.id, X[:3], Deadline(time.time() - 0.5, 3.0))
    mode_file.write_text("")
    assert time.monotonic() - started < 10 < LIMIT and not pids.exists()  # her code never started
    # A wait that still runs out (the call thread busy elsewhere) is her request's typed error.
    never = Future()
    with pytest.raises(UserModelCallTimeout) as raised:
        waited(never, job, 0.05)
    assert raised.value.code == "user_model_timeout" and raised.value.http_status == 422
    assert never.cancelled()  # a queued call never runs


def test_every_reply_from_her_code_is_data(trained, iris, monkeypatch):
    import io

    import joblib

    from ease_jupyter.errors import DataError
    from ease_jupyter.service import own_model_calls

    running, _, _, _ = trained
    X, _ = iris
    store, blobs, task, job = _hers(running)
    kinds = []
    real = own_model_calls.run_user_code

    def recorded(*args, returns="object", **kwargs):
        kinds.append(returns)
        return real(*args, returns=returns, **kwargs)

    monkeypatch.setattr(own_model_calls, "run_user_code", recorded)
    predicted = own_model_calls.own_predictions_of(store, blobs, task.id, job.id, X[:4])
    assert len(predicted) == 4
    outputs = own_model_calls.own_outputs(blobs, task, job, X[:4].astype(np.float32), True, 3, True)
    assert outputs.proba.shape == (4, 3)
    artifact = own_model_calls.own_artifact_of(store, blobs, task.id, job.id, "joblib")
    assert artifact.format == "joblib" and artifact.outputs[0]["name"] == "predict"
    assert list(joblib.load(io.BytesIO(artifact.data)).predict(X[:4])) == list(predicted)
    try:  # a format her model cannot take: the child's DataError, sent as data and raised here
        own_model_calls.own_artifact_of(store, blobs, task.id, job.id, "onnx")
    except DataError as error:
        assert error.field and error.found and error.expected
    assert kinds and set(kinds) == {"array"}, kinds


@pytest.mark.parametrize("mode", sorted(CLASSES))
def test_classes_that_are_not_distinct_whole_indices_are_a_data_error(trained, iris, mode):
    from ease_jupyter.errors import DataError
    from ease_jupyter.service.own_model_calls import own_outputs

    running, _, _, mode_file = trained
    X, _ = iris
    _, blobs, task, job = _hers(running)
    mode_file.write_text(mode)  # her model loads with these classes_
    try:
        with pytest.raises(DataError) as raised:
            own_outputs(blobs, task, job, X[:4].astype(np.float32), True, 3, True)
    finally:
        mode_file.write_text("")
    assert raised.value.field == "mine.classes_" and "distinct whole class indices" in raised.value.expected


class _BrokenProba(LogisticRegression):
    def predict_proba(self, X):
        raise AttributeError("my predict_proba broke on purpose")


def test_an_attribute_error_inside_her_predict_proba_is_hers_not_a_missing_method(iris):
    import pickle

    from sklearn.svm import SVC

    from ease_jupyter.fitted_calls import fitted_proba

    X, y = iris
    broken = _BrokenProba(max_iter=200).fit(X, y)
    with pytest.raises(AttributeError, match="my predict_proba broke on purpose"):
        fitted_proba(pickle.dumps(broken), X[:3])
    assert fitted_proba(pickle.dumps(SVC().fit(X, y)), X[:3]).size == 0  # available_if hides it: predict's turn
    assert fitted_proba(pickle.dumps(LogisticRegression(max_iter=200).fit(X, y)), X[:3]).shape == (3, 3)
