"""A task's table schema and class names, as the service stores them.

Both are reserved task tags written by the service only (a user's
``PUT /tags`` cannot set ``easeml.*`` keys): ``easeml.table`` holds a table
task's ``TableSchema`` as JSON, ``easeml.classes`` the JSON list of a
classification task's class names (table or tensor task) once it has any.
Everything else reads them through ``table_schema`` and ``class_names``.
A third, ``easeml.image_files``, is set once a feed whose rows the client
read from image files (the feed body's ``origin``) is stored: the model
card's "image files" step is true of that task alone (``fed_image_files``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..datasets import program_of
from ..errors import AlreadyExistsError, DataError
from ..schema import CheckedData, check_data, parse
from ..schema.table import TableData, TableSchema, class_indices, nfc
from ..store import Store, Task
from ..zoo import Candidate
from ..zoo.preprocess import TableBuilder, to_frame

TABLE_TAG = "easeml.table"
CLASSES_TAG = "easeml.classes"
IMAGE_FILES_TAG = "easeml.image_files"

__all__ = ["TABLE_TAG", "CLASSES_TAG", "IMAGE_FILES_TAG", "fed_image_files", "table_schema", "class_names",
           "PreparedFeed", "prepare_feed", "checked_inputs", "estimator_inputs", "table_program",
           "store_table_schema", "check_same_table", "names_json", "fields_in", "table_job"]


def table_schema(store: Store, task: Task) -> TableSchema | None:
    """The task's table schema; None for a tensor task."""
    return schema_in(store.tags("task", task.id))


def schema_in(tags: Any) -> TableSchema | None:
    """The table schema from a task's tags already read (None: a tensor task),
    its names as stored: a task's fitted pipelines select columns by them."""
    text = tags.get(TABLE_TAG)
    return None if text is None else TableSchema.from_json(text, field=TABLE_TAG, stored=True)


def names_in(tags: Any) -> list[Any] | None:
    """The class names from a task's tags already read (None: none yet),
    strings in NFC as labels are mapped (names stored before labels were
    normalised read so too, and answer in NFC)."""
    text = tags.get(CLASSES_TAG)
    return None if text is None else [nfc(n) if isinstance(n, str) else n for n in json.loads(text)]


def class_names(store: Store, task: Task) -> list[Any] | None:
    """The task's class names, index order; None while it has none (a
    regression task, or one fed class indices only)."""
    return names_in(store.tags("task", task.id))


def names_json(store: Store, task: Task) -> dict[str, Any]:
    """``{"class_names": [...] or None}``, for the JSON of a task, its best model and its predictions."""
    return {"class_names": class_names(store, task)}


# ---------------------------------------------------------------- declaring


def table_program(body: dict[str, Any]) -> tuple[str, TableSchema] | None:
    """(program text, schema) of a ``POST /tasks`` body with ``table``;
    None without one."""
    raw = body.get("table")
    if raw is None:
        return None
    if body.get("program") is not None or body.get("input") is not None or body.get("output") is not None:
        raise DataError("table", "a table schema with a program or shapes", "one of them")
    schema = TableSchema.from_dict(raw)
    return str(schema.program()), schema


def store_table_schema(store: Store, task: Task, schema: TableSchema) -> None:
    """Tag a new table task with its schema (and class names)."""
    store.set_tag("task", task.id, TABLE_TAG, schema.to_json())
    if schema.classes is not None:
        store.set_tag("task", task.id, CLASSES_TAG, json.dumps(list(schema.classes)))


def check_same_table(store: Store, task: Task, schema: TableSchema) -> None:
    """Opening a table task again with a schema: it must be the task's own."""
    existing = table_schema(store, task)
    if existing != schema:
        have = "no table schema" if existing is None else f"the table schema {existing.to_json()}"
        raise AlreadyExistsError(f"task {task.name!r} exists with {have}, not {schema.to_json()}; "
                                 f"open it by name, or declare the new table under another name")


# ---------------------------------------------------------------- feeding


@dataclass
class PreparedFeed:
    """What a feed stores: X (a table's column arrays as ``CheckedData``,
    or the inputs as given), y as class indices where the task names its
    classes, and ``commit()`` to run once the feed is accepted, before its
    version is written (it records class names the feed added)."""

    X: Any
    y: Any
    new_names: list[Any] | None = None
    _commit: Callable[[], None] = field(default=lambda: None, repr=False)

    def commit(self) -> None:
        self._commit()


def fed_image_files(tags: Mapping[str, str]) -> bool:
    """Whether a feed of rows the client read from image files (an image
    folder) was stored for the task, from its tags already read."""
    return IMAGE_FILES_TAG in tags


def _num_classes(task: Task) -> int | None:
    return program_of(task).num_classes


def _named_labels(y: Any) -> bool:
    """Labels that are names, not class indices: strings (or JSON objects)."""
    try:
        array = np.asarray(y) if isinstance(y, (list, np.ndarray)) else None
    except ValueError:  # ragged: not labels at all, refused by the feed's own check
        return False
    if array is None or array.dtype.kind not in "UO":
        return False
    # An object array also holds integers too large for int64: those are out-of-range indices, not names.
    return array.dtype.kind == "U" or any(isinstance(v, (str, dict)) for v in array.reshape(-1).tolist())


