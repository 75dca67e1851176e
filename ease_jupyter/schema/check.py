"""Checking data against an ease.ml program (pvldb §3.1: ``feed`` takes
input/output pairs whose shapes the program declares).

``check_data(program, X, y)`` validates and normalises; every problem raises
:class:`~ease_jupyter.errors.DataError` naming the path (``X``, ``y[7]``,
``X[3].next.next[0]``), what was found and what was expected.

What ``X`` (and a non-classification ``y``) may be, by data type, and what
``CheckedData`` holds for it:

=============================  ===============================================  ====================================
data type                      accepted                                         normalised to
=============================  ===============================================  ====================================
one tensor ``S``, no rec       array-like ``(n, *S)``; ``{key: array}``;        float32 ``(n, *S)``
                               a list of records
k > 1 tensors, no rec          ``{key: array}`` / DataFrame with those          tuple of k float32 ``(n, *S_j)``
                               columns; a tuple/list of k arrays; a list of
                               records
one tensor ``S``, one rec      array-like ``(n, T, *S)``; a list whose          float32 ``(n, T, *S)`` when all
field (a chain, e.g. a time    items are arrays ``(T_i, *S)`` or chain          chains have the same length, else a
series)                        records                                          list of float32 ``(T_i, *S)``
anything else recursive        a list of records                                a list of normalised records
(trees, multi-tensor chains)
=============================  ===============================================  ====================================

Keys and records are described in :mod:`ease_jupyter.schema._records`: a
tensor's key is its name, or its position (``0``, ``1``, ...) when unnamed.
Normalised records are dicts with those canonical keys, float32 arrays and
child dicts or None for every recursive field.

One convenience: a trailing dimension of size 1 may be left out, so
``Tensor[8,8,1]`` accepts ``(n, 8, 8)`` and ``Tensor[1]`` accepts ``(n,)``.
Otherwise shapes are strict (no flattening or reshaping).

Classification (``program.num_classes`` is D): ``y`` holds class indices
(ints, whole floats or bools) of shape ``(n,)`` or ``(n, 1)``, or one-hot rows
``(n, D)`` (exactly one 1 per row, the rest 0). It is normalised to int64
``(n,)``.

All arrays in ``CheckedData`` are fresh read-only copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError
from ._arrays import Where, check_finite, fit_shape, native, to_array, to_float32
from ._paths import Path, format_shape
from ._records import MAX_DEPTH, Keys, chain_steps, walk
from .types import DataType, Program

__all__ = ["CheckedData", "check_data", "check_inputs", "MAX_DEPTH"]


@dataclass(frozen=True, eq=False)
class CheckedData:
    """Data that fits a program, normalised (see the module docstring).

    Attributes:
        n: number of examples.
        X: the inputs.
        y: the outputs (int64 class indices for classification), or None.
    """

    n: int
    X: Any
    y: Any = None


def check_data(program: Program, X, y=None) -> CheckedData:
    """Check ``X`` (and ``y`` if given) against ``program`` and normalise them.

    Raises:
        DataError: the first problem found, with its path.
        TypeError: if ``program`` is not a Program.
    """
    if not isinstance(program, Program):
        raise TypeError(f"check_data() needs a Program (see schema.parse), not {type(program).__name__}")
    x, n = _check_object(program.input, X, Path("X"))
    if y is None:
        return CheckedData(n=n, X=x)
    if program.num_classes is not None:
        labels = _check_labels(program, y, n)
    else:
        labels, _ = _check_object(program.output, y, Path("y"), n_expected=n)
    return CheckedData(n=n, X=x, y=labels)


def check_inputs(program: Program, X) -> CheckedData:
    """Check inputs alone (``infer``); ``CheckedData.y`` is None."""
    return check_data(program, X)


# -- lengths ------------------------------------------------------------------


def _check_length(n: int, path: Path, n_expected: int | None, reference: str = "one per example of X") -> None:
    if n_expected is not None and n != n_expected:
        raise DataError(str(path), f"{n} example{'s' * (n != 1)}", f"{n_expected}, {reference}")
    if n == 0:
        raise DataError(str(path), "0 examples", "at least one example")


def _leading(arr: np.ndarray, where: Where, n_expected: int | None, reference: str = "one per example of X") -> int:
    """Check the example axis of a batched array before its shape, so that
    empty data and mismatched lengths get their own clear errors."""
    if arr.ndim == 0:
        raise DataError(where.whole(), f"a single number ({arr.item()!r})", "an array with one entry per example")
    _check_length(arr.shape[0], where.path if where.key is None else Path(where.whole()), n_expected, reference)
    return arr.shape[0]


# -- containers ---------------------------------------------------------------


def _sequence(data) -> list | None:
    """A list of examples if ``data`` is one (list, tuple, 1-D object array or
    object Series), else None."""
    if isinstance(data, (list, tuple)):
        return list(data)
    if type(data).__module__.startswith("pandas") and not hasattr(data, "columns"):
        data = native(data)  # a Series (of records, say); DataFrames are tables, not lists
    if isinstance(data, np.ndarray) and data.dtype == object and data.ndim == 1:
        return list(data)
    return None


def _is_record_list(data) -> bool:
    items = _sequence(data)
    return bool(items) and isinstance(items[0], Mapping)


def _is_dataframe(data) -> bool:
    return type(data).__module__.startswith("pandas") and hasattr(data, "columns")


def _check_object(data_type: DataType, data, path: Path, n_expected: int | None = None):
    """Normalise a batch of objects of ``data_type``; returns (value, n)."""
    single = len(data_type.tensors) == 1
    if isinstance(data, (str, bytes)) or data is None:
        raise DataError(str(path), "None" if data is None else "a string", "a batch of examples (an array or a list)")
    if not data_type.recursive:
        if _is_record_list(data):
            return _flat_records(data_type, _sequence(data), path, n_expected)
        if isinstance(data, Mapping) or (not single and _is_dataframe(data)):
            columns = data if isinstance(data, Mapping) else {c: data[c] for c in data.columns}
            return _columns(data_type, columns, path, n_expected)
        if not single:
            if isinstance(data, (list, tuple)):
                if len(data) != len(data_type.tensors):
                    raise DataError(
                        str(path),
                        f"a {type(data).__name__} of {len(data)} arrays",
                        f"{len(data_type.tensors)} arrays, one per tensor field ({Keys(data_type).describe(True)})",
                    )
                return _columns(data_type, dict(enumerate(data)), path, n_expected, by_position=True)
            raise DataError(
                str(path),
                f"a {type(data).__name__}",
                f"one array per tensor field: a dict with {Keys(data_type).describe(True)}, "
                f"a tuple of {len(data_type.tensors)} arrays, or a list of records",
            )
        return _batch(data_type, data, path, n_expected)
    if single and len(data_type.recursive) == 1:
        return _chains(data_type, data, path, n_expected)
    return _tree_records(data_type, data, path, n_expected)


def _batch(data_type: DataType, data, path: Path, n_expected):
    """One tensor, no recursion: an array-like ``(n, *S)``."""
    where = Where(path, batched=True)
    arr = to_array(data, where)
    n = _leading(arr, where, n_expected)
    arr = fit_shape(arr, where, data_type.tensors[0].shape, lead=("n",))
    return to_float32(arr, where), n


def _columns(data_type: DataType, columns: Mapping, path: Path, n_expected, by_position: bool = False):
    keys = Keys(data_type)
    if by_position:  # positions are canonical only for unnamed tensors
        columns = {k: columns[i] for i, k in enumerate(keys.tensors)}
    fields = keys.split(columns, path, tensors_only=True)
    out, n, reference = [], n_expected, "one per example of X"
    for key, tensor in keys.tensors.items():
        where = Where(path, key=key, batched=True)
        arr = to_array(fields[key], where)
        n = _leading(arr, where, n, reference)
        reference = f"like {where.whole()}"
        out.append(to_float32(fit_shape(arr, where, tensor.shape, lead=("n",)), where))
    return (out[0] if len(out) == 1 else tuple(out)), n


def _flat_records(data_type: DataType, items: list, path: Path, n_expected):
    """A list of records of a nonrecursive type, stacked into column arrays."""
    _check_length(len(items), path, n_expected)
    keys = Keys(data_type)
    records = [walk(keys, item, path.index(i)) for i, item in enumerate(items)]
    out = []
    for key in keys.tensors:
        stacked = np.stack([r[key] for r in records])
        stacked.flags.writeable = False
        out.append(stacked)
    return (out[0] if len(out) == 1 else tuple(out)), len(items)


def _chains(data_type: DataType, data, path: Path, n_expected):
    """One tensor and one recursive field: chains such as time series."""
    shape = data_type.tensors[0].shape
    items = _sequence(data)
    if items is None and isinstance(data, Mapping):
        raise DataError(str(path), "a single record", "a list of records, one per example")
    if items is None:  # one array (n, T, *S) of equal-length chains
        where = Where(path, batched=True)
        arr = to_array(data, where)
        n = _leading(arr, where, n_expected)
        arr = fit_shape(arr, where, shape, lead=("n", "T"))
        _check_steps(arr.shape[1], where.whole())
        return to_float32(arr, where), n
    _check_length(len(items), path, n_expected)
    keys = Keys(data_type)
    key, field = next(iter(keys.tensors)), data_type.recursive[0]
    chains = []
    for i, item in enumerate(items):
        here = path.index(i)
        if isinstance(item, Mapping) or item is None:
            steps = chain_steps(walk(keys, item, here), key, field)
            chain = np.stack(steps)
        else:  # an array-like (T_i, *S)
            where = Where(here)
            arr = fit_shape(to_array(item, where), where, shape, lead=("T",))
            _check_steps(arr.shape[0], str(here))
            chain = to_float32(arr, Where(here, batched=False))
        chain.flags.writeable = False
        chains.append(chain)
    if len({c.shape[0] for c in chains}) == 1:
        stacked = np.stack(chains)
        stacked.flags.writeable = False
        return stacked, len(chains)
    return chains, len(chains)


def _check_steps(steps: int, field: str) -> None:
    if steps == 0:
        raise DataError(field, "a chain of 0 steps", "at least one step")
    if steps > MAX_DEPTH:
        raise DataError(field, f"a chain of {steps} steps", f"at most {MAX_DEPTH} steps")


def _tree_records(data_type: DataType, data, path: Path, n_expected):
    """Any other recursive type: a list of records, kept as records."""
    items = _sequence(data)
    if items is None:
        found = "a single record" if isinstance(data, Mapping) else f"a {type(data).__name__}"
        raise DataError(str(path), found, f"a list of records (one per example) with {Keys(data_type).describe()}")
    _check_length(len(items), path, n_expected)
    keys = Keys(data_type)
    return [walk(keys, item, path.index(i)) for i, item in enumerate(items)], len(items)


# -- classification labels ----------------------------------------------------


def _check_labels(program: Program, y, n: int) -> np.ndarray:
    """Class indices or one-hot rows -> int64 ``(n,)`` indices in [0, D)."""
    classes = program.num_classes
    path = Path("y")
    if isinstance(y, Mapping):  # {name: labels} for a named output tensor
        y = Keys(program.output).split(y, path, tensors_only=True)[next(iter(Keys(program.output).tensors))]
    where = Where(path, batched=True)
    arr = to_array(y, where)
    _leading(arr, where, n)
    expected = f"class indices of shape {format_shape((n,))} or one-hot rows of shape {format_shape((n, classes))}"
    if arr.ndim == 2 and arr.shape[1] == classes:
        return _one_hot(arr, where, classes)
    if not (arr.ndim == 1 or (arr.ndim == 2 and arr.shape[1] == 1)):
        raise DataError("y", f"shape {format_shape(arr.shape)}", expected)
    labels = arr.reshape(-1)
    if labels.dtype.kind == "f":
        check_finite(labels, where)
        fractional = labels != np.floor(labels)
        if fractional.any():
            i = int(np.argmax(fractional))
            raise DataError(f"y[{i}]", f"the non-integer label {labels[i].item()!r}", f"a whole-number class index in [0, {classes})")
    out_of_range = (labels < 0) | (labels >= classes)
    if out_of_range.any():
        i = int(np.argmax(out_of_range))
        count = int(np.count_nonzero(out_of_range))
        value = labels[i].item()
        value = int(value) if isinstance(value, float) else value
        raise DataError(
            f"y[{i}]",
            f"the label {value!r} ({count} label{'s' * (count > 1)} out of range in y)",
            f"a class index in [0, {classes})",
        )
    out = labels.astype(np.int64)
    out.flags.writeable = False
    return out


def _one_hot(arr: np.ndarray, where: Where, classes: int) -> np.ndarray:
    if arr.dtype.kind == "f":
        check_finite(arr, where)
    valid = ((arr == 0) | (arr == 1)).all(axis=1) & ((arr == 1).sum(axis=1) == 1)
    if not valid.all():
        i = int(np.argmin(valid))
        row = np.array2string(np.asarray(arr[i], dtype=np.float64), precision=3, threshold=12, separator=", ")
        raise DataError(
            f"y[{i}]",
            f"the row {row}",
            f"a one-hot row of length {classes} (exactly one 1, the rest 0); pass class indices for other labels",
        )
    out = np.argmax(arr, axis=1).astype(np.int64)
    out.flags.writeable = False
    return out
