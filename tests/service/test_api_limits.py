"""Limits a single user (or a caller with no token) meets at the API: a
route that takes no body reads none before the token is checked; an event
stream follows its token's rights while open and a user has a bounded
number of them; an account's admin flag is a JSON boolean; a task's tags
and a user's open uploads are bounded."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.parse

import numpy as np
import pytest
import tornado.httpclient
import tornado.websocket

from ease_jupyter.service.tag_limits import MAX_TAG_VALUE_CHARS, MAX_TAGS_PER_TASK
from ease_jupyter.service import websocket

from .conftest import start, until


def _raw_request(url: str, head: str, wait: float = 3.0) -> bytes:
    """Send ``head`` (request line and headers, no body) and read what comes back within ``wait`` seconds."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=wait) as conn:
        conn.sendall(head.encode())
        conn.settimeout(wait)
        try:
            return conn.recv(4096)
        except TimeoutError:
            return b""


def test_a_route_that_takes_no_body_answers_a_large_one_from_its_headers(svc):
    head = ("GET /api/v1/events HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Content-Length: 1048576\r\n\r\n")
    started = time.monotonic()
    answer = _raw_request(svc.url, head)
    assert answer.startswith(b"HTTP/1.1 4"), answer[:80]  # refused, not waiting for a megabyte that never comes
    assert time.monotonic() - started < 2.5


async def _stream(url: str, token: str):
    ws_url = url.replace("http://", "ws://") + "/api/v1/events"
    return await tornado.websocket.websocket_connect(
        tornado.httpclient.HTTPRequest(ws_url, headers={"Authorization": f"token {token}"}))


def test_an_open_stream_closes_once_its_token_is_revoked(svc, monkeypatch):
    monkeypatch.setattr(websocket, "RECHECK_SECONDS", 0.2)

    async def main():
        ws = await _stream(svc.url, svc.tokens["alice"])
        assert json.loads(await ws.read_message())["type"] == "hello"
        assert svc.call("DELETE", "/users/alice/tokens", "admin").status == 200
        ended = await asyncio.wait_for(ws.read_message(), 5)
        return ended, ws.close_code

    message, code = asyncio.run(main())
    assert message is None and code == websocket.POLICY_VIOLATION


def test_a_user_has_a_bounded_number_of_open_streams(svc, monkeypatch):
    monkeypatch.setattr(websocket, "MAX_STREAMS_PER_USER", 2)

    async def main():
        first, second = await _stream(svc.url, svc.tokens["alice"]), await _stream(svc.url, svc.tokens["alice"])
        with pytest.raises(tornado.httpclient.HTTPClientError) as refused:
            await _stream(svc.url, svc.tokens["alice"])
        others = await _stream(svc.url, svc.tokens["bob"])  # another user's count is her own
        first.close()
        await asyncio.sleep(0.3)
        again = await _stream(svc.url, svc.tokens["alice"])  # a closed stream frees its place
        for ws in (second, others, again):
            ws.close()
        return refused.value.code

    assert asyncio.run(main()) == 429


def test_an_accounts_admin_flag_must_be_a_json_boolean(svc):
    made = svc.call("POST", "/users", "admin", body={"name": "eve", "admin": "false"})
    assert made.status == 400 and made.body["error"]["field"] == "admin"
    assert "eve" not in [u["name"] for u in svc.call("GET", "/users", "admin").body]
    assert svc.call("POST", "/users", "admin", body={"name": "eve", "admin": False}).body["admin"] is False


def test_a_tasks_tags_are_bounded_in_number_length_and_characters(svc):
    assert svc.call("POST", "/tasks", "alice", body={"name": "t", "input": [2], "output": [2]}).status == 201
    too_many = {f"k{i}": "v" for i in range(MAX_TAGS_PER_TASK + 1)}
    for body, field in ((too_many, "tags"), ({"a\u0000b": "v"}, "tags"), ({"k": "v" * (MAX_TAG_VALUE_CHARS + 1)}, "tags.k"),
                        ({"k": "line\nbreak"}, "tags.k"), ({"x" * 200: "v"}, "tags")):
        answer = svc.call("PUT", "/tasks/t/tags", "alice", body=body)
        assert answer.status == 400 and answer.body["error"]["field"] == field, (field, answer.body)
    assert svc.call("PUT", "/tasks/t/tags", "alice", body={"source": "lab notebook"}).status == 200
    assert svc.call("GET", "/tasks/t/tags", "alice").body["source"] == "lab notebook"


