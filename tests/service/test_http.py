"""The JSON API over real HTTP: auth, isolation, names, limits, errors, data."""

from __future__ import annotations

import base64
import io
import logging
import re
import sqlite3

import numpy as np
import pytest

from .conftest import http, start


def npy_b64(a) -> dict:
    buf = io.BytesIO()
    np.save(buf, np.asarray(a), allow_pickle=False)
    return {"npy_b64": base64.b64encode(buf.getvalue()).decode()}


def test_health_is_public_and_the_rest_needs_a_token(svc):
    assert svc.call("GET", "/health").body == {"status": "ok"}
    for path in ("/tasks", "/whoami", "/leaderboard", "/admin/progress", "/users"):
        r = svc.call("GET", path)
        assert r.status == 401, path
        assert r.body["error"]["code"] == "unauthorized" and r.body["error"]["field"] == "Authorization"
    assert svc.call("GET", "/tasks", token="not-a-token").status == 401
    ok = http(svc.url, "GET", "/api/v1/whoami", headers={"Authorization": f"Bearer {svc.tokens['alice']}"})
    assert ok.status == 200 and ok.body["name"] == "alice"


def test_tokens_are_stored_only_as_hashes(svc):
    r = svc.call("POST", "/users", "admin", body={"name": "carol"})
    assert r.status == 201 and r.body["name"] == "carol"
    token = r.body["token"]
    assert svc.call("GET", "/whoami", token=token).body["name"] == "carol"
    listed = svc.call("GET", "/users", "admin").body
    assert "carol" in {u["name"] for u in listed} and all("token" not in u for u in listed)
    import hashlib

    assert svc.service.store.user_by_name("carol").id == svc.service.store.user_by_token_hash(
        hashlib.sha256(token.encode()).hexdigest()).id
    assert svc.call("POST", "/users", "admin", body={"name": "carol"}).status == 409


def test_admin_only_routes(svc):
    assert svc.call("POST", "/users", "alice", body={"name": "eve"}).status == 403
    assert svc.call("GET", "/admin/progress", "alice").status == 403
    svc.call("POST", "/tasks", "alice", body={"name": "t", "input": [4], "output": [3]})
    progress = svc.call("GET", "/admin/progress", "admin").body
    assert {u["name"]: u["tasks"] for u in progress["users"]}["alice"] == 1
    assert "loop" in progress


@pytest.mark.parametrize("name", ["..", "a..b", "a/b", "x" * 65, "", "sp ace", "é"])
def test_bad_names_are_rejected(svc, name):
    r = svc.call("POST", "/tasks", "alice", body={"name": name, "input": [4], "output": [3]})
    assert r.status == 400
    assert r.body["error"]["field"] == "name" and "A-Z" in r.body["error"]["expected"]


def test_bad_name_in_url(svc):
    r = svc.call("GET", "/tasks/a..b", "alice")
    assert r.status == 400 and r.body["error"]["field"] == "task"
    assert svc.call("GET", "/tasks/%2e%2e%2fetc", "alice").status in (400, 404)


def test_two_users_are_isolated(svc):
    r = svc.call("POST", "/tasks", "alice", body={"name": "secret", "input": [4], "output": [3]})
    assert r.status == 201
    assert svc.call("POST", "/tasks", "alice", body={"name": "secret", "input": [4], "output": [3]}).status == 200
    for path in ("/tasks/secret", "/tasks/secret/jobs", "/tasks/secret/best", "/tasks/secret/versions"):
        mine, theirs, missing = (svc.call("GET", path, "alice"), svc.call("GET", path, "bob"),
                                 svc.call("GET", path.replace("secret", "nope"), "bob"))
        assert theirs.status == 404 and missing.status == 404
        assert theirs.body["error"]["code"] == missing.body["error"]["code"] == "not_found"
        assert "alice" not in theirs.body["error"]["message"]
    feed = svc.call("POST", "/tasks/secret/feed", "bob", body={"X": [[1, 2, 3, 4]], "y": [0]})
    assert feed.status == 404
    assert svc.call("GET", "/tasks", "bob").body == []
    # bob may use the same name for his own task
    assert svc.call("POST", "/tasks", "bob", body={"name": "secret", "input": [2], "output": [2]}).status == 201
    assert [t["program"] for t in svc.call("GET", "/tasks", "alice").body] == [
        "{input: {[Tensor[4]], []}, output: {[Tensor[3]], []}}"]


