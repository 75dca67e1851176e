"""The printer's canonical forms and the round trip parse(format(p)) == p."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ease_jupyter.schema import DataType, Program, TensorField, format_program, parse
from ease_jupyter.schema.parser import MAX_DIM
from ease_jupyter.schema.printer import format_data_type, format_tensor


def test_canonical_full_form():
    p = parse("input: [64, 64, 3]\noutput: [2]")
    assert format_program(p) == "{input: {[Tensor[64,64,3]], []}, output: {[Tensor[2]], []}}"


def test_named_and_recursive_fields():
    p = parse("{input: {[img::Tensor[32,32,3],meta::Tensor[4]],[left,right]}, output: {[Tensor[10]],[]}}")
    assert format_program(p) == (
        "{input: {[img :: Tensor[32,32,3], meta :: Tensor[4]], [left, right]}, output: {[Tensor[10]], []}}"
    )


def test_short_form_when_possible():
    p = parse("{input: {[Tensor[256,256,3]], []}, output: {[Tensor[3]], []}}")
    assert format_program(p, short=True) == "input: [256,256,3] output: [3]"
    assert format_program(p) == "{input: {[Tensor[256,256,3]], []}, output: {[Tensor[3]], []}}"


@pytest.mark.parametrize(
    "text",
    [
        "{input: {[Tensor[8]], [next]}, output: {[Tensor[2]], []}}",  # recursion
        "{input: {[x :: Tensor[8]], []}, output: {[Tensor[2]], []}}",  # a name
        "{input: {[Tensor[8], Tensor[2]], []}, output: {[Tensor[2]], []}}",  # two tensors
        "{input: {[Tensor[8]], []}, output: {[Tensor[2]], [next]}}",  # the output side
    ],
)
def test_short_falls_back_to_full_form(text):
    assert format_program(parse(text), short=True) == text


def test_str_of_ast_nodes_uses_the_printer():
    p = parse("{input: {[a :: Tensor[2,3]], [next]}, output: [5]}")
    assert str(p) == format_program(p)
    assert str(p.input) == "{[a :: Tensor[2,3]], [next]}" == format_data_type(p.input)
    assert str(p.input.tensors[0]) == "a :: Tensor[2,3]" == format_tensor(p.input.tensors[0])
    assert str(TensorField((4,))) == "Tensor[4]"
    assert p.input.tensors[0].size == 6


def test_types_module_does_not_import_the_printer_eagerly():
    source = open(__import__("ease_jupyter.schema.types", fromlist=["x"]).__file__).read()
    top_level_imports = [line for line in source.splitlines() if re.match(r"(from|import) ", line)]
    assert not any("printer" in line for line in top_level_imports)


# -- hypothesis: arbitrary valid programs ----------------------------------------

names = st.from_regex(r"[a-z0-9_]{1,8}", fullmatch=True)
shapes = st.one_of(
    st.lists(st.integers(1, 64), min_size=1, max_size=5),
    st.lists(st.integers(1, MAX_DIM), min_size=1, max_size=1),  # one large dimension
).map(tuple)


@st.composite
def data_types(draw):
    used = draw(st.lists(names, unique=True, max_size=8))
    n_tensors = draw(st.integers(1, 5))
    tensors = []
    for _ in range(n_tensors):
        name = used.pop() if used and draw(st.booleans()) else None
        tensors.append(TensorField(draw(shapes), name))
    return DataType(tuple(tensors), tuple(used))  # the leftover names are the recursive fields


programs = st.builds(Program, data_types(), data_types())


@given(programs)
def test_round_trip_full_form(p):
    text = format_program(p)
    assert parse(text) == p
    assert "\n" not in text


@given(programs)
def test_round_trip_short_option(p):
    assert parse(format_program(p, short=True)) == p


@given(programs, st.data())
def test_printing_is_stable_under_reformatting(p, data):
    """Re-space the canonical text with random whitespace and comments between
    tokens; the parsed program and its canonical text do not change."""
    canonical = format_program(p)
    tokens = re.findall(r"::|[{}\[\],:]|[A-Za-z0-9_]+", canonical)
    gaps = st.sampled_from(["", " ", "\n", "\t", "  # note\n", "\r\n"])
    spaced = "".join(data.draw(gaps) + tok for tok in tokens) + data.draw(gaps)
    reparsed = parse(spaced)
    assert reparsed == p
    assert format_program(reparsed) == canonical
    assert format_program(parse(format_program(reparsed))) == canonical
