"""The headless demo on the scheduler service (issue 5 item 7).

It starts the service in-process (``ServiceThread``, a temporary data dir by
default), creates several simulated users with their own tokens, and lets
each one drive its task through ``ease_jupyter.Client`` over real HTTP, as a
notebook would:

* the scikit-learn users each declare a flat task on a data set that
  scikit-learn ships, feed 90% of it and refine away 1% of the examples (as a
  user cleaning noisy labels would);
* the image user declares ``input: [8, 8, 1]`` on the digits images, whose
  candidates are torch nets that the service trains as MOP workloads (each
  pick: the candidate's learning-rate grid, ``torch_epochs`` epochs).

The service's control loop decides, for all users together, what to train
next (multi-tenant GP-UCB, HYBRID). The demo waits with a progress bar (jobs
finished on each task's latest version out of its arms), then infers on the
held-back 10% with each user's best model, and reports: a per-user
leaderboard, the average accuracy loss over time (for each user, the best
validation score among its finished jobs at the end minus the best so far,
averaged over users, against wall time since the start), and an HTML report
with the plots plus ``report.json``.
"""

from __future__ import annotations

import contextlib
import html
import json
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import numpy as np
from sklearn import datasets as sk_datasets

from .jobspec import best_point, parse_job
from .zoo import Engine


def _digits_images() -> tuple[np.ndarray, np.ndarray]:
    d = sk_datasets.load_digits()
    return (d.images / 16.0).astype(np.float32)[..., None], d.target.astype(np.int64)


def _flat(loader: Callable[..., Any]) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    def load() -> tuple[np.ndarray, np.ndarray]:
        X, y = loader(return_X_y=True)
        return X.astype(np.float32), y.astype(np.int64)

    return load


@dataclass(frozen=True)
class DemoUser:
    user: str
    task: str
    load: Callable[[], tuple[np.ndarray, np.ndarray]]
    kind: str = "sklearn"  # or "torch": an image task trained by MOP
    limit: int | None = None  # examples used (before the 10% test split)


DEMO_USERS = (
    DemoUser("alice", "digits", _flat(sk_datasets.load_digits)),
    DemoUser("bob", "breast_cancer", _flat(sk_datasets.load_breast_cancer)),
    DemoUser("carol", "wine", _flat(sk_datasets.load_wine)),
    DemoUser("dave", "iris", _flat(sk_datasets.load_iris)),
    DemoUser("erin", "digit_images", _digits_images, kind="torch", limit=900),
)
QUICK_USERS = (
    DemoUser("alice", "wine", _flat(sk_datasets.load_wine)),
    DemoUser("bob", "breast_cancer", _flat(sk_datasets.load_breast_cancer)),
    DemoUser("erin", "digit_images", _digits_images, kind="torch", limit=900),
)


@dataclass
class UserResult:
    user: str
    task: str
    kind: str
    n_train: int
    n_test: int
    best: dict[str, Any]
    test_accuracy: float
    jobs: list[dict[str, Any]] = field(default_factory=list)
    versions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class DemoRun:
    users: list[UserResult]
    loss_curve: dict[str, list[float]]
    elapsed_seconds: float
    service: dict[str, Any]

    def leaderboard(self) -> list[dict[str, Any]]:
        rows = []
        for r in self.users:
            rows.append({"user": r.user, "task": r.task, "kind": r.kind, "model": r.best["model"],
                         "config": config_label(r.best["model"], r.best["config"], r.best.get("best_config")),
                         "validation": r.best["accuracy"], "test": r.test_accuracy,
                         "dataset_version": r.best["dataset_version"],
                         "jobs": sum(j["status"] == "succeeded" for j in r.jobs)})
        return sorted(rows, key=lambda row: -row["test"])


def config_label(model: str, config: dict[str, Any], best: str | None = None) -> str:
    """``knn[n_neighbors=7] (best of grid n_neighbors=3|7|15)``, or the pick's configs before it finished."""
    if best is not None:
        spec = parse_job(model, config)
        engine = ", MOP" if spec.engine is Engine.TORCH else ""
        return f"{model}[{best}] (best of {spec.describe()}{engine})"
    return f"{model}[{parse_job(model, config).describe()}]"


def _time(value: str | None) -> float | None:
    return None if value is None else datetime.fromisoformat(value).timestamp()


