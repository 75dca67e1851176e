"""The %easeml magics that show widgets: status NAME, status --all, refine
NAME (no ids), provenance NAME; the programmatic forms keep working."""

from __future__ import annotations

import pytest

from ease_jupyter.magics.display import Result
from ease_jupyter.service.testing import flat_models
from ease_jupyter.widgets import ProvenanceGraph, RefinePanel, ServiceView, TaskStatus

from .conftest import widget_threads
from shells import connected_shell  # tests/ is on sys.path

VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def shell(service):
    with connected_shell(service.url, service.tokens["alice"]) as ip:
        yield ip


def test_magics_show_widgets(shell, service, iris):
    X, y = iris
    shell.user_ns.update(X=X, y=y)
    shell.run_line_magic("easeml", "task iris_magic --input 4 --output 3")
    shell.run_line_magic("easeml", "feed iris_magic X y")
    status = shell.run_line_magic("easeml", "status iris_magic --timeout 90")
    assert widget_threads() == []  # nothing starts until the result is shown
    assert status.data["idle"] and status.rows[0]["accuracy"] > 0.85  # the table form is unchanged
    bundle = status._repr_mimebundle_()
    assert isinstance(status.widget, TaskStatus) and bundle[VIEW]["model_id"] == status.widget.model_id
    assert "<table>" in bundle["text/html"] and bundle["text/plain"].startswith(repr(status) + "\n")
    # without a widget front end the summary is followed by the leaderboard's rows and the budget line
    assert "Leaderboard of task 'iris_magic'" in bundle["text/plain"] and "budget: compute" in bundle["text/plain"]
    assert "easeml-board" in bundle["text/html"] and "Leaderboard of task &#x27;iris_magic&#x27;" in bundle["text/html"]
    board = status.widget.leaderboard
    n = flat_models(4, 3)  # one job per scikit-learn candidate
    assert len(board.rows) == n and board.best_job_id == service.client("alice").task("iris_magic").best()["job_id"]
    assert widget_threads() == ["easeml-events", "easeml-widgets"]
    assert repr(status.widget).startswith(f"Leaderboard of task 'iris_magic': {n} done")
    assert f"Curves of task 'iris_magic' (live): 0 deep-net config(s), {n} scikit-learn grid(s)" in repr(status.widget)
    curves = status.widget.curves  # scikit-learn picks: each grid's scores, its best one the job's accuracy
    jobs = service.client("alice").task("iris_magic").jobs()
    assert set(curves.grid_traces) == {j["id"] for j in jobs} and curves.traces == {}
    assert all(max(curves.grid_points(j["id"])["score"]) == pytest.approx(j["accuracy"]) for j in jobs)

    service_view = shell.run_line_magic("easeml", "status --all")
    assert "alice" in {r["name"] for r in service_view.rows} and "loss_estimate" in service_view.columns
    assert isinstance(service_view.widget, ServiceView)
    assert [u["name"] for u in service_view.widget.users] == [r["name"] for r in service_view.rows]
    assert service_view.widget.policy == service_view.data["policy"]

    panel = shell.run_line_magic("easeml", "refine iris_magic")
    assert isinstance(panel.widget, RefinePanel) and panel.widget.n_total == 150 and panel.data["number"] == 1
    v2 = shell.run_line_magic("easeml", "refine iris_magic --drop 0,1")  # the programmatic form still works
    assert v2.data["number"] == 2 and v2.widget is None and VIEW not in v2._repr_mimebundle_()

    prov = shell.run_line_magic("easeml", "provenance iris_magic")
    assert {row["edge"] for row in prov.rows} >= {"feed", "refine", "train"}
    assert isinstance(prov.widget, ProvenanceGraph)
    shown = {(e["kind"], e["src"], e["dst"]) for e in prov.widget.edges}  # built on display: maybe newer
    assert {(r["edge"], r["from"], r["to"]) for r in prov.rows} <= shown
    bundle = prov._repr_mimebundle_()
    assert VIEW in bundle and "<svg" in bundle["text/html"] and "image/svg+xml" in bundle

    for result in (status, service_view, panel, prov):
        result.close()
    assert widget_threads() == []
    with pytest.raises(ValueError, match="--all"):
        shell.run_line_magic("easeml", "status iris_magic --all")


def test_result_falls_back_to_the_table_when_the_widget_fails():
    def broken():
        raise RuntimeError("no widget manager here")

    result = Result("task t", {"a": 1}, [{"task": "t", "accuracy": 0.5}], widget=broken)
    bundle = result._repr_mimebundle_()
    assert VIEW not in bundle and "<td>0.5</td>" in bundle["text/html"] and bundle["text/plain"].startswith("task t")


def test_help_documents_the_widget_forms(shell):
    doc = shell.find_line_magic("easeml").__doc__
    for line in ("%easeml refine NAME ", "%easeml status --all", "--all"):
        assert line in doc
