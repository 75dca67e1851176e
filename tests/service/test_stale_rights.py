"""Rights are judged when a request runs, not only when its headers came:
a request whose token is revoked, or whose account is deleted, while its
body is on the way is 401 and does nothing, even where the store has given
the deleted account's id to a new one (as a SQLite database from before
migration 0004 can; ``lend_deleted_ids``); a body that never comes is cut off;
an event stream closes at once when its user's token is revoked or her
account deleted, and its recheck tells a new account with her id from her."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import time
import urllib.parse

import pytest
import tornado.httpclient
import tornado.websocket

from ease_jupyter.service import handlers, websocket

from .conftest import lend_deleted_ids, serving, until
from .test_hub_accounts import FakeHub


def _held(url: str, token: str, path: str, body: dict) -> tuple[http.client.HTTPConnection, bytes]:
    """A POST whose headers and first body byte are sent (so it passed its
    token check), the rest held back; (connection, the rest)."""
    parts = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    raw = json.dumps(body).encode()
    conn.putrequest("POST", "/api/v1" + path)
    conn.putheader("Authorization", f"token {token}")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(len(raw)))
    conn.endheaders()
    conn.send(raw[:1])
    return conn, raw[1:]


def _finish(held: tuple[http.client.HTTPConnection, bytes]) -> tuple[int, dict]:
    conn, rest = held
    conn.send(rest)
    answer = conn.getresponse()
    status, body = answer.status, json.loads(answer.read() or b"null")
    conn.close()
    return status, body


TASK = {"input": [4], "output": [3]}


@pytest.fixture
def judged(monkeypatch):
    """The (method, path) of each request whose token the service has judged
    from its headers (``prepare``): a held request is in once it passed."""
    seen: list[tuple[str, str]] = []
    authenticate = handlers.BaseHandler._authenticate

    async def counted(self):
        await authenticate(self)
        seen.append((self.request.method, self.request.path))

    monkeypatch.setattr(handlers.BaseHandler, "_authenticate", counted)
    return seen


def _passed(judged: list, *paths: str) -> bool:
    return all(("POST", "/api/v1" + path) in judged for path in paths)


def test_a_request_whose_token_is_revoked_while_its_body_streams_does_not_run(tmp_path, judged):
    with serving(tmp_path, "bob", admins=("admin",)) as run:
        held = _held(run.url, run.tokens["bob"], "/tasks", {"name": "after_revoke", **TASK})
        assert until(lambda: _passed(judged, "/tasks"), 10)  # prepare() has accepted the token
        assert run.call("DELETE", "/users/bob/tokens", "admin").status == 200
        status, body = _finish(held)
        assert status == 401 and body["error"]["code"] == "unauthorized", body
        bob = run.service.store.user_by_name("bob")
        assert not run.service.store.list_tasks(bob.id)


def test_a_deleted_users_held_requests_do_not_reach_the_account_that_gets_her_id(tmp_path, judged, monkeypatch):
    with serving(tmp_path, "bob", "ada", admins=("admin",)) as run:
        lend_deleted_ids(monkeypatch, run.service.store)
        ada_id = run.service.store.user_by_name("ada").id
        create = _held(run.url, run.tokens["ada"], "/tasks", {"name": "adas_task", **TASK})
        cancel = _held(run.url, run.tokens["ada"], "/tasks/carols_task/cancel", {})
        assert until(lambda: _passed(judged, "/tasks", "/tasks/carols_task/cancel"), 10)
        assert run.call("DELETE", "/users/ada", "admin").status == 200
        made = run.call("POST", "/users", "admin", body={"name": "carol"})
        assert made.status == 201
        assert made.body["id"] == ada_id  # the id lent again: what makes a stale request dangerous
        run.tokens["carol"] = made.body["token"]
        assert run.call("POST", "/tasks", "carol", body={"name": "carols_task", **TASK}).status == 201
        for held in (create, cancel):
            status, body = _finish(held)
            assert status == 401 and body["error"]["code"] == "unauthorized", body
        assert [t["name"] for t in run.call("GET", "/tasks", "carol").body] == ["carols_task"]
        assert run.call("GET", "/tasks/carols_task", "carol").body["cancelled"] is False


@pytest.fixture
def hub_mode(tmp_path, monkeypatch):
    pytest.importorskip("jupyterhub")
    from ease_jupyter.service import hub

    fake = FakeHub()
    monkeypatch.setattr(hub, "make_hub_auth", lambda *args, **kwargs: fake)
    with serving(tmp_path, admins=("admin",), jupyterhub=True) as running:
        yield running, fake


def test_a_held_request_of_a_deleted_hub_user_does_not_run_as_her_new_account(hub_mode, judged, monkeypatch):
    """Her hub token still works after the deletion and makes a new, empty
    account, with her old id: the held request was judged for the old one,
    so it is 401 (the same id is not the same account)."""
    run, fake = hub_mode
    lend_deleted_ids(monkeypatch, run.service.store)
    token = fake.add("ada")
    run.tokens["ada"] = token
    old = run.call("GET", "/whoami", "ada").body
    held = _held(run.url, token, "/tasks", {"name": "adas_task", **TASK})
    assert until(lambda: _passed(judged, "/tasks"), 10)
    assert run.call("DELETE", "/users/ada?origin=hub", "admin").status == 200
    status, body = _finish(held)
    assert status == 401 and body["error"]["code"] == "unauthorized", body
    new = run.service.store.user_by_name("ada", "hub")
    assert new.id == old["id"]  # her next look-up (the recheck) made the new account, with the same id
    assert not run.service.store.list_tasks(new.id)


def _connect_then_hold(url: str, head: str, wait: float) -> tuple[bytes, float]:
    """Send ``head`` and one byte of the body it declares; what comes back and when the connection ends."""
    parts = urllib.parse.urlsplit(url)
    started = time.monotonic()
    with socket.create_connection((parts.hostname, parts.port), timeout=wait) as conn:
        conn.sendall(head.encode() + b"{")
        got = b""
        try:
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                got += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return got, time.monotonic() - started


def test_a_body_that_never_comes_is_cut_off(tmp_path, monkeypatch):
    """After ``BODY_SECONDS`` (here 1 s), or on a route whose limit needs
    longer at ``MIN_BODY_BYTES_PER_SECOND`` after that (here: a JSON route,
    3 s), with no answer: nothing ran."""
    monkeypatch.setattr(handlers, "BODY_SECONDS", 1.0)
    with serving(tmp_path, "bob") as run:
        monkeypatch.setattr(handlers, "MIN_BODY_BYTES_PER_SECOND", run.service.config.max_json_bytes / 3)
        api = (f"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: token {run.tokens['bob']}\r\n"
               "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n")
        # a route that takes no body: tornado reads it whole before the handler, under the server's timeout
        events = ("GET /api/v1/events HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Content-Length: 100\r\n\r\n")
        got, took = _connect_then_hold(run.url, events, wait=10.0)
        assert got == b"" and took < 2.5, (got[:80], took)
        got, took = _connect_then_hold(run.url, api, wait=10.0)
        assert got == b"" and 2.5 < took < 8.0, (got[:80], took)


async def _stream(url: str, token: str):
    return await tornado.websocket.websocket_connect(tornado.httpclient.HTTPRequest(
        url.replace("http://", "ws://") + "/api/v1/events", headers={"Authorization": f"token {token}"}))


async def _until_closed(ws, seconds: float) -> tuple[list[dict], int | None]:
    """The events read until the stream closes (or ``seconds`` pass), and its close code."""
    events: list[dict] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            message = await asyncio.wait_for(ws.read_message(), max(0.01, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            break
        if message is None:
            return events, ws.close_code
        events.append(json.loads(message))
    return events, None


def test_revoking_a_token_closes_its_streams_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(websocket, "RECHECK_SECONDS", 60.0)  # not the periodic recheck

    async def main(run):
        ws = await _stream(run.url, run.tokens["bob"])
        assert json.loads(await ws.read_message())["type"] == "hello"
        started = time.monotonic()
        assert (await asyncio.to_thread(run.call, "DELETE", "/users/bob/tokens", "admin")).status == 200
        _, code = await _until_closed(ws, 3.0)
        return code, time.monotonic() - started

    with serving(tmp_path, "bob", admins=("admin",)) as run:
        code, took = asyncio.run(main(run))
    assert code == websocket.POLICY_VIOLATION and took < 3.0


def test_a_deleted_users_stream_closes_at_once_and_sees_nothing_of_the_account_with_her_id(tmp_path, monkeypatch):
    monkeypatch.setattr(websocket, "RECHECK_SECONDS", 60.0)

    async def main(run, ada_id):
        ws = await _stream(run.url, run.tokens["ada"])
        assert json.loads(await ws.read_message())["type"] == "hello"
        assert (await asyncio.to_thread(run.call, "DELETE", "/users/ada", "admin")).status == 200
        made = await asyncio.to_thread(run.call, "POST", "/users", "admin", body={"name": "carol"})
        assert made.body["id"] == ada_id
        run.tokens["carol"] = made.body["token"]
        created = await asyncio.to_thread(run.call, "POST", "/tasks", "carol", body={"name": "carol_private", **TASK})
        assert created.status == 201
        return await _until_closed(ws, 3.0)

    with serving(tmp_path, "bob", "ada", admins=("admin",)) as run:
        lend_deleted_ids(monkeypatch, run.service.store)
        events, code = asyncio.run(main(run, run.service.store.user_by_name("ada").id))
    assert code == websocket.POLICY_VIOLATION
    assert events == []  # not carol's task event


def test_a_streams_recheck_tells_a_new_account_with_the_same_id_from_its_own(hub_mode, monkeypatch):
    """With the immediate close out of the way (as for a stream that opened
    while the deletion ran), the recheck still closes a deleted hub user's
    stream: her token now gives a new account, with her id."""
    run, fake = hub_mode
    monkeypatch.setattr(websocket, "RECHECK_SECONDS", 0.2)
    monkeypatch.setattr(run.service.events, "close_user", lambda user_id: 0)
    lend_deleted_ids(monkeypatch, run.service.store)
    token = fake.add("ada")
    run.tokens["ada"] = token
    old_id = run.call("GET", "/whoami", "ada").body["id"]

    async def main():
        ws = await _stream(run.url, token)
        assert json.loads(await ws.read_message())["type"] == "hello"
        assert (await asyncio.to_thread(run.call, "DELETE", "/users/ada?origin=hub", "admin")).status == 200
        return await _until_closed(ws, 3.0)

    _, code = asyncio.run(main())
    assert code == websocket.POLICY_VIOLATION
    assert until(lambda: run.service.store.user_by_name("ada", "hub").id == old_id, timeout=2)
