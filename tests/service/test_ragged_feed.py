"""Labels that are not even an array (ragged lists) are a named refusal, not a 500."""

from __future__ import annotations


def test_ragged_labels_are_refused_naming_the_field(svc):
    assert svc.call("POST", "/tasks", "alice", body={"name": "t", "input": [3], "output": [3]}).status == 201
    r = svc.call("POST", "/tasks/t/feed", "alice", body={"X": [[1, 2, 3]], "y": [[[], 2.0, ["a"]]]})
    assert r.status == 400, r.body
    assert r.body["error"]["field"].startswith("y")
    assert svc.call("GET", "/tasks/t", "alice").body.get("n_examples", 0) in (0, None)
