"""Benchmark of the scheduler service (issue 5, item 8): API latency and the
delay of events, measured from a separate client process on loopback.

    python benchmarks/service.py            # full: ~2 min on 2 cores
    python benchmarks/service.py --quick    # < 1 minute

Target: p99 under 100 ms for reads, with events under 1 s.

What runs
---------
``easeml serve`` as a subprocess (its defaults: the process executor with
one spawned training worker, SQLite in a temp data dir, free loopback port).
A user is made with ``easeml users add`` (admin) and ``POST /users``. This
process is only the client: a WebSocket reader thread and sequential HTTP
requests.

1. Training (events): the user's task ``iris`` is fed scikit-learn's iris and
   trained until idle (full: then also ``wine``). Every event is stamped on
   arrival.
2. Reads: GET /tasks, /tasks/iris, /tasks/iris/jobs, /leaderboard and
   /tasks/iris/best, round-robin, N times each, on the service at rest,
   (a) over one keep-alive connection (server + loopback), and
   (b) through ``ease_jupyter.Client`` (a new connection per request, which
   is what a notebook does).
3. Reads under training: the same reads through ``Client`` while ``iris``
   trains (step 1), so the loop, a worker process and SQLite writes compete
   with the API. ``/best`` answers 404 until the first model; that answer is
   timed too.
4. Writes: ``POST /tasks/w/feed`` of 10 rows, N times, and ``PUT .../tags``.
   Each feed is also timed from the request to the arrival of its
   ``version`` event.

Event delays
------------
* ``event_delay_ms``: from the event's server timestamp (``time``, set in
  ``EventBus.publish``) to its arrival in this process, over all events
  (job states with their metrics, versions). Same machine, same clock.
* ``metric_to_client_ms``: from a job's ``finished_at`` in the store (its
  result and metrics written by the worker) to the arrival of its
  ``succeeded`` event. This adds the control loop's collection delay.
* ``feed_to_version_event_ms``: from sending a feed to receiving its version
  event.

``targets_met`` takes the worse of the two read paths for the read target and
the worse of ``event_delay_ms`` / ``metric_to_client_ms`` p99 for events.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ease_jupyter.client import Client  # noqa: E402
from ease_jupyter.errors import NotFoundError  # noqa: E402
from ease_jupyter.service.testing import ServeProcess, add_user  # noqa: E402

READ_TARGET_P99_MS = 100.0
EVENT_TARGET_MS = 1000.0


def pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return {"n": 0}
    return {"n": int(a.size), "p50": round(float(np.percentile(a, 50)), 2), "p99": round(float(np.percentile(a, 99)), 2),
            "max": round(float(a.max()), 2), "mean": round(float(a.mean()), 2)}


class Service:
    """``easeml serve`` on a free loopback port, in a subprocess, with an admin."""

    def __init__(self, data_dir: Path, *args: str):
        self.admin = add_user(data_dir, "admin", admin=True, cwd=ROOT)
        self._server = ServeProcess(data_dir, *args, cwd=ROOT)
        self.url = self._server.url
        self.pid = self._server.pid

    def stop(self) -> None:
        self._server.stop()


class EventReader:
    """The user's WebSocket on a thread; each event stamped with its arrival time."""

    def __init__(self, url: str, token: str):
        self.url = url.replace("http://", "ws://") + "/api/v1/events"
        self.token = token
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.cond = threading.Condition()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._read()), daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise SystemExit("event stream did not open")

    async def _read(self) -> None:
        import tornado.httpclient
        import tornado.websocket

        request = tornado.httpclient.HTTPRequest(self.url, headers={"Authorization": f"token {self.token}"})
        ws = await tornado.websocket.websocket_connect(request)
        await ws.read_message()  # hello
        self._ready.set()
        while not self._stop.is_set():
            try:
                message = await asyncio.wait_for(ws.read_message(), 0.2)
            except asyncio.TimeoutError:
                continue
            now = time.time()
            if message is None:
                break
            with self.cond:
                self.events.append((now, json.loads(message)))
                self.cond.notify_all()
        ws.close()

    def wait_for(self, predicate, timeout: float) -> tuple[float, dict[str, Any]] | None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for item in self.events:
                    if predicate(item[1]):
                        return item
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _when(iso: str) -> float:
    stamp = datetime.fromisoformat(iso)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


READS = ["/tasks", "/tasks/iris", "/tasks/iris/jobs", "/leaderboard", "/tasks/iris/best"]