def loss_curve(histories: dict[str, list[dict[str, Any]]], started: float, ended: float) -> dict[str, list[float]]:
    """Average accuracy loss over users against seconds since ``started``:
    for each user, (best validation score among its finished jobs on its
    latest version at the end) minus (the best among those finished so far,
    0 before the first)."""
    finals: dict[str, tuple[float, list[tuple[float, float]]]] = {}
    for user, jobs in histories.items():
        latest = max((j["dataset_version"] or 0 for j in jobs), default=0)
        done = sorted((_time(j["finished_at"]) - started, j["accuracy"]) for j in jobs
                      if j["status"] == "succeeded" and j["accuracy"] is not None and j["dataset_version"] == latest
                      and j["finished_at"] is not None)
        finals[user] = (max((a for _, a in done), default=0.0), done)
    times = sorted({0.0, *(t for _, done in finals.values() for t, _ in done), ended - started})
    losses = []
    for t in times:
        per_user = [final - max((a for s, a in done if s <= t), default=0.0) for final, done in finals.values()]
        losses.append(float(np.mean(per_user)) if per_user else 0.0)
    return {"seconds": [float(t) for t in times], "average_loss": losses}


DEMO_TAG = "easeml.demo"  # a user tag: the account was made by the demo


def _token_for(store: Any, name: str) -> str:
    """A token of the demo's user ``name``: a new account, or on a data dir
    of an earlier run, the account it made, with a new token (its tasks go
    on with new versions). An account of that name that the demo did not
    make is someone's: AlreadyExistsError, and her token stays as it is."""
    from .errors import AlreadyExistsError
    from .service.auth import create_user, local_user, revoke_token

    try:
        user, token = create_user(store, name)
    except AlreadyExistsError:
        if store.tags("user", local_user(store, name).id).get(DEMO_TAG) != "true":
            raise AlreadyExistsError(f"user name {name!r}: an account of this data dir that the demo did not "
                                     "make; run the demo on another --data-dir") from None
        token = revoke_token(store, name, replace=True)[1]
        assert token is not None
        return token
    store.set_tag("user", user.id, DEMO_TAG, "true")
    return token


