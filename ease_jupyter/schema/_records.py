"""Records: one object of a (possibly recursive) data type, as nested dicts.

Record format (pvldb §3.1: an object is its tensors plus pointers to objects
of the same type):

* a record is a mapping (usually a dict);
* each tensor field is keyed by its name, or, for an unnamed tensor, by its
  position in the type's tensor list as an ``int`` (``0`` for the first
  tensor). The string ``"0"`` is accepted for ``0`` so that JSON-decoded
  records work. The value is an array-like of the tensor's shape (a trailing
  dimension of size 1 may be left out, so a plain float is fine for
  ``Tensor[1]``);
* each recursive field is keyed by its name; the value is a child record or
  ``None``. A missing recursive field counts as ``None`` (a leaf).

Example, time series ``{[Tensor[8]], [next]}``: ``{0: [...8 floats...],
"next": {0: [...], "next": None}}``.

ease.ml assumes no reuse of objects: an example must be a singleton, a chain
or a tree. A record met twice within one example (a cycle or a shared
sub-record) is an error. Sharing records *between* examples is allowed (each
example is copied). Walks are iterative, so deep chains cannot hit Python's
recursion limit; depth is capped at ``MAX_DEPTH``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import DataError
from ._arrays import Where, fit_shape, to_array, to_float32
from ._paths import Path
from .printer import format_tensor
from .types import DataType

MAX_DEPTH = 10_000  # records along one root-to-leaf path


def tensor_key(position: int, data_type: DataType) -> int | str:
    """The record key of a tensor field: its name, else its position."""
    name = data_type.tensors[position].name
    return position if name is None else name


class Keys:
    """The keys a record of ``data_type`` may use, and what each one means."""

    def __init__(self, data_type: DataType):
        self.data_type = data_type
        self.tensors = {tensor_key(i, data_type): t for i, t in enumerate(data_type.tensors)}
        self.recursive = data_type.recursive
        self.aliases: dict = {k: k for k in self.tensors}
        self.aliases.update({str(k): k for k in self.tensors if isinstance(k, int)})
        self.aliases.update({name: name for name in self.recursive})

    def canonical(self, key):
        """The canonical key for ``key``, or None if the type has no such field."""
        if isinstance(key, (bool, np.bool_)):  # True == 1 would alias tensor 1
            return None
        if isinstance(key, np.integer):
            key = int(key)
        try:
            return self.aliases.get(key)
        except TypeError:  # unhashable
            return None

    def describe(self, tensors_only: bool = False) -> str:
        parts = [f"{k!r} -> {format_tensor(t)}" for k, t in self.tensors.items()]
        if not tensors_only:
            parts += [f"{name!r} -> a record or None" for name in self.recursive]
        return "keys " + ", ".join(parts)

    def split(self, mapping: Mapping, path: Path, tensors_only: bool = False) -> dict:
        """Map every key of ``mapping`` to its canonical key; all tensors required."""
        fields: dict = {}
        originals: dict = {}
        for key, value in mapping.items():
            canonical = self.canonical(key)
            if canonical is None or (tensors_only and canonical not in self.tensors):
                raise DataError(str(path), f"unknown key {key!r}", self.describe(tensors_only))
            if canonical in fields:
                raise DataError(
                    str(path.key(canonical)),
                    f"both keys {originals[canonical]!r} and {key!r}",
                    "one key per field",
                )
            fields[canonical], originals[canonical] = value, key
        for key, tensor in self.tensors.items():
            if key not in fields:
                raise DataError(str(path.key(key)), "no such key", f"a {format_tensor(tensor)} value ({self.describe(tensors_only)})")
        return fields


def leaf(value, path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """One tensor value of one record, as a read-only float32 array."""
    where = Where(path)
    return to_float32(fit_shape(to_array(value, where), where, shape), where)


def walk(keys: Keys, root, path: Path, max_depth: int = MAX_DEPTH) -> dict:
    """Check one example and return it normalised: a dict per record with
    canonical keys, float32 tensors and child dicts (or None)."""
    out_root: dict = {}
    seen: set[int] = set()
    # Depth-first with an explicit stack; children are pushed in reverse so
    # errors come in reading order (left before right).
    stack = [(root, out_root, path, 1)]
    while stack:
        node, out, here, depth = stack.pop()
        if depth > max_depth:
            raise DataError(str(here), f"a chain or tree deeper than {max_depth} records", f"at most {max_depth} records from the root to any leaf")
        if not isinstance(node, Mapping):
            raise DataError(str(here), _describe(node), f"a record: a dict with {keys.describe()}")
        if id(node) in seen:
            raise DataError(
                str(here),
                "a record already used earlier in this example (a cycle or a shared sub-record)",
                "a chain or tree in which every record is used once (ease.ml allows no reuse of objects)",
            )
        seen.add(id(node))
        fields = keys.split(node, here)
        for key, tensor in keys.tensors.items():
            out[key] = leaf(fields[key], here.key(key), tensor.shape)
        children = []
        for name in keys.recursive:
            child = fields.get(name)
            if child is None:
                out[name] = None
            else:
                out[name] = {}
                children.append((child, out[name], here.key(name), depth + 1))
        stack.extend(reversed(children))
    return out_root


def _describe(node) -> str:
    if node is None:
        return "None"
    if isinstance(node, (list, tuple)):
        return f"a {type(node).__name__} of length {len(node)}"
    shape = getattr(node, "shape", None)
    return f"a {type(node).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else "")


def chain_steps(record: dict, key, field: str) -> list[np.ndarray]:
    """The tensors of a normalised chain, root first."""
    steps = []
    node: dict | None = record
    while node is not None:
        steps.append(node[key])
        node = node[field]
    return steps
