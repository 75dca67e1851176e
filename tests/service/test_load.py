"""Load check (issue 5, item 8): 50 concurrent clients, each its own user,
feeding and polling one ``easeml serve`` subprocess on loopback, bounded in
time. No request may fail, and no row may be lost or duplicated.

``ServeProcess`` and ``add_user`` live in ``ease_jupyter.service.testing``
(shared with benchmarks/service.py, test_two_notebooks.py and
test_postgres_service.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from ease_jupyter.client import Client
from ease_jupyter.service.testing import ServeProcess, add_user

N_CLIENTS = 50
N_FEEDS = 3
BATCH = 12
TIME_BOUND = 60.0


def _batch(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    y = np.arange(n, dtype="int64") % 3  # every class in every batch
    X = (rng.normal(size=(n, 4)) + y[:, None]).astype("float32")
    return X, y


@pytest.fixture
def served(tmp_path):
    # One training worker and the thread executor: training runs (the data is
    # tiny) but never crowds out the HTTP side on a 2-core machine.
    admin = add_user(tmp_path, "admin", admin=True)
    server = ServeProcess(tmp_path, "--workers", "1", "--executor", "thread", "--max-running", "1")
    try:
        yield server, admin
    finally:
        assert server.stop() == 0


def test_fifty_concurrent_clients_feed_and_poll(served):
    server, admin_token = served
    admin = Client(server.url, admin_token)
    tokens = {f"u{i:02d}": admin.add_user(f"u{i:02d}")["token"] for i in range(N_CLIENTS)}

    errors: list[str] = []
    fed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    answers: dict[str, list[dict[str, Any]]] = {}
    counts = {"requests": 0}
    count_lock = threading.Lock()
    start_line = threading.Barrier(N_CLIENTS)

    def worker(i: int, name: str, token: str) -> None:
        client = Client(server.url, token, timeout=TIME_BOUND)
        rng = np.random.default_rng(i)
        n = 0
        try:
            start_line.wait(30)
            task = client.task("load", input=[4], output=[3]); n += 1
            Xs, ys, got = [], [], []
            for k in range(1, N_FEEDS + 1):
                X, y = _batch(rng, BATCH)
                got.append(task.feed(X, y)); n += 1
                Xs.append(X); ys.append(y)
                # Poll until the task shows this version (it must, at once).
                info = task.refresh(); n += 1
                assert info["latest_version"]["number"] == k, info["latest_version"]
                client.leaderboard(); task.jobs(); n += 2
            answers[name] = got
            fed[name] = (np.concatenate(Xs), np.concatenate(ys))
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            errors.append(f"{name}: {type(error).__name__}: {error}")
        finally:
            with count_lock:
                counts["requests"] += n

    threads = [threading.Thread(target=worker, args=(i, name, tok)) for i, (name, tok) in enumerate(tokens.items())]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIME_BOUND + 30)
    elapsed = time.monotonic() - t0

    assert not errors, errors[:5]
    assert elapsed < TIME_BOUND, f"{N_CLIENTS} clients took {elapsed:.1f} s"
    assert counts["requests"] == N_CLIENTS * (1 + 4 * N_FEEDS)
    assert len(answers) == N_CLIENTS

    # No lost or duplicated rows: each feed made exactly one version, with the
    # running total of examples, and the latest version holds exactly what was sent.
    for name, token in tokens.items():
        versions = answers[name]
        assert [v["number"] for v in versions] == list(range(1, N_FEEDS + 1))
        assert [v["n_examples"] for v in versions] == [BATCH * k for k in range(1, N_FEEDS + 1)]
        task = Client(server.url, token).task("load")
        stored = task.versions()
        assert [(v["number"], v["n_examples"]) for v in stored] == [(k, BATCH * k) for k in range(1, N_FEEDS + 1)]
        ids, X, y = task.data()
        X_sent, y_sent = fed[name]
        assert len(set(ids.tolist())) == len(ids) == N_FEEDS * BATCH
        np.testing.assert_array_equal(y, y_sent)
        np.testing.assert_allclose(X, X_sent)
        assert [t.name for t in Client(server.url, token).tasks()] == ["load"]  # each sees its own task only

    progress = admin.progress()
    assert progress is not None
    assert not server.errors(), server.errors()[:5]