def test_a_user_has_a_bounded_number_of_uploads_not_fed_yet(tmp_path, monkeypatch):
    from ease_jupyter.service import arrays

    monkeypatch.setattr(arrays, "MAX_OPEN_UPLOADS", 3)
    running = start(tmp_path)
    try:
        running.user("alice")
        running.user("bob")
        made = [running.call("POST", "/uploads", "alice").status for _ in range(3)]
        refused = running.call("POST", "/uploads", "alice")
        assert made == [201] * 3 and refused.status == 413 and refused.body["error"]["field"] == "uploads"
        assert running.call("POST", "/uploads", "bob").status == 201
    finally:
        running.thread.stop()


def test_a_versions_examples_come_in_pages_that_the_client_puts_back_together(svc, monkeypatch):
    from ease_jupyter.service import core

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(50, 4)).astype("float32"), rng.integers(0, 3, 50)
    task = svc.client("alice").task("pages", input=[4], output=[3])
    task.feed(X, y)
    monkeypatch.setattr(core, "EXAMPLES_PAGE_BYTES", 20 * (16 + 8 + 8))  # 20 rows of 4 floats, a label and an id
    first = svc.call("GET", "/tasks/pages/examples", "alice").body
    assert (first["offset"], first["total"], first["next_offset"]) == (0, 50, 20)
    small = svc.call("GET", "/tasks/pages/examples?offset=45&limit=3", "alice").body
    assert (small["offset"], small["next_offset"]) == (45, 48)
    last = svc.call("GET", "/tasks/pages/examples?offset=40", "alice").body
    assert last["next_offset"] is None
    ids, got_X, got_y = task.data()
    assert np.array_equal(ids, np.arange(50)) and np.array_equal(got_X, X) and np.array_equal(got_y, y)
    for query, field in (("offset=51", "offset"), ("offset=-1", "offset"), ("limit=0", "limit")):
        answer = svc.call("GET", f"/tasks/pages/examples?{query}", "alice")
        assert answer.status == 400 and answer.body["error"]["field"] == field


def test_a_page_of_examples_reads_only_the_feeds_that_hold_it(svc, monkeypatch):
    """A page costs its own feed chunks, not the whole version: with a later
    feed's blob gone, the pages before it still answer, and the page that
    needs it says which examples are unreadable."""
    from ease_jupyter.service import core

    rng = np.random.default_rng(1)
    task = svc.client("alice").task("chunks", input=[4], output=[3])
    for _ in range(3):
        task.feed(rng.normal(size=(10, 4)).astype("float32"), rng.integers(0, 3, 10), mode="append")
    store, blobs = svc.service.store, svc.service.blobs
    (chunks,) = [t for t in store.list_tasks() if t.name == "chunks"]
    version = store.latest_dataset_version(chunks.id)
    blobs.delete(store.list_chunks(version.task_id, up_to_version=version.id)[-1].x_blob)
    monkeypatch.setattr(core, "EXAMPLES_PAGE_BYTES", 15 * (16 + 8 + 8))  # 15 rows a page
    first = svc.call("GET", "/tasks/chunks/examples", "alice").body
    assert (first["offset"], first["total"], first["next_offset"]) == (0, 30, 15)
    second = svc.call("GET", "/tasks/chunks/examples?offset=15&limit=5", "alice")
    assert second.status == 200 and second.body["next_offset"] == 20
    broken = svc.call("GET", "/tasks/chunks/examples?offset=15", "alice")
    assert broken.status >= 500 and "examples 20 to 29" in json.dumps(broken.body), broken.body


def test_a_page_of_examples_reads_each_feed_chunk_once(svc, monkeypatch):
    """A page's chunks are read once each, the one at its offset included
    (a page is not sized by reading its first row on its own first)."""
    from collections import Counter

    from ease_jupyter.service import core

    rng = np.random.default_rng(2)
    task = svc.client("alice").task("once", input=[4], output=[3])
    for _ in range(3):
        task.feed(rng.normal(size=(10, 4)).astype("float32"), rng.integers(0, 3, 10), mode="append")
    task.cancel()  # its training jobs read the same chunks through the same blob store: none runs while counting
    assert until(lambda: svc.service.loop.n_running() == 0, 120)
    blobs = svc.service.blobs
    reads, get = Counter(), blobs.get_referenced
    monkeypatch.setattr(blobs, "get_referenced", lambda digest, what: (reads.update([digest]), get(digest, what))[1])
    monkeypatch.setattr(core, "EXAMPLES_PAGE_BYTES", 15 * (16 + 8 + 8))  # 15 rows a page
    page = svc.call("GET", "/tasks/once/examples?offset=5", "alice").body
    assert (page["offset"], page["next_offset"]) == (5, 20)
    assert reads and max(reads.values()) == 1, reads


