"""The parser accepts every form of pvldb Fig. 3 and reports malformed programs
with their line, column, found text and expected tokens."""

from __future__ import annotations

import pytest

from ease_jupyter.errors import ProgramSyntaxError
from ease_jupyter.schema import DataType, Program, TensorField, parse
from ease_jupyter.schema.parser import MAX_DIM, MAX_ELEMENTS, MAX_RANK


def T(*shape, name=None):
    return TensorField(tuple(shape), name)


def D(*tensors, rec=()):
    return DataType(tuple(tensors), tuple(rec))


IMAGE = Program(D(T(64, 64, 3)), D(T(2)))

ACCEPTED = [
    # image classification, the canonical form
    ("{input: {[Tensor[64,64,3]], []}, output: {[Tensor[2]], []}}", IMAGE),
    # time series: a tensor and a pointer to the next object
    ("{input: {[Tensor[8]], [next]}, output: {[Tensor[2]], []}}", Program(D(T(8), rec=["next"]), D(T(2)))),
    # named tensors
    (
        "{input: {[img :: Tensor[32,32,3], meta :: Tensor[4]], []}, output: {[Tensor[10]], []}}",
        Program(D(T(32, 32, 3, name="img"), T(4, name="meta")), D(T(10))),
    ),
    # tree: two recursive fields
    ("{input: {[Tensor[16]], [left, right]}, output: {[Tensor[3]], []}}", Program(D(T(16), rec=["left", "right"]), D(T(3)))),
    # several unnamed tensors, mixed with named ones
    (
        "{input: {[Tensor[2], x :: Tensor[3], Tensor[4,5]], []}, output: {[Tensor[1]], []}}",
        Program(D(T(2), T(3, name="x"), T(4, 5)), D(T(1))),
    ),
    # recursive output (time series translation, Fig. 6)
    ("{input: {[Tensor[10]], [next]}, output: {[Tensor[10]], [next]}}", Program(D(T(10), rec=["next"]), D(T(10), rec=["next"]))),
    # field names are [a-z0-9_]*: digits only, leading digit, underscores, keyword-like
    (
        "{input: {[_ :: Tensor[1], 2nd :: Tensor[1], tensor :: Tensor[1]], [7, a_b_9]}, output: {[input :: Tensor[2]], []}}",
        Program(
            D(T(1, name="_"), T(1, name="2nd"), T(1, name="tensor"), rec=["7", "a_b_9"]),
            D(T(2, name="input")),
        ),
    ),
    # the same name may appear in the input and in the output
    ("{input: {[a :: Tensor[1]], [b]}, output: {[a :: Tensor[2]], [b]}}", Program(D(T(1, name="a"), rec=["b"]), D(T(2, name="a"), rec=["b"]))),
    # leading zeros are read as decimal
    ("{input: {[Tensor[007]], []}, output: {[Tensor[02]], []}}", Program(D(T(7)), D(T(2)))),
    # short form and its separators
    ("input: [256,256,3] output: [3]", Program(D(T(256, 256, 3)), D(T(3)))),
    ("input: [64,64,3]  output: [2]", IMAGE),
    ("input: [64,64,3], output: [2]", IMAGE),
    ("input: [64,64,3]; output: [2]", IMAGE),
    ("input: [64, 64, 3]\noutput: [2]\n", IMAGE),
    ("input:[64,64,3]output:[2]", IMAGE),
    # short data types inside braces, and mixed with the full form
    ("{input: [64,64,3], output: [2]}", IMAGE),
    ("{input: {[Tensor[8]], [next]}, output: [2]}", Program(D(T(8), rec=["next"]), D(T(2)))),
    ("input: {[Tensor[64,64,3]], []} output: {[Tensor[2]], []}", IMAGE),
]


@pytest.mark.parametrize("text, program", ACCEPTED, ids=[t for t, _ in ACCEPTED])
def test_accepts(text, program):
    assert parse(text) == program