def reads_keepalive(url: str, token: str, n: int) -> dict[str, list[float]]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    out: dict[str, list[float]] = {p: [] for p in READS}
    headers = {"Authorization": f"token {token}"}
    for _ in range(n):
        for path in READS:
            t0 = time.perf_counter()
            conn.request("GET", "/api/v1" + path, headers=headers)
            response = conn.getresponse()
            body = response.read()
            out[path].append(1000 * (time.perf_counter() - t0))
            if response.status != 200:
                raise SystemExit(f"GET {path}: {response.status} {body[:200]!r}")
    conn.close()
    return out


def reads_client(client: Client, n: int, stop: threading.Event | None = None) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {p: [] for p in READS}
    for _ in range(n):
        if stop is not None and stop.is_set():
            break
        for path in READS:
            t0 = time.perf_counter()
            try:
                client.request("GET", path)
            except NotFoundError:  # /best before the first model: a valid (timed) answer
                if not path.endswith("/best"):
                    raise
            out[path].append(1000 * (time.perf_counter() - t0))
    return out


def summary(per_path: dict[str, list[float]]) -> dict[str, Any]:
    every = [v for values in per_path.values() for v in values]
    return {**pct(every), "by_endpoint": {p: pct(v) for p, v in per_path.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests, iris only (< 1 minute)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/service.json (service_quick.json with --quick)")
    args = parser.parse_args()
    if args.out is None:  # a quick run never replaces the full run's figures
        args.out = ROOT / "benchmarks" / "results" / ("service_quick.json" if args.quick else "service.json")
    n_reads = 40 if args.quick else 400
    n_writes = 20 if args.quick else 100
    t_start = time.monotonic()
    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    from sklearn.datasets import load_iris, load_wine

    X_iris, y_iris = load_iris(return_X_y=True)
    X_wine, y_wine = load_wine(return_X_y=True)
    X_iris, X_wine = X_iris.astype("float32"), X_wine.astype("float32")

    with tempfile.TemporaryDirectory(prefix="easeml-bench-") as tmp:
        service = Service(Path(tmp))
        try:
            admin = Client(service.url, service.admin)
            token = admin.add_user("bench")["token"]
            client = Client(service.url, token)
            reader = EventReader(service.url, token)

            # 1. training (events with metrics); 3. reads while it trains
            t0 = time.monotonic()
            iris = client.task("iris", input=[4], output=[3])
            iris.feed(X_iris, y_iris)
            done = threading.Event()
            waiter = threading.Thread(target=lambda: (iris.wait(timeout=300), done.set()), daemon=True)
            waiter.start()
            time.sleep(0.5)  # the first jobs are running, so /best answers
            under_training = reads_client(client, n_reads, stop=done)
            waiter.join(300)
            if not iris.wait(timeout=1):
                raise SystemExit("iris did not finish training")
            if not args.quick:
                wine = client.task("wine", input=[13], output=[3])
                wine.feed(X_wine, y_wine)
                if not wine.wait(timeout=300):
                    raise SystemExit("wine did not finish training")
            train_seconds = time.monotonic() - t0
            time.sleep(0.5)

            # 2. reads at rest
            keepalive = reads_keepalive(service.url, token, n_reads)
            through_client = reads_client(client, n_reads // 2)

            # 4. writes (feeds of 10 rows, tags) and feed -> version event
            w = client.task("w", input=[4], output=[3])
            rng = np.random.default_rng(0)
            feed_ms, feed_event_ms, tag_ms = [], [], []
            for k in range(1, n_writes + 1):
                idx = rng.choice(len(y_iris), 10, replace=False)
                sent = time.time()
                t0 = time.perf_counter()
                version = w.feed(X_iris[idx], y_iris[idx])
                feed_ms.append(1000 * (time.perf_counter() - t0))
                got = reader.wait_for(lambda e, vid=version["id"]: e.get("type") == "version"
                                      and e["version"]["id"] == vid, 10)
                if got is None:
                    raise SystemExit(f"no version event for feed {k}")
                feed_event_ms.append(1000 * (got[0] - sent))
                t0 = time.perf_counter()
                w.set_tags(round=str(k))
                tag_ms.append(1000 * (time.perf_counter() - t0))
            if args.quick:
                w.cancel()
            else:
                w.wait(timeout=300)
            time.sleep(1.0)
            reader.close()

            # event delays
            events = list(reader.events)
            delays = [1000 * (arrived - e["time"]) for arrived, e in events if "time" in e]
            by_type: dict[str, list[float]] = {}
            for arrived, e in events:
                if "time" in e:
                    by_type.setdefault(e["type"], []).append(1000 * (arrived - e["time"]))
            finished = {}
            for t in client.tasks():
                for job in t.jobs():
                    if job["status"] == "succeeded" and job["finished_at"]:
                        finished[job["id"]] = _when(job["finished_at"])
            metric_delays = [1000 * (arrived - finished[e["job_id"]]) for arrived, e in events
                             if e.get("type") == "job" and e.get("status") == "succeeded" and e["job_id"] in finished]
            n_metric_events = sum(1 for _, e in events if e.get("type") == "job" and e.get("metrics"))
            jobs_by_status: dict[str, int] = {}
            for user in admin.progress()["users"]:
                for status, count in user["jobs"].items():
                    jobs_by_status[status] = jobs_by_status.get(status, 0) + count
        finally:
            service.stop()

    read_keepalive, read_client, read_busy = summary(keepalive), summary(through_client), summary(under_training)
    event = pct(delays)
    metric = pct(metric_delays)
    worst_read_p99 = max(read_keepalive["p99"], read_client["p99"])
    worst_event_p99 = max(event["p99"], metric.get("p99", 0.0))
    result = {
        "benchmark": "service", "mode": "quick" if args.quick else "full",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average_at_start": load_start},
        "setup": {"service": "easeml serve (subprocess; process executor, 1 worker, SQLite)",
                  "client": "this process, loopback", "reads_per_endpoint": n_reads, "writes": n_writes,
                  "endpoints": READS, "train_seconds": round(train_seconds, 2),
                  "jobs_by_status": jobs_by_status},
        "read_latency_ms": {"p50": read_keepalive["p50"], "p99": read_keepalive["p99"], "max": read_keepalive["max"],
                            "path": "one keep-alive HTTP connection", "detail": read_keepalive},
        "read_latency_client_ms": {"p50": read_client["p50"], "p99": read_client["p99"], "max": read_client["max"],
                                   "path": "ease_jupyter.Client (new connection per request)", "detail": read_client},
        "read_latency_under_training_ms": {"p50": read_busy["p50"], "p99": read_busy["p99"], "max": read_busy["max"],
                                           "path": "ease_jupyter.Client while a task trains", "detail": read_busy},
        "write_latency_ms": {"feed_10_rows": pct(feed_ms), "put_tags": pct(tag_ms)},
        "event_delay_ms": {"p50": event["p50"], "p99": event["p99"], "max": event["max"], "n": event["n"],
                           "from": "server publish timestamp (event 'time') to arrival in the client process",
                           "by_type": {k: pct(v) for k, v in by_type.items()}},
        "metric_to_client_ms": {**metric, "from": "job finished_at in the store to arrival of its succeeded event",
                                "events_with_metrics": n_metric_events},
        "feed_to_version_event_ms": pct(feed_event_ms),
        "targets": {"read_p99_ms": READ_TARGET_P99_MS, "event_ms": EVENT_TARGET_MS},
        "targets_met": {"reads_p99_under_100ms": bool(worst_read_p99 < READ_TARGET_P99_MS),
                        "events_under_1s": bool(worst_event_p99 < EVENT_TARGET_MS),
                        "events_max_under_1s": bool(max(event["max"], metric.get("max", 0.0)) < EVENT_TARGET_MS)},
        "wall_seconds": round(time.monotonic() - t_start, 1),
        "load_average_at_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    result["targets_met"]["all"] = result["targets_met"]["reads_p99_under_100ms"] and result["targets_met"]["events_under_1s"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    brief = {k: result[k] for k in ("read_latency_ms", "read_latency_client_ms", "read_latency_under_training_ms")}
    for k, v in brief.items():
        print(f"{k}: p50 {v['p50']} p99 {v['p99']} max {v['max']}")
    print("write_latency_ms:", json.dumps(result["write_latency_ms"]))
    print("event_delay_ms:", {k: event[k] for k in ("n", "p50", "p99", "max")})
    print("metric_to_client_ms:", metric)
    print("feed_to_version_event_ms:", result["feed_to_version_event_ms"])
    print("targets_met:", result["targets_met"], f"({result['wall_seconds']} s) -> {args.out}")


if __name__ == "__main__":
    main()