def test_health_answers_while_every_read_thread_is_busy(svc):
    import threading

    from ease_jupyter.service import handlers

    release = threading.Event()
    busy = [handlers._READS.submit(release.wait, 30) for _ in range(handlers.READ_THREADS)]
    try:
        started = time.monotonic()
        assert svc.call("GET", "/health").body == {"status": "ok"}
        assert time.monotonic() - started < 5  # not after the slow reads
    finally:
        release.set()
        for future in busy:
            future.result(10)


def _parts(svc) -> list:
    return sorted(svc.service.uploads.directory.rglob("*.part"))


def test_uploads_are_dropped_when_their_feed_or_infer_fails_or_by_their_owner(svc, monkeypatch):
    from ease_jupyter import client as client_module
    from ease_jupyter.errors import DataError, EaseMLError

    monkeypatch.setattr(client_module, "INLINE_BYTES", 0)  # every array goes through an upload
    task = svc.client("alice").task("up", input=[4], output=[3])
    with pytest.raises(DataError):
        task.feed(np.zeros((5, 3), "float32"), np.zeros(5, "int64"))  # the wrong shape: refused
    assert _parts(svc) == []
    with pytest.raises(EaseMLError):
        task.infer(np.zeros((2, 4), "float32"))  # no model yet
    assert _parts(svc) == []
    made = svc.call("POST", "/uploads", "alice").body["id"]
    assert svc.call("DELETE", f"/uploads/{made}", "bob").status == 404  # not hers to drop
    assert svc.call("DELETE", f"/uploads/{made}", "alice").body == {"id": made, "deleted": True}
    assert svc.call("GET", f"/uploads/{made}", "alice").status == 404 and _parts(svc) == []


def test_an_event_stream_that_does_not_open_gives_up_at_its_timeout(svc, monkeypatch):
    from ease_jupyter import Client

    stalled = socket.socket()  # accepts connections, never answers
    stalled.bind(("127.0.0.1", 0))
    stalled.listen()
    try:
        client = Client(f"http://127.0.0.1:{stalled.getsockname()[1]}", "t")
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="did not open within 1 s"):
            client.events(timeout=1)
        assert time.monotonic() - started < 3
    finally:
        stalled.close()
    asked = []
    real = Client.events
    monkeypatch.setattr(Client, "events", lambda self, timeout=30.0: (asked.append(timeout), real(self, timeout))[1])
    task = svc.client("alice").task("w", input=[4], output=[3])
    task.wait(timeout=2)
    assert asked and asked[0] <= 2  # a wait opens its stream within its own time


def test_a_passive_stream_keeps_no_idle_service_running(svc):
    from ease_jupyter import Client

    client = Client(svc.url, svc.tokens["alice"])
    listening = client.events(passive=True)  # the magics' notifications
    try:
        assert wait_for(lambda: svc.service.passive_streams == 1)
        time.sleep(0.2)
        assert svc.service.idle_seconds() > 0  # no request, no running job, no active stream: idle
        watching = client.events()
        try:
            assert wait_for(lambda: svc.service.idle_seconds() == 0)  # a stream that watches keeps it busy
        finally:
            watching.close()
    finally:
        listening.close()
    assert wait_for(lambda: svc.service.passive_streams == 0)


def wait_for(predicate, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_an_event_stream_whose_connection_times_out_first_is_the_same_timeout(monkeypatch):
    """The connection's own timer is set to the stream's timeout: when it
    fires first, the caller gets the same TimeoutError, not an HTTP 599."""
    import tornado.httpclient
    import tornado.websocket

    from ease_jupyter import Client

    async def times_out(request, **kwargs):
        raise tornado.httpclient.HTTPClientError(599, "Timeout during request")

    monkeypatch.setattr(tornado.websocket, "websocket_connect", times_out)
    with pytest.raises(TimeoutError, match="did not open within 1 s"):
        Client("http://127.0.0.1:9", "t").events(timeout=1)
