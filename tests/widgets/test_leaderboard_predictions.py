"""The leaderboard shows each job's measured seconds beside the seconds the
profiler (or, before it had data, the FLOPs proxy) predicted before it ran."""

from __future__ import annotations

import pytest

from ease_jupyter.widgets import Leaderboard
from ease_jupyter.widgets._hub import wait_until
from widgets.test_views_in_browser import mount, page  # noqa: F401 - page: the browser fixture


@pytest.fixture(scope="module")
def trained(service, iris):
    X, y = iris
    task = service.client("alice").task("iris_predicted", input=[4], output=[3])
    task.feed(X, y)
    assert task.wait(timeout=120)
    return task


def test_rows_show_predicted_beside_actual_seconds(trained):
    board = Leaderboard(trained, live=False)
    history = {j["id"]: j for j in trained.history()}
    assert board.rows and all(r["state"] == "done" for r in board.rows)
    for row in board.rows:
        job = history[row["job_id"]]
        assert row["predicted"] == job["predicted_seconds"] and row["predicted"] > 0
        assert row["source"] == job["source"] and row["cost"] == job["cost_seconds"]
        assert row["profiling"] == job["profiling_seconds"]
    text = repr(board)
    header = text.splitlines()[1]
    assert "seconds" in header and "predicted" in header
    for row in board.rows:
        assert f"{row['cost']:.2f}s" in text and f"{row['predicted']:.2f}s ({row['source']})" in text
        if row["profiling"]:
            assert f"{row['cost']:.2f}s ({row['profiling']:.2f}s profiling)" in text
    board.close()


def test_new_jobs_arrive_live_with_their_prediction(trained):
    board = Leaderboard(trained)
    version = trained.refine(drop=list(range(20)))
    assert wait_until(lambda: any(r["version"] == version["number"] and r["state"] == "done"
                                  for r in board.rows), 120)
    stored = {j["id"]: j["predicted_seconds"] for j in trained.history()}
    for row in board.rows:
        if row["version"] == version["number"]:  # filled in from the jobs' events
            assert row["predicted"] == stored[row["job_id"]] is not None, row
    trained.cancel()
    assert trained.wait(timeout=60)
    board.close()


@pytest.mark.browser
def test_the_view_has_a_predicted_column(page, trained):  # noqa: F811
    board = Leaderboard(trained, live=False)
    mount(page, board)
    heads = page.locator("table thead th").all_inner_texts()
    assert "seconds" in heads and "predicted" in heads
    best = page.locator("tr.easeml-best")
    cells = dict(zip(heads, best.locator("td").all_inner_texts()))
    row = next(r for r in board.rows if r["job_id"] == board.best_job_id)
    # run alone, the best job may be the profiled one; after the refine test it is not
    profiled = f" ({row['profiling']:.2f} s profiling)" if row["profiling"] else ""
    assert cells["seconds"] == f"{row['cost']:.2f} s{profiled}"
    assert cells["predicted"] == f"{row['predicted']:.2f} s ({row['source']})"
    board.close()


def test_a_profiled_jobs_seconds_say_what_its_profiling_took(trained):
    board = Leaderboard(trained, live=False)
    row = dict(board.rows[0], cost=3.0, profiling=1.25, predicted=1.5, source="pooled")
    board.rows = [row]
    text = repr(board)
    assert "3.00s (1.25s profiling)" in text and "1.50s (pooled)" in text
    board.close()
