"""Exceptions shared by every layer.

Each error names the field (or position) at fault, what was found and what was
expected, so that a notebook user can fix the call without reading our code.
"""

from __future__ import annotations


class EaseMLError(Exception):
    """Base class of every error ease_jupyter raises on purpose."""


class ProgramSyntaxError(EaseMLError, ValueError):
    """A malformed ease.ml program (pvldb Fig. 3).

    ``line`` and ``column`` are 1-based; ``found`` is the offending text and
    ``expected`` describes what the grammar allows there. ``message`` is the
    bare sentence; ``of`` names what the line counts in, where that is not
    the program itself (``"the cell"``: a ``%%easeml task`` cell).
    """

    def __init__(self, message: str, *, line: int, column: int, found: str, expected: str, of: str | None = None):
        self.message, self.line, self.column, self.found, self.expected = message, line, column, found, expected
        self.of = of
        where = f"line {line}, column {column}" + (f" of {of}" if of else "")
        super().__init__(f"{where}: {message} (found {found!r}, expected {expected})")


class DataError(EaseMLError, ValueError):
    """Data that does not fit a task's schema.

    ``field`` is a path such as ``"X[3].next.0"`` or ``"y"``.
    """

    def __init__(self, field: str, found: str, expected: str):
        self.field, self.found, self.expected = field, found, expected
        super().__init__(f"{field}: found {found}, expected {expected}")

    def __reduce__(self):  # pickles whole: it crosses process boundaries (executors' calls)
        return type(self), (self.field, self.found, self.expected)


class NotFoundError(EaseMLError, KeyError):
    """An unknown task, user, dataset version, job or example id."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "not found"


class AlreadyExistsError(EaseMLError, ValueError):
    """A name that must be unique is already taken."""


class InvalidStateError(EaseMLError, ValueError):
    """An operation that the current state forbids, e.g. a finished job started again."""


class StaleParentError(InvalidStateError):
    """A new dataset version whose parent is no longer the task's latest:
    another feed or refine stored a version meanwhile. Built on the old
    latest version, it would lose that version's examples; ``datasets``
    reads the latest again and retries."""


class StorageError(EaseMLError, OSError):
    """The store cannot take or give what was asked. ``code`` and
    ``http_status`` are the JSON error the API answers with (one place for
    both the API and a failed job's record)."""

    code, http_status = "storage_error", 500

    def __init__(self, message: str, *, field: str | None = None, found: str | None = None,
                 expected: str | None = None):
        self.field, self.found, self.expected = field, found, expected
        super().__init__(message)


class QuotaExceededError(StorageError):
    """A user's write would take her over her storage quota (HTTP 413 ``quota_exceeded``)."""

    code, http_status = "quota_exceeded", 413


class StorageFullError(StorageError):
    """The data dir's filesystem has no room left (HTTP 507 ``storage_full``)."""

    code, http_status = "storage_full", 507


class StoreUnavailableError(StorageError):
    """The database cannot be written (read-only, locked, gone; HTTP 503 ``store_unavailable``)."""

    code, http_status = "store_unavailable", 503


class StoreCorruptError(StorageError):
    """A stored object (blob) that rows refer to cannot be read (HTTP 500 ``store_corrupt``).
    The message names the object (task, version, job), never a path."""

    code, http_status = "store_corrupt", 500


class ClusterUnavailableError(EaseMLError, RuntimeError):
    """The cluster could not run the work now: a worker or the scheduler went
    away, or no worker was there (``cluster_unavailable``). It says nothing
    of the model: the service retries such a job later (``failures.py``).
    The message names a worker by its name, never its address, and holds no
    library internals."""

    code = "cluster_unavailable"

    def __reduce__(self):
        return type(self), self.args


def _gib(total_memory: int | None) -> str:
    return "unknown size" if total_memory is None else f"{total_memory / 2**30:.1f} GiB"


class DeviceOutOfMemoryError(EaseMLError):
    """A unit ran out of its GPU's memory (``gpu_out_of_memory``).

    ``model`` and ``batch_size`` are the config's, ``device`` the device's
    kind (``"cuda:NVIDIA H100 80GB HBM3"``) and ``total_memory`` its memory
    in bytes (None when unknown). The retry with half the batch size reads
    ``batch_size``.
    """

    code = "gpu_out_of_memory"

    def __init__(self, model: str, batch_size: int, device: str, total_memory: int | None, *,
                 phase: str = "training", detail: str = ""):
        self.model, self.batch_size, self.device, self.total_memory = model, batch_size, device, total_memory
        self.phase, self.detail = phase, detail
        super().__init__(
            f"model {model!r} with batch_size {batch_size} does not fit in the memory of {device} "
            f"({_gib(total_memory)}) during {phase}; expected a smaller batch_size or a smaller model"
            + (f" ({detail})" if detail else "")
        )

    def __reduce__(self):  # pickles whole: it crosses Dask and process pipes
        return _rebuild_oom, (self.model, self.batch_size, self.device, self.total_memory, self.phase, self.detail)


def _rebuild_oom(model: str, batch_size: int, device: str, total_memory: int | None, phase: str,
                 detail: str) -> DeviceOutOfMemoryError:
    return DeviceOutOfMemoryError(model, batch_size, device, total_memory, phase=phase, detail=detail)


class DeviceFailedError(EaseMLError):
    """A unit's accelerator failed (a CUDA, cuDNN or cuBLAS runtime error other
    than out of memory; ``device_failed``). The worker is treated as lost:
    its device may be unusable until the process restarts."""

    code = "device_failed"

    def __init__(self, device: str, detail: str):
        self.device, self.detail = device, detail
        super().__init__(f"device {device} failed: {detail}")

    def __reduce__(self):
        return type(self), (self.device, self.detail)


class UserModelCallError(EaseMLError):
    """A user's own model failed when called after training (``infer``, the
    suspicion scores, ``export``): her code raised, and the message holds her
    traceback (HTTP 422 ``user_model_error``). ``field`` names the call
    (``mine.predict``). Nothing stored changes."""

    code, http_status = "user_model_error", 422

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)

    def __reduce__(self):  # pickles whole: it crosses the executors' process pipes
        return type(self), (self.field, str(self))


class UserModelCallTimeout(UserModelCallError):
    """A user's own model was still running at its time limit when called
    after training; its process was killed (HTTP 422 ``user_model_timeout``)."""

    code = "user_model_timeout"
