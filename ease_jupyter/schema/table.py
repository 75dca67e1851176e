"""Typed table schemas: the columns a table task takes, and its classes.

A table task's data is a table (a pandas DataFrame, a CSV or Parquet file)
whose columns each have a name and a kind, and a target column. Its
ease.ml program (pvldb §3.1) is the flat ``{input: {Tensor[d]}, output:
{Tensor[k]}}`` with d the number of feature columns and k the number of
classes (``Tensor[1]`` for a numeric target), so template matching gives
it the flat scikit-learn candidates; the columns' encoding (imputation,
one-hot, scaling, text vectors) is part of each candidate's pipeline
(``zoo.preprocess``), fitted on training rows only.

On the wire and in the blob store a table is a column per array, never
pickled objects: numbers and booleans as float64 with NaN for missing,
strings as unicode arrays with a missing mask (``TableData``).

Class names. Labels that are not class indices (strings, or any JSON
scalar) are kept as class names: ``class_indices`` maps them to indices
with the task's class list (the first labels establish it, sorted; later
labels may add names while the task has room for more classes).

Text in Unicode NFC. A string label (``class_name``), a string column's
values (``TableColumn.of``) and column names (``TableData.of``, a declared
``TableSchema``) are normalised to NFC (``nfc``) where they enter, so that
"é" typed on macOS (decomposed, NFD) and on Linux (composed) is one class,
one category, one row and one column. A schema read back as stored
(``from_dict(..., stored=True)``) keeps its names as they were spelt: its
fitted pipelines select their columns by those names. It matches a table's
columns by their NFC names all the same.

Pure: numpy only, no I/O.
"""

from __future__ import annotations

import enum
import json
import math
import re
import unicodedata
from dataclasses import InitVar, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import DataError
from .limits import MAX_CLASSES, program_from_shapes
from .types import Program

__all__ = ["ColumnKind", "Column", "TableSchema", "TableColumn", "TableData", "WIRE_TYPES", "MAX_COLUMNS",
           "class_indices", "class_name", "sorted_names", "nfc", "nfc_strings"]

MAX_COLUMNS = 10_000
MAX_NAME_CHARS = 200


class ColumnKind(str, enum.Enum):
    NUMERIC = "numeric"
    BOOLEAN = "boolean"
    CATEGORICAL = "categorical"
    TEXT = "text"


#: What each kind of column is on the wire: numbers, booleans (both float64
#: with NaN for missing) or strings (unicode with a missing mask).
WIRE_TYPES: Mapping[ColumnKind, str] = {
    ColumnKind.NUMERIC: "number", ColumnKind.BOOLEAN: "bool",
    ColumnKind.CATEGORICAL: "string", ColumnKind.TEXT: "string",
}
_KIND_WORDS = {ColumnKind.NUMERIC: "a numeric column", ColumnKind.BOOLEAN: "a boolean column",
               ColumnKind.CATEGORICAL: "a column of strings (categorical)", ColumnKind.TEXT: "a column of strings (text)"}
_TYPE_WORDS = {"number": "a numeric column", "bool": "a boolean column", "string": "a column of strings"}


@dataclass(frozen=True)
class Column:
    name: str
    kind: ColumnKind


# ---------------------------------------------------------------- text


