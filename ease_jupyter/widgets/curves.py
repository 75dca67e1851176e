"""A task's training, live, as plotly FigureWidgets: per-epoch curves of the
deep nets, and the grid scores of the scikit-learn picks."""

from __future__ import annotations

import math
from typing import Any

import ipywidgets as widgets

from ..jobspec import best_point, describe_job, parse_job, point_label, split_metric
from ..zoo import Engine
from ._hub import Event
from ._jobs import all_failed
from ._live import Live
from ._plot_style import Styles, base_layout, dash, fit_height

_PLOTTED = ("train_loss", "val_accuracy")  # per-config metrics of a torch job, one point per epoch
GRID_SCORE = "val_score"  # per-config metric of a scikit-learn job: its held-out score
WAITING = "<i>no finished model yet: the curves appear as jobs train</i>"
DELETED = "<i>the task was deleted: these curves no longer follow it</i>"


def _failed_html(message: str) -> str:
    import html

    return f'<i style="color: #b00020">no model: {html.escape(message)}</i>'


def _is_torch(model: str, config: dict[str, Any]) -> bool:
    """Torch jobs are drawn as curves (per epoch), scikit-learn ones as grid scores."""
    return parse_job(model, config).engine is Engine.TORCH


def _lr(value: Any) -> str:
    return f"{float(value):g}"


def grid_scores(model: str, config: dict[str, Any], metrics: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """``[(config label, held-out score)]`` of a scikit-learn job, in the grid's
    order; a combination that failed has no score and is left out."""
    scores: dict[str, float] = {}
    for row in metrics:
        for key, value in row.items():
            metric, label = split_metric(key)
            if metric == GRID_SCORE and label is not None and value is not None and not math.isnan(value):
                scores[label] = float(value)
    order = {point_label(p): i for i, p in enumerate(parse_job(model, config).points())}
    return sorted(scores.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))


