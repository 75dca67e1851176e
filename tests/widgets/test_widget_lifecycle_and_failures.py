"""Widgets at the edges: a first read that fails, a task deleted while shown,
a task whose every job failed, a regression task's metric, a task with no
jobs, table cells that are booleans or missing, many classes, and showing a
status result again and again."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pandas as pd
import pytest

from ease_jupyter.errors import NotFoundError
from ease_jupyter.widgets import Curves, Leaderboard, ProvenanceGraph, RefinePanel, TaskStatus
from ease_jupyter.widgets._hub import EventHub, wait_until

from .conftest import widget_threads
from service.conftest import serving  # tests/ is on sys.path
from shells import connected_shell


def test_a_widget_whose_first_read_fails_leaves_nothing_running(service, monkeypatch):
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    client = service.client("alice")
    task = client.task("gone_widgets", input=[4], output=[3])
    task.delete()  # another notebook deleted it
    before = widget_threads()
    for cls in (TaskStatus, ProvenanceGraph, Leaderboard, Curves):
        with pytest.raises(NotFoundError):
            cls(task)
        gc.collect()
        hub = EventHub._registry.get(id(client))
        assert hub is None or hub.n_subscribers == 0, cls
        assert wait_until(lambda: widget_threads() == before, 5), (cls, widget_threads())
    assert [str(u.exc_value) for u in unraisable] == []  # no error from __del__ / close()
    client.close()


def test_widgets_of_a_task_deleted_while_shown_say_so_and_never_follow_its_name(service, iris):
    X, y = iris
    client = service.client("alice")
    task = client.task("deleted_shown", input=[4], output=[3])
    status, graph = TaskStatus(task), ProvenanceGraph(task)
    board, curves, old_id = status.leaderboard, status.curves, task.info["id"]
    task.delete()
    assert wait_until(lambda: board.deleted and graph.deleted and curves.deleted, 10)
    assert board.status.startswith("task deleted") and repr(board).startswith("Leaderboard of task 'deleted_shown': task deleted")
    assert "(task deleted)" in repr(graph).splitlines()[0] and "was deleted" in graph._repr_html_()
    assert "(task deleted)" in repr(curves)
    assert not (board.live or graph.live or curves.live)
    board.cancel_clicks += 1  # a click (the button is disabled) does nothing
    with pytest.raises(NotFoundError):
        board.cancel()
    # the name declared again is another task: a resync (after a reconnect) must not show it
    again = client.task("deleted_shown", input=[4], output=[3])
    again.feed(X[:30], y[:30])
    for widget in (board, graph, curves):
        widget._resync()
    board.refresh()
    graph.refresh()
    assert board.rows == [] and graph.nodes == [] and board.task_id == graph.task_id == old_id
    # a frozen widget missed the deletion event: its resync sees the name now means another task
    frozen, frozen_graph = Leaderboard(again, live=False), ProvenanceGraph(again, live=False)
    again.delete()
    client.task("deleted_shown", input=[4], output=[3])  # may even get the freed id back
    frozen._resync()
    frozen_graph._resync()
    assert frozen.deleted and frozen.status.startswith("task deleted") and frozen_graph.deleted
    for widget in (status, graph, frozen, frozen_graph):
        widget.close()
    client.close()


def test_a_task_with_no_jobs_says_so(service):
    task = service.client("alice").task("no_jobs_yet", input=[4], output=[3])
    board = Leaderboard(task, live=False)
    assert board.status == "no jobs yet"
    assert repr(board).splitlines()[0] == "Leaderboard of task 'no_jobs_yet': no jobs yet"
    board.close()


def test_many_classes_are_shortened_in_the_title(service):
    task = service.client("alice").task("many_classes", input=[4], output=[120])
    board = Leaderboard(task, live=False)
    board.class_names = [f"species_{i:03d}" for i in range(120)]
    title = repr(board).splitlines()[0]
    assert "species_009, ... (110 more, 120 in all)" in title and "species_010" not in title and len(title) < 250
    board.close()


def test_refine_table_shows_booleans_and_blanks(service):
    n = 24
    df = pd.DataFrame({"x": np.where(np.arange(n) % 3 == 1, np.nan, np.arange(n, dtype=float)),
                       "flag": pd.array([True, None, False] * (n // 3), dtype="boolean"),
                       "note": np.array(["a", None, "b"] * (n // 3), dtype=object),
                       "y": np.array(["p", "q"] * (n // 2))})
    task = service.client("bob").task("bools_blanks", like=df, target="y")
    task.feed(df)
    panel = RefinePanel(task, page_size=3)
    cells = {tuple(r["values"]) for r in panel.rows}
    assert cells == {("0", "True", "a"), ("", "", ""), ("2", "False", "b")}, cells
    panel.close()
    task.cancel()


@pytest.fixture(scope="module")
def sklearn_service(tmp_path_factory):
    """scikit-learn only (no torch): the jobs of a task here are the zoo's pipelines."""
    with serving(tmp_path_factory.mktemp("svc_sk"), "alice", torch=False, workers=1) as running:
        yield running