def nfc(text: str) -> str:
    """``text`` in Unicode NFC: one spelling for text that looks the same
    (macOS writes "é" as "e" and a combining accent, most other systems as
    one character)."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def nfc_strings(values: np.ndarray) -> np.ndarray:
    """A 1-d unicode array with every value in NFC (``values`` itself when all are already)."""
    if values.size == 0 or values.dtype.itemsize == 0:
        return values
    # Only values with a character beyond ASCII can change: found without a Python loop.
    codes = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("=")).view(np.uint32)
    rows = np.flatnonzero((codes.reshape(len(values), -1) > 127).any(axis=1))
    fixed = {i: unicodedata.normalize("NFC", text) for i, text in zip(rows.tolist(), values[rows].tolist())
             if not unicodedata.is_normalized("NFC", text)}
    if not fixed:
        return values
    # a new array, not assignment in place: NFC can make a value longer than the array's width
    items = values.tolist()
    for i, text in fixed.items():
        items[i] = text
    return np.array(items, dtype=str)


# ---------------------------------------------------------------- class names


def class_name(value: Any, field: str) -> Any:
    """A label as a class name: a JSON scalar (str, int, float, bool);
    numpy scalars become Python ones, strings NFC (``nfc``); a missing
    label is an error."""
    name = _scalar_name(value, field)
    return nfc(name) if isinstance(name, str) else name


def _scalar_name(value: Any, field: str) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)) or _pandas_missing(value):
        raise DataError(field, "a missing label", "a class name or index for every example")
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 3.0 and 3 are one class (integer labels read as floats next to missing ones)
    if isinstance(value, (str, bool, int, float)):
        return value
    raise DataError(field, f"a label of type {type(value).__name__}", "a string, number or boolean class name")


def _pandas_missing(value: Any) -> bool:
    # pd.NA (nullable Int64, boolean, string columns) and pd.NaT, known by their
    # type so that this pure layer never imports pandas.
    kind = type(value)
    return kind.__module__.startswith("pandas") and kind.__name__ in ("NAType", "NaTType")


def _name_order(value: Any) -> tuple[int, Any]:
    # Mixed types sort by kind first (booleans, numbers, strings), so the order is total.
    return (0 if isinstance(value, bool) else 1 if isinstance(value, (int, float)) else 2, value)


def sorted_names(values: Sequence[Any]) -> tuple[Any, ...]:
    """Distinct class names in their canonical order."""
    distinct: dict[tuple[type, Any], Any] = {}
    for v in values:
        distinct.setdefault((type(v), v), v)  # (type, value): True and 1 stay two names
    return tuple(sorted(distinct.values(), key=_name_order))


def class_indices(names: Sequence[Any] | None, labels: Any, max_classes: int | None,
                  field: str = "y") -> tuple[np.ndarray, tuple[Any, ...]]:
    """Labels -> (int64 class indices, the class list after them).

    ``names`` is the task's class list (None: none yet, these labels make
    it). Labels not in it are added, in sorted order, while the list stays
    within ``max_classes``; beyond that a label is a DataError naming it
    and the known classes.
    """
    array = np.asarray(labels, dtype=object) if not isinstance(labels, np.ndarray) else labels
    if array.ndim == 2 and array.shape[1] == 1:
        array = array.reshape(-1)
    if array.ndim != 1:
        raise DataError(field, f"labels of shape {array.shape}", "one label per example, shape (n,)")
    if array.size == 0:
        raise DataError(field, "0 examples", "at least one example")
    values = [class_name(v, f"{field}[{i}]") for i, v in enumerate(array.tolist())]
    known = tuple(names or ())
    index = _index_of(known)
    new = sorted_names([v for v in values if (type(v), v) not in index])
    if new:
        limit = max_classes if max_classes is not None else MAX_CLASSES
        if len(known) + len(new) > limit:
            first = next(i for i, v in enumerate(values) if (type(v), v) not in index)
            if known:
                raise DataError(f"{field}[{first}]", f"the unknown label {values[first]!r}",
                                f"one of the task's {len(known)} classes {list(known)!r}")
            raise DataError(field, f"{len(new)} distinct labels", f"at most {limit}, the task's number of classes")
        known = known + new
        index = _index_of(known)
    out = np.fromiter((index[(type(v), v)] for v in values), dtype=np.int64, count=len(values))
    return out, known


def _index_of(names: Sequence[Any]) -> dict[tuple[type, Any], int]:
    # The first index of a name: a class list stored before names were NFC may
    # hold two spellings of one name, which now read alike; labels take the first.
    index: dict[tuple[type, Any], int] = {}
    for i, n in enumerate(names):
        index.setdefault((type(n), n), i)
    return index


# ---------------------------------------------------------------- table data


@dataclass(frozen=True, eq=False)
class TableColumn:
    """One column on the wire: ``type`` is "number", "bool" or "string";
    ``values`` float64 (NaN where missing) or unicode; ``missing`` bool."""

    type: str
    values: np.ndarray
    missing: np.ndarray

    @staticmethod
    def of(name: str, type_: Any, values: Any, missing: Any = None, field: str = "X") -> "TableColumn":
        """A checked column (DataError naming ``field[name]``)."""
        where = f"{field}[{nfc(name) if isinstance(name, str) else name!r}]"
        if type_ not in _TYPE_WORDS:
            raise DataError(f"{where}.type", repr(type_)[:80], "'number', 'bool' or 'string'")
        values = np.asarray(values)
        if values.ndim != 1:
            raise DataError(where, f"values of shape {values.shape}", "one value per row")
        if type_ == "string":
            if values.size and values.dtype.kind != "U":
                raise DataError(where, f"values of dtype {values.dtype}", "unicode strings")
            values = values.astype(str) if values.size == 0 else nfc_strings(values)
            mask = np.zeros(len(values), dtype=bool) if missing is None else np.asarray(missing)
            if mask.shape != values.shape or mask.dtype != bool:
                raise DataError(f"{where}.missing", f"a mask of shape {mask.shape} and dtype {mask.dtype}",
                                f"booleans of shape {values.shape}")
        else:
            if values.dtype.kind not in "biuf":
                raise DataError(where, f"values of dtype {values.dtype}", "numbers (NaN where missing)")
            values = values.astype(np.float64)
            if np.isinf(values).any():
                row = int(np.argmax(np.isinf(values)))
                raise DataError(f"{where}[{row}]", "an infinite value", "a finite number or a missing value")
            mask = np.isnan(values)
            if type_ == "bool" and not np.isin(values[~mask], (0.0, 1.0)).all():
                row = int(np.argmax(~mask & ~np.isin(values, (0.0, 1.0))))
                raise DataError(f"{where}[{row}]", f"the value {values[row]!r}", "True, False or missing")
        return TableColumn(type_, values, mask)


@dataclass(frozen=True, eq=False)
class TableData:
    """A table's feature columns by name, in order, and its row count."""

    columns: Mapping[str, TableColumn]
    n: int

    @staticmethod
    def of(columns: Mapping[str, TableColumn], field: str = "X") -> "TableData":
        """The columns keyed by their names in NFC; two names alike in NFC are a DataError."""
        named: dict[str, TableColumn] = {}
        for name, column in columns.items():
            key = nfc(name)
            if key in named:
                raise DataError(f"{field}[{key!r}]", "a column name used twice (in two Unicode spellings, "
                                "NFC and NFD, that look alike)", "unique column names")
            named[key] = column
        columns = named
        lengths = {name: len(c.values) for name, c in columns.items()}
        if not lengths:
            raise DataError(field, "a table with no columns", "at least one column")
        n = next(iter(lengths.values()))
        for name, length in lengths.items():
            if length != n:
                raise DataError(f"{field}[{name!r}]", f"{length} rows", f"{n}, like the other columns")
        if n == 0:
            raise DataError(field, "0 rows", "at least one row")
        return TableData(columns, n)


