"""Fixtures for the widget tests: a real service on a thread (the helpers of
tests/service/conftest.py), shared per module to keep the run short, and a
recording comm so tests can see what a browser would receive."""

from __future__ import annotations

import json
import threading
from typing import Any, Iterator

import comm
import numpy as np
import pytest

from service.conftest import Running, iris, serving  # noqa: F401 - iris: the shared fixture; tests/ is on sys.path


class RecordingComm(comm.DummyComm):
    """A comm that keeps every message a widget sends to the front end."""

    sent: list[tuple[str, dict]] = []

    def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None, buffers: Any = None,
                    **keys: Any) -> None:
        RecordingComm.sent.append((msg_type, {"comm_id": self.comm_id, "data": data or {},
                                              "n_buffer_bytes": sum(len(memoryview(b)) for b in buffers or [])}))


def message_bytes(message: dict) -> int:
    """The size of a comm message as JSON plus its binary buffers."""
    return len(json.dumps(message["data"], default=str)) + message["n_buffer_bytes"]


@pytest.fixture
def recorder(monkeypatch) -> Iterator[list[tuple[str, dict]]]:
    monkeypatch.setattr(comm, "create_comm", lambda *a, **kw: RecordingComm(*a, **kw))
    RecordingComm.sent = []
    yield RecordingComm.sent


def updates_to(sent: list[tuple[str, dict]], widget: Any) -> list[dict]:
    """The ``update`` messages sent to ``widget``'s model (its state deltas)."""
    return [m["data"]["state"] for kind, m in sent
            if kind == "comm_msg" and m["comm_id"] == widget.model_id and m["data"].get("method") == "update"]


@pytest.fixture(scope="session")
def service(tmp_path_factory) -> Iterator[Running]:
    """One service for the widget tests (each test uses its own task names):
    alice and bob, an admin; torch on (2 epochs)."""
    with serving(tmp_path_factory.mktemp("svc"), "alice", "bob", admins=("root",), torch_epochs=2,
                 workers=1) as running:
        yield running


@pytest.fixture(scope="session")
def digit_images():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images[:240] / 16.0).astype("float32")[..., None], d.target[:240].astype("int64")


def widget_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name in ("easeml-widgets", "easeml-events"))


__all__ = ["RecordingComm", "message_bytes", "np", "updates_to", "widget_threads"]
