"""GET /api/v1/events: a WebSocket of the caller's events, measured."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import tornado.httpclient
import tornado.websocket

from .conftest import IRIS_MODELS


async def _connect(url: str, token: str | None, *, header: bool = True):
    ws_url = url.replace("http://", "ws://") + "/api/v1/events"
    if token and not header:
        ws_url += f"?token={token}"
    headers = {"Authorization": f"token {token}"} if token and header else {}
    return await tornado.websocket.websocket_connect(tornado.httpclient.HTTPRequest(ws_url, headers=headers))


async def _collect(ws, until, timeout: float) -> list[dict]:
    out: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = await asyncio.wait_for(ws.read_message(), timeout=max(0.01, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            break
        if msg is None:
            break
        event = json.loads(msg)
        event["received"] = time.time()
        out.append(event)
        if until(out):
            break
    return out


def test_events_reach_only_the_owner_and_admins(svc, iris):
    X, y = iris

    async def main():
        alice = await _connect(svc.url, svc.tokens["alice"])
        bob = await _connect(svc.url, svc.tokens["bob"], header=False)  # ?token= form
        admin = await _connect(svc.url, svc.tokens["admin"])
        for ws, name in ((alice, "alice"), (bob, "bob"), (admin, "admin")):
            hello = json.loads(await ws.read_message())
            assert hello["type"] == "hello" and hello["user"] == name
        task = svc.client("alice").task("iris", input=[4], output=[3])
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, task.feed, X, y)

        def finished(events):
            return sum(e["type"] == "job" and e["status"] == "succeeded" for e in events) >= IRIS_MODELS

        got_alice, got_admin, got_bob = await asyncio.gather(
            _collect(alice, finished, 90), _collect(admin, finished, 90), _collect(bob, lambda e: False, 1.0))
        for ws in (alice, bob, admin):
            ws.close()
        return got_alice, got_admin, got_bob

    got_alice, got_admin, got_bob = asyncio.run(main())
    kinds = [e["type"] for e in got_alice]
    assert "task" in kinds and "version" in kinds
    done = [e for e in got_alice if e["type"] == "job" and e["status"] == "succeeded"]
    assert len(done) == IRIS_MODELS and all("val_score" in e["metrics"] for e in done)
    running = {e["job_id"] for e in got_alice if e["type"] == "job" and e["status"] == "running"}
    assert {e["job_id"] for e in done} <= running  # each job's life cycle is visible
    # Bob never sees alice's task: only the scheduler's decisions, anonymised.
    assert got_bob and all(e["type"] == "decision" and e["task"] is None and e["user"] == "user 2" for e in got_bob)
    assert "alice" not in json.dumps(got_bob) and "iris" not in json.dumps(got_bob)
    assert len([e for e in got_admin if e["type"] == "job" and e["status"] == "succeeded"]) == IRIS_MODELS
    seqs = [e["seq"] for e in got_alice]
    assert seqs == sorted(seqs)
    # Publish -> received by a client in this same process (which shares the GIL
    # with the service's threads): typically a few ms, worst cases a few 100 ms.
    latency = sorted(e["received"] - e["time"] for e in got_alice)
    assert latency[len(latency) // 2] < 0.1, f"median event delivery {latency[len(latency) // 2]:.3f} s"
    assert latency[-1] < 2.0, f"event delivery took up to {latency[-1]:.3f} s"


def test_events_need_a_token(svc):
    async def main():
        with pytest.raises(tornado.httpclient.HTTPClientError) as info:
            await _connect(svc.url, None)
        assert info.value.code == 401
        with pytest.raises(tornado.httpclient.HTTPClientError):
            await _connect(svc.url, "bad", header=False)
        ws = await _connect(svc.url, svc.tokens["alice"])
        await ws.read_message()
        ws.write_message("ping")
        assert json.loads(await ws.read_message())["type"] == "pong"
        ws.close()

    asyncio.run(main())


def test_tokens_in_the_query_are_not_logged(svc, caplog):
    from ease_jupyter.service.app import redact

    assert redact("/api/v1/events?token=abc&x=1") == "/api/v1/events?token=***&x=1"
    token = svc.tokens["alice"]

    async def main():
        ws = await _connect(svc.url, token, header=False)
        await ws.read_message()
        ws.close()

    with caplog.at_level("INFO", logger="tornado.access"):
        asyncio.run(main())
        time.sleep(0.2)
    assert "events?token=***" in caplog.text
    assert token not in caplog.text


def test_client_event_stream(svc, iris):
    from ease_jupyter.client import AuthError, Client

    X, y = iris
    client = svc.client("alice")
    with client.events() as stream:
        task = client.task("iris", input=[4], output=[3])
        task.feed(X, y)
        statuses = []
        for event in stream.iter(timeout=30):
            if event["type"] == "job":
                statuses.append(event["status"])
            if statuses.count("succeeded") == IRIS_MODELS:
                break
    assert statuses.count("succeeded") == IRIS_MODELS and "running" in statuses
    with pytest.raises(AuthError):
        Client(svc.url, "bad").events()