def test_figure5_programs_verbatim():
    # pvldb/arXiv Fig. 5 write the two halves on separate lines, without a comma
    image = "{input: {[Tensor[256, 256, 3]], []}\noutput:{[Tensor[1000]], []}}"
    series = "{input: {[Tensor[10]], [next]}\noutput:{[Tensor[10]], [next]}}"
    assert parse(image) == Program(D(T(256, 256, 3)), D(T(1000)))
    assert parse(image).num_classes == 1000
    assert parse(series) == Program(D(T(10), rec=["next"]), D(T(10), rec=["next"]))
    assert parse(series).num_classes is None


def test_whitespace_newlines_and_comments_between_every_token():
    text = """
    # an image task
    {   # opening brace
      input :          # the input type
        { [ Tensor [ 64 , # height
                     64 ,
                     3 ] ] ,
          [ ] } ,
      output\t:\r\n { [ img_class :: Tensor[2] ] , [] }  # two classes
    }
    # trailing comment, no newline at the end"""
    assert parse(text) == Program(D(T(64, 64, 3)), D(T(2, name="img_class")))


def test_windows_line_endings_and_tabs():
    assert parse("input:\t[3]\r\noutput:\t[2]\r\n") == Program(D(T(3)), D(T(2)))


def test_dimension_limits():
    assert parse(f"input: [{MAX_DIM}] output: [2]").input.tensors[0].shape == (MAX_DIM,)
    assert parse("input: [" + ",".join(["1"] * MAX_RANK) + "] output: [2]").input.tensors[0].shape == (1,) * MAX_RANK


def test_rejects_non_string():
    with pytest.raises(TypeError, match="str"):
        parse(b"input: [3] output: [2]")


