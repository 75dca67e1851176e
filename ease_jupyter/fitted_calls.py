"""What a user's fitted scikit-learn model or trained torch net does after
training, run in a child process of ``user_sandbox``
(``service/own_model_calls.py`` sends the calls): ``predict`` for ``infer``,
``predict_proba`` and ``classes_`` for the suspicion scores, and the
conversion of ``export``; for a net, her factory and its checkpoint loaded,
``forward`` on a request's rows, and ``export``'s tracing.

Each function takes the model's stored bytes (the job's artifact, a
cloudpickle) and loads them here, in the child, so that her classes'
``__setstate__`` runs where it can be killed too. The child keeps the last
model it loaded: a request's several calls load it once.

Every reply is data (``returns="array"``: numbers the parent loads
without pickle): the parent may be the service process, and an unpickled
reply would run whatever code her objects' pickles name there. ``export``'s
file comes back as bytes behind a small JSON header (``packed``).

Imports only the standard library at import time: a child starts with it
and ``user_sandbox`` alone.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import struct
from dataclasses import dataclass
from typing import Any

_LOADED: dict[str, Any] = {}  # digest -> the model or net: the last one loaded in this child


def load_fitted(data: bytes) -> Any:
    """The fitted model from its stored bytes (loaded once per child)."""
    import cloudpickle  # noqa: F401 - a model holding classes pickled by value needs it to load

    digest = hashlib.sha256(data).hexdigest()
    if digest not in _LOADED:
        _LOADED.clear()
        _LOADED[digest] = pickle.loads(data)
    return _LOADED[digest]


def _rows(X: Any) -> Any:
    """A table task's DataFrame as it is; an array task's examples flattened."""
    return X.reshape(len(X), -1) if hasattr(X, "reshape") and not hasattr(X, "columns") else X


def fitted_predict(data: bytes, X: Any) -> Any:
    return load_fitted(data).predict(_rows(X))


def fitted_proba(data: bytes, X: Any) -> Any:
    """``predict_proba``'s rows, or an empty array where the model has none
    (``hasattr`` is False where scikit-learn's ``available_if`` hides it, e.g.
    SVC's without ``probability``); an AttributeError her ``predict_proba``
    raises is her error, not a missing method."""
    import numpy as np

    model = load_fitted(data)
    if not hasattr(model, "predict_proba"):
        return np.zeros((0,))
    return model.predict_proba(_rows(X))


def fitted_classes(data: bytes, n_columns: int) -> Any:
    """The class of each ``predict_proba`` column (``classes_``; 0..n-1 where it has none)."""
    import numpy as np

    return np.asarray(getattr(load_fitted(data), "classes_", np.arange(n_columns)))


_LENGTH = struct.Struct("<Q")  # the JSON header's length, ahead of it in a packed reply


def packed(header: dict[str, Any], data: bytes = b"") -> Any:
    """``header`` (JSON) and ``data`` as one uint8 array: a reply the parent reads without unpickling."""
    import numpy as np

    head = json.dumps(header).encode()
    return np.frombuffer(_LENGTH.pack(len(head)) + head + data, dtype=np.uint8)


def unpacked(reply: Any) -> tuple[dict[str, Any], bytes]:
    """(header, data) of a ``packed`` reply; ValueError if it is not one."""
    raw = reply.tobytes() if getattr(reply, "dtype", None) is not None and reply.dtype.name == "uint8" else None
    if raw is None or len(raw) < _LENGTH.size:
        raise ValueError("expected a packed reply (uint8: header length, JSON header, data)")
    (size,) = _LENGTH.unpack(raw[:_LENGTH.size])
    header = json.loads(raw[_LENGTH.size:_LENGTH.size + size])
    if not isinstance(header, dict):
        raise ValueError("expected a JSON object as a packed reply's header")
    return header, raw[_LENGTH.size + size:]


def _artifact_reply(convert: Any) -> Any:
    """``convert()``'s artifact (its ONNX outputs read from the graph) packed
    as data; a ``DataError`` (a format this model cannot take) packed as its
    field, found and expected, for the parent to raise again."""
    from .errors import DataError
    from .service.export import with_onnx_outputs

    try:
        artifact = with_onnx_outputs(convert())
    except DataError as error:
        return packed({"error": {"field": str(error.field), "found": str(error.found),
                                 "expected": str(error.expected)}})
    return packed({"format": artifact.format, "inputs": artifact.inputs, "outputs": artifact.outputs,
                   "preprocessing": artifact.preprocessing}, artifact.data)


def fitted_export(data: bytes, fmt: str, inputs: Any, classification: bool) -> Any:
    """``export.sklearn_artifact`` of the model, ``packed``."""
    from .service.export import sklearn_artifact

    return _artifact_reply(lambda: sklearn_artifact(load_fitted(data), fmt, inputs, classification))


# -- a user's trained torch net --------------------------------------------------------------------


@dataclass(frozen=True)
class TrainedNet:
    """What rebuilds a user's trained net in the child: her factory's
    cloudpickle, the options of the config that won, one example's input
    and output shapes, and that config's checkpoint (``units.load_checkpoint``'s bytes)."""

    code: bytes
    checkpoint: bytes
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    options: dict[str, Any]

    def key(self) -> str:
        parts = (self.code, self.checkpoint, repr((self.input_shape, self.output_shape, sorted(self.options.items()))))
        return hashlib.sha256(b"\0".join(p if isinstance(p, bytes) else p.encode() for p in parts)).hexdigest()


def load_net(parts: TrainedNet) -> Any:
    """Her ``nn.Module`` with the checkpoint's weights, in eval mode (built
    once per child): ``factory(input_shape, output_shape, **options)``, its
    weights loaded as the training wrapper (``user_models.user_net``) saved
    them, under ``net.``."""
    import torch

    from .execution.units import load_checkpoint
    from .user_sandbox import load_code

    key = parts.key()
    if key not in _LOADED:
        _LOADED.clear()
        net = load_code(parts.code)(parts.input_shape, parts.output_shape, **parts.options)
        if not isinstance(net, torch.nn.Module):
            raise TypeError(f"the factory returned a {type(net).__name__}, expected a torch nn.Module")
        holder = torch.nn.Module()
        holder.net = net
        load_checkpoint(holder, None, parts.checkpoint)
        _LOADED[key] = net.eval()
    return _LOADED[key]


def net_loaded(parts: TrainedNet) -> int:
    """Build and load her net (a call of its own, so that its time names the
    build); its number of parameters, a number the parent reads as data."""
    return int(sum(p.numel() for p in load_net(parts).parameters()))


def net_forward(parts: TrainedNet, X: Any, batch: int = 4096) -> Any:
    """Her net's outputs on ``X`` (float32 rows), in batches, as one numpy
    array; a batch whose output is not ``(rows, *output_shape)`` comes back
    as it is, for the parent to name what it found."""
    import numpy as np
    import torch

    net, parts_out = load_net(parts), []
    with torch.no_grad():
        for start in range(0, len(X), batch):
            rows = torch.as_tensor(X[start:start + batch])
            out = net(rows)
            out = out.detach().cpu().numpy() if isinstance(out, torch.Tensor) else np.asarray(out)
            if out.shape != (len(rows), *parts.output_shape):
                return out
            parts_out.append(out)
    return np.concatenate(parts_out) if parts_out else np.zeros((0, *parts.output_shape), dtype=np.float32)


def net_export(parts: TrainedNet, fmt: str, example: Any) -> Any:
    """``export.torch_artifact`` of her trained net (tracing runs her
    ``forward``), ``packed``."""
    from .service.export import torch_artifact

    return _artifact_reply(lambda: torch_artifact(load_net(parts), example, fmt))
