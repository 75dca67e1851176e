"""Large arrays of one request share uploads: a table of more large columns
than a user may hold uploads (``arrays.MAX_OPEN_UPLOADS``) feeds and infers,
each column a part of an upload (``{"upload", "offset", "size"}``); a string
column costs its UTF-8 size on the wire and in her quota; a part that is not
in its upload is refused naming the field."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ease_jupyter import client as client_module
from ease_jupyter.errors import DataError
from ease_jupyter.service.arrays import MAX_OPEN_UPLOADS, to_npy_bytes

from .conftest import start

COLUMNS = MAX_OPEN_UPLOADS + 6  # 70: more than one upload each could hold


def parts(running) -> list:
    return sorted(running.service.uploads.directory.rglob("*.part"))


def wide(rows: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({f"c{i}": rng.normal(size=rows) for i in range(COLUMNS)})
    frame["y"] = np.where(frame["c0"] > 0, "up", "down")
    return frame


@pytest.fixture
def counted_uploads(monkeypatch):
    """The POST /uploads the client sends, counted; every array of 64 bytes or more goes through an upload."""
    monkeypatch.setattr(client_module, "INLINE_BYTES", 64)
    made = []
    real = client_module.Client.request

    def request(self, method, path, *args, **kwargs):
        if (method, path) == ("POST", "/uploads"):
            made.append(path)
        return real(self, method, path, *args, **kwargs)

    monkeypatch.setattr(client_module.Client, "request", request)
    return made


def test_a_table_of_more_large_columns_than_open_uploads_feeds_and_infers(svc, counted_uploads):
    frame = wide()
    task = svc.client("alice").task("wide", like=frame, target="y")
    fed = task.feed(frame)
    assert fed["n_examples"] == len(frame) and fed["created"]
    assert counted_uploads == ["/uploads"]  # 70 columns, one upload
    assert parts(svc) == []
    _, X, _ = task.data()
    pd.testing.assert_frame_equal(X[frame.columns[:-1]], frame.drop(columns="y"), check_dtype=False)
    assert task.wait(timeout=180)
    assert len(task.infer(frame.drop(columns="y"))) == len(frame)
    assert len(counted_uploads) == 2 and parts(svc) == []


def test_a_request_larger_than_a_pack_takes_several_uploads(svc, counted_uploads, monkeypatch):
    monkeypatch.setattr(client_module, "PACK_BYTES", 2_000)  # each column's .npy is 448 bytes: 4 to an upload
    frame = wide(rows=40)
    task = svc.client("alice").task("wide", like=frame, target="y")
    assert task.feed(frame)["n_examples"] == len(frame)
    assert len(counted_uploads) == -(-COLUMNS // 4)
    assert parts(svc) == []
    _, X, _ = task.data()
    np.testing.assert_array_equal(X["c69"].to_numpy(), frame["c69"].to_numpy())


def test_the_uploads_of_a_wide_feed_that_fails_are_dropped(svc, counted_uploads):
    frame = wide()
    task = svc.client("alice").task("wide", like=frame, target="y")
    with pytest.raises(DataError):
        task.feed(frame.assign(y=["sideways"] * len(frame)))  # no such class: refused after the upload
    assert counted_uploads == ["/uploads"] and parts(svc) == []


def test_a_part_that_is_not_in_its_upload_is_named(svc):
    alice = svc.client("alice")
    alice.task("t", input=[2], output=[2])
    data = to_npy_bytes(np.zeros((4, 2), "float32"))
    made = svc.call("POST", "/uploads", "alice").body["id"]
    assert svc.call("PUT", f"/uploads/{made}?offset=0", "alice", raw=data * 2).status == 200
    y = [0, 1, 0, 1]
    for part, field in (({"offset": len(data), "size": len(data) + 1}, "X.size"),
                        ({"offset": -1, "size": 4}, "X.offset"),
                        ({"offset": 0, "size": True}, "X.size"),
                        ({"offset": 0}, "X.size")):
        answer = svc.call("POST", "/tasks/t/feed", "alice", body={"X": {"upload": made, **part}, "y": y})
        assert answer.status == 400 and answer.body["error"]["field"] == field, answer.body
        made = svc.call("POST", "/uploads", "alice").body["id"]  # the feed consumed the last one
        assert svc.call("PUT", f"/uploads/{made}?offset=0", "alice", raw=data * 2).status == 200
    second = svc.call("POST", "/tasks/t/feed", "alice",
                      body={"X": {"upload": made, "offset": len(data), "size": len(data)}, "y": y})
    assert second.status == 201 and second.body["n_examples"] == 4
    assert parts(svc) == []


def test_a_long_string_costs_its_own_size_on_the_wire_and_in_the_quota(tmp_path, monkeypatch):
    """10,000 rows, one value of 2,000 characters: as numpy unicode every
    row would cost 8 kB (80 MB, 20 times the quota); as UTF-8 the feed and
    what it stores are a few hundred kB."""
    running = start(tmp_path, quota_bytes=4 * 1024 * 1024)
    running.user("alice")
    sent = []
    real_send = client_module._Transport.send
    monkeypatch.setattr(client_module._Transport, "send", lambda self, method, target, data, headers: (
        sent.append(len(data or b"")), real_send(self, method, target, data, headers))[1])
    try:
        n = 10_000
        colour = np.array(["red", "green", "blue", "amber"] * (n // 4), dtype=object)
        colour[17] = "x" * 2_000
        frame = pd.DataFrame({"colour": colour, "size": np.arange(n, dtype=float), "y": ["a", "b"] * (n // 2)})
        task = running.client("alice").task("notes", like=frame, target="y", kinds={"colour": "categorical"})
        sent.clear()
        assert task.feed(frame)["n_examples"] == n
        assert sum(sent) < 600_000
        service = running.service
        owner = service.store.user_by_name("alice")
        assert service.quota.usage(service.store, service.blobs, owner.id).data < 500_000
        _, X, _ = task.data()
        assert X["colour"].tolist() == colour.tolist()
    finally:
        running.thread.stop()
