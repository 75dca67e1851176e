"""Large bodies are refused from the headers, before they are read.

A request without a valid token (401), with a method the route does not
take (405), or declaring a body over its route's limit (413: 1 MiB of JSON,
64 MiB per upload chunk) is answered as soon as its headers are in, and its
connection is closed without reading the body. A body sent without a length
(chunked) is refused the moment it passes the limit. So the service's memory
stays flat however many such requests arrive at once.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import psutil
import pytest

from ease_jupyter.service.testing import ServeProcess, add_user

from .conftest import serving

MIB = 1024 * 1024
JSON_LIMIT = 1 * MIB  # ServiceConfig defaults
CHUNK_LIMIT = 64 * MIB


class RawRequest:
    """One HTTP/1.1 request written by hand, so that a test controls when
    (and whether) the body follows the headers."""

    def __init__(self, url: str, method: str, path: str, headers: dict[str, str]):
        parsed = urlparse(url)
        self.sock = socket.create_connection((parsed.hostname, parsed.port), timeout=10)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {parsed.netloc}", *(f"{k}: {v}" for k, v in headers.items())]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())

    def send(self, data: bytes) -> bool:
        """False once the server has closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def response(self) -> tuple[int, dict]:
        """(status, JSON body) of the answer; raises socket.timeout when none comes."""
        raw = b""
        while b"\r\n\r\n" not in raw:
            piece = self.sock.recv(65536)
            if not piece:
                raise ConnectionError(f"closed after {raw!r}")
            raw += piece
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
        while len(body) < length:
            body += self.sock.recv(65536)
        return int(lines[0].split()[1]), json.loads(body)

    def close(self) -> None:
        self.sock.close()


def _answer_before_body(url: str, method: str, path: str, headers: dict[str, str]) -> tuple[int, dict, float]:
    """Send only the headers and wait for the answer: (status, body, seconds)."""
    request = RawRequest(url, method, path, headers)
    try:
        started = time.monotonic()
        status, body = request.response()
        return status, body, time.monotonic() - started
    finally:
        request.close()


@pytest.fixture
def svc(tmp_path):
    with serving(tmp_path, "alice") as running:
        yield running


def test_refusals_come_from_the_headers(svc):
    token = {"Authorization": f"token {svc.tokens['alice']}"}
    cases = [  # (method, path, headers, status, error field)
        ("POST", "/api/v1/tasks", {"Content-Length": str(64 * MIB)}, 401, "Authorization"),
        ("PUT", "/api/v1/uploads/0123456789abcdef0123456789abcdef?offset=0", {"Content-Length": str(64 * MIB)},
         401, "Authorization"),
        ("POST", "/api/v1/tasks", {**token, "Content-Length": str(JSON_LIMIT + 1)}, 413, "body"),
        ("PUT", "/api/v1/uploads/0123456789abcdef0123456789abcdef?offset=0",
         {**token, "Content-Length": str(CHUNK_LIMIT + 1)}, 413, "body"),
        ("POST", "/api/v1/whoami", {**token, "Content-Length": str(64 * MIB)}, 405, "method"),
        ("POST", "/api/v1/no/such/route", {"Content-Length": str(64 * MIB)}, 404, "path"),
        ("POST", "/api/v1/tasks", {**token, "Content-Length": "lots"}, 400, "Content-Length"),
    ]
    for method, path, headers, status, field in cases:
        got, body, seconds = _answer_before_body(svc.url, method, path, headers)
        assert (got, body["error"]["field"]) == (status, field), (method, path, body)
        assert seconds < 5
    _, body, _ = _answer_before_body(svc.url, "POST", "/api/v1/tasks", {**token, "Content-Length": str(2 * MIB)})
    assert body["error"]["code"] == "too_large" and body["error"]["expected"] == f"at most {JSON_LIMIT} bytes"
    assert "uploads" in body["error"]["message"]


def test_a_chunked_body_is_refused_once_it_passes_the_limit(svc):
    request = RawRequest(svc.url, "POST", "/api/v1/tasks", {"Authorization": f"token {svc.tokens['alice']}",
                                                             "Content-Type": "application/json",
                                                             "Transfer-Encoding": "chunked"})
    try:
        piece = b" " * 16384
        for _ in range(JSON_LIMIT // len(piece) + 4):  # past the limit, and never the final empty chunk
            if not request.send(b"%x\r\n%s\r\n" % (len(piece), piece)):
                break
        status, body = request.response()
    finally:
        request.close()
    assert status == 413 and body["error"]["field"] == "body"
    assert svc.call("GET", "/health").status == 200


def test_a_chunked_body_within_the_limit_is_taken(svc):
    payload = json.dumps({"name": "chunky", "input": [4], "output": [3], "pad": " " * 100_000}).encode()
    request = RawRequest(svc.url, "POST", "/api/v1/tasks", {"Authorization": f"token {svc.tokens['alice']}",
                                                             "Content-Type": "application/json",
                                                             "Transfer-Encoding": "chunked"})
    try:
        for start_at in range(0, len(payload), 8192):
            piece = payload[start_at:start_at + 8192]
            request.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        request.send(b"0\r\n\r\n")
        status, body = request.response()
    finally:
        request.close()
    assert status == 201 and body["name"] == "chunky"


@pytest.mark.timeout(180)
def test_memory_stays_flat_under_parallel_large_bodies(tmp_path):
    """8 connections at once push 64 MiB bodies (512 MiB in all) that the
    service must refuse: no token, or a token with a body over the route's
    limit. The service's RSS may grow by at most 48 MiB; buffering the bodies
    would take more than 512 MiB."""
    token = add_user(tmp_path, "alice")
    server = ServeProcess(tmp_path, "--executor", "thread")
    try:
        process = psutil.Process(server.pid)
        auth = {"Authorization": f"token {token}"}
        upload = f"/api/v1/uploads/{'0' * 32}?offset=0"
        attacks = [("POST", "/api/v1/tasks", {}, 64 * MIB), ("PUT", upload, {}, 64 * MIB),
                   ("POST", "/api/v1/tasks/t/feed", auth, 64 * MIB), ("PUT", upload, auth, CHUNK_LIMIT + MIB)] * 2
        for _ in range(3):  # warm up: the first requests allocate what every later one reuses
            _answer_before_body(server.url, "POST", "/api/v1/tasks", {"Content-Length": "0"})
        baseline = process.memory_info().rss
        peak = [baseline]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], process.memory_info().rss)
                time.sleep(0.005)

        def push(method: str, path: str, headers: dict[str, str], size: int) -> int:
            request = RawRequest(server.url, method, path, {**headers, "Content-Length": str(size)})
            block, sent = b"\0" * MIB, 0
            try:
                while sent < size and request.send(block[:size - sent]):
                    sent += min(MIB, size - sent)
            finally:
                request.close()
            return sent

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        with ThreadPoolExecutor(len(attacks)) as pool:
            sent = list(pool.map(lambda attack: push(*attack), attacks))
        seconds = time.monotonic() - started
        done.set()
        sampler.join()
        growth = peak[0] - baseline
        print(f"RSS growth {growth / MIB:.1f} MiB, sent {sum(sent) / MIB:.0f} MiB in {seconds:.1f} s")
        assert growth < 48 * MIB, f"RSS grew {growth / MIB:.0f} MiB under {sum(sent) / MIB:.0f} MiB of refused bodies"
        assert seconds < 30
        assert _answer_before_body(server.url, "GET", "/api/v1/health", {})[0] == 200
        assert server.errors() == []
    finally:
        server.stop()
