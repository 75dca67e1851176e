"""The Client keeps its HTTP connection open between requests, one per
thread, and replaces it when the server has closed it; a POST that may have
reached the server is never sent twice.

A small tornado server on a thread counts the TCP connections it accepted
and the requests each route received, so the tests see what the Client did
on the wire (the real service is tested end to end in test_http.py and
test_load.py, both through this Client).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any, Iterator

import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web

from ease_jupyter.client import Client, NotFoundError


class Counts:
    def __init__(self) -> None:
        self.connections = 0
        self.requests: dict[str, int] = {}
        self.drop_next: set[str] = set()  # routes whose next request is dropped without an answer
        self.half_closed = threading.Event()
        self.lock = threading.Lock()

    def seen(self, route: str) -> bool:
        """Count a request; True if it is to be dropped (the connection closed, no answer)."""
        with self.lock:
            self.requests[route] = self.requests.get(route, 0) + 1
            if route in self.drop_next:
                self.drop_next.discard(route)
                return True
        return False


class _Handler(tornado.web.RequestHandler):
    def initialize(self, counts: Counts) -> None:
        self.counts = counts

    def _answer(self, route: str, body: Any) -> None:
        if self.counts.seen(route):
            self.request.connection.stream.close()
            return
        self.finish(body)

    async def get(self, route: str) -> None:
        if route == "missing":
            self.set_status(404)
            self.finish({"error": {"code": "not_found", "message": "no such thing"}})
            return
        if route == "half_close":  # answer, then close our side only: the client sees an end of file
            stream = self.request.connection.stream
            await self.finish({"route": route})
            stream.socket.shutdown(socket.SHUT_WR)
            self.counts.half_closed.set()
            return
        self._answer(route, {"route": route, "echo": self.get_query_argument("x", None)})

    def post(self, route: str) -> None:
        self._answer(route, {"route": route, "got": self.request.body.decode()})


class _Server(tornado.httpserver.HTTPServer):
    def initialize(self, *args: Any, counts: Counts, **kwargs: Any) -> None:  # noqa: D401 - tornado's hook
        super().initialize(*args, **kwargs)
        self.counts = counts

    def handle_stream(self, stream: Any, address: Any) -> None:
        with self.counts.lock:
            self.counts.connections += 1
        super().handle_stream(stream, address)


@pytest.fixture
def server() -> Iterator[tuple[str, Counts]]:
    """(url, counts) of a server that closes connections idle for 0.3 s."""
    counts = Counts()
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        app = tornado.web.Application([(r"/base/api/v1/(\w+)", _Handler, {"counts": counts}),
                                       # what a proxy receives: the absolute URL (see the proxy test)
                                       (r"http://service\.invalid/base/api/v1/(\w+)", _Handler, {"counts": counts})])
        http_server = _Server(app, counts=counts, idle_connection_timeout=0.3)
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        http_server.add_sockets(sockets)
        box["port"], box["stop"] = sockets[0].getsockname()[1], asyncio.Event()
        box["loop"] = asyncio.get_running_loop()
        ready.set()
        await box["stop"].wait()
        http_server.stop()
        await http_server.close_all_connections()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield f"http://127.0.0.1:{box['port']}/base", counts
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(10)


def test_consecutive_requests_share_one_connection(server):
    url, counts = server
    client = Client(url, "t")
    answers = [client.request("GET", "/one", params={"x": i}) for i in range(5)]
    answers.append(client.request("POST", "/two", {"n": 1}))
    with pytest.raises(NotFoundError):  # an error answer leaves the connection usable
        client.request("GET", "/missing")
    answers.append(client.request("GET", "/one"))
    assert [a["echo"] for a in answers[:5]] == ["0", "1", "2", "3", "4"]
    assert answers[5] == {"route": "two", "got": '{"n": 1}'}
    assert counts.connections == 1
    assert counts.requests == {"one": 6, "two": 1}


def test_each_thread_has_its_own_connection(server):
    url, counts = server
    client = Client(url, "t")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait(10)
            for _ in range(10):
                assert client.request("GET", "/one")["route"] == "one"
        except BaseException as error:  # noqa: BLE001 - asserted below
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert counts.requests["one"] == 40
    assert counts.connections == 4


def test_a_connection_the_server_closed_is_replaced(server):
    url, counts = server
    client = Client(url, "t")
    client.request("GET", "/one")
    threading.Event().wait(0.8)  # past the server's idle timeout: it has closed the connection
    # A POST is sent on a new connection, not on the closed one, and arrives once.
    assert client.request("POST", "/feed", {"k": 1})["got"] == '{"k": 1}'
    assert client.request("GET", "/one")["route"] == "one"
    assert counts.connections == 2
    assert counts.requests == {"one": 2, "feed": 1}


def test_a_post_never_goes_out_on_a_connection_the_server_closed(server):
    # The server closed its side but would still read: a POST sent there
    # would arrive and never be answered. The client notices the end of
    # file first and sends it on a new connection.
    url, counts = server
    client = Client(url, "t")
    assert client.request("GET", "/half_close")["route"] == "half_close"
    assert counts.half_closed.wait(10)
    assert client.request("POST", "/feed", {"k": 1})["got"] == '{"k": 1}'
    assert counts.requests == {"feed": 1}
    assert counts.connections == 2


def test_a_post_that_may_have_arrived_is_not_repeated(server):
    url, counts = server
    client = Client(url, "t")
    client.request("GET", "/one")  # the connection is now a reused one
    counts.drop_next.add("feed")
    with pytest.raises(ConnectionError):
        client.request("POST", "/feed", {"k": 1})
    assert counts.requests["feed"] == 1
    # The client goes on, on a new connection.
    assert client.request("POST", "/feed", {"k": 2})["got"] == '{"k": 2}'
    assert counts.requests["feed"] == 2


def test_a_get_on_a_broken_reused_connection_is_sent_again(server):
    url, counts = server
    client = Client(url, "t")
    client.request("GET", "/one")
    counts.drop_next.add("one")
    assert client.request("GET", "/one", params={"x": "again"})["echo"] == "again"
    assert counts.requests["one"] == 3
    assert counts.connections == 2


def test_close_closes_the_connection(server):
    url, counts = server
    client = Client(url, "t")
    client.request("GET", "/one")
    client.close()
    client.request("GET", "/one")
    assert counts.connections == 2


def test_behind_a_proxy_from_the_environment_requests_go_through_it(server, monkeypatch):
    url, counts = server
    proxy = url.removesuffix("/base")  # the test server plays the proxy
    monkeypatch.setenv("http_proxy", proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    client = Client("http://service.invalid/base", "t")
    assert [client.request("GET", "/one", params={"x": i})["echo"] for i in range(2)] == ["0", "1"]
    assert counts.requests == {"one": 2}


def test_this_machines_service_is_never_called_through_a_proxy(svc, monkeypatch):
    """A proxy from the environment would see the token, and may not reach loopback at all."""
    import socket

    from ease_jupyter import Client
    from ease_jupyter.service.embedded import is_alive

    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen()
    proxy.settimeout(0.5)
    address = f"http://127.0.0.1:{proxy.getsockname()[1]}"
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, address)
    try:
        assert Client(svc.url, svc.tokens["alice"]).whoami()["name"] == "alice"
        assert is_alive(svc.url, svc.tokens["alice"])
        with pytest.raises(TimeoutError):
            proxy.accept()  # nobody came through it
    finally:
        proxy.close()


def test_a_chunk_sent_again_after_it_arrived_is_not_an_error(svc, monkeypatch):
    """The transport sends a PUT again when its connection broke after it went out; the
    service, holding the chunk already, refuses the copy, and the upload goes on."""
    import numpy as np

    from ease_jupyter import client as client_module

    monkeypatch.setattr(client_module, "INLINE_BYTES", 0)
    monkeypatch.setattr(client_module, "CHUNK_BYTES", 64)
    client = Client(svc.url, svc.tokens["alice"])
    real = client.request
    sent = []

    def twice_the_first_chunk(method, path, *args, **kwargs):
        answer = real(method, path, *args, **kwargs)
        if method == "PUT" and not sent:
            sent.append(path)
            return real(method, path, *args, **kwargs)  # the copy: refused with 409 (offset already taken)
        return answer

    monkeypatch.setattr(client, "request", twice_the_first_chunk)
    task = client.task("chunks", input=[4], output=[3])
    version = task.feed(np.arange(80, dtype="float32").reshape(20, 4), np.arange(20) % 3)
    assert sent and version["n_examples"] == 20