def run_demo(
    *,
    quick: bool = False,
    seed: int = 0,
    data_dir: str | Path | None = None,
    engine: str = "local",
    torch_epochs: int | None = None,
    timeout: float = 900.0,
    progress: Callable[[int], Any] | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> DemoRun:
    """Run every demo user end to end on an in-process service.
    ``progress(total)`` must return an object with ``update(n)``,
    ``set_postfix_str(s)`` and ``close()`` (a tqdm bar fits)."""
    from .client import Client
    from .service import ServiceConfig, ServiceThread
    users = QUICK_USERS if quick else DEMO_USERS
    epochs = torch_epochs or 3
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(prefix="easeml-demo-") as scratch, contextlib.ExitStack() as held:
        if data_dir is not None:  # one service per data dir: the demo's too (DataDirInUse beside another)
            from .service.embedded import DataDirLock
            held.callback(DataDirLock(data_dir).release)
        config = ServiceConfig(data_dir=Path(data_dir or scratch), executor="thread", workers=1, engine=engine,
                               max_running_per_user=2, tick_seconds=0.1, seed=seed, torch_epochs=epochs)
        thread = ServiceThread(config).start()
        try:
            log(f"service on {thread.url} (data dir {config.data_dir})")
            started = time.time()
            prepared = []
            for spec in users:
                token = _token_for(thread.service.store, spec.user)
                client = Client(thread.url, token)
                X, y = spec.load()
                order = rng.permutation(len(X))[: spec.limit or len(X)]
                n_classes = int(y.max()) + 1
                n_test = max(len(order) // 10, n_classes)
                test, train = order[:n_test], order[n_test:]
                task = client.task(spec.task, input=list(X.shape[1:]), output=[n_classes])
                log(f"{spec.user}: task {spec.task!r} ({spec.kind}), feeding {len(train)} examples")
                task.feed(X[train], y[train])
                if spec.kind == "sklearn":
                    ids, _, _ = task.data()
                    task.refine(drop=ids[: max(1, len(ids) // 100)].tolist())
                prepared.append((spec, task, X, y, test))
            totals = {spec.user: int(task.refresh()["arms"]) for spec, task, *_ in prepared}
            bar = progress(sum(totals.values())) if progress else None
            seen = 0
            deadline = time.monotonic() + timeout
            idle: set[str] = set()
            while len(idle) < len(prepared):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the demo did not finish within {timeout:.0f} s")
                done = 0
                last = ""
                for spec, task, *_ in prepared:
                    info = task.refresh()
                    latest = (info.get("latest_version") or {}).get("number")
                    jobs = [j for j in task.jobs() if j["dataset_version"] == latest]
                    finished = [j for j in jobs if j["status"] in ("succeeded", "failed")]
                    done += len(finished)
                    if finished:
                        j = max(finished, key=lambda j: j["finished_at"] or "")
                        last = f"{spec.user}: {j['model']} {j['accuracy'] or 0:.3f}"
                    if info.get("idle"):
                        idle.add(spec.user)
                if bar is not None and done > seen:
                    bar.update(done - seen)
                    bar.set_postfix_str(last)
                    seen = done
                time.sleep(0.25)
            if bar is not None:
                bar.close()
            ended = time.time()
            results = []
            for spec, task, X, y, test in prepared:
                best = task.best()
                predicted = np.asarray(task.infer(X[test]))
                versions = task.versions()
                results.append(UserResult(
                    user=spec.user, task=spec.task, kind=spec.kind, n_train=versions[-1]["n_examples"],
                    n_test=len(test), best=best, test_accuracy=float(np.mean(predicted == y[test])),
                    jobs=task.history(),
                    versions=[{"number": v["number"], "kind": v["kind"], "n_examples": v["n_examples"],
                               "parent": v["parent_id"]} for v in versions]))
            service = thread.service.loop.progress()
            curve = loss_curve({r.user: r.jobs for r in results}, started, ended)
            return DemoRun(results, curve, ended - started, service)
        finally:
            thread.stop()


def write_report(run: DemoRun, out_dir: Path) -> tuple[Path, Path]:
    """Write report.json and report.html (leaderboard, loss over time, configs)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "elapsed_seconds": run.elapsed_seconds,
        "leaderboard": run.leaderboard(),
        "loss_curve": run.loss_curve,
        "service": run.service,
        "users": [r.__dict__ for r in run.users],
    }
    json_path = out_dir / "report.json"
    json_path.write_text(json.dumps(payload, indent=2, default=str))
    html_path = out_dir / "report.html"
    html_path.write_text(_render_html(run))
    return json_path, html_path


def _render_html(run: DemoRun) -> str:
    import plotly.graph_objects as go

    loss = go.Figure(go.Scatter(x=run.loss_curve["seconds"], y=run.loss_curve["average_loss"],
                                mode="lines+markers", line_shape="hv", name="average accuracy loss"))
    loss.update_layout(title="Average accuracy loss over users vs wall time", xaxis_title="seconds since start",
                       yaxis_title="average accuracy loss", height=420)
    configs = go.Figure()
    for r in run.users:
        done = [j for j in r.jobs if j["accuracy"] is not None]
        # One bar per config: jobs on an older data version are labelled with
        # it, or plotly would stack them onto the newer job's bar.
        newest = max((j["dataset_version"] for j in done), default=None)
        labels = [
            config_label(j["model"], j["config"], best_point(j.get("metrics", [])))
            + ("" if j["dataset_version"] == newest else f" (v{j['dataset_version']})")
            for j in done
        ]
        configs.add_trace(go.Bar(name=f"{r.user}/{r.task}", x=labels, y=[j["accuracy"] for j in done]))
    configs.update_layout(title="Validation score of every trained job", barmode="group",
                          yaxis_title="validation accuracy", height=500)
    curves = go.Figure()
    for r in run.users:
        for j in r.jobs:
            points = [(m["epoch"], m["val_accuracy"]) for m in j.get("metrics", []) if "val_accuracy" in m and m["epoch"] > 0]
            if points:
                curves.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                                            name=f"{r.user}: {j['model']} (job {j['id']})"))
    curves.update_layout(title="Torch (MOP) jobs: best config's validation accuracy per epoch",
                         xaxis_title="epoch", yaxis_title="validation accuracy", height=420)
    board = run.leaderboard()
    head = "".join(f"<th>{h}</th>" for h in ("user", "task", "kind", "best model", "validation", "test (held back)",
                                              "data version", "jobs"))
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            b["user"], b["task"], b["kind"], b["config"], f"{b['validation']:.4f}", f"{b['test']:.4f}",
            b["dataset_version"], b["jobs"])) + "</tr>"
        for b in board)
    parts = [loss.to_html(full_html=False, include_plotlyjs=True), configs.to_html(full_html=False, include_plotlyjs=False)]
    if curves.data:
        parts.append(curves.to_html(full_html=False, include_plotlyjs=False))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>ease_jupyter demo report</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px}</style></head><body>"
        f"<h1>ease_jupyter demo</h1><p>{len(run.users)} users on one scheduler service, "
        f"{run.elapsed_seconds:.1f} s.</p>"
        f"<h2>Leaderboard</h2><table><tr>{head}</tr>{rows}</table>"
        f"<h2>Accuracy loss over time</h2>{parts[0]}<h2>All jobs</h2>{''.join(parts[1:])}"
        "</body></html>"
    )
