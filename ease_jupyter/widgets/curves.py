"""Training loss and validation accuracy per epoch, live, as a plotly FigureWidget."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..jobspec import describe_job, parse_job, split_metric
from ..zoo import Engine
from ._hub import Event
from ._live import Live

_PLOTTED = ("train_loss", "val_accuracy")  # per-config metrics of a torch job, one point per epoch
LOSS, ACC = 0, 1  # subplot columns


def _is_torch(model: str, config: dict[str, Any]) -> bool:
    """Torch jobs are drawn as curves (per epoch), the others as one marker."""
    return parse_job(model, config).engine is Engine.TORCH


def _lr(value: Any) -> str:
    return f"{float(value):g}"


class Curves(Live, widgets.VBox):
    """One task's curves: training loss (left) and validation accuracy (right)
    against the epoch, one trace per config, grouped by model in the legend.

    A torch job trains a learning-rate grid, so each of its learning rates is a
    config with its own pair of traces (``model #job lr=X``), extended by every
    ``metrics`` event. A scikit-learn job has no epochs: its config is one
    validation-accuracy marker at epoch 1, added when the job succeeds.

    Args:
        task: a ``ease_jupyter.client.Task``.
        live: follow the Client's event stream (False: a snapshot).

    ``figure`` is the plotly ``FigureWidget``; ``traces`` maps each config
    key ``(job_id, lr or None)`` to its ``(loss trace, accuracy trace)``
    indices in ``figure.data`` (loss is None for scikit-learn configs).
    """

    def __init__(self, task: Any, *, live: bool = True, **kwargs: Any):
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        base = make_subplots(rows=1, cols=2, subplot_titles=("training loss", "validation accuracy"))
        base.update_layout(height=320, margin=dict(l=40, r=10, t=30, b=30), legend=dict(groupclick="toggleitem"),
                           template="plotly_white")
        base.update_xaxes(title_text="epoch")
        base.update_yaxes(range=[0, 1.02], row=1, col=2)
        self.figure = go.FigureWidget(base)
        self.task = task
        self.task_id = task.info["id"]
        self.traces: dict[tuple[int, str | None], tuple[int | None, int]] = {}
        self._jobs: dict[int, dict[str, Any]] = {}
        self._series: dict[int, dict[int, float]] = {}  # trace index -> {epoch: value}
        super().__init__(children=[self.figure], **kwargs)
        self._live_init(task.client, live)  # subscribe first, then backfill: no event falls in between
        with self._lock:
            self._backfill()

    # ------------------------------------------------------------ backfill
    def _backfill(self) -> None:
        with self.figure.batch_update():
            for job in self.task.history():
                self._jobs[job["id"]] = job
                if _is_torch(job["model"], job["config"]):
                    for row in job.get("metrics", []):
                        for key, value in row.items():
                            metric, label = split_metric(key)
                            if metric in _PLOTTED and label is not None and label.startswith("lr=") and value is not None:
                                self._point(job["id"], job["model"], label.removeprefix("lr="), row["epoch"],
                                            **{metric: value})
                elif job["status"] == "succeeded" and job["accuracy"] is not None:
                    self._marker(job["id"], job["model"], job["config"], job["accuracy"])

    def _resync(self) -> None:
        self._backfill()  # points are idempotent: a repeated epoch replaces, never duplicates

    # ------------------------------------------------------------ events
    def _on_event(self, event: Event) -> None:
        if event.get("task_id") != self.task_id:
            return
        kind = event.get("type")
        if kind == "metrics":
            with self.figure.batch_update():
                self._point(event["job_id"], event["model"], _lr(event["lr"]), event["epoch"],
                            train_loss=event.get("train_loss"), val_accuracy=event.get("val_accuracy"))
        elif (kind == "job" and event.get("status") == "succeeded"
              and not _is_torch(event.get("model", ""), event.get("config") or {})):
            if event.get("accuracy") is not None:
                self._marker(event["job_id"], event["model"], event.get("config") or {}, event["accuracy"])

    # ------------------------------------------------------------ traces
    def _pair(self, key: tuple[int, str | None], model: str, name: str, *, loss: bool) -> tuple[int | None, int]:
        if key in self.traces:
            return self.traces[key]
        import plotly.graph_objects as go

        mode = "lines+markers" if loss else "markers"
        common = dict(name=name, legendgroup=model, legendgrouptitle_text=model, mode=mode,
                      meta={"job_id": key[0], "lr": key[1], "model": model})
        loss_index = None
        if loss:
            self.figure.add_trace(go.Scatter(x=[], y=[], showlegend=False, **common), row=1, col=1)
            loss_index = len(self.figure.data) - 1
        self.figure.add_trace(go.Scatter(x=[], y=[], **common), row=1, col=2)
        self.traces[key] = (loss_index, len(self.figure.data) - 1)
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
        loss_i, acc_i = self._pair((job_id, lr), model, f"{model} #{job_id} lr={lr}", loss=True)
        if train_loss is not None and loss_i is not None:
            self._set(loss_i, int(epoch), float(train_loss))
        if val_accuracy is not None:
            self._set(acc_i, int(epoch), float(val_accuracy))

    def _marker(self, job_id: int, model: str, config: dict[str, Any], accuracy: float) -> None:
        _, acc_i = self._pair((job_id, None), model, f"{model} #{job_id} {describe_job(model, config)}".strip(), loss=False)
        self._set(acc_i, 1, float(accuracy))

    # ------------------------------------------------------------ views
    def points(self, job_id: int, lr: float | str | None = None) -> dict[str, list]:
        """The plotted ``epoch``, ``train_loss`` and ``val_accuracy`` of one config."""
        with self._lock:
            loss_i, acc_i = self.traces[(job_id, None if lr is None else _lr(lr))]
            acc = self.figure.data[acc_i]
            loss = self.figure.data[loss_i] if loss_i is not None else None
            return {"epoch": list(acc.x or ()), "val_accuracy": list(acc.y or ()),
                    "train_loss": list(loss.y or ()) if loss is not None else []}

    def close(self) -> None:
        self.stop()
        self.figure.close()
        super().close()

    def __repr__(self) -> str:
        with self._lock:
            groups: dict[str, int] = {}
            for (job_id, _), (_, acc_i) in self.traces.items():
                model = self.figure.data[acc_i].legendgroup
                groups[model] = groups.get(model, 0) + 1
        models = ", ".join(f"{m} ({n})" for m, n in sorted(groups.items())) or "none yet"
        state = "live" if self.live else "stopped"
        return f"Curves of task {self.task.name!r} ({state}): {len(self.traces)} config(s); {models}"