def test_errors_name_the_field(svc):
    r = svc.call("POST", "/tasks", "alice", body={"name": "p", "program": "input: [4 output: [3]"})
    assert r.status == 400 and r.body["error"]["code"] == "program_syntax"
    assert r.body["error"]["found"] is not None and r.body["error"]["expected"]
    r = svc.call("POST", "/tasks", "alice", body={"name": "p", "input": [0], "output": [3]})
    assert r.status == 400 and r.body["error"]["field"] == "input"
    svc.call("POST", "/tasks", "alice", body={"name": "p", "input": [4], "output": [3]})
    r = svc.call("POST", "/tasks", "alice", body={"name": "p", "input": [5], "output": [3]})
    assert r.status == 409 and r.body["error"]["code"] == "already_exists"
    r = svc.call("POST", "/tasks/p/feed", "alice", body={"X": npy_b64(np.zeros((3, 5), "float32")), "y": [0, 1, 2]})
    assert r.status == 400 and r.body["error"]["field"].startswith("X")
    r = svc.call("POST", "/tasks/p/feed", "alice", body={"X": npy_b64(np.zeros((3, 4), "float32")), "y": [0, 1, 7]})
    assert r.status == 400 and r.body["error"]["field"].startswith("y")
    r = svc.call("POST", "/tasks/p/feed", "alice", body={"X": {"npy_b64": "!!"}, "y": [0]})
    assert r.status == 400 and r.body["error"]["field"] == "X"
    r = svc.call("POST", "/tasks/p/feed", "alice", raw=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.body["error"]["field"] == "body"
    r = svc.call("POST", "/tasks/p/refine", "alice", body={"drop": [0]})
    assert r.status == 400
    assert svc.call("GET", "/tasks/p/best", "alice").status == 404
    assert svc.call("GET", "/no/such/route", "alice").status == 404
    assert svc.call("DELETE", "/tasks", "alice").status == 405
    assert svc.call("GET", "/tasks/p/versions", "alice").body == []  # nothing stored by the failures


def test_feed_refine_versions_provenance_tags(svc):
    svc.call("POST", "/tasks", "alice", body={"name": "d", "input": [2], "output": [2]})
    X = np.arange(20, dtype="float32").reshape(10, 2)
    v1 = svc.call("POST", "/tasks/d/feed", "alice", body={"X": npy_b64(X), "y": npy_b64(np.arange(10) % 2)})
    assert v1.status == 201 and v1.body["number"] == 1 and v1.body["n_examples"] == 10
    v2 = svc.call("POST", "/tasks/d/feed", "alice", body={"X": X[:2].tolist(), "y": [1, 0]})
    assert v2.body["number"] == 2 and v2.body["n_examples"] == 12
    v3 = svc.call("POST", "/tasks/d/refine", "alice", body={"drop": [0, 11]})
    assert v3.status == 201 and v3.body["kind"] == "refine" and v3.body["n_examples"] == 10
    assert [v["number"] for v in svc.call("GET", "/tasks/d/versions", "alice").body] == [1, 2, 3]
    prov = svc.call("GET", "/tasks/d/provenance", "alice").body
    assert sorted(e["kind"] for e in prov["edges"]) == ["feed", "feed", "refine"]
    assert [e["src"] for e in prov["edges"] if e["src"] is None] == [None]  # the first feed came from outside
    assert svc.call("GET", "/tasks/d/provenance?direction=sideways", "alice").status == 400
    ex = svc.call("GET", "/tasks/d/examples?version=3", "alice").body
    ids = np.load(io.BytesIO(base64.b64decode(ex["example_ids"]["npy_b64"])))
    assert 0 not in ids and 11 not in ids and len(ids) == 10
    assert svc.call("PUT", "/tasks/d/tags", "alice", body={"owner": "lab-3"}).body == {"owner": "lab-3"}
    assert svc.call("PUT", "/tasks/d/tags", "alice", body={"easeml.x": "1"}).status == 400
    assert svc.call("GET", "/tasks/d/tags", "alice").body == {"owner": "lab-3"}


def test_chunked_upload_then_feed(svc):
    svc.call("POST", "/tasks", "alice", body={"name": "big", "input": [8], "output": [3]})
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 8)).astype("float32")
    buf = io.BytesIO()
    np.save(buf, X)
    data = buf.getvalue()
    up = svc.call("POST", "/uploads", "alice")
    assert up.status == 201
    uid = up.body["id"]
    step = 10_000
    for off in range(0, len(data), step):
        r = svc.call("PUT", f"/uploads/{uid}?offset={off}", "alice", raw=data[off:off + step])
        assert r.status == 200 and r.body["size"] == min(off + step, len(data))
    bad = svc.call("PUT", f"/uploads/{uid}?offset=5", "alice", raw=b"xx")
    assert bad.status == 409 and str(len(data)) in bad.body["error"]["message"]
    assert svc.call("GET", f"/uploads/{uid}", "alice").body["size"] == len(data)
    assert svc.call("GET", f"/uploads/{uid}", "bob").status == 404  # uploads are per user
    r = svc.call("POST", "/tasks/big/feed", "alice", body={"X": {"upload": uid}, "y": npy_b64(np.arange(3000) % 3)})
    assert r.status == 201 and r.body["n_examples"] == 3000
    assert svc.call("GET", f"/uploads/{uid}", "alice").status == 404  # consumed
    again = svc.call("POST", "/tasks/big/feed", "alice", body={"X": {"upload": uid}, "y": [0, 1, 2]})
    assert again.status == 400 and again.body["error"]["field"] == "X.upload"  # a body naming a spent upload


