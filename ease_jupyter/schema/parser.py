"""Parser for ease.ml programs (pvldb §3.1, Fig. 3).

The full form follows Fig. 3 exactly::

    prog         ::= {input: data_type, output: data_type}
    data_type    ::= {nonrec_field list, rec_field list}
    nonrec_field ::= Tensor[int list] | field_name :: Tensor[int list]
    rec_field    ::= field_name
    field_name   ::= [a-z0-9_]*

Lists are written in square brackets, comma separated::

    {input: {[Tensor[64,64,3]], []}, output: {[Tensor[2]], []}}     # image
    {input: {[Tensor[8]], [next]}, output: {[Tensor[2]], []}}        # time series
    {input: {[img :: Tensor[32,32,3], meta :: Tensor[4]], []}, ...}  # named tensors
    {input: {[Tensor[16]], [left, right]}, ...}                      # tree

Two conveniences on top of Fig. 3:

* a data type may be abbreviated ``[d1, ..., dk]``, meaning one unnamed tensor
  and no recursion (``{[Tensor[d1, ..., dk]], []}``), and the outer braces may
  be left out. This gives the short form ``input: [256,256,3] output: [3]``.
* the separator between the input and the output may be ``,``, ``;`` or
  nothing (pvldb Fig. 5 writes them on two lines with no comma).

Whitespace and newlines may appear between any two tokens, and ``#`` starts a
comment that runs to the end of the line.

Rules beyond the grammar, each reported with its position:

* dimensions are whole numbers in ``[1, MAX_DIM]``; a tensor has between 1 and
  ``MAX_RANK`` dimensions and at most ``MAX_ELEMENTS`` elements;
* field names are lowercase (``[a-z0-9_]+``) and unique within a data type
  (tensor names and recursive field names share one namespace);
* every data type has at least one tensor: an object with no tensor carries
  nothing to learn from (and Fig. 6 has no template for it).
"""

from __future__ import annotations

import math
import re
from typing import Callable, NoReturn

from ..errors import ProgramSyntaxError
from ._lexer import DECIMAL, EOF, ERROR, NEGATIVE, PUNCT, WORD, Token, tokenize
from .types import DataType, Program, TensorField

__all__ = ["parse", "MAX_DIM", "MAX_RANK", "MAX_ELEMENTS"]

MAX_DIM = 2**31 - 1  # fits an int32, which torch/numpy shape code may assume
MAX_RANK = 32  # numpy's historical limit on array dimensions
MAX_ELEMENTS = 2**31 - 1  # per tensor, per example: beyond this nothing could train

_FIELD_NAME = re.compile(r"[a-z0-9_]+\Z")
_DIGITS = re.compile(r"[0-9]+\Z")
_TENSOR = "Tensor"


