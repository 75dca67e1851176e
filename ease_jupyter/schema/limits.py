"""Size limits of a task's program, checked when the task is declared.

The parser's own bounds (``MAX_DIM``, ``MAX_ELEMENTS``) only keep shapes
representable; these keep them trainable. A task over them could never be
fed (one example would not fit a request or an upload chunk) or would make a
worker allocate gigabytes for its output layer, so it is refused up front
rather than accepted and left idle.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import DataError
from .parser import MAX_RANK
from .types import DataType, Program, TensorField

MAX_PROGRAM_CHARS = 8_192  # the text of a program
MAX_EXAMPLE_ELEMENTS = 2**24  # numbers in one input (or output) object: 64 MiB as float32
MAX_CLASSES = 10_000  # size of a 1-D output tensor (classes, or values of a multi-output regression)

__all__ = ["MAX_PROGRAM_CHARS", "MAX_EXAMPLE_ELEMENTS", "MAX_CLASSES", "check_program_text", "check_program_size",
           "program_from_shapes"]


def check_program_text(text: str) -> str:
    """``text`` if it is at most ``MAX_PROGRAM_CHARS`` long; else DataError on ``program``."""
    if len(text) > MAX_PROGRAM_CHARS:
        raise DataError("program", f"{len(text)} characters", f"at most {MAX_PROGRAM_CHARS} characters")
    return text


def check_program_size(program: Program, *, field: str | None = None) -> Program:
    """``program`` if its input and output are within the limits above.

    Errors name ``field`` (e.g. ``"program"`` for a program given as text),
    or ``"input"``/``"output"`` when ``field`` is None (shapes given apart)."""
    for side, data_type in (("input", program.input), ("output", program.output)):
        where = field or side
        rank = max(len(tensor.shape) for tensor in data_type.tensors)
        if rank > MAX_RANK:  # the parser checks this for text; shapes given apart come here unchecked
            raise DataError(where, f"a tensor of {rank} dimensions", f"at most {MAX_RANK} dimensions")
        elements = _elements(data_type)
        if elements > MAX_EXAMPLE_ELEMENTS:
            raise DataError(where, f"{side} of {elements} elements per example",
                            f"at most {MAX_EXAMPLE_ELEMENTS} (2**24) elements per example")
    out = program.output.tensors
    if len(out) == 1 and len(out[0].shape) == 1 and out[0].shape[0] > MAX_CLASSES:
        raise DataError(field or "output", f"output of {out[0].shape[0]} classes",
                        f"at most {MAX_CLASSES} classes (output values)")
    return program


def _elements(data_type: DataType) -> int:
    """Numbers in one object of the type (one node of a chain or tree)."""
    return sum(tensor.size for tensor in data_type.tensors)


def program_from_shapes(input: Sequence[int], output: Sequence[int]) -> Program:
    """The program of one input tensor and one output tensor (the short form
    ``input: [64]  output: [10]``); a ``DataError`` naming ``input`` or
    ``output`` when a shape is over the limits."""
    program = Program(DataType((TensorField(tuple(int(d) for d in input)),)),
                      DataType((TensorField(tuple(int(d) for d in output)),)))
    return check_program_size(program)
