"""The Client checks its own arguments before it sends them: a shape, an
example id or a ``k`` that is not what it looks like is a DataError naming
the argument, and nothing is created or changed (``int("64")`` walked a
string's characters into the shape [6, 4], and ``int(2.5)`` made 2)."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter.errors import DataError


@pytest.mark.parametrize("shape, field", [([2.5], "input"), ([True, 3], "input"), ("abc", "input"), ([], "input"),
                                          ([0], "input"), ("4x3", "input"), (None, "output"), ({"a": 1}, "output")])
def test_a_shape_that_is_not_positive_integers_is_refused_naming_it_and_creates_nothing(svc, shape, field):
    alice = svc.client("alice")
    args = {"input": shape, "output": [3]} if field == "input" else {"input": [4], "output": shape}
    if shape is None:  # one shape without the other stays the usage error it was
        with pytest.raises(ValueError):
            alice.task("bad", **args)
    else:
        with pytest.raises(DataError) as error:
            alice.task("bad", **args)
        assert error.value.field == field and "positive integers" in error.value.expected
    assert [t.name for t in alice.tasks()] == []


@pytest.mark.parametrize("shape, program", [("64", "Tensor[64]"), ("8, 8,1", "Tensor[8,8,1]"), (4, "Tensor[4]"),
                                            ((np.int64(2), 3), "Tensor[2,3]")])
def test_a_shape_may_be_a_list_a_tuple_one_integer_or_the_command_lines_text(svc, shape, program):
    task = svc.client("alice").task(f"ok{abs(hash(str(shape))) % 1000}", input=shape, output=[3])
    assert program in task.refresh()["program"].replace(" ", ""), task.refresh()["program"]


def test_example_ids_and_k_must_be_integers(svc):
    task = svc.client("alice").task("ids", input=[4], output=[3])
    rng = np.random.default_rng(0)
    task.feed(rng.normal(size=(12, 4)).astype("float32"), rng.integers(0, 3, 12))
    before = [v["number"] for v in task.versions()]
    for kwargs, field in (({"drop": ["a"]}, "drop[0]"), ({"drop": [1, 2.0]}, "drop[1]"), ({"keep": "012"}, "keep"),
                          ({"keep": [True]}, "keep[0]")):
        with pytest.raises(DataError) as error:
            task.refine(**kwargs)
        assert error.value.field == field and "integer" in error.value.expected, kwargs
    assert [v["number"] for v in task.versions()] == before
    assert task.refine(drop=np.array([0, 1]))["n_examples"] == 10  # numpy integers are integers
    with pytest.raises(DataError) as error:
        task.suspicion(k="x")
    assert error.value.field == "k"
