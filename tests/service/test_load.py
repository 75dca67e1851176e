"""Load check: 200 concurrent clients, each its own user, creating, feeding
and polling one ``easeml serve`` subprocess on loopback. No request may fail,
no answer may be a 5xx, every poll sees the feed before it, and every feed is
stored exactly once. The run is bounded in time (a hung client fails the
test); how fast it goes is ``benchmarks/service.py``'s business.

``ServeProcess`` and ``add_user`` live in ``ease_jupyter.service.testing``
(shared with benchmarks/service.py, test_two_notebooks.py and
test_postgres_service.py).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from ease_jupyter.client import Client
from ease_jupyter.service.testing import ServeProcess, add_user

N_CLIENTS = 200
N_FEEDS = 3
BATCH = 12
# Every client must be done by then (seconds); a run on 2 busy cores takes far less.
TIME_BOUND = 180.0


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


def _check_stored(url: str, token: str, answers: list[dict[str, Any]], X_sent: np.ndarray, y_sent: np.ndarray) -> None:
    """Each feed made exactly one version, with the running total of examples,
    and the latest version holds exactly what was sent, in order, once."""
    assert [v["number"] for v in answers] == list(range(1, N_FEEDS + 1))
    assert [v["n_examples"] for v in answers] == [BATCH * k for k in range(1, N_FEEDS + 1)]
    client = Client(url, token)
    task = client.task("load")
    assert [(v["number"], v["n_examples"]) for v in task.versions()] == [(k, BATCH * k) for k in range(1, N_FEEDS + 1)]
    ids, X, y = task.data()
    assert len(set(ids.tolist())) == len(ids) == N_FEEDS * BATCH
    np.testing.assert_array_equal(y, y_sent)
    np.testing.assert_allclose(X, X_sent)
    assert [t.name for t in client.tasks()] == ["load"]  # each sees its own task only


@pytest.mark.slow
def test_two_hundred_concurrent_clients_feed_and_poll(served):
    server, admin_token = served
    admin = Client(server.url, admin_token)
    tokens = {f"u{i:03d}": admin.add_user(f"u{i:03d}")["token"] for i in range(N_CLIENTS)}

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
            start_line.wait(60)
            task = client.task("load", input=[4], output=[3]); n += 1
            Xs, ys, got = [], [], []
            for k in range(1, N_FEEDS + 1):
                X, y = _batch(rng, BATCH)
                got.append(task.feed(X, y)); n += 1
                Xs.append(X); ys.append(y)
                # Poll: the task shows this version at once (read after write).
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

    threads = [threading.Thread(target=worker, args=(i, name, tok), daemon=True)
               for i, (name, tok) in enumerate(tokens.items())]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIME_BOUND)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"{len(hung)} of {N_CLIENTS} clients were not done within {TIME_BOUND:.0f} s"

    assert not errors, errors[:5]
    assert counts["requests"] == N_CLIENTS * (1 + 4 * N_FEEDS)
    assert len(answers) == N_CLIENTS
    with ThreadPoolExecutor(8) as pool:  # checked a few at a time: 200 in turn would take long on 2 cores
        list(pool.map(lambda name: _check_stored(server.url, tokens[name], answers[name], *fed[name]), tokens))
    assert admin.progress() is not None
    assert not server.errors(), server.errors()[:5]