# ---------------------------------------------------------------- the schema


@dataclass(frozen=True, eq=False)
class TableSchema:
    """A table task's columns (in order), its target and its classes
    (None for a numeric target: regression).

    Column names and the target are taken in NFC; ``stored=True`` keeps them
    as given (a schema stored before names were NFC: its models' pipelines
    select columns by the stored names). Two schemas are equal when their
    names are, in NFC."""

    columns: tuple[Column, ...]
    target: str
    classes: tuple[Any, ...] | None = None
    stored: InitVar[bool] = False

    def __post_init__(self, stored: bool) -> None:
        if not self.columns:
            raise DataError("table.columns", "no feature columns", "at least one column besides the target")
        if len(self.columns) > MAX_COLUMNS:
            raise DataError("table.columns", f"{len(self.columns)} columns", f"at most {MAX_COLUMNS}")
        for i, column in enumerate(self.columns):
            _check_column_name(column.name, f"table.columns[{i}].name")
        _check_column_name(self.target, "table.target")
        # Names alike in NFC are one name (a stored schema may hold two spellings:
        # it still reads, and ``check`` refuses its feeds).
        spell = (lambda name: name) if stored else nfc
        target = spell(self.target)
        seen: dict[str, int] = {}
        for i, column in enumerate(self.columns):
            key = spell(column.name)
            if key in seen or key == target:
                raise DataError(f"table.columns[{i}].name", _twice(column.name, self.columns, seen.get(key)),
                                "a name used once (and not the target's)")
            seen[key] = i
        if not stored:
            object.__setattr__(self, "columns", tuple(Column(nfc(c.name), c.kind) for c in self.columns))
            object.__setattr__(self, "target", target)
        if self.classes is not None:
            given = tuple(_scalar_name(c, f"table.classes[{i}]") for i, c in enumerate(self.classes))
            if len(given) < 2 or len(given) > MAX_CLASSES or len(sorted_names(given)) != len(given):
                raise DataError("table.classes", f"{len(given)} classes ({len(sorted_names(given))} distinct)",
                                f"2 to {MAX_CLASSES} distinct class names (a target with one value cannot be learnt)")
            names = tuple(nfc(c) if isinstance(c, str) else c for c in self.classes)
            # A schema stored before names were NFC may hold two spellings of one name
            # as two classes: it keeps them as given, so its class indices keep their
            # meaning (labels in either spelling take the first: class_indices).
            if len(sorted_names(names)) == len(names):
                object.__setattr__(self, "classes", names)

    def _key(self) -> tuple[Any, ...]:
        return (tuple((nfc(c.name), c.kind) for c in self.columns), nfc(self.target), self.classes)

    def __eq__(self, other: object) -> bool:
        # A schema stored with NFD names is the one declared again from the same table.
        return self._key() == other._key() if isinstance(other, TableSchema) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def kinds(self) -> dict[str, ColumnKind]:
        return {c.name: c.kind for c in self.columns}

    def program(self) -> Program:
        """The flat ease.ml program of the task: d feature columns in, k
        classes (or one number) out."""
        return program_from_shapes([len(self.columns)], [len(self.classes) if self.classes else 1])

    # -- JSON

    def to_dict(self) -> dict[str, Any]:
        return {"columns": [{"name": c.name, "kind": c.kind.value} for c in self.columns],
                "target": self.target, "classes": None if self.classes is None else list(self.classes)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_dict(data: Any, field: str = "table", stored: bool = False) -> "TableSchema":
        """A schema from its JSON object; ``stored``: as the service stored it
        (names kept as spelt, see the class), else a declaration (names in NFC)."""
        if not isinstance(data, Mapping):
            raise DataError(field, type(data).__name__, "an object with columns, target and classes")
        columns = data.get("columns")
        if not isinstance(columns, list):
            raise DataError(f"{field}.columns", type(columns).__name__, "a list of {name, kind}")
        parsed = []
        for i, column in enumerate(columns):
            if not isinstance(column, Mapping):
                raise DataError(f"{field}.columns[{i}]", type(column).__name__, "an object {name, kind}")
            kind = column.get("kind")
            if kind not in {k.value for k in ColumnKind}:
                raise DataError(f"{field}.columns[{i}].kind", repr(kind)[:80], ", ".join(k.value for k in ColumnKind))
            parsed.append(Column(column.get("name"), ColumnKind(kind)))  # the name is checked below
        classes = data.get("classes")
        if classes is not None and not isinstance(classes, list):
            raise DataError(f"{field}.classes", type(classes).__name__, "a list of class names, or null")
        return TableSchema(tuple(parsed), data.get("target"), None if classes is None else tuple(classes), stored)

    @staticmethod
    def from_json(text: str, field: str = "table", stored: bool = False) -> "TableSchema":
        try:
            data = json.loads(text)
        except ValueError:
            raise DataError(field, "text that is not JSON", "a table schema as JSON") from None
        return TableSchema.from_dict(data, field, stored)

    # -- data

    def check(self, table: TableData, field: str = "X") -> None:
        """DataError naming the first column that is missing, extra, or of
        another type than this schema's. Columns match by their names in NFC
        (``TableData`` keys them so)."""
        seen: set[str] = set()
        for column in self.columns:
            key = nfc(column.name)
            if key in seen:  # a schema stored with two spellings of one name: no table can give both
                raise DataError(f"{field}[{key!r}]", "a task with two columns of this name in two Unicode "
                                "spellings (NFC and NFD)", "a task declared again, with unique column names")
            seen.add(key)
            found = table.columns.get(key)
            if found is None:
                raise DataError(f"{field}[{key!r}]", "no such column",
                                f"{_KIND_WORDS[column.kind]} (the task's columns: {list(self.names)!r})")
            if found.type != WIRE_TYPES[column.kind] and not found.missing.all():
                if found.type == "string" and column.kind is ColumnKind.NUMERIC:
                    raise _strings_for_numbers(f"{field}[{key!r}]", found)
                raise DataError(f"{field}[{key!r}]", _TYPE_WORDS[found.type], _KIND_WORDS[column.kind])
        extra = [name for name in table.columns if name not in seen]
        if extra:
            raise DataError(f"{field}[{extra[0]!r}]", "a column the task does not have",
                            f"only the task's columns {list(self.names)!r}")

    def stored_arrays(self, table: TableData) -> tuple[np.ndarray, ...]:
        """The checked table as the arrays stored for it: one per column in
        schema order (float64, or unicode with "" where missing), then one
        missing mask per string column."""
        self.check(table)
        values, masks = [], []
        for column in self.columns:
            found = table.columns[nfc(column.name)]
            if WIRE_TYPES[column.kind] == "string":
                text = found.values if found.type == "string" else np.full(table.n, "")
                text = np.where(found.missing, "", text) if text.size else text.astype(str)
                values.append(np.ascontiguousarray(text))
                masks.append(found.missing.copy())
            else:
                number = found.values if found.type != "string" else np.full(table.n, np.nan)
                values.append(np.where(found.missing, np.nan, number).astype(np.float64))
        return tuple(values + masks)

    def columns_of(self, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """Stored arrays -> column name -> values as scikit-learn takes them:
        float64 with NaN, or object arrays of str with NaN where missing."""
        strings = [c for c in self.columns if WIRE_TYPES[c.kind] == "string"]
        if len(arrays) != len(self.columns) + len(strings):
            raise DataError("X", f"{len(arrays)} stored arrays", f"{len(self.columns) + len(strings)} for this schema")
        masks = dict(zip((c.name for c in strings), arrays[len(self.columns):]))
        out = {}
        for column, values in zip(self.columns, arrays):
            if column.name in masks:
                objects = values.astype(object)
                objects[np.asarray(masks[column.name], dtype=bool)] = np.nan
                out[column.name] = objects
            else:
                out[column.name] = np.asarray(values, dtype=np.float64)
        return out


def _twice(name: str, columns: Sequence[Column], first: int | None) -> str:
    """What a refused repeated name is: the name, and where two spellings look alike, which column it repeats."""
    if first is None or columns[first].name == name:
        return repr(name)
    return f"{name!r}, the name of column {first} in another Unicode spelling (NFC and NFD look alike)"


# A number written with thousands separators: 12,345 or 1,234,567.5
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")


def _strings_for_numbers(where: str, found: TableColumn) -> DataError:
    """The DataError for strings fed to a numeric column, naming the first
    value that is not a number, and how pandas reads such a CSV as numbers."""
    present = np.flatnonzero(~found.missing).tolist()
    row = next((i for i in present if not _is_number(found.values[i])), present[0])
    value = str(found.values[row])
    shown = repr(value if len(value) <= 40 else value[:40] + "...")
    if _THOUSANDS.fullmatch(value.strip()):
        hint = "for numbers with thousands separators, read the CSV with thousands=','"
    else:
        hint = f"if {shown} marks a missing value, read the CSV with na_values=[{shown}]"
    return DataError(where, f"a column of strings (row {row}: {shown})",
                     f"a numeric column ({hint}), or declare the column categorical")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_column_name(name: Any, field: str) -> None:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise DataError(field, repr(name)[:80], f"a non-empty column name of at most {MAX_NAME_CHARS} characters")