class Curves(Live, widgets.VBox):
    """One task's training, one figure per kind of model, each shown once it
    has something to show:

    * ``figure``, deep nets (torch): training loss (left) and validation
      accuracy (right) against the epoch, one pair of traces per config
      (``#job lr=X``), extended by every ``metrics`` event;
    * ``grid_figure``, scikit-learn picks: every grid point's held-out score,
      one column of points per job (the winner drawn larger, as a star),
      added when the job succeeds.

    Traces are grouped by model in the legend (``legendgroup``, the model as
    the group's title); each model has its own colour from a qualitative
    palette, each of its jobs its own marker and each config its own dash,
    so dozens of traces stay apart. The legend sits beside the plots and the
    figure grows with it; titles sit below plotly's toolbar.

    Args:
        task: a ``ease_jupyter.client.Task``.
        live: follow the Client's event stream (False: a snapshot).

    ``traces`` maps each torch config ``(job_id, lr)`` to its ``(loss trace,
    accuracy trace)`` indices in ``figure.data``; ``grid_traces`` maps a
    scikit-learn job id to its trace index in ``grid_figure.data``.
    """

    def __init__(self, task: Any, *, live: bool = True, **kwargs: Any):
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        self.styles = Styles()
        epochs = make_subplots(rows=1, cols=2, subplot_titles=("training loss", "validation accuracy"),
                               horizontal_spacing=0.12)
        epochs.update_layout(**base_layout("deep nets: per epoch"))
        epochs.update_xaxes(title_text="epoch")
        epochs.update_yaxes(range=[0, 1.02], row=1, col=2)
        self.figure = go.FigureWidget(epochs)
        grid = go.Figure(layout=base_layout("scikit-learn: held-out score of each grid point (star: the winner)"))
        grid.update_xaxes(title_text="pick (model #job)", type="category", tickangle=-30)
        grid.update_yaxes(title_text="held-out score", range=[0, 1.02])
        self.grid_figure = go.FigureWidget(grid)
        self.task = task
        self.task_id = task.info["id"]
        self.traces: dict[tuple[int, str], tuple[int, int]] = {}
        self.grid_traces: dict[int, int] = {}
        self._series: dict[int, dict[int, float]] = {}  # trace index -> {epoch: value}
        self._waiting = widgets.HTML(WAITING)
        self._status: dict[int, str] = {}  # job id -> status, to say when every job failed
        self._failed: str | None = None  # "all N jobs failed: <error>"
        super().__init__(children=[self._waiting], **kwargs)
        self._live_init(task.client, live)  # subscribe first, then backfill: no event falls in between
        self._first_read(self._backfill)  # a failed first read closes the widget (no subscription left) and raises

    # ------------------------------------------------------------ backfill
    def _backfill(self) -> None:
        with self.figure.batch_update(), self.grid_figure.batch_update():
            jobs = self.task.history()
            for job in jobs:
                self._add_job(job)
        self._status = {j["id"]: j["status"] for j in jobs}
        self._say_failed(jobs)
        self._show()

    def _say_failed(self, jobs: list[dict[str, Any]]) -> None:
        """The waiting line says why no curve will come when every job failed."""
        if self.deleted:
            return
        failed = self._failed = all_failed(jobs)
        self._waiting.value = WAITING if failed is None else _failed_html(failed)

    def _add_job(self, job: dict[str, Any]) -> None:
        if _is_torch(job["model"], job["config"]):
            for row in job.get("metrics", []):
                for key, value in row.items():
                    metric, label = split_metric(key)
                    if metric in _PLOTTED and label is not None and label.startswith("lr=") and value is not None:
                        self._point(job["id"], job["model"], label.removeprefix("lr="), row["epoch"], **{metric: value})
        elif job["status"] == "succeeded":
            self._grid(job["id"], job["model"], job["config"], job.get("metrics", []))

    def _resync(self) -> None:
        # events may have been missed while disconnected, a deletion too: reads are by name
        if self._task_is_gone(self.task):
            self._gone()
            return
        self._backfill()  # points are idempotent: a repeated epoch or job replaces, never duplicates

    def _gone(self) -> None:
        self._mark_deleted()
        self._waiting.value = DELETED
        self.children = tuple(self.children) + (() if self._waiting in self.children else (self._waiting,))

    def _show(self) -> None:
        """Show the figures that have traces (or a line saying none has yet)."""
        shown = tuple(f for f in (self.figure, self.grid_figure) if f.data) or (self._waiting,)
        if tuple(self.children) != shown:
            self.children = shown

    # ------------------------------------------------------------ events
    def _on_event(self, event: Event) -> None:
        if event.get("task_id") != self.task_id:
            return
        kind = event.get("type")
        if kind == "task" and event.get("status") == "deleted":
            self._gone()
            return
        if kind == "job":
            self._status[event["job_id"]] = event.get("status", "")
            if event.get("status") == "failed" and all(s == "failed" for s in self._status.values()):
                self._say_failed(self.task.jobs())  # the event has no error text: the jobs' records do
        if kind == "metrics":
            with self.figure.batch_update():
                self._point(event["job_id"], event["model"], _lr(event["lr"]), event["epoch"],
                            train_loss=event.get("train_loss"), val_accuracy=event.get("val_accuracy"))
            self._show()
        elif (kind == "job" and event.get("status") == "succeeded"
              and not _is_torch(event.get("model", ""), event.get("config") or {})):
            # the grid's per-point scores are in the job's metrics, not in the event
            job = next((j for j in self.task.history() if j["id"] == event["job_id"]), None)
            if job is not None:
                with self.grid_figure.batch_update():
                    self._grid(job["id"], job["model"], job["config"], job.get("metrics", []))
                self._show()

    # ------------------------------------------------------------ traces
    def _pair(self, job_id: int, model: str, lr: str) -> tuple[int, int]:
        key = (job_id, lr)
        if key in self.traces:
            return self.traces[key]
        import plotly.graph_objects as go

        configs_of_job = sum(1 for j, _ in self.traces if j == job_id)
        style = dict(legendgroup=model, legendgrouptitle_text=model, mode="lines+markers",
                     line=dict(color=self.styles.colour(model), dash=dash(configs_of_job), width=1.6),
                     marker=dict(symbol=self.styles.symbol(model, job_id), size=6),
                     name=f"#{job_id} lr={lr}", meta={"job_id": job_id, "lr": lr, "model": model},
                     hovertemplate=f"{model} #{job_id} lr={lr}<br>epoch %{{x}}: %{{y:.4f}}<extra></extra>")
        self.figure.add_trace(go.Scatter(x=[], y=[], showlegend=False, **style), row=1, col=1)
        loss_index = len(self.figure.data) - 1
        self.figure.add_trace(go.Scatter(x=[], y=[], **style), row=1, col=2)
        self.traces[key] = (loss_index, len(self.figure.data) - 1)
        fit_height(self.figure)
        return self.traces[key]

    def _set(self, index: int, epoch: int, value: float) -> None:
        # Our own copy of each trace's points: inside figure.batch_update()
        # plotly defers assignments, so reading trace.x back would be stale.
        series = self._series.setdefault(index, {})
        series[epoch] = value
        trace = self.figure.data[index]
        trace.x, trace.y = sorted(series), [series[e] for e in sorted(series)]

    def _point(self, job_id: int, model: str, lr: str, epoch: int, *, train_loss: float | None = None,
               val_accuracy: float | None = None) -> None:
        loss_i, acc_i = self._pair(job_id, model, lr)
        if train_loss is not None:
            self._set(loss_i, int(epoch), float(train_loss))
        if val_accuracy is not None:
            self._set(acc_i, int(epoch), float(val_accuracy))

    def _grid(self, job_id: int, model: str, config: dict[str, Any], metrics: list[dict[str, Any]]) -> None:
        scores = grid_scores(model, config, metrics)
        if not scores:
            return
        import plotly.graph_objects as go

        labels, values = [label for label, _ in scores], [value for _, value in scores]
        # the point the leaderboard and best() name (ties: the same rule)
        winner = labels.index(best_point(metrics)) if best_point(metrics) in labels else values.index(max(values))
        column = f"{model} #{job_id}"
        trace = go.Scatter(
            x=[column] * len(values), y=values, text=labels, mode="markers",
            name=f"#{job_id} {describe_job(model, config)}".strip(), legendgroup=model, legendgrouptitle_text=model,
            marker=dict(color=self.styles.colour(model), symbol=["star" if i == winner else "circle"
                                                                 for i in range(len(values))],
                        size=[14 if i == winner else 8 for i in range(len(values))], line=dict(width=0.5)),
            meta={"job_id": job_id, "model": model, "winner": labels[winner]},
            hovertemplate=f"{column}<br>%{{text}}: %{{y:.4f}}<extra></extra>")
        if job_id in self.grid_traces:  # a resync: replace its points
            shown = self.grid_figure.data[self.grid_traces[job_id]]
            shown.x, shown.y, shown.text, shown.marker, shown.meta = trace.x, trace.y, trace.text, trace.marker, trace.meta
            return
        self.grid_figure.add_trace(trace)
        self.grid_traces[job_id] = len(self.grid_figure.data) - 1
        fit_height(self.grid_figure)

    # ------------------------------------------------------------ views
    def points(self, job_id: int, lr: float | str) -> dict[str, list]:
        """The plotted ``epoch``, ``train_loss`` and ``val_accuracy`` of one torch config."""
        with self._lock:
            loss_i, acc_i = self.traces[(job_id, _lr(lr))]
            acc, loss = self.figure.data[acc_i], self.figure.data[loss_i]
            return {"epoch": list(acc.x or ()), "val_accuracy": list(acc.y or ()), "train_loss": list(loss.y or ())}

    def grid_points(self, job_id: int) -> dict[str, Any]:
        """The plotted grid of one scikit-learn job: ``config`` labels, their
        held-out ``score`` and the ``winner``'s label."""
        with self._lock:
            trace = self.grid_figure.data[self.grid_traces[job_id]]
            return {"config": list(trace.text), "score": list(trace.y), "winner": trace.meta["winner"]}

    def close(self) -> None:
        self.stop()
        self.figure.close()
        self.grid_figure.close()
        super().close()

    def __repr__(self) -> str:
        with self._lock:
            groups: dict[str, int] = {}
            for _, acc_i in self.traces.values():
                model = self.figure.data[acc_i].legendgroup
                groups[model] = groups.get(model, 0) + 1
            for index in self.grid_traces.values():
                model = self.grid_figure.data[index].legendgroup
                groups[model] = groups.get(model, 0) + 1
        models = ", ".join(f"{m} ({n})" for m, n in sorted(groups.items())) or "none yet"
        state = "live" if self.live else "task deleted" if self.deleted else "stopped"
        failed = f"; {self._failed}" if self._failed and not (self.traces or self.grid_traces) else ""
        return (f"Curves of task {self.task.name!r} ({state}): {len(self.traces)} deep-net config(s), "
                f"{len(self.grid_traces)} scikit-learn grid(s); {models}{failed}")
