"""The device a training unit runs on, and its arithmetic.

Cerebro (§4.3, §6) runs one worker per GPU, one unit at a time per worker.
Dask does not know what a GPU is: a GPU worker is a process that sees one
GPU (its own ``CUDA_VISIBLE_DEVICES``, as dask-cuda sets it), so a unit
trains on ``cuda`` (the current device, ``cuda:0`` in that process) when
torch sees a GPU and on the CPU otherwise. The *worker* decides, inside the
unit; the driver never names a device, so a config can hop between a GPU
worker and a CPU worker (checkpoints are device-neutral, see ``units``).

Mixed precision is opt-in (``Hooks.precision``): ``"bf16"`` autocasts the
forward pass to bfloat16; ``"fp16"`` autocasts to float16 and scales the
loss with a ``GradScaler`` so small gradients do not underflow. On the CPU,
``bf16`` autocast is used as asked and ``fp16`` falls back to ``fp32``: CPU
float16 kernels are slow and a scaler buys nothing there, and a config that
hops onto a CPU worker must not fail for it.

Determinism on GPUs. cuBLAS picks reduction orders by workspace unless
``CUBLAS_WORKSPACE_CONFIG`` is set before CUDA creates its first handle, so
importing this module sets it to ``:4096:8`` when it is unset (the value
torch's reproducibility notes give). The units turn on
``torch.use_deterministic_algorithms`` (warn only). What is and is not
bit-identical is listed in docs/gpus.md.

Importing this module does not import torch.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, ContextManager

from ease_jupyter.errors import DeviceFailedError, DeviceOutOfMemoryError, EaseMLError

__all__ = [
    "DEVICE_ENV",
    "PRECISIONS",
    "DeviceDescription",
    "MixedPrecision",
    "classify_device_error",
    "describe_device",
    "mixed_precision",
    "release_device_memory",
    "worker_device",
]

# Must be in the environment before CUDA initialises cuBLAS in this process.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

#: Environment variable that overrides the worker's choice: ``cpu`` or ``cuda``.
DEVICE_ENV = "EASEML_DEVICE"

#: ``Hooks.precision`` values: plain float32, or autocast to bfloat16 / float16.
PRECISIONS = ("fp32", "bf16", "fp16")

# Text of torch RuntimeErrors raised by a failing accelerator (not out of memory).
_DEVICE_FAILURE_MARKS = ("CUDA error", "device-side assert", "cuDNN error", "CUDNN_STATUS", "CUBLAS")


def worker_device() -> Any:
    """This process's training device: ``cuda`` (the current GPU) when torch
    sees one, else ``cpu``; ``EASEML_DEVICE=cpu|cuda`` overrides the choice
    (``cuda`` without a GPU is an error)."""
    import torch

    wanted = os.environ.get(DEVICE_ENV, "").strip().lower()
    if wanted not in ("", "cpu", "cuda"):
        raise EaseMLError(f"{DEVICE_ENV}: found {wanted!r}, expected 'cpu', 'cuda' or unset")
    if wanted == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if wanted == "cuda":
        raise EaseMLError(f"{DEVICE_ENV}: found 'cuda', expected 'cpu' or unset: torch sees no CUDA device in this process")
    return torch.device("cpu")


@dataclass(frozen=True)
class DeviceDescription:
    """A device for messages and for per-kind measurements: ``kind`` is
    ``"cpu"`` or ``"cuda:<product name>"``; ``total_memory`` is the GPU's
    memory, or the host's physical memory for the CPU, in bytes (None when
    unknown)."""

    kind: str
    total_memory: int | None


def describe_device(device: Any) -> DeviceDescription:
    """The kind name and total memory of ``device`` (a ``torch.device`` or a string)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return DeviceDescription(f"cuda:{props.name}", int(props.total_memory))
    if device.type == "cpu":
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            total = None
        return DeviceDescription("cpu", total)
    return DeviceDescription(device.type, None)


@dataclass(frozen=True)
class MixedPrecision:
    """The arithmetic of one unit on one device (see :func:`mixed_precision`).

    ``precision`` is the one asked for, ``effective`` the one used (``fp16``
    on the CPU runs as ``fp32``).
    """

    precision: str
    effective: str
    device_type: str

    @property
    def active(self) -> bool:
        """True when the forward pass is autocast (``bf16`` or ``fp16``)."""
        return self.effective != "fp32"

    def autocast(self) -> ContextManager[Any]:
        """The forward pass's context: ``torch.autocast`` to the precision's
        dtype, or a no-op for ``fp32``."""
        import torch

        if not self.active:
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.effective == "bf16" else torch.float16
        return torch.autocast(self.device_type, dtype=dtype)

    def scaler(self) -> Any:
        """A fresh ``torch.amp.GradScaler`` for ``fp16``, else None."""
        import torch

        if self.effective != "fp16":
            return None
        return torch.amp.GradScaler(self.device_type)


def mixed_precision(precision: str, device: Any) -> MixedPrecision:
    """The arithmetic for ``precision`` (one of :data:`PRECISIONS`) on ``device``."""
    import torch

    if precision not in PRECISIONS:
        raise EaseMLError(f"precision: found {precision!r}, expected one of {list(PRECISIONS)}")
    device_type = torch.device(device).type
    effective = "fp32" if precision == "fp16" and device_type == "cpu" else precision
    return MixedPrecision(precision, effective, device_type)


def classify_device_error(error: BaseException, device: Any, *, model: str, batch_size: int,
                          phase: str = "training") -> EaseMLError | None:
    """Our error for a device failure inside a unit, or None for any other error.

    * ``torch.cuda.OutOfMemoryError``, or a RuntimeError that says "out of
      memory" on a CUDA device -> :class:`DeviceOutOfMemoryError` (the
      driver retries once with half the batch size);
    * a RuntimeError that marks a CUDA, cuDNN or cuBLAS failure ->
      :class:`DeviceFailedError` (the driver treats the worker as lost).
    """
    import torch

    if not isinstance(error, RuntimeError):
        return None
    device = torch.device(device)
    text = str(error)
    detail = text.strip().splitlines()[0][:300] if text.strip() else type(error).__name__
    if isinstance(error, torch.cuda.OutOfMemoryError) or (device.type == "cuda" and "out of memory" in text):
        desc = _describe_safely(device)
        return DeviceOutOfMemoryError(model, batch_size, desc.kind, desc.total_memory, phase=phase, detail=detail)
    if any(mark in text for mark in _DEVICE_FAILURE_MARKS):
        return DeviceFailedError(_describe_safely(device).kind, detail)
    return None


def _describe_safely(device: Any) -> DeviceDescription:
    """:func:`describe_device` for an error message: a device that has just
    failed may not answer, and the message must still be built."""
    try:
        return describe_device(device)
    except Exception:  # noqa: BLE001 - the original error matters, not this one
        return DeviceDescription(str(device), None)


def release_device_memory(device: Any) -> None:
    """Give the CUDA caching allocator's free blocks back after an out of
    memory, so the retry (or the next unit) starts from an empty cache."""
    import torch

    if torch.device(device).type == "cuda" and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
