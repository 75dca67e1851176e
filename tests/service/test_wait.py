"""Task.wait waits on the event stream: it returns promptly after the last
job finishes without polling, and falls back to polling when the stream
cannot be opened or drops."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from ease_jupyter.client import EventStream

from .conftest import IRIS_MODELS


def _when(iso: str) -> float:
    stamp = datetime.fromisoformat(iso)
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()


def _count_task_gets(task) -> list[float]:
    """Record when the client fetches the task's state (what polling would repeat)."""
    calls: list[float] = []
    original = task.client.request

    def request(method, path, *args, **kwargs):
        if method == "GET" and path == task._path():
            calls.append(time.time())
        return original(method, path, *args, **kwargs)

    task.client.request = request
    return calls


def test_wait_returns_promptly_on_events_without_polling(svc, iris):
    task = svc.client("alice").task("iris", input=[4], output=[3])
    calls = _count_task_gets(task)
    task.feed(*iris)
    # poll=30: were wait() polling, it could not return within seconds of the last job.
    assert task.wait(timeout=120, poll=30)
    returned = time.time()
    fetched = len(calls)
    jobs = task.jobs()
    finished = [_when(j["finished_at"]) for j in jobs if j["finished_at"]]
    assert len(finished) == len(jobs) == IRIS_MODELS and task.refresh()["idle"]
    lag = returned - max(finished)
    assert 0 <= lag < 2.0, f"wait returned {lag:.2f} s after the last job finished"
    # One fetch at the start, at most one per finished job (each job's final
    # event) and one for the task's "idle" event: no polling.
    assert fetched <= 2 + len(jobs), fetched


def test_wait_times_out(svc, iris):
    task = svc.client("alice").task("slow", input=[4], output=[3])
    task.feed(*iris)
    started = time.monotonic()
    assert task.wait(timeout=0.05) is False  # six grids cannot all train this fast
    assert time.monotonic() - started < 10.0  # its timeout, not the grids' time (slack for a loaded machine)


def test_wait_falls_back_to_polling_when_the_stream_is_unavailable(svc, iris, monkeypatch):
    client = svc.client("alice")
    task = client.task("iris", input=[4], output=[3])

    def refused(self, timeout=30.0):
        raise ConnectionRefusedError("no WebSocket through this proxy")

    monkeypatch.setattr(type(client), "events", refused)
    calls = _count_task_gets(task)
    task.feed(*iris)
    assert task.wait(timeout=120, poll=0.05)
    assert len(calls) > 1  # it polled


def test_wait_falls_back_to_polling_when_the_stream_drops(svc, iris, monkeypatch):
    client = svc.client("alice")
    task = client.task("iris", input=[4], output=[3])
    opened: list[EventStream] = []

    def dropping(self, timeout=30.0):
        stream = EventStream(self)
        stream.close()  # the connection goes away right after it opened
        opened.append(stream)
        return stream

    monkeypatch.setattr(type(client), "events", dropping)
    task.feed(*iris)
    started = time.monotonic()
    assert task.wait(timeout=120, poll=0.05)
    assert opened and not opened[0].alive
    assert time.monotonic() - started < 120
    assert task.refresh()["idle"] and len(task.jobs()) == IRIS_MODELS


def test_event_stream_close_is_prompt(svc):
    stream = svc.client("alice").events()
    assert stream.alive
    started = time.monotonic()
    stream.close()
    assert time.monotonic() - started < 1.0 and not stream.alive
    assert stream.get(timeout=0.1) is None


def test_wait_on_an_idle_task_returns_at_once(svc):
    task = svc.client("alice").task("empty", input=[4], output=[3])
    started = time.monotonic()
    assert task.wait(timeout=0.5)  # no data: nothing to do
    assert time.monotonic() - started < 1.0
