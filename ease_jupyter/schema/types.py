"""Abstract syntax of an ease.ml program (pvldb §3.1, Fig. 3).

    prog         ::= {input: data_type, output: data_type}
    data_type    ::= {nonrec_field list, rec_field list}
    nonrec_field ::= Tensor[int list] | field_name :: Tensor[int list]
    rec_field    ::= field_name
    field_name   ::= [a-z0-9_]*

All nodes are frozen, hashable dataclasses so programs can be compared,
used as dict keys and round-tripped through the printer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorField:
    """A constant-shaped tensor, optionally named (``name :: Tensor[...]``)."""

    shape: tuple[int, ...]
    name: str | None = None

    @property
    def size(self) -> int:
        """Number of elements of one such tensor."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __str__(self) -> str:
        from .printer import format_tensor  # lazy: the printer imports this module

        return format_tensor(self)


@dataclass(frozen=True)
class DataType:
    """An object: its tensors (nonrecursive part) and its pointers to objects of
    the same type (recursive part; one field makes a chain, two make a tree)."""

    tensors: tuple[TensorField, ...]
    recursive: tuple[str, ...] = ()

    @property
    def is_recursive(self) -> bool:
        return bool(self.recursive)

    def __str__(self) -> str:
        from .printer import format_data_type  # lazy: the printer imports this module

        return format_data_type(self)


@dataclass(frozen=True)
class Program:
    """A learning task: the type of an input object and of an output object."""

    input: DataType
    output: DataType

    @property
    def num_classes(self) -> int | None:
        """Classes when the output is a single 1-D tensor of size >= 2 with no
        recursion (a classification task), else None."""
        out = self.output
        if out.recursive or len(out.tensors) != 1:
            return None
        shape = out.tensors[0].shape
        return shape[0] if len(shape) == 1 and shape[0] >= 2 else None

    def __str__(self) -> str:
        from .printer import format_program  # lazy: the printer imports this module

        return format_program(self)
