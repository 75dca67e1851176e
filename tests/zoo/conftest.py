"""Shared helpers of the zoo tests. Torch runs on one thread so that the
suite stays fast and deterministic on a small shared machine."""

from __future__ import annotations

import pytest

from ease_jupyter.schema.types import DataType, Program, TensorField


def program(inp, out, in_rec=(), out_rec=()) -> Program:
    """``program([(8, 8, 1)], [(10,)])``; shapes are lists of tensor shapes."""
    return Program(
        DataType(tuple(TensorField(tuple(s)) for s in inp), tuple(in_rec)),
        DataType(tuple(TensorField(tuple(s)) for s in out), tuple(out_rec)),
    )


@pytest.fixture(autouse=True, scope="session")
def _torch_one_thread():
    try:
        import torch
    except ImportError:  # pragma: no cover
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
