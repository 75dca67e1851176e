"""The ease.ml program language (pvldb §3.1, Fig. 3): its syntax tree, a
parser and printer, and the check of data against a program.

This layer is pure: it imports nothing from the rest of ease_jupyter except
``ease_jupyter.errors``.
"""

from ._json import to_jsonable
from .check import CheckedData, check_data, check_inputs
from .limits import program_from_shapes
from .parser import parse
from .printer import format_program
from .types import DataType, Program, TensorField

__all__ = [
    "to_jsonable",
    "TensorField",
    "DataType",
    "Program",
    "parse",
    "format_program",
    "check_data",
    "check_inputs",
    "CheckedData",
    "program_from_shapes",
]