def prepare_feed(store: Store, task: Task, X: Any, y: Any, tags: Mapping[str, str] | None = None, *,
                 has_data: bool = False) -> PreparedFeed:
    """Check a table task's columns and map named labels to indices, before
    anything is written (DataError naming the column or label). ``tags``: the
    task's tags when the caller read them already (``Store.feed_reads``);
    ``has_data``: the task has a dataset version (named labels are then
    refused while it has no class names: its rows hold class indices, which
    new names would take over)."""
    if tags is None:
        tags = store.tags("task", task.id)  # read once: the schema and the class names
    schema = schema_in(tags)
    if schema is not None:
        table = _table_of(X)
        X = CheckedData(n=table.n, X=schema.stored_arrays(table))
        if schema.classes is None:
            X = CheckedData(n=table.n, X=X.X, y=_numeric_target(y, table.n))
            return PreparedFeed(X, X.y)
    elif isinstance(X, TableData):
        raise DataError("X", "a table (columns by name)", f"arrays for the tensor task {task.name!r}; declare a table "
                        "task with client.task(name, like=df, target=...) to feed tables")
    names = names_in(tags)
    if _num_classes(task) is None or (names is None and not _named_labels(y)):
        return PreparedFeed(X, y)
    if y is None:
        raise DataError("y", "nothing", "a label for every example")
    if names is None and has_data:
        raise DataError("y", f"class names such as {_first_name(y)!r}",
                        f"class indices 0 to {_num_classes(task) - 1}, as this task's earlier feeds gave: "
                        "a task fed class indices keeps them")
    indices, after = class_indices(names, y, _num_classes(task))
    if isinstance(X, CheckedData) and len(indices) != X.n:
        raise DataError("y", f"{len(indices)} examples", f"{X.n}, one per row of X")
    added = list(after) if names is None or len(after) > len(names) else None
    frozen_indices = indices.copy()
    frozen_indices.flags.writeable = False
    if isinstance(X, CheckedData):
        X = CheckedData(n=X.n, X=X.X, y=frozen_indices)

    def commit() -> None:
        if added is not None:
            store.set_tag("task", task.id, CLASSES_TAG, json.dumps(added))

    return PreparedFeed(X, frozen_indices, added, commit)


def _first_name(y: Any) -> Any:
    first = np.asarray(y, dtype=object).reshape(-1)[:1]
    return str(first[0])[:40] if first.size else ""


def _table_of(X: Any) -> TableData:
    if not isinstance(X, TableData):
        raise DataError("X", type(X).__name__ if not isinstance(X, list) else "a list",
                        'a table: {"table": [{"name", "type", "values", "missing"}, ...]} '
                        "(the client sends DataFrames, CSV and Parquet files so)")
    return X


def _numeric_target(y: Any, n: int) -> np.ndarray:
    if y is None:
        raise DataError("y", "nothing", "the target column's values")
    try:
        values = np.asarray(y, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise DataError("y", "values that are not numbers", "the numeric target's values") from None
    if len(values) != n:
        raise DataError("y", f"{len(values)} examples", f"{n}, one per row of X")
    if not np.isfinite(values).all():
        row = int(np.argmax(~np.isfinite(values)))
        raise DataError(f"y[{row}]", "a missing or infinite target", "a finite number for every row")
    out = values.astype(np.float32).reshape(n, 1)  # as the flat program's Tensor[1] output is stored
    out.flags.writeable = False
    return out


def fields_in(tags: Any) -> dict[str, Any]:
    """What a task's JSON adds, from its tags already read: its table schema (or None) and class names."""
    schema = schema_in(tags)
    return {"table": None if schema is None else schema.to_dict(), "class_names": names_in(tags)}


def checked_inputs(store: Store, task: Task, X: Any) -> Any:
    """Inputs for ``infer``, checked: a table task's as its stored column
    arrays, other tasks' against their program (``check_data``)."""
    schema = table_schema(store, task)
    if schema is None:
        if isinstance(X, TableData):
            raise DataError("X", "a table (columns by name)", f"arrays for the tensor task {task.name!r}")
        return check_data(parse(task.program), X).X
    return schema.stored_arrays(_table_of(X))


def estimator_inputs(store: Store, task: Task, X: Any) -> Any:
    """Checked inputs as a scikit-learn model of the task takes them: a
    table task's as a DataFrame with its column names, others flattened."""
    schema = table_schema(store, task)
    if schema is not None:
        return to_frame(schema, X)
    return X.reshape(len(X), -1)


def table_job(store: Store, task: Task, candidate: Candidate, data: Any) -> tuple[Candidate, Any]:
    """A scikit-learn pick of a table task: its candidate behind the
    schema's preprocessing (``zoo.preprocess``), and its loaded data
    (``datasets.LoadedData``) with X as a DataFrame. Other tasks' as they are."""
    schema = table_schema(store, task)
    if schema is None:
        return candidate, data
    return (dataclasses.replace(candidate, build=TableBuilder(schema, candidate.build)),
            dataclasses.replace(data, X=to_frame(schema, data.X)))


def table_json(schema: TableSchema, arrays: Any, encode: Callable[[np.ndarray], Any]) -> list[dict[str, Any]]:
    """A version's table as ``GET /examples`` answers it: per column its name,
    kind and values (float64 with NaN, or strings), and for string columns
    which rows are missing."""
    out, columns = [], schema.columns_of(arrays)
    for column in schema.columns:
        values = columns[column.name]
        entry: dict[str, Any] = {"name": column.name, "kind": column.kind.value}
        if values.dtype == object:
            missing = np.array([not isinstance(v, str) for v in values], dtype=bool)
            entry["values"] = encode(np.array(["" if m else v for v, m in zip(values, missing)], dtype=str))
            entry["missing"] = encode(missing)
        else:
            entry["values"] = encode(values)
        out.append(entry)
    return out
