"""A task's jobs as a live leaderboard with a cancel button.

Each row shows the pick (``config``: the grid it tried), the grid point that
won it (``best_config``: ``C=1``, ``lr=0.01``), its held-out accuracy and
the number of held-out examples behind it (``validation_size``), its
measured seconds (``cost``) beside the seconds the profiler predicted before
it ran (``predicted``, with its ``source``: ``family``, ``pooled`` or
``flops``, ACAI §4.2.2); the title names the task's classes where the labels
had names (the first ten of many). A regression task's jobs are scored by
R² clipped to [0, 1] (the model card's ``r2``): the column is named after the
task's metric (``metric``). A failed job's row carries its ``error`` (one
line); when every job failed, the status line says so with the first error.
A task deleted while shown says so (``deleted``), disables the button and
stops following events."""

from __future__ import annotations

import html
import pathlib
from typing import Any

import anywidget
import traitlets as t

from ..errors import NotFoundError
from ..jobspec import best_point, describe_job
from ..schema.scores import TITLES as METRIC_TITLES
from ._hub import Event
from ._jobs import all_failed, classes_text, metric_name, short_error
from ._live import Live

HERE = pathlib.Path(__file__).parent
STATES = ("queued", "running", "done", "failed", "cancelled", "stale")
ROW_KEYS = ("job_id", "model", "config", "best_config", "accuracy", "validation_size", "cost", "predicted", "source",
            "profiling", "state", "version", "error")


def _state(status: str, version: int | None, latest: int | None) -> str:
    if status == "succeeded":
        return "stale" if version is not None and latest is not None and version < latest else "done"
    return status  # queued, running, failed, cancelled


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}s"


def _measured(cost: float | None, profiling: float | None) -> str:
    """The measured seconds; a job profiled first also says how many of them
    its profiling runs took (its prediction is for the rest)."""
    return _seconds(cost) + (f" ({profiling:.2f}s profiling)" if cost is not None and profiling else "")


def _text_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(columns)] + [line(r) for r in rows]