def parse(text: str) -> Program:
    """Parse an ease.ml program in the full or the short form.

    Args:
        text: the program, e.g. ``"{input: {[Tensor[64,64,3]], []}, output:
            {[Tensor[2]], []}}"`` or ``"input: [64,64,3] output: [2]"``.

    Returns:
        The program's abstract syntax.

    Raises:
        ProgramSyntaxError: with the line, column, found text and expected
            tokens of the first problem.
        TypeError: if ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse() takes the program text as str, not {type(text).__name__}")
    return _Parser(text).program()


class _Parser:
    """Recursive descent over the token list; one method per grammar rule."""

    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.pos = 0

    # -- token helpers ------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def at(self, text: str) -> bool:
        return self.tok.kind in (PUNCT, WORD) and self.tok.text == text

    def advance(self) -> Token:
        tok = self.tok
        if tok.kind != EOF:
            self.pos += 1
        return tok

    def expect(self, text: str, message: str | None = None) -> Token:
        if not self.at(text):
            self.fail(message or f"expected {text!r}", f"{text!r}")
        return self.advance()

    def fail(self, message: str, expected: str, tok: Token | None = None, found: str | None = None) -> NoReturn:
        tok = tok or self.tok
        if tok.kind == ERROR:
            message = f"unexpected character {tok.text!r}; {message}"
        raise ProgramSyntaxError(
            message,
            line=tok.line,
            column=tok.column,
            found=tok.shown if found is None else found,
            expected=expected,
        )

    # -- grammar ------------------------------------------------------------

    def program(self) -> Program:
        if self.tok.kind == EOF:
            self.fail(
                "empty program",
                "a program such as '{input: {[Tensor[64,64,3]], []}, output: {[Tensor[2]], []}}' "
                "or 'input: [64,64,3] output: [2]'",
            )
        braced = self.at("{")
        if braced:
            self.advance()
        elif not self.at("input"):
            self.fail("a program starts with '{' or 'input'", "'{' or 'input'")
        self.expect("input", "expected 'input' (the input type comes first)")
        self.expect(":")
        source = self.data_type("input")
        if self.at(",") or self.at(";"):
            self.advance()
        if not self.at("output"):
            self.fail("expected 'output' after the input type", "',', ';' or 'output'")
        self.advance()
        self.expect(":")
        target = self.data_type("output")
        if braced:
            self.expect("}", "expected '}' to close the program")
        if self.tok.kind != EOF:
            self.fail("unexpected text after the end of the program", "end of input")
        return Program(input=source, output=target)

    def data_type(self, side: str) -> DataType:
        start = self.tok
        if self.at("["):  # short form: one unnamed tensor, no recursion
            return DataType(tensors=(TensorField(self.dims(start)),))
        if not self.at("{"):
            self.fail(
                f"expected the {side} type: '{{[tensors], [recursive fields]}}' or '[dims]'",
                "'{' or '['",
            )
        self.advance()
        names: dict[str, Token] = {}
        tensors = self.bracketed(lambda: self.nonrec_field(names, side), "'Tensor' or a field name")
        self.expect(",", "expected ',' between the tensor list and the recursive field list")
        recursive = self.bracketed(lambda: self.field_name(names, side), "a field name")
        end = self.expect("}", f"expected '}}' to close the {side} type")
        if not tensors:
            self.fail(
                f"the {side} type has no tensor field; an object needs at least one tensor",
                "at least one 'Tensor[...]' in the first list",
                tok=start,
                found=self.text[start.offset : end.end],
            )
        return DataType(tensors=tuple(tensors), recursive=tuple(recursive))

    def bracketed(self, item: Callable[[], object], what: str) -> list:
        """``[item, item, ...]``, possibly empty."""
        self.expect("[")
        items = []
        if self.at("]"):
            self.advance()
            return items
        if self.tok.kind != WORD:
            self.fail(f"expected {what} or ']'", f"{what} or ']'")
        while True:
            items.append(item())
            if self.at("]"):
                self.advance()
                return items
            if not self.at(","):
                self.fail("expected ',' or ']' in the list", "',' or ']'")
            self.advance()

    def nonrec_field(self, names: dict[str, Token], side: str) -> TensorField:
        if self.at(_TENSOR):
            tok = self.advance()
            return TensorField(self.dims(tok))
        nxt = self.tokens[self.pos + 1] if self.tok.kind != EOF else self.tok
        if self.tok.kind == WORD and self.tok.text.lower() == _TENSOR.lower() and nxt.text == "[":
            self.fail("the tensor keyword is spelt 'Tensor'", "'Tensor' or a field name")
        name = self.field_name(names, side, what="'Tensor' or a field name")
        if not self.at("::"):
            self.fail(f"expected '::' after the field name {name!r}", "'::'")
        self.advance()
        tok = self.expect(_TENSOR, "expected 'Tensor' after '::'")
        return TensorField(self.dims(tok), name=name)

    def field_name(self, names: dict[str, Token], side: str, what: str = "a field name") -> str:
        tok = self.tok
        if tok.kind != WORD:
            self.fail(f"expected {what}", what)
        if tok.text == _TENSOR:
            self.fail("'Tensor' is a keyword, not a field name", "a field name ([a-z0-9_]+)")
        if not _FIELD_NAME.match(tok.text):
            self.fail(
                f"field name {tok.text!r} is not lowercase",
                "a field name of lowercase letters, digits and '_' ([a-z0-9_]+)",
            )
        if tok.text in names:
            first = names[tok.text]
            self.fail(
                f"duplicate field name {tok.text!r} in the {side} type "
                f"(first used at line {first.line}, column {first.column})",
                "a field name not used before in this type",
            )
        names[tok.text] = tok
        self.advance()
        return tok.text

    def dims(self, tensor: Token) -> tuple[int, ...]:
        """``[int, int, ...]`` with at least one dimension."""
        self.expect("[", "expected '[' to open the list of dimensions")
        if self.at("]"):
            self.fail("a tensor needs at least one dimension", "a positive integer")
        shape = []
        while True:
            shape.append(self.dimension())
            if self.at("]"):
                self.advance()
                break
            if not self.at(","):
                self.fail("expected ',' or ']' in the list of dimensions", "',' or ']'")
            self.advance()
        if len(shape) > MAX_RANK:
            self.fail(
                f"a tensor has at most {MAX_RANK} dimensions, this one has {len(shape)}",
                f"at most {MAX_RANK} dimensions",
                tok=tensor,
            )
        if math.prod(shape) > MAX_ELEMENTS:
            self.fail(
                f"a tensor has at most {MAX_ELEMENTS} elements, this one has {math.prod(shape)}",
                f"at most {MAX_ELEMENTS} elements",
                tok=tensor,
            )
        return tuple(shape)

    def dimension(self) -> int:
        tok = self.tok
        expected = f"a positive integer (1 to {MAX_DIM})"
        if tok.kind == NEGATIVE:
            self.fail("dimensions must be positive", expected)
        if tok.kind == DECIMAL:
            self.fail("dimensions must be whole numbers", expected)
        if tok.kind != WORD or not _DIGITS.match(tok.text):
            self.fail("expected a dimension", expected)
        value = int(tok.text)
        if value == 0:
            self.fail("dimensions must be positive, not 0", expected)
        if value > MAX_DIM:
            self.fail(f"dimension {value} is too large", expected)
        self.advance()
        return value
