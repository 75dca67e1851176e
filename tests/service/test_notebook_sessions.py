"""Notebook sessions (docs/service.md, "Notebook sessions"): a Client in a
kernel registers with the service, heartbeats over its event stream, is
listed by GET /api/v1/notebooks (the caller's; admins: everyone's), is gone
after the timeout, and is learnt again by a restarted service; another
user's kernel id or session id is refused and changes nothing."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from ease_jupyter import kernel_info, notebook_session
from ease_jupyter.client import AuthError, Client
from ease_jupyter.errors import DataError, InvalidStateError, NotFoundError
from ease_jupyter.kernel_info import KernelInfo
from ease_jupyter.service import ServiceConfig, ServiceThread

from .conftest import Running, serving, start, until

BEAT = 0.2  # seconds between heartbeats in these tests


@pytest.fixture
def in_a_kernel(monkeypatch):
    """``Client()`` believes it runs in kernel ``k-alice`` of notebook ``work/a.ipynb``."""
    facts = {"info": KernelInfo(hub_user="alice", server_name="gpu", kernel_id="k-alice",
                                notebook_path="work/a.ipynb")}
    monkeypatch.setattr(kernel_info, "current", lambda: facts["info"])
    monkeypatch.setenv(notebook_session.HEARTBEAT_ENV, str(BEAT))
    monkeypatch.delenv(notebook_session.REGISTER_ENV, raising=False)
    yield facts
    with notebook_session._attached_lock:
        sessions = list(notebook_session._attached.values())
        notebook_session._attached.clear()
    for session in sessions:
        session.stop()


def _service(tmp_path, **config) -> Running:
    running = start(tmp_path, **config)
    running.user("admin", admin=True)
    running.user("alice")
    running.user("bob")
    return running


@pytest.fixture
def short(tmp_path):
    with serving(tmp_path, "alice", "bob", admins=("admin",), notebook_timeout_seconds=1.5) as running:
        yield running


def _sessions(running: Running, who: str) -> list[dict]:
    response = running.call("GET", "/notebooks", who)
    assert response.status == 200, response.body
    return response.body


def _stable(sessions: list[dict]) -> list[dict]:
    """The sessions without the one field that changes by itself (the clock)."""
    return [{k: v for k, v in s.items() if k != "seconds_since_seen"} for s in sessions]


def test_a_client_in_a_kernel_registers_and_records_the_tasks_it_touches(short, in_a_kernel):
    alice = short.client("alice")
    assert alice.notebook is not None
    assert until(lambda: len(_sessions(short, "alice")) == 1, 10)
    alice.task("iris", input=[4], output=[3])
    assert until(lambda: _sessions(short, "alice")[0]["tasks"] == ["iris"], 10)
    (session,) = alice.notebooks()
    assert session["id"] == alice.notebook.id
    assert {k: session[k] for k in ("user", "kernel_id", "hub_user", "server_name", "notebook_path", "gateway")} == {
        "user": "alice", "kernel_id": "k-alice", "hub_user": "alice", "server_name": "gpu",
        "notebook_path": "work/a.ipynb", "gateway": None}
    assert session["alive"] and session["connected"]
    # A second Client of the same kernel and service shares the session (one registration per kernel).
    again = Client(alice.url, alice.token)
    assert again.notebook is alice.notebook
    again.task("iris")
    assert alice.notebook.tasks == ["iris"]
    assert len(_sessions(short, "alice")) == 1


def test_each_user_sees_her_sessions_and_admins_everyones(short, in_a_kernel):
    short.client("alice")
    in_a_kernel["info"] = KernelInfo(kernel_id="k-bob", notebook_path="b.ipynb")
    short.client("bob")
    assert until(lambda: len(_sessions(short, "admin")) == 2, 10)
    assert [(s["user"], s["kernel_id"]) for s in _sessions(short, "alice")] == [("alice", "k-alice")]
    assert [(s["user"], s["kernel_id"]) for s in _sessions(short, "bob")] == [("bob", "k-bob")]
    assert sorted((s["user"], s["kernel_id"]) for s in _sessions(short, "admin")) == [
        ("alice", "k-alice"), ("bob", "k-bob")]
    alice_id = _sessions(short, "alice")[0]["id"]
    assert short.call("GET", f"/notebooks/{alice_id}", "admin").body["user"] == "alice"
    assert short.call("GET", f"/notebooks/{alice_id}", "bob").status == 404
    assert short.call("GET", "/notebooks").status == 401


def test_heartbeats_keep_a_session_alive_and_silence_marks_it_gone(short, in_a_kernel):
    alice = short.client("alice")
    assert until(lambda: _sessions(short, "alice") and _sessions(short, "alice")[0]["connected"], 10)
    time.sleep(2 * short.service.notebooks.timeout)  # two timeouts: only the heartbeats keep it
    (session,) = _sessions(short, "alice")
    assert session["alive"] and session["seconds_since_seen"] < short.service.notebooks.timeout
    alice.notebook.stop()  # the kernel died: its stream closes, no more heartbeats
    assert until(lambda: not _sessions(short, "alice")[0]["connected"], 5)
    assert until(lambda: not _sessions(short, "alice")[0]["alive"], 5)
    (gone,) = _sessions(short, "alice")  # still listed, as gone
    assert gone["id"] == session["id"] and gone["seconds_since_seen"] > 1.5
    assert short.service.notebooks.sessions_of(short.service.store.user_by_name("alice").id, alive_only=True) == []


def test_a_closed_stream_is_not_gone_before_the_timeout(tmp_path, in_a_kernel):
    running = _service(tmp_path, notebook_timeout_seconds=30.0)
    try:
        alice = running.client("alice")
        assert until(lambda: _sessions(running, "alice") and _sessions(running, "alice")[0]["connected"], 10)
        alice.notebook.stop()
        assert until(lambda: not _sessions(running, "alice")[0]["connected"], 5)
        assert _sessions(running, "alice")[0]["alive"]  # a network blip: kept until 30 s pass
    finally:
        running.thread.stop()


def test_a_restarted_service_learns_the_session_again(tmp_path, in_a_kernel):
    first = _service(tmp_path, notebook_timeout_seconds=5.0)
    port = first.thread.port
    alice = first.client("alice")
    alice.task("iris", input=[4], output=[3])
    assert until(lambda: _sessions(first, "alice") and _sessions(first, "alice")[0]["tasks"] == ["iris"], 10)
    old_id = alice.notebook.id
    first.thread.stop()
    second = Running(ServiceThread(ServiceConfig(data_dir=tmp_path, port=port, tick_seconds=0.05,
                                                 executor="thread", notebook_timeout_seconds=5.0)).start())
    second.tokens = first.tokens  # the users and tokens are in the store
    try:
        assert until(lambda: len(_sessions(second, "alice")) == 1, 20)
        (session,) = _sessions(second, "alice")
        assert session["kernel_id"] == "k-alice" and session["tasks"] == ["iris"] and session["alive"]
        assert session["id"] == alice.notebook.id != old_id
        assert alice.notebook.registrations >= 2
    finally:
        second.thread.stop()


def test_a_new_client_ends_the_back_off_after_the_service_comes_back(tmp_path, in_a_kernel, monkeypatch):
    """The session waits longer after each failed attempt (here 60 s after the
    first); her next ``Client()`` in the kernel makes it register at once."""
    monkeypatch.setenv(notebook_session.HEARTBEAT_ENV, "30")
    first = _service(tmp_path, notebook_timeout_seconds=5.0)
    port, token = first.thread.port, first.tokens["alice"]
    first.thread.stop()
    url = f"http://127.0.0.1:{port}"
    session = Client(url, token).notebook
    assert until(lambda: session.failures >= 1, 10) and session.registrations == 0
    second = Running(ServiceThread(ServiceConfig(data_dir=tmp_path, port=port, tick_seconds=0.05,
                                                 executor="thread", notebook_timeout_seconds=5.0)).start())
    second.tokens = first.tokens
    try:
        time.sleep(1.0)
        assert session.registrations == 0  # still waiting out the back-off
        assert Client(url, token).notebook is session
        assert until(lambda: len(_sessions(second, "alice")) == 1, 10)
        # (the client counts the registration once its answer is back, a moment after the service stored it)
        assert until(lambda: session.registrations == 1, 10) and session.registrations == 1
    finally:
        second.thread.stop()


def test_a_kernel_id_of_another_users_session_is_refused_and_changes_nothing(short):
    created = short.call("POST", "/notebooks", "alice", body={"kernel_id": "k1", "notebook_path": "a.ipynb",
                                                              "server_name": "gpu", "tasks": ["secret-task"]})
    assert created.status == 201
    before = _sessions(short, "alice")
    forged = short.call("POST", "/notebooks", "bob", body={"kernel_id": "k1", "notebook_path": "evil.ipynb",
                                                           "tasks": ["x"]})
    assert forged.status == 403, forged.body
    error = forged.body["error"]
    assert (error["code"], error["field"], error["found"]) == ("forbidden", "kernel_id", "k1")
    assert error["expected"] and "kernel_id" in error["message"]
    # Nothing of alice's session in the refusal: not her name, session id, notebook, server or tasks.
    for secret in ("alice", created.body["id"], "a.ipynb", "gpu", "secret-task", "alive", "gone"):
        assert secret not in json.dumps(forged.body), secret
    assert _stable(_sessions(short, "alice")) == _stable(before)
    assert _sessions(short, "bob") == []
    # The same user's kernel id again: the kernel reconnected; same session, updated.
    again = short.call("POST", "/notebooks", "alice", body={"kernel_id": "k1", "notebook_path": "b.ipynb"})
    assert again.status == 200 and again.body["id"] == created.body["id"] and again.body["notebook_path"] == "b.ipynb"


def test_a_gone_session_keeps_its_kernel_id_from_other_users(short):
    """Gone is not dead (a stream down longer than the timeout): another
    user who learnt the kernel id cannot take it, in either kind of gone,
    and the refusal reads the same as for a live session; her kernel coming
    back finds its own session, and her heartbeat and goodbye stay hers."""
    created = short.call("POST", "/notebooks", "alice", body={"kernel_id": "k1", "notebook_path": "a.ipynb"})
    sid = created.body["id"]
    live = short.call("POST", "/notebooks", "bob", body={"kernel_id": "k1"})
    assert live.status == 403
    assert until(lambda: not _sessions(short, "alice")[0]["alive"], timeout=30, every=0.1)  # timed out
    timed_out = short.call("POST", "/notebooks", "bob", body={"kernel_id": "k1", "notebook_path": "b.ipynb"})
    assert timed_out.status == 403 and timed_out.body == live.body  # the refusal tells nothing of her state
    assert short.call("DELETE", f"/notebooks/{sid}", "alice").status == 200  # ended: her own goodbye
    ended = short.call("POST", "/notebooks", "bob", body={"kernel_id": "k1"})
    assert ended.status == 403 and ended.body == live.body
    assert _sessions(short, "bob") == []
    for method, path in (("POST", f"/notebooks/{sid}/heartbeat"), ("DELETE", f"/notebooks/{sid}")):
        assert short.call(method, path, "bob").status == 404
    # Her kernel registers again: the same session, alive, with its kernel id.
    back = short.call("POST", "/notebooks", "alice", body={"kernel_id": "k1"})
    assert back.status == 200 and back.body["id"] == sid and back.body["alive"] and back.body["kernel_id"] == "k1"


def test_a_kernel_id_stays_with_its_user_until_her_session_is_forgotten():
    from ease_jupyter.service.notebooks import FORGET_AFTER, KernelIdTaken, NotebookRegistry

    now = [1000.0]
    registry = NotebookRegistry(timeout=10.0, clock=lambda: now[0])
    alices, _ = registry.register(1, "alice", {"kernel_id": "k1", "notebook_path": "a.ipynb"})
    for later in (10.0, 0.5, 3600.0):  # at the timeout (alive), just after it, an hour later (gone)
        now[0] += later
        with pytest.raises(KernelIdTaken) as refused:
            registry.register(2, "bob", {"kernel_id": "k1"})
        assert refused.value.field == "kernel_id" and refused.value.found == "k1"
        assert registry.sessions_of(2) == [] and alices.kernel_id == "k1"
    # A heartbeat over the stream brings her session back with its kernel id.
    assert registry.heartbeat(1, alices.id).alive(now[0], registry.timeout) and alices.kernel_id == "k1"
    now[0] += FORGET_AFTER + 11.0  # forgotten: the id is nobody's any more
    bobs, created = registry.register(2, "bob", {"kernel_id": "k1"})
    assert created and bobs.kernel_id == "k1" and registry.sessions_of(1) == []


def test_the_same_hub_user_under_a_relinked_account_takes_her_kernel_id_over():
    """``easeml users link`` gives hub user carol another account (row): her
    running kernel registers again under it and takes its kernel id over; a
    local account of the same name, or another hub user, does not."""
    from ease_jupyter.service.notebooks import KernelIdTaken, NotebookRegistry

    registry = NotebookRegistry(timeout=60.0)
    before, _ = registry.register(5, "carol", {"kernel_id": "k1"}, hub_login="carol")
    with pytest.raises(KernelIdTaken):
        registry.register(3, "carol", {"kernel_id": "k1"})  # the local account carol: another user
    with pytest.raises(KernelIdTaken):
        registry.register(7, "dave", {"kernel_id": "k1"}, hub_login="dave")
    after, created = registry.register(3, "carol", {"kernel_id": "k1"}, hub_login="carol")  # linked: her row now
    assert created and after.kernel_id == "k1" and before.kernel_id is None
    assert [s.id for s in registry.sessions_of(5)] == [before.id]  # the old one stays listed, without the id


def test_a_refused_takeover_and_a_full_registry_change_nothing():
    from ease_jupyter.service.notebooks import MAX_SESSIONS_PER_USER, KernelIdTaken, NotebookRegistry

    now = [1000.0]
    registry = NotebookRegistry(timeout=10.0, clock=lambda: now[0])
    old, _ = registry.register(1, "carol", {"kernel_id": "k1"}, hub_login="carol")
    for i in range(MAX_SESSIONS_PER_USER):  # carol's new account at her limit of live sessions
        registry.register(2, "carol", {"kernel_id": f"b{i}"}, hub_login="carol")
    with pytest.raises(InvalidStateError):
        registry.register(2, "carol", {"kernel_id": "k1"}, hub_login="carol")
    assert old.kernel_id == "k1" and len(registry.sessions_of(2)) == MAX_SESSIONS_PER_USER
    with pytest.raises(KernelIdTaken):
        registry.register(3, "bob", {"kernel_id": "b0"})
    registry.end(2, registry.sessions_of(2)[0].id)  # room for one more
    new, created = registry.register(2, "carol", {"kernel_id": "k1"}, hub_login="carol")
    assert created and new.kernel_id == "k1" and old.kernel_id is None


def test_a_task_touched_while_a_heartbeat_is_written_goes_out_at_once(monkeypatch):
    """touch() between taking the pending tasks and the wait must wake the
    next beat, not wait for the heartbeat interval (30 s here)."""
    import tornado.websocket

    session = notebook_session.NotebookSession("http://127.0.0.1:9", "tok", KernelInfo(kernel_id="k1"), every=30.0)
    session.id = "s1"
    beats: list[dict] = []

    class Stream:
        def __init__(self):
            self.closed = asyncio.Event()

        async def write_message(self, text):
            beats.append(json.loads(text))
            if len(beats) == 1:
                session.touch("iris")  # lands while the first beat is on its way
                await asyncio.sleep(0)  # the wake-up runs before the loop goes on
            else:
                session.stop()

        async def read_message(self):
            await self.closed.wait()

        def close(self):
            self.closed.set()

    async def connect(*args, **kwargs):
        return Stream()

    monkeypatch.setattr(tornado.websocket, "websocket_connect", connect)
    asyncio.run(asyncio.wait_for(session._stream(), 5))
    assert [b.get("tasks") for b in beats] == [None, ["iris"]]


def test_touch_and_stop_after_a_stream_that_never_connected_do_not_raise(monkeypatch):
    """The service went away between the registration and the event stream's
    connection: the stream's asyncio loop is closed by then, and the kernel's
    next touch() (from a Client call) or stop() must not meet it."""
    import tornado.websocket

    session = notebook_session.NotebookSession("http://127.0.0.1:9", "tok", KernelInfo(kernel_id="k1"), every=30.0)

    async def refused(*args, **kwargs):
        raise ConnectionRefusedError("nothing listens")

    monkeypatch.setattr(tornado.websocket, "websocket_connect", refused)
    with pytest.raises(ConnectionRefusedError):
        asyncio.run(session._stream())
    session.touch("iris")
    session.stop()
    assert session.tasks == ["iris"]


def test_a_wake_racing_the_streams_end_does_not_raise(monkeypatch):
    """touch() may take the wake-up just before the stream's loop closes and
    call it just after."""
    import tornado.websocket

    session = notebook_session.NotebookSession("http://127.0.0.1:9", "tok", KernelInfo(kernel_id="k1"), every=30.0)
    taken = []

    async def refused(*args, **kwargs):
        taken.append(session._wake)
        raise ConnectionRefusedError("nothing listens")

    monkeypatch.setattr(tornado.websocket, "websocket_connect", refused)
    with pytest.raises(ConnectionRefusedError):
        asyncio.run(session._stream())
    taken[0]()  # the loop is closed now


def test_a_heartbeat_for_another_users_session_is_404_and_changes_nothing(short):
    sid = short.call("POST", "/notebooks", "alice", body={"kernel_id": "k1"}).body["id"]
    before = _sessions(short, "alice")
    for method, path, body in (("POST", f"/notebooks/{sid}/heartbeat", {"tasks": ["x"]}),
                               ("DELETE", f"/notebooks/{sid}", None), ("GET", f"/notebooks/{sid}", None)):
        refused = short.call(method, path, "bob", body=body)
        assert refused.status == 404, (method, path, refused.body)
    assert short.call("POST", "/notebooks/nosuchsession/heartbeat", "alice").status == 404
    # Over the event stream: answered ok false, 404; the session stays as it was.
    reply = asyncio.run(_stream_heartbeat(short, "bob", {"type": "heartbeat", "session": sid, "tasks": ["x"]}))
    assert reply["ok"] is False and reply["status"] == 404
    assert _stable(_sessions(short, "alice")) == _stable(before)
    # Hers: refreshed, over HTTP and over the stream.
    own = short.call("POST", f"/notebooks/{sid}/heartbeat", "alice", body={"tasks": ["iris"]})
    assert own.status == 200 and own.body["tasks"] == ["iris"] and own.body["last_seen"] > before[0]["last_seen"]
    reply = asyncio.run(_stream_heartbeat(short, "alice", {"type": "heartbeat", "session": sid, "tasks": ["d"]}))
    assert reply["ok"] is True and _sessions(short, "alice")[0]["tasks"] == ["iris", "d"]


async def _stream_heartbeat(running: Running, who: str, message: dict) -> dict:
    import tornado.httpclient
    import tornado.websocket

    request = tornado.httpclient.HTTPRequest(running.url.replace("http://", "ws://") + "/api/v1/events",
                                             headers={"Authorization": f"token {running.tokens[who]}"})
    ws = await tornado.websocket.websocket_connect(request)
    try:
        assert json.loads(await ws.read_message())["type"] == "hello"
        await ws.write_message(json.dumps(message))
        while True:
            event = json.loads(await asyncio.wait_for(ws.read_message(), 10))
            if event["type"] == "heartbeat":
                return event
    finally:
        ws.close()


def test_ending_a_session_lists_it_as_gone(short):
    client = short.client("alice")
    sid = client.request("POST", "/notebooks", {"kernel_id": "k1"})["id"]
    assert client.request("DELETE", f"/notebooks/{sid}")["alive"] is False
    assert client.notebooks()[0]["alive"] is False


@pytest.mark.parametrize("body, field", [
    ({"kernel_id": "../k"}, "kernel_id"), ({"kernel_id": 7}, "kernel_id"), ({"tasks": ["a/b"]}, "tasks[0]"),
    ({"tasks": "iris"}, "tasks"), ({"notebook_path": "x" * 5000}, "notebook_path"), ({"user": "bob"}, "user"),
    ({"gateway": [1]}, "gateway")])
def test_bad_registrations_name_the_field_and_register_nothing(short, body, field):
    client = short.client("alice")
    with pytest.raises(DataError) as error:
        client.request("POST", "/notebooks", body)
    assert error.value.field == field
    assert client.notebooks() == []


def test_outside_a_kernel_or_opted_out_nothing_registers(short, in_a_kernel, monkeypatch):
    monkeypatch.setenv(notebook_session.REGISTER_ENV, "0")
    assert short.client("alice").notebook is None
    monkeypatch.delenv(notebook_session.REGISTER_ENV)
    assert Client(short.url, short.tokens["alice"], register=False).notebook is None
    monkeypatch.setattr(kernel_info, "current", lambda: KernelInfo())  # no kernel id: not a kernel
    assert short.client("alice").notebook is None
    assert _sessions(short, "alice") == []


def test_an_unreachable_service_never_breaks_the_client(in_a_kernel):
    client = Client("http://127.0.0.1:9", "token")  # discard port: nothing listens
    assert client.notebook is not None  # the thread retries in the background, later and later
    with pytest.raises(OSError):
        client.whoami()
    assert isinstance(client.notebook.id, type(None))


def test_registration_needs_a_token(short):
    assert short.call("POST", "/notebooks", body={"kernel_id": "k1"}).status == 401
    with pytest.raises(AuthError):
        Client(short.url, "wrong", register=False).notebooks()
    with pytest.raises(NotFoundError):
        short.client("alice").request("GET", "/notebooks/none")


def test_the_service_view_shows_the_callers_sessions(short):
    from ease_jupyter.widgets.service_view import ServiceView

    short.call("POST", "/notebooks", "alice", body={"kernel_id": "0123456789abcdef", "notebook_path": "a.ipynb",
                                                    "server_name": "gpu", "tasks": ["iris"]})
    short.call("POST", "/notebooks", "bob", body={"kernel_id": "k-bob", "notebook_path": "b.ipynb"})
    view = ServiceView(short.client("alice"), live=False)
    try:
        assert [(n["user"], n["notebook_path"], n["server_name"], n["kernel"], n["alive"], n["tasks"])
                for n in view.notebooks] == [("alice", "a.ipynb", "gpu", "01234567", True, ["iris"])]
        assert "a.ipynb" in repr(view) and "b.ipynb" not in repr(view)
    finally:
        view.close()
    admin = ServiceView(short.client("admin"), live=False)
    try:
        assert sorted(n["notebook_path"] for n in admin.notebooks) == ["a.ipynb", "b.ipynb"]
    finally:
        admin.close()


def test_a_hub_login_registers_under_her_own_hub_name_whatever_the_body_says():
    """A hub login's hub name is the service's to know: a registration that
    names another hub user is listed under hers; a local account's is kept."""
    from types import SimpleNamespace

    from ease_jupyter.service import notebooks
    from ease_jupyter.store.base import HUB, LOCAL

    service = SimpleNamespace(notebooks=notebooks.NotebookRegistry(timeout=60.0))
    alice = SimpleNamespace(id=1, name="alice", origin=HUB)
    session, created = notebooks.api_register(service, alice, {"kernel_id": "k1", "hub_user": "bob"})
    assert created and session["hub_user"] == "alice" and session["user"] == "alice"
    carol = SimpleNamespace(id=2, name="carol", origin=LOCAL)  # an ease.ml account: the body is all there is
    session, _ = notebooks.api_register(service, carol, {"kernel_id": "k2", "hub_user": "carol-on-hub"})
    assert session["hub_user"] == "carol-on-hub"