def test_a_regression_task_is_scored_by_r2(sklearn_service):
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True, as_frame=True)
    df = X.iloc[:150, :4].copy()
    df["target"] = y.iloc[:150].astype(float)
    task = sklearn_service.client("alice").task("diab_r2", like=df, target="target")
    task.feed(df)
    assert task.wait(timeout=120)
    board, graph = Leaderboard(task, live=False), ProvenanceGraph(task, live=False)
    assert board.metric == "r2"
    title, head = repr(board).splitlines()[:2]
    assert "scored by r2 (clipped to [0, 1])" in title and " r2 " in head and "accuracy" not in head
    models = [n["label"] for n in graph.nodes if n["kind"] == "model"]
    assert models and all(" r2 " in label for label in models), models
    with connected_shell(sklearn_service.url, sklearn_service.tokens["alice"]) as shell:
        result = shell.run_line_magic("easeml", "status diab_r2")
        assert "r2" in result.rows[0] and "accuracy" not in result.rows[0]
    board.close()
    graph.close()


def test_when_every_job_fails_the_widgets_say_why(sklearn_service, monkeypatch):
    import sklearn.pipeline

    def broken(self, *args, **kwargs):
        raise RuntimeError('every fit fails "here"')

    monkeypatch.setattr(sklearn.pipeline.Pipeline, "fit", broken)
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=60), "b": rng.normal(size=60), "y": np.array(["u", "v", "w"] * 20)})
    task = sklearn_service.client("alice").task("all_fail", like=df, target="y")
    live = TaskStatus(task)  # follows the jobs as they fail
    task.feed(df)
    assert task.wait(timeout=120)
    n = len(task.jobs())
    assert n and all(j["status"] == "failed" for j in task.jobs())
    status = TaskStatus(task, live=False)
    for board, curves in ((status.leaderboard, status.curves), (live.leaderboard, live.curves)):
        assert wait_until(lambda: board.status.startswith(f"all {n} jobs failed: "), 10), board.status
        assert 'every fit fails "here"' in board.status
        assert all('every fit fails "here"' in r["error"] for r in board.rows)
        assert repr(board).splitlines()[1].split()[-1] == "error"
        assert wait_until(lambda: f"all {n} jobs failed" in curves._waiting.value, 10), curves._waiting.value
        assert f"all {n} jobs failed" in repr(curves)
    panel = RefinePanel(task, page_size=4)
    panel.sort = "loss"
    assert panel.sort == "id" and f"all {n} jobs failed" in panel.message and "wait" not in panel.message
    for widget in (status, live, panel):
        widget.close()


def test_showing_a_status_again_keeps_one_live_widget_per_task(service):
    client_before = widget_threads()
    with connected_shell(service.url, service.tokens["alice"]) as shell:
        shell.run_line_magic("easeml", "task shown_again --input 4 --output 3")
        results = []
        for _ in range(3):
            result = shell.run_line_magic("easeml", "status shown_again")
            shell.display_formatter.format(result)  # what showing it does
            results.append(result)
        hub = EventHub._registry[id(results[-1].widget.leaderboard._task.client)]
        assert hub.n_subscribers == 2  # the last display's leaderboard and curves
        assert results[-1].widget.leaderboard.live and not results[0].widget.leaderboard.live
        assert not results[1].widget.curves.live
        again = shell.run_line_magic("easeml", "provenance shown_again")
        again.widget
        other = shell.run_line_magic("easeml", "provenance shown_again")
        other.widget
        assert not again.widget.live and other.widget.live
        for result in results + [again, other]:
            result.close()
    assert wait_until(lambda: widget_threads() == client_before, 5)
