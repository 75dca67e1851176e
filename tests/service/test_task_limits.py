"""Shapes that could never be fed are refused when the task is declared (400
naming ``input``/``output``/``program`` and the limit), and a task with no
candidate model says so in its status instead of sitting idle."""

from __future__ import annotations

import pytest

from ease_jupyter.errors import DataError
from ease_jupyter.schema import program_from_shapes
from ease_jupyter.schema import parse
from ease_jupyter.schema.limits import MAX_CLASSES, MAX_EXAMPLE_ELEMENTS, MAX_PROGRAM_CHARS, check_program_size

from .conftest import start


@pytest.mark.parametrize("inp, out, field, limit", [
    ([10**12], [2], "input", MAX_EXAMPLE_ELEMENTS),
    ([2**63], [2], "input", MAX_EXAMPLE_ELEMENTS),
    ([10**6, 10**6], [2], "input", MAX_EXAMPLE_ELEMENTS),
    ([1] * 40, [2], "input", 32),  # dimensions
    ([8, 8, 1], [10**9], "output", MAX_EXAMPLE_ELEMENTS),
    ([4], [10**6], "output", MAX_CLASSES),
])
def test_shapes_over_the_limits_are_refused_over_http(svc, inp, out, field, limit):
    r = svc.call("POST", "/tasks", "alice", body={"name": "big", "input": inp, "output": out})
    assert r.status == 400
    error = r.body["error"]
    assert error["field"] == field and str(limit) in error["expected"]
    assert svc.call("GET", "/tasks", "alice").body == []  # nothing created


@pytest.mark.parametrize("program, limit", [
    ("input: [4] output: [20000]", MAX_CLASSES),
    ("input: [5000, 5000] output: [2]", MAX_EXAMPLE_ELEMENTS),
    ("input: {[a :: Tensor[4096, 4096], b :: Tensor[2]], []} output: [2]", MAX_EXAMPLE_ELEMENTS),
    ("input: [4] output: [2] " + "#" * MAX_PROGRAM_CHARS, MAX_PROGRAM_CHARS),
])
def test_program_text_over_the_limits_is_refused(svc, program, limit):
    r = svc.call("POST", "/tasks", "alice", body={"name": "big", "program": program})
    assert r.status == 400 and r.body["error"]["field"] == "program" and str(limit) in r.body["error"]["expected"]


def test_shapes_at_the_limits_and_usual_ones_are_accepted(svc):
    for name, inp, out in (("iris", [4], [3]), ("img", [256, 256, 3], [10]), ("ae", [64, 64, 3], [64, 64, 3]),
                           ("edge", [MAX_EXAMPLE_ELEMENTS], [MAX_CLASSES])):
        assert svc.call("POST", "/tasks", "alice", body={"name": name, "input": inp, "output": out}).status == 201


def test_limits_hold_for_the_local_path_too():
    with pytest.raises(DataError) as caught:
        program_from_shapes([10**6, 10**6], [2])
    assert caught.value.field == "input"
    assert check_program_size(parse("input: [4] output: [3]")) == parse("input: [4] output: [3]")


def test_image_task_without_torch_has_no_candidates(tmp_path):
    running = start(tmp_path, torch=False)
    running.user("alice")
    try:
        running.call("POST", "/tasks", "alice", body={"name": "img", "input": [8, 8, 1], "output": [10]})
        task = running.call("GET", "/tasks/img", "alice").body
        assert task["candidates"] == 0 and task["status"] == "no_candidates" and "torch" in task["reason"]
    finally:
        running.thread.stop()


def test_task_with_no_candidate_model_says_so(svc):
    # Trees have no model in the zoo at all.
    svc.call("POST", "/tasks", "alice", body={"name": "tree", "program": "input: {[Tensor[4]], [left, right]} output: [2]"})
    task = svc.call("GET", "/tasks/tree", "alice").body
    assert task["candidates"] == 0 and task["status"] == "no_candidates" and task["reason"]
    flat = svc.call("POST", "/tasks", "alice", body={"name": "flat", "input": [4], "output": [3]}).body
    task = svc.call("GET", "/tasks/flat", "alice").body
    assert task["candidates"] > 0 and task["status"] == "no_data" and flat["name"] == "flat"
