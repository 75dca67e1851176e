"""A zoo scikit-learn model is unpickled and converted in the service's
export processes (``export_processes.py``), not in the process that answers
every request: with every store (``memory://`` too, whose model bytes are
sent along); a conversion past the request's wait is a typed timeout and its
process is killed; a process that dies is a typed error; the next export
gets a fresh process; what fails in a conversion comes back typed; a process
whose memory grew retires; the service's stop ends them all.
"""

from __future__ import annotations

import io
import os
import pickle
import signal
import sys
import threading
import time
import zipfile

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.errors import DataError, UserModelCallError, UserModelCallTimeout
from ease_jupyter.service import export, models
from ease_jupyter.service.export_processes import ExportProcessDied, ExportProcesses, ExportProcessTimeout
from ease_jupyter.service.handlers import error_of
from ease_jupyter.service.testing import train_now
from ease_jupyter.store import JobStatus, JobUpdate

from .conftest import start, until


class _Sleeps:
    """A stored model whose unpickling takes 20 s: a conversion that overruns."""

    def __reduce__(self):
        return time.sleep, (20,)


class _Exits:
    """A stored model whose unpickling ends the process that loads it."""

    def __reduce__(self):
        return sys.exit, (7,)


def _not_here(*args, **kwargs):
    raise AssertionError("a zoo model was unpickled or converted in the service's process")


def _iris(tmp_path, **config):
    """A service with alice's cancelled iris task, fed here: (running, client task, stored task, X)."""
    from sklearn.datasets import load_iris

    running = start(tmp_path / "service", **config)
    running.user("alice")
    task = running.client("alice").task("iris", input=[4], output=[3])
    task.cancel()
    store, blobs = running.service.store, running.service.blobs
    stored = store.task_by_name(store.user_by_name("alice").id, "iris")
    X, y = load_iris(return_X_y=True)
    X = X.astype("float32")
    datasets.feed(store, blobs, stored, X, y)
    return running, task, stored, X


def _finished(store, blobs, stored, data: bytes) -> None:
    """A finished logreg job of ``stored`` whose stored model is ``data``
    (at a low accuracy: a job trained later is the best)."""
    job = store.create_job(stored.id, store.latest_dataset_version(stored.id).id, "logreg", {"grid": {"C": [1.0]}})
    store.update_job(job.id, JobStatus.RUNNING)
    store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.05, cost_seconds=1.0,
                                                            artifact_blob=blobs.put_bytes(data)))


def _onnx_labels(bundle: bytes, X: np.ndarray) -> np.ndarray:
    import onnxruntime

    with zipfile.ZipFile(io.BytesIO(bundle)) as archive:
        session = onnxruntime.InferenceSession(archive.read("model.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": X})[0]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# ---------------------------------------------------------------- through the service


@pytest.mark.parametrize("db_url", [None, "memory://"])
def test_a_zoo_model_is_converted_outside_the_services_process(tmp_path, monkeypatch, db_url):
    """The service's own unpickling and conversion are made to fail: the
    export still answers, from a process that is not the service's."""
    running, task, stored, X = _iris(tmp_path, db_url=db_url)
    try:
        store, blobs = running.service.store, running.service.blobs
        assert train_now(store, blobs, stored, "logreg", {"C": 1.0}).status.value == "succeeded"
        expected = task.infer(X)
        monkeypatch.setattr(export, "sklearn_artifact", _not_here)
        monkeypatch.setattr(models, "load_estimator", _not_here)
        card = task.export(tmp_path / "iris.onnx")
        assert card["format"] == "onnx" and [row["name"] for row in card["outputs"]] == ["label", "probabilities"]
        bundle, _, _ = running.service.export_model(store.user_by_name("alice"), "iris", "onnx")
        np.testing.assert_array_equal(_onnx_labels(bundle, X), expected)
        assert task.export(tmp_path / "iris.joblib")["format"] == "joblib"
        pids = running.service.export_processes.pids()
        assert pids and os.getpid() not in pids
        assert running.service.export_processes.run(os.getpid) in pids
    finally:
        running.thread.stop()


