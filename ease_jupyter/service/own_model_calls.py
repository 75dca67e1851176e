"""A user's own fitted scikit-learn model or trained torch net, called after
training (``infer``, the refine panel's suspicion scores, ``export``) in a
child process of the worker, killed at her model's time limit: the same
child and limit as her training calls (``user_sandbox``, the job's
``limit``). A net is built there from her factory and loaded with its
checkpoint; its ``forward`` on the request's rows and ``export``'s tracing
run there too.

Each request gets one deadline, fixed as it arrives (``request_deadline``):
her model's ``limit`` from then, and, where the service waits at most
``MODEL_CALL_SECONDS`` for a call where the jobs run, less than that wait,
so that her call ends before the service stops waiting. Time spent queued
behind other calls on that engine counts: a call whose deadline has passed
when it starts fails at once without running her code. Its child is closed
when the request's calls are done. A call still running at the deadline is
killed: the request fails with ``UserModelCallTimeout``, and the worker
thread that ran it serves the next call. A call that raises fails the
request with ``UserModelCallError`` holding her traceback; an output of the
wrong shape with a ``DataError`` naming the call (``mine.predict``), the
shape found and the one expected. Every reply comes back as numbers (numpy
arrays loaded without pickle; ``export``'s file as bytes behind a JSON
header, ``fitted_calls.packed``): her code's pickles are never loaded here.

These run where the jobs of her model's engine run (an executor's
``call``): the service process never loads her code.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from ..datasets import program_of
from ..errors import DataError, UserModelCallError, UserModelCallTimeout
from ..fitted_calls import (
    TrainedNet,
    fitted_classes,
    fitted_export,
    fitted_predict,
    fitted_proba,
    net_export,
    net_forward,
    net_loaded,
    unpacked,
)
from ..jobspec import parse_job
from ..store import BlobStore, Job, Store, Task
from ..user_sandbox import UserModelError, UserModelTimeout, close_job, run_user_code
from . import task_schema
from ..zoo import Engine
from .user_models import DEFAULT_LIMIT_SECONDS, TRAIN_OPTIONS, net_shapes

REPLY_MARGIN_SECONDS = 5.0  # of the service's wait, left for killing her child and the reply's way back


@dataclass(frozen=True)
class Deadline:
    """When a request's calls into her model must end (``at``, ``time.time()``),
    ``seconds`` after the request arrived."""

    at: float
    seconds: float


def request_deadline(job: Job, wait_seconds: float | None = None) -> Deadline:
    """The deadline of a request into her model, arriving now: her model's
    ``limit``, bounded, where the service waits at most ``wait_seconds`` for
    the call, by that wait less a margin (``REPLY_MARGIN_SECONDS``, at most a
    quarter of it), so that her call has ended, killed if need be, before the
    service stops waiting."""
    seconds = float(parse_job(job.model, job.config).limit or DEFAULT_LIMIT_SECONDS)
    if wait_seconds is not None:
        seconds = min(seconds, wait_seconds - min(REPLY_MARGIN_SECONDS, wait_seconds / 4))
    return Deadline(time.time() + seconds, seconds)


def waited(future: "Future[Any]", job: Job, wait_seconds: float | None) -> Any:
    """The value of a call into her model sent where the jobs run, waited for
    at most ``wait_seconds``. Her call ends before (``request_deadline``); a
    wait that still runs out (the engine's call thread stuck elsewhere) is
    her request's ``UserModelCallTimeout``, not the service's error."""
    try:
        return future.result(wait_seconds)
    except TimeoutError:  # concurrent.futures.TimeoutError is the builtin one
        future.cancel()  # still queued: it never runs
        raise UserModelCallTimeout(job.model, (
            f"user model {job.model!r}: no answer from where the jobs run within {wait_seconds:g} s, expected "
            "her call to end by its deadline (other calls on that engine were still running); try again"))


class OwnModel:
    """One request's calls into a finished job's fitted model, all bounded by
    one deadline (``request_deadline``; her ``limit`` from now where none is
    given) and run in one child process."""

    def __init__(self, blobs: BlobStore, task: Task, job: Job, store: Store | None = None,
                 deadline: Deadline | None = None):
        from .models import model_name, read_model

        spec = parse_job(job.model, job.config)
        self.name, self.where = job.model, model_name(task, job)
        self.limit = deadline or request_deadline(job)
        self.deadline = self.limit.at
        # a net is rebuilt from her factory and its checkpoint (``store``: which config won);
        # nothing is read for a request whose deadline passed while it queued
        self.data = None if self._expired() else (
            trained_net(store, blobs, task, job) if spec.engine is Engine.TORCH else read_model(blobs, task, job))

    def _expired(self) -> bool:
        return time.time() >= self.deadline

    def call(self, fn: Callable[..., Any], *args: Any, what: str) -> Any:
        """``fn(self.data, *args)`` in the child, its value a numeric numpy
        array (data: never unpickled here); her failure as a typed error naming the call."""
        field = f"{self.name}.{what}"
        if self._expired() or self.data is None:  # queued past its deadline: her code does not start
            raise UserModelCallTimeout(field, (
                f"user model {self.name!r} ({self.where}): {what} had not started by its time limit, "
                f"{self.limit.seconds:g} s after the request arrived, expected it to start before (other calls "
                "into models on the same engine ran first); it did not run"))
        try:
            return run_user_code(fn, self.data, *args, deadline=self.deadline, what=field, returns="array")
        except UserModelTimeout:
            raise UserModelCallTimeout(field, (
                f"user model {self.name!r} ({self.where}): {what} was still running at its time limit, "
                f"{self.limit.seconds:g} s after the request arrived, expected it to return (the model's "
                "`limit`, at most the service's --user-model-timeout and the service's wait for a model call); "
                "its process was killed")) from None
        except UserModelError as error:
            raise UserModelCallError(field, f"user model {self.name!r} ({self.where}): {error}") from None

    def close(self) -> None:
        close_job(self.deadline)  # its child ends with the request, whatever state it is in


@contextlib.contextmanager
def own_model(blobs: BlobStore, task: Task, job: Job, store: Store | None = None,
              deadline: Deadline | None = None) -> Iterator[OwnModel]:
    model = OwnModel(blobs, task, job, store, deadline)
    try:
        yield model
    finally:
        model.close()


def _check_rows(field: str, out: np.ndarray, n: int, expected: str) -> None:
    if out.ndim == 0 or out.shape[0] != n:
        raise DataError(field, f"shape {out.shape}", f"({n}, ...): {expected}")


def checked_predictions(field: str, out: np.ndarray, task: Task, n: int) -> np.ndarray:
    """``predict``'s output if it fits the task: one class index per example
    for classification, one output of the task's shape per example otherwise."""
    program = program_of(task)
    k = program.num_classes
    if k is not None:
        _check_rows(field, out, n, "one class index per example")
        if out.ndim != 1:
            raise DataError(field, f"shape {out.shape}", f"({n},): one class index per example")
        if not (np.issubdtype(out.dtype, np.number) and np.all(np.mod(out, 1) == 0)
                and np.all((out >= 0) & (out < k))):
            raise DataError(field, f"values such as {out[:3].tolist()!r}", f"class indices from 0 to {k - 1}")
        return out.astype(np.int64)
    size = int(np.prod(program.output.tensors[0].shape)) if len(program.output.tensors) == 1 else None
    _check_rows(field, out, n, "one output per example")
    if size is not None and out.size != n * size:
        raise DataError(field, f"shape {out.shape}", f"({n}, {size}): one output of the task's shape per example")
    if not np.issubdtype(out.dtype, np.number):
        raise DataError(field, f"values of type {out.dtype}", "numbers")
    return out


def own_predictions(store: Store, blobs: BlobStore, task: Task, job: Job, X: Any,
                    deadline: Deadline | None = None) -> np.ndarray:
    """Her fitted model's predictions on checked inputs, by ``deadline``."""
    rows = task_schema.estimator_inputs(store, task, X)
    with own_model(blobs, task, job, deadline=deadline) as model:
        out = model.call(fitted_predict, rows, what="predict")
    return checked_predictions(f"{job.model}.predict", out, task, len(rows))


def own_predictions_of(store: Store, blobs: BlobStore, task_id: int, job_id: int, X: Any,
                       deadline: Deadline | None = None) -> np.ndarray:
    """``own_predictions`` by ids: what an executor's ``call`` runs where the jobs run."""
    return own_predictions(store, blobs, store.get_task(task_id), store.get_job(job_id), X, deadline)


def own_outputs(blobs: BlobStore, task: Task, job: Job, X: Any, classification: bool, n_classes: int | None,
                want_proba: bool, deadline: Deadline | None = None) -> Any:
    """What her fitted model says about X for the suspicion scores
    (``suspicion.estimator_outputs``'s contract), by ``deadline``."""
    from .suspicion import _Outputs

    n = len(X)
    with own_model(blobs, task, job, deadline=deadline) as model:
        raw = model.call(fitted_proba, X, what="predict_proba") if classification and want_proba else None
        if raw is not None and raw.size:
            field = f"{job.model}.predict_proba"
            if raw.ndim != 2 or raw.shape[0] != n or not np.issubdtype(raw.dtype, np.number):
                raise DataError(field, f"shape {raw.shape} of {raw.dtype}", f"({n}, classes): one row of "
                                "probabilities per example")
            classes = model.call(fitted_classes, raw.shape[1], what="classes_")
            if not _class_indices(classes, raw.shape[1], n_classes):
                raise DataError(f"{job.model}.classes_", f"{classes.tolist()!r}"[:80],
                                f"{raw.shape[1]} distinct whole class indices from 0 to {n_classes - 1}, "
                                "one per column")
            proba = np.zeros((n, n_classes), dtype=np.float64)
            proba[:, classes.astype(np.int64)] = raw  # a class missing from the training side keeps probability 0
            return _Outputs(classes.astype(np.int64)[raw.argmax(axis=1)], proba)
        out = model.call(fitted_predict, X, what="predict")
    out = checked_predictions(f"{job.model}.predict", out, task, n)
    return _Outputs(out if classification else out.reshape(n, -1), None)


def _class_indices(classes: np.ndarray, n_columns: int, n_classes: int) -> bool:
    """Whether ``classes_`` names one distinct class index (a whole number
    from 0 to ``n_classes - 1``) per ``predict_proba`` column."""
    return (classes.shape == (n_columns,) and np.issubdtype(classes.dtype, np.number)
            and bool(np.all(np.mod(classes, 1) == 0)) and bool(np.all((classes >= 0) & (classes < n_classes)))
            and len(np.unique(classes)) == n_columns)


def own_outputs_of(store: Store, blobs: BlobStore, task_id: int, job_id: int, X: Any, classification: bool,
                   n_classes: int | None, want_proba: bool, deadline: Deadline | None = None) -> Any:
    """``own_outputs`` by ids: what an executor's ``call`` runs where the jobs run."""
    return own_outputs(blobs, store.get_task(task_id), store.get_job(job_id), X, classification, n_classes,
                       want_proba, deadline)


def artifact_of_reply(field: str, reply: np.ndarray) -> Any:
    """The ``export.Artifact`` a child sent as data (``fitted_calls.packed``),
    or the ``DataError`` it sent, raised here."""
    from .export import Artifact

    try:
        header, data = unpacked(reply)
        error = header.get("error")
        found = (DataError(str(error["field"]), str(error["found"]), str(error["expected"])) if error else
                 Artifact(str(header["format"]), data, list(header["inputs"]), list(header["outputs"]),
                          list(header["preprocessing"])))
    except (ValueError, KeyError, TypeError) as wrong:
        raise UserModelCallError(field, f"{field}: its process answered what is not an exported model "
                                        f"({type(wrong).__name__}: {wrong})") from None
    if isinstance(found, DataError):
        raise found
    return found


def own_artifact_of(store: Store, blobs: BlobStore, task_id: int, job_id: int, fmt: str,
                    deadline: Deadline | None = None) -> Any:
    """``export.sklearn_artifact`` of her fitted model, converted in the
    child by ``deadline`` (the conversion unpickles and pickles her
    objects, whose ``__setstate__`` and ``__reduce__`` are her code)."""
    from .export import sklearn_inputs

    task, job = store.get_task(task_id), store.get_job(job_id)
    classification = program_of(task).num_classes is not None
    with own_model(blobs, task, job, deadline=deadline) as model:
        out = model.call(fitted_export, fmt, sklearn_inputs(store, task), classification, what="export")
    return artifact_of_reply(f"{job.model}.export", out)


# -- a user's trained torch net ----------------------------------------------------------------------


def trained_net(store: Store | None, blobs: BlobStore, task: Task, job: Job) -> TrainedNet:
    """What rebuilds a user torch job's best config in the child: her
    factory's code, that config's options (less the training ones) and checkpoint."""
    from .models import model_name, read_model, torch_best_params

    if store is None:
        raise ValueError(f"{model_name(task, job)}: a torch model's calls need the store (its best config)")
    spec = parse_job(job.model, job.config)
    code = blobs.get_referenced(spec.code, f"task {task.name!r}: the code of user model {job.model!r}")
    options = {k: v for k, v in torch_best_params(store, job, spec).items() if k not in TRAIN_OPTIONS}
    inp, out = net_shapes(task)
    return TrainedNet(code, read_model(blobs, task, job), inp, out, options)


def checked_net_outputs(field: str, out: np.ndarray, n: int, output_shape: tuple[int, ...]) -> np.ndarray:
    """``forward``'s outputs if they are one number tensor of the task's output shape per example."""
    want = (n, *output_shape)
    if out.shape != want:
        raise DataError(field, f"shape {out.shape}", f"{want}: one output of shape {tuple(output_shape)} per example")
    if not np.issubdtype(out.dtype, np.number):
        raise DataError(field, f"values of type {out.dtype}", "numbers")
    return out


def own_net_outputs(store: Store, blobs: BlobStore, task: Task, job: Job, X: Any,
                    deadline: Deadline | None = None) -> np.ndarray:
    """Her trained net's raw outputs on X (logits for classification), its
    factory, checkpoint and ``forward`` run in the child by ``deadline``."""
    X = np.require(X, dtype=np.float32, requirements=["C", "W"])  # torch wants a writable buffer
    with own_model(blobs, task, job, store, deadline) as model:
        model.call(net_loaded, what="load")  # her factory, then the checkpoint's weights
        out = model.call(net_forward, X, what="forward")
        return checked_net_outputs(f"{job.model}.forward", out, len(X), model.data.output_shape)


def own_net_outputs_of(store: Store, blobs: BlobStore, task_id: int, job_id: int, X: Any,
                       deadline: Deadline | None = None) -> np.ndarray:
    """``own_net_outputs`` by ids: what the torch executor's ``call`` runs where the torch jobs run."""
    return own_net_outputs(store, blobs, store.get_task(task_id), store.get_job(job_id), X, deadline)


def own_net_artifact_of(store: Store, blobs: BlobStore, task_id: int, job_id: int, fmt: str,
                        example: np.ndarray, deadline: Deadline | None = None) -> Any:
    """``export.torch_artifact`` of her trained net, built, traced (or
    scripted through torch.onnx) and saved in the child by ``deadline``."""
    task, job = store.get_task(task_id), store.get_job(job_id)
    with own_model(blobs, task, job, store, deadline) as model:
        model.call(net_loaded, what="load")
        out = model.call(net_export, fmt, example, what="export")
    return artifact_of_reply(f"{job.model}.export", out)
