"""The headless demo: several users, each a task on data scikit-learn ships.

For each user it registers a task, feeds most of the data, refines away a few
examples, trains every candidate config with a progress bar, picks the best
model and infers on the examples it held back. It ends with a leaderboard and
an HTML/JSON report. Until the scheduler service lands this runs in-process on
the same functions the service will call.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from sklearn import datasets as sk_datasets

from .local import LocalWorkspace
from .training import sklearn_candidates
from .zoo import ModelConfig

QUICK_MODELS = ("logreg", "knn", "random_forest")


@dataclass(frozen=True)
class DemoUser:
    user: str
    task: str
    load: Callable[[], Any]


DEMO_USERS = (
    DemoUser("alice", "digits", sk_datasets.load_digits),
    DemoUser("bob", "breast_cancer", sk_datasets.load_breast_cancer),
    DemoUser("carol", "wine", sk_datasets.load_wine),
    DemoUser("dave", "iris", sk_datasets.load_iris),
)


@dataclass
class UserResult:
    user: str
    task: str
    n_train: int
    n_test: int
    best: dict[str, Any]
    test_accuracy: float
    jobs: list[dict[str, Any]] = field(default_factory=list)
    versions: list[dict[str, Any]] = field(default_factory=list)


def run_demo(
    workspace: LocalWorkspace,
    *,
    quick: bool = False,
    seed: int = 0,
    progress: Callable[[int], Any] | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> list[UserResult]:
    """Run every demo user end to end. ``progress(total)`` must return an object
    with ``update(n)`` and ``set_postfix_str(s)`` (a tqdm bar fits)."""
    users = DEMO_USERS[:2] if quick else DEMO_USERS
    only = QUICK_MODELS if quick else None
    rng = np.random.default_rng(seed)
    prepared = []
    total = 0
    for spec in users:
        bunch = spec.load()
        X, y = bunch.data.astype(np.float32), bunch.target.astype(np.int64)
        n_classes = int(y.max()) + 1
        order = rng.permutation(len(X))
        n_test = max(len(X) // 10, n_classes)
        test, train = order[:n_test], order[n_test:]
        task = workspace.as_user(spec.user).task(spec.task, input=[X.shape[1]], output=[n_classes])
        n_configs = sum(
            len(c.configs) for c in sklearn_candidates(task.record) if only is None or c.name in only
        )
        total += n_configs
        prepared.append((spec, task, X, y, train, test))
    bar = progress(total) if progress else None

    results = []
    for spec, task, X, y, train, test in prepared:
        log(f"{spec.user}: task {spec.task!r}, feeding {len(train)} examples")
        task.feed(X[train], y[train])
        # Drop the first 1% of examples, as a user cleaning noisy labels would.
        data = task.data()
        task.refine(drop=data.example_ids[: max(1, len(data.example_ids) // 100)])

        def on_job(job, _user=spec.user):
            if bar is not None:
                bar.update(1)
                score = "failed" if job.accuracy is None else f"{job.accuracy:.3f}"
                bar.set_postfix_str(f"{_user}: {job.model} {score}")

        task.train(on_job=on_job, only=only)
        best = task.best()
        predicted = task.infer(X[test])
        results.append(
            UserResult(
                user=spec.user,
                task=spec.task,
                n_train=task.versions()[-1].n_examples,
                n_test=len(test),
                best=best,
                test_accuracy=float(np.mean(predicted == y[test])),
                jobs=task.history(),
                versions=[
                    {"number": v.number, "kind": v.kind.value, "n_examples": v.n_examples,
                     "parent": v.parent_id}
                    for v in task.versions()
                ],
            )
        )
    if bar is not None and hasattr(bar, "close"):
        bar.close()
    return results


def write_report(results: list[UserResult], out_dir: Path, *, elapsed_seconds: float) -> tuple[Path, Path]:
    """Write report.json and report.html (a leaderboard and per-config scores)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "elapsed_seconds": elapsed_seconds,
        "users": [r.__dict__ for r in results],
    }
    json_path = out_dir / "report.json"
    json_path.write_text(json.dumps(payload, indent=2, default=str))
    html_path = out_dir / "report.html"
    html_path.write_text(_render_html(results, elapsed_seconds))
    return json_path, html_path


def _render_html(results: list[UserResult], elapsed_seconds: float) -> str:
    import plotly.graph_objects as go

    figure = go.Figure()
    for r in results:
        done = [j for j in r.jobs if j["accuracy"] is not None]
        figure.add_trace(
            go.Bar(
                name=f"{r.user}/{r.task}",
                x=[ModelConfig.of(j["model"], j["config"]).key for j in done],
                y=[j["accuracy"] for j in done],
            )
        )
    figure.update_layout(
        title="Validation score of every trained config", barmode="group",
        yaxis_title="validation accuracy", height=500,
    )
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            r.user, r.task, r.best["model"], r.best["config"], f"{r.best['accuracy']:.4f}",
            f"{r.test_accuracy:.4f}", r.best["dataset_version"], r.n_train,
        )) + "</tr>"
        for r in results
    )
    head = "".join(f"<th>{h}</th>" for h in (
        "user", "task", "best model", "config", "validation", "test (held back)",
        "data version", "examples"))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>ease_jupyter demo report</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px}</style></head><body>"
        f"<h1>ease_jupyter demo</h1><p>{len(results)} users, {elapsed_seconds:.1f} s.</p>"
        f"<h2>Leaderboard</h2><table><tr>{head}</tr>{rows}</table>"
        f"<h2>All configs</h2>{figure.to_html(full_html=False, include_plotlyjs=True)}"
        "</body></html>"
    )


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started
