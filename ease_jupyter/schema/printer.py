"""Printer for ease.ml programs (pvldb §3.1, Fig. 3).

``format_program`` is the inverse of :func:`~ease_jupyter.schema.parser.parse`:
``parse(format_program(p)) == p`` for every valid program, and the printed text
is canonical (one line, no spaces inside dimension lists), so printing a parsed
program twice gives the same text.
"""

from __future__ import annotations

from .types import DataType, Program, TensorField

__all__ = ["format_program", "format_data_type", "format_tensor"]


def format_tensor(field: TensorField) -> str:
    """``Tensor[64,64,3]`` or ``img :: Tensor[64,64,3]``."""
    tensor = "Tensor[" + ",".join(str(d) for d in field.shape) + "]"
    return tensor if field.name is None else f"{field.name} :: {tensor}"


def format_data_type(data_type: DataType) -> str:
    """``{[Tensor[8]], [next]}``: the tensor list, then the recursive fields."""
    tensors = ", ".join(format_tensor(t) for t in data_type.tensors)
    recursive = ", ".join(data_type.recursive)
    return f"{{[{tensors}], [{recursive}]}}"


def _short(data_type: DataType) -> str | None:
    """``[64,64,3]`` when the type is one unnamed tensor without recursion."""
    if data_type.recursive or len(data_type.tensors) != 1 or data_type.tensors[0].name is not None:
        return None
    return "[" + ",".join(str(d) for d in data_type.tensors[0].shape) + "]"


def format_program(program: Program, *, short: bool = False) -> str:
    """Print ``program`` on one line.

    Args:
        program: the program to print.
        short: print ``input: [64,64,3] output: [2]`` when both sides are a
            single unnamed tensor without recursion; otherwise (and when
            False) print the full form of Fig. 3,
            ``{input: {[Tensor[64,64,3]], []}, output: {[Tensor[2]], []}}``.
    """
    if short:
        source, target = _short(program.input), _short(program.output)
        if source is not None and target is not None:
            return f"input: {source} output: {target}"
    return f"{{input: {format_data_type(program.input)}, output: {format_data_type(program.output)}}}"