def test_unreadable_npy_payload_names_no_internals(svc):
    svc.call("POST", "/tasks", "alice", body={"name": "t", "input": [2], "output": [2]})
    raw = base64.b64encode(b"\x93NUMPY garbage").decode()
    r = svc.call("POST", "/tasks/t/feed", "alice", body={"X": {"npy_b64": raw}, "y": [0]})
    assert r.status == 400 and r.body["error"]["field"] == "X"
    assert "Error" not in r.body["error"]["message"]  # no exception class name


def test_request_size_limits(tmp_path):
    r = start(tmp_path, max_json_bytes=1024, max_chunk_bytes=4096)
    try:
        r.user("alice")
        big = r.call("POST", "/tasks", "alice", body={"name": "x", "program": " " * 2000 + "input: [1] output: [2]"})
        assert big.status == 413
        err = big.body["error"]
        assert err["code"] == "too_large" and err["field"] == "body" and "uploads" in err["message"]
        uid = r.call("POST", "/uploads", "alice").body["id"]
        assert r.call("PUT", f"/uploads/{uid}?offset=0", "alice", raw=b"x" * 4000).status == 200
        r2 = r.call("PUT", f"/uploads/{uid}?offset=4000", "alice", raw=b"x" * 5000)
        assert r2.status == 413 and r2.body["error"]["expected"] == "at most 4096 bytes"
        assert r.call("GET", "/health").status == 200  # still serving
    finally:
        r.thread.stop()


def test_health_tells_only_admins_more(svc):
    assert svc.call("GET", "/health").body == {"status": "ok"}  # no version, workers or WebSocket count
    assert svc.call("GET", "/health", "alice").body == {"status": "ok"}
    assert svc.call("GET", "/health", token="made-up").body == {"status": "ok"}
    admin = svc.call("GET", "/health", "admin").body
    assert admin["status"] == "ok" and {"version", "workers", "subscribers"} <= set(admin)


@pytest.mark.parametrize("path", ["/tasks", "/tasks/n/feed", "/tasks/n/infer", "/tasks/n/refine", "/tasks/n/tags"])
def test_json_the_parser_cannot_take_is_a_400(svc, path):
    svc.call("POST", "/tasks", "alice", body={"name": "n", "input": [2], "output": [2]})
    method = "PUT" if path.endswith("/tags") else "POST"
    for raw in (b"[" * 1000 + b"]" * 1000, b'{"X": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"\xff\xfe{", b"[1, 2]"):
        r = svc.call(method, path, "alice", raw=raw, headers={"Content-Type": "application/json"})
        assert r.status == 400, (path, raw[:20], r.body)
        assert r.body["error"]["code"] == "bad_data" and r.body["error"]["field"] == "body"


def test_an_internal_error_names_no_internals(svc, caplog, tmp_path):
    """A failure we did not foresee is a 500 with an error id; the SQL, the
    path and the exception go to the service log under that id only."""
    def broken(caller):  # noqa: ANN001
        raise sqlite3.OperationalError(f"SELECT token_hash FROM users; unable to open {tmp_path}/store.sqlite")

    svc.service.list_tasks = broken
    with caplog.at_level(logging.ERROR, logger="ease_jupyter.service.handlers"):
        r = svc.call("GET", "/tasks", "alice")
    assert r.status == 500 and r.body["error"]["code"] == "internal"
    text = str(r.body)
    for leak in ("SELECT", "token_hash", str(tmp_path), "OperationalError", "sqlite"):
        assert leak not in text, leak
    error_id = re.search(r"error id ([0-9a-f]+)", r.body["error"]["message"]).group(1)
    logged = [rec for rec in caplog.records if error_id in rec.getMessage()]
    assert logged and "SELECT token_hash" in str(logged[0].exc_info[1])


def test_a_filesystem_permission_error_is_not_a_403(svc, tmp_path):
    def broken(caller):  # noqa: ANN001
        raise PermissionError(13, "Permission denied", str(tmp_path / "blobs"))

    svc.service.list_tasks = broken
    r = svc.call("GET", "/tasks", "alice")
    assert r.status == 500 and str(tmp_path) not in str(r.body) and "Errno" not in str(r.body)
    assert svc.call("GET", "/users", "alice").status == 403  # our own "admin rights needed" stays a 403


def test_405_lists_the_allowed_methods(svc):
    r = svc.call("DELETE", "/tasks", "alice")
    assert r.status == 405 and r.headers["Allow"] == "GET, POST" and r.body["error"]["field"] == "method"
    r = svc.call("PATCH", "/health")
    assert r.status == 405 and r.headers["Allow"] == "GET"
    r = svc.call("PUT", "/events", "alice")
    assert r.status == 405 and r.headers["Allow"] == "GET"
    assert r.headers["Content-Type"].startswith("application/json")


def test_events_without_an_upgrade_is_a_json_426(svc):
    r = svc.call("GET", "/events", "alice")
    assert r.status == 426 and r.headers["Content-Type"].startswith("application/json")
    assert r.body["error"]["code"] == "upgrade_required" and r.headers["Upgrade"] == "websocket"
    assert svc.call("GET", "/events").status == 401