def test_a_conversion_past_its_wait_is_a_typed_timeout_and_its_process_is_killed(tmp_path):
    running, task, stored, X = _iris(tmp_path)
    pool = ExportProcesses(1)
    try:
        store, blobs = running.service.store, running.service.blobs
        _finished(store, blobs, stored, pickle.dumps(_Sleeps()))
        first = pool.run(os.getpid)
        with pytest.raises(UserModelCallTimeout) as error:
            export.export_best(store, blobs, stored, "onnx", timeout=1.0, export_processes=pool)
        assert "'iris'" in str(error.value) and "still converting after the 1 s" in str(error.value)
        assert "its process ended" in str(error.value)
        answer = error_of(error.value)
        assert answer.status == 422 and answer.code == "user_model_timeout"
        assert first not in pool.pids() and _gone(first)  # killed, not left converting
        # the next export gets a fresh process
        assert train_now(store, blobs, stored, "logreg", {"C": 1.0}).status.value == "succeeded"
        _, bundle = export.export_best(store, blobs, stored, "onnx", timeout=120.0, export_processes=pool)
        np.testing.assert_array_equal(_onnx_labels(bundle, X), task.infer(X))
        assert pool.pids() and first not in pool.pids()
    finally:
        pool.close()
        running.thread.stop()


def test_a_conversion_whose_process_dies_is_a_typed_error_and_the_next_export_works(tmp_path):
    running, task, stored, X = _iris(tmp_path)
    pool = ExportProcesses(1)
    try:
        store, blobs = running.service.store, running.service.blobs
        _finished(store, blobs, stored, pickle.dumps(_Exits()))
        with pytest.raises(UserModelCallError) as error:
            export.export_best(store, blobs, stored, "joblib", timeout=120.0, export_processes=pool)
        assert not isinstance(error.value, UserModelCallTimeout)
        assert "'iris'" in str(error.value) and "ended before it answered (exit code 7" in str(error.value)
        answer = error_of(error.value)
        assert answer.status == 422 and answer.code == "user_model_error" and answer.field == "logreg.export"
        assert pool.pids() == []
        assert train_now(store, blobs, stored, "logreg", {"C": 1.0}).status.value == "succeeded"
        _, bundle = export.export_best(store, blobs, stored, "onnx", timeout=120.0, export_processes=pool)
        np.testing.assert_array_equal(_onnx_labels(bundle, X), task.infer(X))
    finally:
        pool.close()
        running.thread.stop()


def test_the_services_stop_ends_its_export_processes(tmp_path):
    running = start(tmp_path / "service")
    try:
        pid = running.service.export_processes.run(os.getpid)
        assert pid != os.getpid() and not _gone(pid)
    finally:
        running.thread.stop()
    assert running.service.export_processes.pids() == [] and _gone(pid)


# ---------------------------------------------------------------- the processes


def test_a_killed_process_is_a_typed_error_and_a_fresh_one_takes_the_next_call():
    pool = ExportProcesses(1)
    try:
        first = pool.run(os.getpid)
        with pytest.raises(ExportProcessDied) as error:
            pool.run(signal.raise_signal, signal.SIGKILL, wait=120.0)  # as the kernel kills one out of memory
        assert error.value.how == "killed by SIGKILL: out of memory, say"
        second = pool.run(os.getpid, wait=120.0)
        assert second not in (first, os.getpid()) and _gone(first)
    finally:
        pool.close()


def test_what_a_conversion_raises_comes_back_typed():
    pool = ExportProcesses(1)
    try:
        with pytest.raises(DataError) as error:
            pool.run(export.check_format, "mp4", wait=120.0)
        assert error.value.field == "format" and "'mp4'" in error.value.found
        with pytest.raises(TypeError, match="pickle"):
            pool.run(threading.Lock, wait=120.0)  # an answer that does not pickle
        assert len(pool.pids()) == 1  # the same process goes on
    finally:
        pool.close()


def test_a_call_that_finds_every_process_busy_gives_up_at_its_wait_without_running():
    pool = ExportProcesses(1)
    outcome = []

    def busy():
        try:
            pool.run(time.sleep, 60)
        except ExportProcessDied as error:
            outcome.append(error)

    holder = threading.Thread(target=busy)
    holder.start()
    try:
        assert until(pool._idle.empty, 60)  # the one process is taken
        with pytest.raises(ExportProcessTimeout) as error:
            pool.run(os.getpid, wait=0.3)
        assert error.value.started is False
    finally:
        pool.close()  # ends the sleeping one too
        holder.join(60)
    assert len(outcome) == 1 and not holder.is_alive()


def test_a_process_whose_memory_grew_retires_after_answering():
    pool = ExportProcesses(1, recycle_bytes=16 * 1024 * 1024)
    try:
        first = pool.run(os.getpid)
        assert len(pool.run(os.urandom, 1024)) == 1024
        assert pool.pids() == [first]  # grew by little: kept
        assert len(pool.run(os.urandom, 64 * 1024 * 1024)) == 64 * 1024 * 1024
        assert first not in pool.pids() and _gone(first)
        assert pool.run(os.getpid) != first
    finally:
        pool.close()