# (text, line, column, found, a fragment of expected, a fragment of the message)
REJECTED = [
    ("", 1, 1, "end of input", "a program such as", "empty program"),
    ("   \n  # only a comment\n", 3, 1, "end of input", "a program such as", "empty program"),
    ("output: [2] input: [3]", 1, 1, "output", "'{' or 'input'", "starts with"),
    ("{output: [2]}", 1, 2, "output", "'input'", "input type comes first"),
    ("input [3] output: [2]", 1, 7, "[", "':'", ""),
    ("input: [3] output: [2] extra", 1, 24, "extra", "end of input", "after the end"),
    ("{input: [3], output: [2]}}", 1, 26, "}", "end of input", "after the end"),
    ("{input: [3], output: [2]", 1, 25, "end of input", "'}'", "close the program"),
    ("input: [3] [2]", 1, 12, "[", "',', ';' or 'output'", "expected 'output'"),
    ("input: [3],, output: [2]", 1, 12, ",", "',', ';' or 'output'", ""),
    ("input: 3 output: [2]", 1, 8, "3", "'{' or '['", "input type"),
    ("input: [3] output: Tensor[2]", 1, 20, "Tensor", "'{' or '['", "output type"),
    # lists of dimensions
    ("input: [3 4] output: [2]", 1, 11, "4", "',' or ']'", ""),
    ("input: [3,] output: [2]", 1, 11, "]", "a positive integer", "expected a dimension"),
    ("input: [] output: [2]", 1, 9, "]", "a positive integer", "at least one dimension"),
    ("input: [0] output: [2]", 1, 9, "0", "a positive integer", "not 0"),
    ("input: [3, -2] output: [2]", 1, 12, "-2", "a positive integer", "positive"),
    ("input: [2.5] output: [2]", 1, 9, "2.5", "a positive integer", "whole numbers"),
    ("input: [x] output: [2]", 1, 9, "x", "a positive integer", ""),
    (f"input: [{MAX_DIM + 1}] output: [2]", 1, 9, str(MAX_DIM + 1), "a positive integer", "too large"),
    ("input: [3] output: [99999999999999999999]", 1, 21, "99999999999999999999", "a positive integer", "too large"),
    ("input: [" + ",".join(["1"] * (MAX_RANK + 1)) + "] output: [2]", 1, 8, "[", f"at most {MAX_RANK} dimensions", ""),
    ("{input: {[Tensor[65536,65536]], []}, output: [2]}", 1, 11, "Tensor", f"at most {MAX_ELEMENTS} elements", ""),
    ("input: [3@] output: [2]", 1, 10, "@", "',' or ']'", "unexpected character '@'"),
    ("input: [64×64] output: [2]", 1, 11, "×", "',' or ']'", "unexpected character"),
    # data types
    ("{input: {[Tensor[3]] []}, output: [2]}", 1, 22, "[", "','", "between the tensor list"),
    ("{input: {[Tensor[3]]}, output: [2]}", 1, 21, "}", "','", ""),
    ("{input: {[Tensor[3]], [], []}, output: [2]}", 1, 25, ",", "'}'", "close the input type"),
    ("{input: {Tensor[3], []}, output: [2]}", 1, 10, "Tensor", "'['", ""),
    ("{input: {[Tensor[3],], []}, output: [2]}", 1, 21, "]", "'Tensor' or a field name", ""),
    ("{input: {[Tensor[3] Tensor[4]], []}, output: [2]}", 1, 21, "Tensor", "',' or ']'", ""),
    ("{input: {[Tensor[3]], [next,]}, output: [2]}", 1, 29, "]", "a field name", ""),
    ("{input: {[Tensor[3]], [,]}, output: [2]}", 1, 24, ",", "a field name or ']'", ""),
    ("{input: {[], []}, output: [2]}", 1, 9, "{[], []}", "at least one 'Tensor[...]'", "no tensor field"),
    ("{input: {[], [next]}, output: [2]}", 1, 9, "{[], [next]}", "at least one 'Tensor[...]'", "no tensor field"),
    ("{input: [3], output: {[], []}}", 1, 22, "{[], []}", "at least one 'Tensor[...]'", "output type has no tensor"),
    ("{input: {[tensor[3]], []}, output: [2]}", 1, 11, "tensor", "'Tensor' or a field name", "spelt 'Tensor'"),
    ("{input: {[TENSOR[3]], []}, output: [2]}", 1, 11, "TENSOR", "'Tensor' or a field name", "spelt 'Tensor'"),
    ("{input: {[x : Tensor[3]], []}, output: [2]}", 1, 13, ":", "'::'", "after the field name 'x'"),
    ("{input: {[x :: [3]], []}, output: [2]}", 1, 16, "[", "'Tensor'", "after '::'"),
    ("{input: {[x :: Tensor 3], []}, output: [2]}", 1, 23, "3", "'['", ""),
    # field names
    ("{input: {[Img :: Tensor[3]], []}, output: [2]}", 1, 11, "Img", "lowercase letters", "not lowercase"),
    ("{input: {[Tensor[3]], [Next]}, output: [2]}", 1, 24, "Next", "lowercase letters", "not lowercase"),
    ("{input: {[Tensor[3]], [Tensor]}, output: [2]}", 1, 24, "Tensor", "a field name", "keyword"),
    ("{input: {[Tensor[3]], [left, left]}, output: [2]}", 1, 30, "left", "not used before", "duplicate field name 'left' in the input type"),
    ("{input: {[a :: Tensor[3], a :: Tensor[1]], []}, output: [2]}", 1, 27, "a", "not used before", "first used at line 1, column 11"),
    ("{input: {[next :: Tensor[3]], [next]}, output: [2]}", 1, 32, "next", "not used before", "duplicate"),
    ("{input: [3], output: {[Tensor[2]], [a, b, a]}}", 1, 43, "a", "not used before", "in the output type"),
    ("{input: {[Tensor[3]], [a-b]}, output: [2]}", 1, 25, "-", "',' or ']'", "unexpected character '-'"),
    # positions on later lines
    ("{input: {[Tensor[3]], []},\n output: {[Tensor[2]],\n  [x y]}}", 3, 6, "y", "',' or ']'", ""),
    ("input: [3]\n\n   output: [2, 0]", 3, 16, "0", "a positive integer", ""),
]


@pytest.mark.parametrize("text, line, column, found, expected, message", REJECTED, ids=[r[0] for r in REJECTED])
def test_rejects_with_position(text, line, column, found, expected, message):
    with pytest.raises(ProgramSyntaxError) as info:
        parse(text)
    err = info.value
    assert (err.line, err.column, err.found) == (line, column, found)
    assert expected in err.expected
    assert message in str(err)
    # the message itself says where and what
    assert str(err).startswith(f"line {line}, column {column}: ")
    assert repr(found) in str(err)


def test_syntax_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse("input: [3]")
