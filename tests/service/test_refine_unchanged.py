"""A refine that changes no example's state returns the latest version (200)
and starts nothing; one that does change something creates a version (201)."""

from __future__ import annotations

import time

import numpy as np

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.store import open_store

from .conftest import until


def test_datasets_refine_reuses_the_latest_version_when_nothing_changes(tmp_path):
    store, blobs = open_store("memory://", tmp_path)
    try:
        user = store.create_user("alice", None)
        record = store.create_task(user.id, "t", format_program(program_from_shapes([2], [2])))
        fed = datasets.feed(store, blobs, record, np.zeros((6, 2), "float32"), np.arange(6) % 2)
        for keep, drop in (([], None), (None, []), ([0, 1], None)):  # nothing, nothing, ids already on
            version, created = datasets.refine_or_reuse(store, blobs, record, keep=keep, drop=drop)
            assert (version.id, created) == (fed.id, False)
        dropped, created = datasets.refine_or_reuse(store, blobs, record, drop=[0, 1])
        assert created and dropped.n_examples == 4
        again, created = datasets.refine_or_reuse(store, blobs, record, drop=[1, 0])  # already off
        assert (again.id, created) == (dropped.id, False)
        assert datasets.refine(store, blobs, record, keep=[2], drop=[0]).id == dropped.id  # the plain refine agrees
        assert [v.number for v in store.list_dataset_versions(record.id)] == [1, 2]
    finally:
        store.close()


def test_http_refine_unchanged_answers_200_and_starts_no_job(svc):
    svc.call("POST", "/tasks", "alice", body={"name": "r", "input": [2], "output": [2]})
    X = np.arange(24, dtype="float32").reshape(12, 2)
    fed = svc.call("POST", "/tasks/r/feed", "alice", body={"X": X.tolist(), "y": (np.arange(12) % 2).tolist()}).body
    assert until(lambda: svc.call("GET", "/tasks/r", "alice").body["idle"], 120)
    jobs = len(svc.call("GET", "/tasks/r/jobs", "alice").body)

    for body in ({"keep": []}, {"drop": []}, {"keep": [0, 5]}):
        r = svc.call("POST", "/tasks/r/refine", "alice", body=body)
        assert r.status == 200, body
        assert r.body["id"] == fed["id"] and r.body["number"] == 1
    # Several turns later: still one version, no new job, still idle.
    time.sleep(0.5)
    assert [v["number"] for v in svc.call("GET", "/tasks/r/versions", "alice").body] == [1]
    assert len(svc.call("GET", "/tasks/r/jobs", "alice").body) == jobs
    assert svc.call("GET", "/tasks/r", "alice").body["idle"]

    changed = svc.call("POST", "/tasks/r/refine", "alice", body={"drop": [3]})
    assert changed.status == 201 and changed.body["number"] == 2
    repeat = svc.call("POST", "/tasks/r/refine", "alice", body={"drop": [3]})
    assert repeat.status == 200 and repeat.body["id"] == changed.body["id"]
    # The client still returns the version either way.
    assert svc.client("alice").task("r").refine(drop=[3])["number"] == 2
