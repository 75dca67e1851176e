"""The service end to end on PostgreSQL (``EASEML_TEST_POSTGRES_URL``): users
from the CLI, ``easeml serve`` with spawned worker processes (each with its
own database connection), a task fed, trained and queried, and the results
still there after a restart. Skipped with the standard reason without a server.
"""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter.client import Client
from ease_jupyter.errors import NotFoundError

from ease_jupyter.service.testing import ServeProcess, add_user

pytestmark = pytest.mark.postgres


@pytest.mark.slow
def test_service_end_to_end_on_postgres(postgres_url, tmp_path, iris):
    X, y = iris
    ada = add_user(tmp_path, "ada", db_url=postgres_url)
    bob = add_user(tmp_path, "bob", db_url=postgres_url)
    server = ServeProcess(tmp_path, "--workers", "2", db_url=postgres_url)
    try:
        client = Client(server.url, ada)
        assert client.whoami()["name"] == "ada"
        task = client.task("iris", input=[4], output=[3])
        assert task.feed(X[:100], y[:100])["n_examples"] == 100
        version = task.feed(X[100:], y[100:])
        assert (version["number"], version["n_examples"]) == (2, 150)
        assert task.wait(timeout=150), task.refresh()
        info = task.refresh()
        assert info["jobs"].get("succeeded", 0) >= 1 and not info["jobs"].get("running")
        best = task.best()
        assert best["accuracy"] > 0.85 and best["dataset_version"] == 2
        predictions = task.infer(X)
        assert float((predictions == y).mean()) > 0.85
        history = task.history()
        assert any(row["metrics"] for row in history if row["status"] == "succeeded")
        assert client.leaderboard()[0]["best"]["job_id"] == best["job_id"]
        with pytest.raises(NotFoundError):
            Client(server.url, bob).task("iris")
        assert not server.errors(), server.errors()[:5]
    finally:
        assert server.stop() == 0

    # A restart on the same database serves the same results.
    server = ServeProcess(tmp_path, "--workers", "1", db_url=postgres_url)
    try:
        again = Client(server.url, ada).task("iris")
        assert again.best()["job_id"] == best["job_id"]
        assert np.array_equal(again.infer(X), predictions)
        assert [v["n_examples"] for v in again.versions()] == [100, 150]
    finally:
        assert server.stop() == 0
