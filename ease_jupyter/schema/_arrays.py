"""Turning array-likes into checked float32 numpy arrays.

Accepted containers: numpy arrays, torch tensors (``.detach().cpu().numpy()``,
duck-typed so torch is never imported here), pandas DataFrame/Series, nested
Python lists and anything ``numpy.asarray`` understands. Accepted element
types: bool, integers and floats. Strings, complex numbers, dates, ``None``
and other objects are rejected with the position of the first one.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..errors import DataError
from ._paths import Path, format_shape

_NUMERIC_KINDS = "biuf"  # bool, signed, unsigned, float
_KIND_NAMES = {
    "c": "complex numbers",
    "U": "strings",
    "S": "byte strings",
    "M": "dates",
    "m": "time deltas",
    "V": "structured records",
}
NUMBERS = "numbers (bool, int or float)"


@dataclass(frozen=True)
class Where:
    """Where an array sits, for error messages.

    ``batched`` arrays have the example index on axis 0, so an error inside
    them names the example (``X[5]``, or ``X[5].img`` for a column ``key``)
    and gives the rest of the index as a position.
    """

    path: Path
    key: int | str | None = None
    batched: bool = False

    def whole(self) -> str:
        if self.key is None:
            return str(self.path)
        return str((Path("[:]", self.path) if self.batched else self.path).key(self.key))

    def at(self, index: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
        """``(field, rest of the index)`` for the element at ``index``."""
        if not self.batched or not index:
            return self.whole(), index
        path = self.path.index(index[0])
        return str(path if self.key is None else path.key(self.key)), index[1:]

    def example(self, i: int) -> str:
        return self.at((i,))[0]


def _position(rest: tuple[int, ...]) -> str:
    return f" at position {format_shape(rest)}" if rest else ""


def native(obj):
    """Unwrap torch tensors and pandas objects into numpy (or leave as is)."""
    module = type(obj).__module__ or ""
    if module.startswith("torch") and hasattr(obj, "detach"):
        tensor = obj.detach()
        if str(getattr(tensor, "dtype", "")) == "torch.bfloat16":  # numpy has no bfloat16
            tensor = tensor.float()
        return tensor.cpu().numpy()
    if module.startswith("pandas"):
        import pandas as pd  # lazy: pandas is only needed when the user passes it

        if isinstance(obj, pd.DataFrame):
            if obj.shape[1] == 1 and obj.dtypes.iloc[0] == object:
                return native(obj.iloc[:, 0])  # one column of array cells
            if all(_number_like(pd, t) for t in obj.dtypes):
                # float64 keeps nullable ints' NA visible as NaN instead of objects, and a bool
                # column beside floats numeric (to_numpy alone gives an object array)
                return obj.to_numpy(dtype=np.float64, na_value=np.nan)
            return obj.to_numpy()
        if isinstance(obj, pd.Series):
            if _number_like(pd, obj.dtype):
                return obj.to_numpy(dtype=np.float64, na_value=np.nan)
            return obj.to_numpy()
    return obj


def _number_like(pd, dtype) -> bool:
    """Real numbers or booleans, numpy's, nullable (``Int64``, ``boolean``) or pyarrow's."""
    if isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_complex_dtype(dtype):
        return False
    return pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype)


def _describe(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, (str, bytes)):
        return f"a string {value!r:.40}"
    if isinstance(value, complex):
        return f"a complex number {value!r}"
    return f"a {type(value).__name__}"


def _is_real(value) -> bool:
    return isinstance(value, (numbers.Real, np.bool_)) and not isinstance(value, (complex, np.complexfloating))


def _is_nested(value) -> bool:
    return isinstance(value, (list, tuple, np.ndarray)) or hasattr(value, "__array__")


def to_array(obj, where: Where) -> np.ndarray:
    """A numeric numpy array (bool, int or float) or a DataError."""
    if isinstance(obj, (str, bytes)):
        raise DataError(where.whole(), _describe(obj), f"an array of {NUMBERS}")
    try:
        obj = native(obj)
    except (RuntimeError, TypeError) as exc:  # e.g. sparse or meta torch tensors
        raise DataError(where.whole(), f"a {type(obj).__name__} that cannot be read ({exc})", "a dense array") from None
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        try:
            arr = np.asarray(obj)
        except (ValueError, TypeError):
            _raise_ragged(obj, where)
            raise  # pragma: no cover - _raise_ragged always raises
    if arr.dtype.kind in "US":
        # numpy turned everything into text because of some strings: point at
        # the first element that is not a number
        _from_objects(arr.astype(object) if isinstance(obj, np.ndarray) else np.asarray(obj, dtype=object), where)
    if arr.dtype == object:
        arr = _from_objects(arr, where)
    if arr.dtype.kind not in _NUMERIC_KINDS:
        found = _KIND_NAMES.get(arr.dtype.kind, f"dtype {arr.dtype}")
        raise DataError(where.whole(), f"{found} (dtype {arr.dtype})", f"{NUMBERS}")
    return arr


def _raise_ragged(obj, where: Where, index: tuple[int, ...] = ()) -> None:
    """Find the first element whose shape differs from its first sibling."""
    if not isinstance(obj, (list, tuple)):
        obj = list(obj) if _is_nested(obj) else obj
    shapes = []
    for i, item in enumerate(obj):
        try:
            shapes.append(np.shape(native(item)))
        except (ValueError, TypeError):
            _raise_ragged(item, where, index + (i,))
        if shapes[-1] != shapes[0] or item is None or isinstance(item, (str, bytes)):
            field, rest = where.at(index + (i,))
            if item is None or isinstance(item, (str, bytes)):
                raise DataError(field, _describe(item) + _position(rest), NUMBERS)
            first_field, first_rest = where.at(index + (0,))
            raise DataError(
                field,
                f"shape {format_shape(shapes[-1])}{_position(rest)}",
                f"shape {format_shape(shapes[0])} like {first_field}{_position(first_rest)} "
                "(nested lists must be rectangular)",
            )
    raise DataError(where.whole(), "nested lists that numpy cannot read", "a rectangular array of numbers")


def _from_objects(arr: np.ndarray, where: Where) -> np.ndarray:
    """Object arrays: stack array-valued cells, or check every cell is a real number."""
    flat = arr.reshape(-1)
    if flat.size and _is_nested(flat[0]):
        cells = []
        for i, cell in enumerate(flat):
            index = np.unravel_index(i, arr.shape) if arr.ndim else ()
            field, rest = where.at(tuple(int(j) for j in index))
            cell_path = Path(field)
            for j in rest:
                cell_path = cell_path.index(j)
            cell_where = Where(cell_path)
            cells.append(to_array(cell, cell_where))
            if cells[-1].shape != cells[0].shape:
                raise DataError(
                    cell_where.whole(),
                    f"shape {format_shape(cells[-1].shape)}",
                    f"shape {format_shape(cells[0].shape)} like the first cell",
                )
        return np.stack(cells).reshape(arr.shape + cells[0].shape)
    for i, value in enumerate(flat):
        if not _is_real(value):
            index = tuple(int(j) for j in np.unravel_index(i, arr.shape)) if arr.ndim else ()
            field, rest = where.at(index)
            raise DataError(field, _describe(value) + _position(rest), NUMBERS)
    try:
        return arr.astype(np.float64)
    except OverflowError:
        raise DataError(where.whole(), "an integer too large for a float", NUMBERS) from None


def fit_shape(arr: np.ndarray, where: Where, shape: tuple[int, ...], lead: tuple[str, ...] = ()) -> np.ndarray:
    """Check ``arr.shape == (*lead, *shape)`` where ``lead`` axes are free
    (``n`` examples, ``T`` steps). A trailing dimension of size 1 may be left
    out (``(n, 8, 8)`` for ``Tensor[8,8,1]``, ``(n,)`` for ``Tensor[1]``); it
    is added back."""
    k = len(lead)
    if arr.ndim == k + len(shape) and arr.shape[k:] == shape:
        return arr
    if shape[-1] == 1 and arr.ndim == k + len(shape) - 1 and arr.shape[k:] == shape[:-1]:
        return arr.reshape(arr.shape + (1,))
    expected = f"shape {format_shape(lead + shape)}"
    if shape[-1] == 1:
        expected += f" or {format_shape(lead + shape[:-1])} (a trailing dimension of size 1 may be left out)"
    if lead:
        expected += " with " + " and ".join(_LEAD_NAMES.get(a, a) for a in lead)
        if arr.shape == shape:
            expected += "; this looks like a single example: add the example axis first (e.g. X[None])"
    raise DataError(where.whole(), f"shape {format_shape(arr.shape)}", expected)


_LEAD_NAMES = {"n": "n the number of examples", "T": "T the number of steps"}


def to_float32(arr: np.ndarray, where: Where) -> np.ndarray:
    """A read-only float32 copy, or a DataError naming the first NaN/inf."""
    if arr.dtype.kind == "f":
        check_finite(arr, where)
    out = np.array(arr, dtype=np.float32)
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 4:
        bad = ~np.isfinite(out)
        if bad.any():  # finite in float64, but beyond float32's range
            index = tuple(int(j) for j in np.argwhere(bad)[0])
            field, rest = where.at(index)
            raise DataError(
                field,
                f"{arr[index]!r}{_position(rest)}, too large for float32",
                f"values with magnitude below {float(np.finfo(np.float32).max):.3g}",
            )
    out.flags.writeable = False
    return out


def check_finite(arr: np.ndarray, where: Where) -> None:
    bad = ~np.isfinite(arr)
    count = int(np.count_nonzero(bad))
    if count:
        index = tuple(int(j) for j in np.argwhere(bad)[0])
        field, rest = where.at(index)
        value = arr[index]
        raise DataError(
            field,
            f"{count} NaN or inf value{'s' if count > 1 else ''} in {where.whole()}, "
            f"the first ({value}) here{_position(rest)}",
            "finite numbers",
        )