class Leaderboard(Live, anywidget.AnyWidget):
    """The jobs of one task: model, config, winning config, accuracy,
    validation size, measured and predicted seconds, state, best first.

    States are ``queued``, ``running``, ``done``, ``failed``, ``cancelled`` and
    ``stale`` (succeeded, but on an older dataset version than the latest).
    The best row (highest accuracy among ``done``) is highlighted. The
    *Cancel task* button bumps ``cancel_clicks``; Python then calls
    ``Task.cancel()`` (stop exploring the task).
    """

    _esm = HERE / "leaderboard.js"
    _css = HERE / "easeml.css"

    task = t.Unicode(help="the task's name").tag(sync=True)
    rows = t.List(t.Dict(), help="one dict per job: " + ", ".join(ROW_KEYS)).tag(sync=True)
    best_job_id = t.Int(None, allow_none=True, help="the highlighted row's job id").tag(sync=True)
    latest_version = t.Int(None, allow_none=True, help="the task's latest dataset version number").tag(sync=True)
    cancelled = t.Bool(False, help="the task is cancelled").tag(sync=True)
    class_names = t.List(t.Unicode(), help="what the class indices stand for (empty: unnamed)").tag(sync=True)
    cancel_clicks = t.Int(0, help="bumped by the cancel button; each bump cancels the task").tag(sync=True)
    status = t.Unicode("", help="a one-line summary").tag(sync=True)
    metric = t.Unicode("accuracy", help="what the accuracy column holds: accuracy, or r2 for regression").tag(sync=True)
    deleted = t.Bool(False, help="the task was deleted while shown (the widget no longer follows it)").tag(sync=True)

    def __init__(self, task: Any, *, live: bool = True, **kwargs: Any):
        self._task = task
        self.task_id = task.info["id"]
        self._version_numbers: dict[int, int] = {}
        super().__init__(task=task.name, **kwargs)
        self._live_init(task.client, live)
        self._first_read(self.refresh)  # a failed first read closes the widget (no subscription left) and raises

    # ------------------------------------------------------------ validation
    @t.validate("rows")
    def _check_rows(self, proposal: t.Bunch) -> list[dict[str, Any]]:
        rows = proposal["value"]
        for i, row in enumerate(rows):
            missing = [k for k in ROW_KEYS if k not in row]
            if missing:
                raise t.TraitError(f"rows[{i}]: found keys {sorted(row)}, expected also {missing}")
            if row["state"] not in STATES:
                raise t.TraitError(f"rows[{i}].state: found {row['state']!r}, expected one of {STATES}")
        return sorted(rows, key=lambda r: (r["accuracy"] is None, -(r["accuracy"] or 0.0), r["job_id"]))

    @t.validate("cancel_clicks")
    def _check_clicks(self, proposal: t.Bunch) -> int:
        if proposal["value"] < self.cancel_clicks:
            raise t.TraitError(f"cancel_clicks: found {proposal['value']}, expected a count >= {self.cancel_clicks}")
        return proposal["value"]

    @t.observe("cancel_clicks")
    def _on_cancel_click(self, change: t.Bunch) -> None:
        if change["new"] > change["old"] and not self.deleted:  # a deleted task has nothing to cancel
            self.cancel()

    @t.observe("rows")
    def _on_rows(self, change: t.Bunch) -> None:
        done = [r for r in change["new"] if r["state"] == "done" and r["accuracy"] is not None]
        self.best_job_id = max(done, key=lambda r: (r["accuracy"], -r["job_id"]))["job_id"] if done else None
        counts: dict[str, int] = {}
        for row in change["new"]:
            counts[row["state"]] = counts.get(row["state"], 0) + 1
        parts = [f"{counts[s]} {s}" for s in STATES if counts.get(s)]
        failed = all_failed({"id": r["job_id"], "status": r["status"], "error": r["error"]} for r in change["new"])
        self.status = (("task deleted; " if self.deleted else "") + ("cancelled; " if self.cancelled else "")
                       + (failed or ", ".join(parts) or "no jobs yet"))

    # ------------------------------------------------------------ actions
    def cancel(self) -> dict[str, Any]:
        """Stop exploring the task (what the button does)."""
        with self._lock:
            if self.deleted:
                raise NotFoundError(f"task {self.task!r} (id {self.task_id}) was deleted: nothing to cancel")
            info = self._task.cancel()
            self.cancelled = bool(info.get("cancelled"))
            self._on_rows({"new": self.rows})
            return info

    def refresh(self) -> None:
        """Re-read the task's jobs from the service (nothing once the task was
        deleted: its name may have come to mean another task)."""
        with self._lock:
            if self.deleted:
                return
            try:
                info = self._task.refresh()
            except NotFoundError:
                self._deleted()
                raise
            if not self._same_task(info):  # the name now belongs to a task declared after ours was deleted
                self._deleted()
                return
            self.cancelled = bool(info.get("cancelled"))
            self.metric = metric_name(info.get("program"))
            self.class_names = [str(c) for c in info.get("class_names") or []]
            self._version_numbers = {v["id"]: v["number"] for v in self._task.versions()}
            latest = info.get("latest_version") or {}
            self.latest_version = latest.get("number")
            # history: the jobs with their per-config scores (the winning config) and validation sizes
            self.rows = [self._row(j["id"], j["model"], j["config"], j["status"], j["accuracy"], j["cost_seconds"],
                                   j["dataset_version"], best_point(j.get("metrics", [])), j.get("validation_size"),
                                   j.get("predicted_seconds"), j.get("source"), j.get("profiling_seconds"),
                                   j.get("error"))
                         for j in self._task.history()]
            self._on_rows({"new": self.rows})  # [] -> [] fires no observer: the status line must still be set

    def _resync(self) -> None:
        try:
            self.refresh()
        except NotFoundError:
            pass  # marked deleted

    def _deleted(self) -> None:
        self._mark_deleted()
        self._on_rows({"new": self.rows})

    def _row(self, job_id: int, model: str, config: dict, status: str, accuracy: float | None, cost: float | None,
             version: int | None, best_config: str | None = None, validation_size: int | None = None,
             predicted: float | None = None, source: str | None = None,
             profiling: float | None = None, error: str | None = None) -> dict[str, Any]:
        return {"job_id": job_id, "model": model, "config": describe_job(model, config or {}),
                "best_config": best_config, "accuracy": accuracy, "validation_size": validation_size, "cost": cost,
                "predicted": predicted, "source": source, "profiling": profiling,
                "state": _state(status, version, self.latest_version), "version": version, "status": status,
                "error": short_error(error) if status == "failed" else ""}

    def _on_event(self, event: Event) -> None:
        if event.get("task_id") != self.task_id:
            return
        kind = event.get("type")
        if kind == "version":
            v = event["version"]
            self._version_numbers[v["id"]] = v["number"]
            self.latest_version = max(self.latest_version or 0, v["number"])
            self.rows = [{**r, "state": _state(r["status"], r["version"], self.latest_version)} for r in self.rows]
        elif kind == "task":
            if event.get("status") == "deleted":
                self._deleted()
                return
            # A task's status ("idle", "over_budget", ...) is not whether exploring was
            # stopped: a cancelled task also goes idle. The service's flag says.
            self.cancelled = bool(self._task.refresh().get("cancelled"))
            self._on_rows({"new": self.rows})
        elif kind == "job":
            rows = {r["job_id"]: r for r in self.rows}
            old = rows.get(event["job_id"])
            if old is None:  # a new job: its dataset version is only in the service's job record
                self.refresh()
                return
            rows[event["job_id"]] = self._row(
                event["job_id"], event.get("model", old["model"]), event.get("config") or {}, event["status"],
                event.get("accuracy", old["accuracy"]), event.get("cost_seconds", old["cost"]), old["version"],
                old["best_config"], old["validation_size"], old["predicted"], old["source"], old["profiling"])
            if event["status"] == "succeeded":
                self._add_details(rows, event["job_id"])
            elif event["status"] == "failed":  # the event has no error text: the job's record does
                job = next((j for j in self._task.jobs() if j["id"] == event["job_id"]), None)
                rows[event["job_id"]]["error"] = short_error((job or {}).get("error"))
            self.rows = list(rows.values())

    def _add_details(self, rows: dict[int, dict[str, Any]], job_id: int) -> None:
        """A finished job's winning config, validation size and prediction, from the service's
        history. Only those fields: the states stay the events' (the store may lag behind an event)."""
        job = next((j for j in self._task.history() if j["id"] == job_id), None)
        if job is not None:
            rows[job_id] = {**rows[job_id], "best_config": best_point(job.get("metrics", [])),
                            "validation_size": job.get("validation_size"),
                            "predicted": job.get("predicted_seconds"), "source": job.get("source"),
                            "profiling": job.get("profiling_seconds")}

    def state_of(self, job_id: int) -> str:
        """The shown state of one job."""
        return next(r["state"] for r in self.rows if r["job_id"] == job_id)

    def close(self) -> None:
        self.stop()
        super().close()

    def title(self) -> str:
        """The first line: task, classes (the first ten of many), metric of a regression task, status."""
        classes = f" (classes: {classes_text(self.class_names)})" if self.class_names else ""
        metric = f" (scored by {METRIC_TITLES[self.metric]})" if self.metric != "accuracy" else ""
        return f"Leaderboard of task {self.task!r}{classes}{metric}: {self.status}"

    def table(self) -> tuple[list[str], list[list[str]]]:
        """The columns and the rows as text, best first (an error column when a job failed)."""
        errors = any(r["error"] for r in self.rows)
        columns = ["model", "config", "best config", self.metric, "validated on", "seconds", "predicted", "state"]
        rows = [[r["model"], r["config"], r["best_config"] or "", "" if r["accuracy"] is None else f"{r['accuracy']:.4f}",
                 "" if r["validation_size"] is None else str(r["validation_size"]),
                 _measured(r["cost"], r["profiling"]), _seconds(r["predicted"]) + (f" ({r['source']})" if r["source"] else ""),
                 r["state"] + (" *" if r["job_id"] == self.best_job_id else "")] + ([r["error"]] if errors else [])
                for r in self.rows]
        return columns + (["error"] if errors else []), rows

    def _repr_html_(self) -> str:
        """The static table (nbconvert, a front end without widgets)."""
        columns, rows = self.table()
        best = [r["job_id"] == self.best_job_id for r in self.rows]
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join(("<tr class='easeml-best'>" if b else "<tr>") + "".join(f"<td>{html.escape(c)}</td>" for c in row)
                       + "</tr>" for row, b in zip(rows, best))
        return (f"<div class='easeml-board'><b>{html.escape(self.title())}</b>"
                f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")

    def __repr__(self) -> str:
        columns, rows = self.table()
        return "\n".join([self.title()] + _text_table(columns, rows))
