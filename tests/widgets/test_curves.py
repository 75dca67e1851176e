"""The curves widget: grid scores for scikit-learn tasks (a real service), a
legend that stays readable past 24 traces, and titles clear of plotly's
toolbar (layout values here; the drawn boxes in test_views_in_browser.py)."""

from __future__ import annotations

import itertools

import pytest

from ease_jupyter.jobspec import TorchWorkload, best_point
from ease_jupyter.widgets import Curves, Leaderboard
from ease_jupyter.widgets import _plot_style as style
from ease_jupyter.widgets._hub import wait_until


def test_a_scikit_learn_task_shows_its_grid_scores(service, iris):
    X, y = iris
    task = service.client("bob").task("iris_grids", input=[4], output=[3])
    curves = Curves(task)
    assert curves.children == (curves._waiting,)  # no empty plots before anything trained
    task.feed(X, y)
    assert task.wait(timeout=120)
    history = [j for j in task.history() if j["status"] == "succeeded"]
    assert len(history) >= 3 and all("grid" in j["config"] for j in history)
    # every pick, live: its last job's event may reach the widget just after wait() returns
    assert wait_until(lambda: set(curves.grid_traces) == {j["id"] for j in history}, 10), curves.grid_traces
    board = Leaderboard(task, live=False)
    winners = {r["job_id"]: r["best_config"] for r in board.rows}
    for job in history:
        plotted = curves.grid_points(job["id"])
        stored = {key[len("val_score["):-1]: value for row in job["metrics"] for key, value in row.items()
                  if key.startswith("val_score[")}
        assert dict(zip(plotted["config"], plotted["score"])) == pytest.approx(stored)  # one point per grid point
        assert len(plotted["config"]) == len(stored) >= 2
        assert plotted["winner"] == winners[job["id"]] == best_point(job["metrics"])  # the leaderboard's winner
        trace = curves.grid_figure.data[curves.grid_traces[job["id"]]]
        star = [s for s, c in zip(trace.marker.symbol, trace.text) if c == plotted["winner"]]
        assert star == ["star"] and list(trace.marker.symbol).count("star") == 1
    assert task.best()["best_config"] == curves.grid_points(task.best()["job_id"])["winner"]
    # the figure shown is the grid scores; the per-epoch one has nothing to show and is not shown
    assert curves.children == (curves.grid_figure,) and len(curves.figure.data) == 0
    late = Curves(task, live=False)  # a widget opened afterwards backfills the same points
    assert {j: late.grid_points(j) for j in late.grid_traces} == {j: curves.grid_points(j) for j in curves.grid_traces}
    for widget in (late, curves, board):
        widget.close()


class StubTask:
    """A task whose history is given: enough for a snapshot (``live=False``)."""

    def __init__(self, history):
        self.info, self.name, self.client, self._history = {"id": 1}, "stub", None, history

    def history(self):
        return self._history


def many_jobs() -> list[dict]:
    """6 deep-net models x 2 jobs x 3 rates (36 configs), and 8 grids of 4 scikit-learn models."""
    jobs, ids = [], itertools.count(1)
    for model in ("lenet", "resnet_small", "mlp_net", "cnn_a", "cnn_b", "cnn_c"):
        for _ in range(2):
            config = TorchWorkload(model, (0.1, 0.01, 0.001), 2).config()
            metrics = [{"epoch": e, **{f"{m}[lr={lr:g}]": 0.1 * e + lr for lr in (0.1, 0.01, 0.001)
                                       for m in ("train_loss", "val_accuracy")}} for e in (1, 2)]
            jobs.append({"id": next(ids), "model": model, "config": config, "status": "succeeded", "metrics": metrics})
    for model in ("svm", "knn", "logreg", "forest") * 2:
        metrics = [{"epoch": 0, "val_score[C=0.1]": 0.7, "val_score[C=1]": 0.9, "val_score[C=10]": 0.8, "val_score": 0.9}]
        jobs.append({"id": next(ids), "model": model, "config": {"grid": {"C": [0.1, 1, 10]}}, "status": "succeeded",
                     "metrics": metrics})
    return jobs


def legend_entries(figure) -> list:
    return [t for t in figure.data if t.showlegend is not False]


def test_a_legend_of_many_traces_groups_by_model_with_distinct_styles():
    curves = Curves(StubTask(many_jobs()), live=False)
    entries = legend_entries(curves.figure)
    assert len(entries) == 36 and len(curves.figure.data) == 72
    for figure in (curves.figure, curves.grid_figure):
        for trace in figure.data:  # grouped by model, the model as the group's title
            assert trace.legendgroup == trace.meta["model"] == trace.legendgrouptitle.text
        colours = {}
        for trace in figure.data:
            colour = trace.line.color if figure is curves.figure else trace.marker.color
            colours.setdefault(trace.legendgroup, set()).add(colour)
        assert all(len(c) == 1 for c in colours.values())  # one colour per model
        assert len({next(iter(c)) for c in colours.values()}) == len(colours)  # and no two models share one
        assert set().union(*colours.values()) <= set(style.PALETTE)
    # every legend entry of the curves has its own look: colour (model), marker (job), dash (rate)
    looks = [(t.line.color, t.marker.symbol, t.line.dash) for t in entries]
    assert len(set(looks)) == len(looks)
    # a loss trace looks like its accuracy trace (one legend entry stands for both)
    for loss_i, acc_i in curves.traces.values():
        loss, acc = curves.figure.data[loss_i], curves.figure.data[acc_i]
        assert (loss.line.color, loss.line.dash, loss.marker.symbol) == (acc.line.color, acc.line.dash, acc.marker.symbol)
    # names are short: the group title carries the model
    assert all(t.name.startswith("#") and t.meta["model"] not in t.name for t in entries)
    # the legend is beside the plots, and the figure grew with it (past the maximum the legend scrolls)
    legend = curves.figure.layout.legend
    assert legend.x > 1 and legend.xanchor == "left" and legend.groupclick == "toggleitem"
    assert style.MIN_HEIGHT < curves.grid_figure.layout.height < curves.figure.layout.height <= style.MAX_HEIGHT
    curves.close()


def test_titles_sit_below_the_toolbar():
    curves = Curves(StubTask(many_jobs()), live=False)
    for figure in (curves.figure, curves.grid_figure):
        layout = figure.layout
        title = layout.title
        # the figure title hangs from the container's top, below the toolbar's strip
        assert (title.yref, title.y, title.yanchor) == ("container", 1.0, "top")
        assert title.pad.t >= style.MODEBAR_PX
        # and ends above the plots' top edge, where the subplot titles start
        assert layout.margin.t >= title.pad.t + title.font.size + 16 + 16
        for note in layout.annotations:  # make_subplots' titles: on the plots' top edge, growing upwards
            assert (note.yref, note.y, note.yanchor) == ("paper", 1.0, "bottom")
            assert layout.margin.t - title.pad.t - title.font.size >= note.font.size
    assert [a.text for a in curves.figure.layout.annotations] == ["training loss", "validation accuracy"]
    curves.close()
