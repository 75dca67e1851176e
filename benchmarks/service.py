"""Benchmark of the scheduler service: API latency and event delays.

Measured from a separate client process on loopback.

    python benchmarks/service.py            # full: about 1 minute on 2 quiet cores
    python benchmarks/service.py --quick    # about 30 s
    python benchmarks/service.py --clients-only [--db postgresql://...]

Target: p99 under 100 ms for reads, with events under 1 s (steps 1-4); at
200 clients (step 5), p99 under 500 ms for reads and 1 s for feeds.

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
   (b) through ``ease_jupyter.Client`` (which keeps one connection per
   thread open, as a notebook's client does).
3. Reads under training: the same reads through ``Client`` while ``iris``
   trains (step 1), so the loop, a worker process and SQLite writes compete
   with the API. ``/best`` answers 404 until the first model; that answer is
   timed too.
4. Writes: ``POST /tasks/w/feed`` of 10 rows, N times, and ``PUT .../tags``.
   Each feed is also timed from the request to the arrival of its
   ``version`` event.
5. Many clients (``--clients``, 200 by default): that many users, each on its
   own thread, start together; each creates a task, then feeds it 12 rows
   3 times (2 with ``--quick``), and after every feed reads the task (which
   must show the new version at once), the leaderboard and the task's jobs,
   with no pause between requests. Latency is taken on the server
   (tornado's request time, from the service's access log: the client
   process's 200 threads share one GIL and would measure themselves) and in
   the client. ``service_cpu_seconds`` is the service process's CPU time
   over the step: close to ``wall_seconds``, the service is bound by one
   core (the GIL), and the latency is about clients / requests per second.
   ``client_cpu_seconds`` is this process's over the step (its 200 threads
   share the machine's cores with the service).
   Afterwards every task must hold exactly what was sent, once. Target:
   server-side p99 under 500 ms for reads and under 1 s for feeds.

``--clients-only`` runs only step 5 (profiling, comparing stores); ``--db
URL`` runs on PostgreSQL: a fresh database is made on the server at URL for
the run and dropped afterwards (``scripts/postgres.sh start`` prints one).
Results go to ``service[_quick][_clients][_postgres].json``.

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
import contextlib
import http.client
import json
import os
import platform
import re
import signal
import subprocess
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
from ease_jupyter.service.testing import ServeProcess, add_user, fresh_postgres_database  # noqa: E402

READ_TARGET_P99_MS = 100.0
EVENT_TARGET_MS = 1000.0
# Step 5 (many clients): server-side p99 targets.
MANY_READ_TARGET_P99_MS = 500.0
MANY_FEED_TARGET_P99_MS = 1000.0
MANY_ROWS = 12


def pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return {"n": 0}
    return {"n": int(a.size), "p50": round(float(np.percentile(a, 50)), 2), "p99": round(float(np.percentile(a, 99)), 2),
            "max": round(float(a.max()), 2), "mean": round(float(a.mean()), 2)}


class Service:
    """``easeml serve`` on a free loopback port, in a subprocess, with an admin."""

    def __init__(self, data_dir: Path, *args: str, db_url: str | None = None):
        self.admin = add_user(data_dir, "admin", admin=True, db_url=db_url, cwd=ROOT)
        self._server = ServeProcess(data_dir, *args, db_url=db_url, cwd=ROOT)
        self.url = self._server.url
        self.pid = self._server.pid
        self.log = self._server.log

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


@contextlib.contextmanager
def fresh_database(server_url: str | None):
    """A new, empty database on the PostgreSQL server at ``server_url`` for
    one run, dropped afterwards; None (SQLite in the data dir) passes through."""
    if not server_url:
        yield None
        return
    with fresh_postgres_database(server_url, prefix="easeml_bench") as url:
        yield url


_ACCESS = re.compile(r"tornado\.access \w+ (\d{3}) (GET|POST|PUT|DELETE) (\S+) \([^)]*\) ([\d.]+)ms")


def server_times(log_text: str) -> dict[str, list[float]]:
    """Server-side request times (tornado's, from the access log) by kind:
    ``create`` (POST /tasks), ``feed``, ``task`` (GET /tasks/{name}) and
    ``other_reads`` (every other GET); ``errors`` counts 5xx answers."""
    out: dict[str, list[float]] = {"create": [], "feed": [], "task": [], "other_reads": [], "errors": []}
    for status, method, path, ms in _ACCESS.findall(log_text):
        path = path.split("?")[0].removeprefix("/api/v1")
        if status.startswith("5"):
            out["errors"].append(float(ms))
        if method == "POST" and path == "/tasks":
            out["create"].append(float(ms))
        elif method == "POST" and path.endswith("/feed"):
            out["feed"].append(float(ms))
        elif method == "GET" and re.fullmatch(r"/tasks/[^/]+", path):
            out["task"].append(float(ms))
        elif method == "GET":
            out["other_reads"].append(float(ms))
    return out


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) the process has used so far; None where /proc is missing."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu(pid: int) -> dict[int, float]:
    """CPU seconds so far of each process the service started (training
    workers, feed processes), by pid."""
    import psutil

    out = {}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # gone meanwhile
            continue
        out[child.pid] = times.user + times.system
    return out


def many_clients(service: Service, admin: Client, n_clients: int, n_feeds: int,
                 py_spy: Path | None = None) -> dict[str, Any]:
    """Step 5: ``n_clients`` users at once, each creating, feeding and polling
    its own task; latencies on both sides, errors, and an exactly-once check.
    ``py_spy``: record the service's GIL holders over the phase there
    (py-spy's raw, collapsed-stack format)."""
    tokens = {f"c{i:03d}": admin.add_user(f"c{i:03d}")["token"] for i in range(n_clients)}
    log_start = service.log.stat().st_size
    client_ms: dict[str, list[float]] = {"create": [], "feed": [], "task": [], "other_reads": []}
    feed_rounds: dict[int, list[float]] = {k: [] for k in range(1, n_feeds + 1)}  # client-side, per feed
    errors: list[str] = []
    sent: dict[str, np.ndarray] = {}
    lock = threading.Lock()
    start_line = threading.Barrier(n_clients)

    def timed(kind: str, call, *args, **kwargs):
        t0 = time.perf_counter()
        out = call(*args, **kwargs)
        with lock:
            client_ms[kind].append(1000 * (time.perf_counter() - t0))
        return out

    def one_client(i: int, name: str, token: str) -> None:
        client = Client(service.url, token, timeout=300)
        rng = np.random.default_rng(i)
        try:
            start_line.wait(60)
            task = timed("create", client.task, "load", input=[4], output=[3])
            ys = []
            for k in range(1, n_feeds + 1):
                y = (np.arange(MANY_ROWS) + k) % 3
                X = (rng.normal(size=(MANY_ROWS, 4)) + y[:, None]).astype("float32")
                t_feed = time.perf_counter()
                timed("feed", task.feed, X, y)
                with lock:
                    feed_rounds[k].append(1000 * (time.perf_counter() - t_feed))
                ys.append(y)
                info = timed("task", task.refresh)
                if info["latest_version"]["number"] != k:
                    raise AssertionError(f"feed {k} not shown: {info['latest_version']}")
                timed("other_reads", client.leaderboard)
                timed("other_reads", task.jobs)
            sent[name] = np.concatenate(ys)
        except BaseException as error:  # noqa: BLE001 - counted and reported
            with lock:
                errors.append(f"{name}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=one_client, args=(i, n, t), daemon=True)
               for i, (n, t) in enumerate(tokens.items())]
    spy = None if py_spy is None else subprocess.Popen(
        ["py-spy", "record", "--pid", str(service.pid), *([] if os.environ.get("EASEML_BENCH_SPY_ALL") else ["--gil"]), "--threads", "--rate", "200", "--format", "raw",
         "--output", str(py_spy)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0, cpu0, own0 = time.monotonic(), cpu_seconds(service.pid), time.process_time()
    kids0 = children_cpu(service.pid)
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    wall, cpu1, own1 = time.monotonic() - t0, cpu_seconds(service.pid), time.process_time()
    kids1 = children_cpu(service.pid)
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        spy.wait(60)
    with open(service.log) as handle:
        handle.seek(log_start)
        server_ms = server_times(handle.read())
    # Exactly once: each task has one version per feed and holds what was sent, in order.
    mismatched = []
    for name, y in sent.items():
        task = Client(service.url, tokens[name]).task("load")
        versions = [(v["number"], v["n_examples"]) for v in task.versions()]
        ids, _, y_stored = task.data()
        if (versions != [(k, MANY_ROWS * k) for k in range(1, n_feeds + 1)]
                or len(set(ids.tolist())) != len(ids) or not np.array_equal(y_stored, y)):
            mismatched.append(name)
    reads = server_ms["task"] + server_ms["other_reads"]
    return {
        "clients": n_clients, "feeds_per_client": n_feeds, "rows_per_feed": MANY_ROWS,
        "wall_seconds": round(wall, 2), "errors": len(errors), "error_examples": errors[:5],
        # the service process's CPU time over the phase: near wall_seconds, it is bound by one core (the GIL)
        "service_cpu_seconds": None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 2),
        "client_cpu_seconds": round(own1 - own0, 2),
        # its child processes' (training workers, feed processes) over the phase
        "children_cpu_seconds": round(sum(kids1[p] - kids0.get(p, 0.0) for p in kids1), 2),
        "server_5xx": len(server_ms["errors"]),
        "exactly_once": not mismatched and len(sent) == n_clients, "tasks_mismatched": mismatched[:5],
        "server_ms": {"reads": pct(reads), **{k: pct(v) for k, v in server_ms.items() if k != "errors"}},
        "client_ms": {k: pct(v) for k, v in client_ms.items()},
        "client_feed_ms_by_round": {str(k): pct(v) for k, v in feed_rounds.items()},
        "targets": {"read_p99_ms": MANY_READ_TARGET_P99_MS, "feed_p99_ms": MANY_FEED_TARGET_P99_MS},
        "targets_met": {
            "reads_p99": bool(reads) and pct(reads)["p99"] < MANY_READ_TARGET_P99_MS,
            "feeds_p99": bool(server_ms["feed"]) and pct(server_ms["feed"])["p99"] < MANY_FEED_TARGET_P99_MS,
        },
    }


def print_many(result: dict[str, Any]) -> None:
    server = result["server_ms"]
    print(f"{result['clients']} clients: {result['wall_seconds']} s (service CPU {result['service_cpu_seconds']} s, "
          f"its children's CPU {result.get('children_cpu_seconds')} s, client CPU {result['client_cpu_seconds']} s), "
          f"errors {result['errors']}, "
          f"5xx {result['server_5xx']}, exactly once: {result['exactly_once']}")
    for kind in ("reads", "task", "other_reads", "feed", "create"):
        s = server[kind]
        if s["n"]:
            print(f"  server {kind:<11} n {s['n']:>5}  p50 {s['p50']:>8}  p99 {s['p99']:>8}  max {s['max']:>8} ms")
    for k, s in result.get("client_feed_ms_by_round", {}).items():
        if s["n"]:
            print(f"  client feed {k:<6} n {s['n']:>5}  p50 {s['p50']:>8}  p99 {s['p99']:>8}  max {s['max']:>8} ms")
    print("  targets_met:", result["targets_met"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests, iris only (< 1 minute)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/service[_quick][_clients][_postgres].json")
    parser.add_argument("--clients", type=int, default=200, help="step 5: concurrent clients (0: skip it)")
    parser.add_argument("--clients-only", action="store_true", help="run only step 5")
    parser.add_argument("--py-spy", type=Path, default=None, metavar="FILE",
                        help="step 5: record the service with py-spy (GIL holders, raw collapsed stacks) into FILE")
    parser.add_argument("--feed-processes", type=int, default=None, metavar="N",
                        help="the service's feed processes (default: easeml serve's; 0: feeds in its own process)")
    parser.add_argument("--db", default=None, metavar="URL",
                        help="PostgreSQL server URL: run on a fresh database there (default: SQLite)")
    args = parser.parse_args()
    if args.out is None:  # a quick run never replaces the full run's figures
        name = "service" + ("_quick" if args.quick else "") + ("_clients" if args.clients_only else "") \
            + ("_postgres" if args.db else "")
        args.out = ROOT / "benchmarks" / "results" / f"{name}.json"
    n_reads = 40 if args.quick else 400
    n_writes = 20 if args.quick else 100
    n_feeds = 2 if args.quick else 3
    serve_args = () if args.feed_processes is None else ("--feed-processes", str(args.feed_processes))
    t_start = time.monotonic()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    if args.clients_only:
        with tempfile.TemporaryDirectory(prefix="easeml-bench-") as tmp, fresh_database(args.db) as db_url:
            service = Service(Path(tmp), *serve_args, db_url=db_url)
            try:
                many = many_clients(service, Client(service.url, service.admin), args.clients, n_feeds, args.py_spy)
            finally:
                service.stop()
        result = {"benchmark": "service", "mode": ("quick" if args.quick else "full") + ", step 5 only",
                  "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "machine": {"python": platform.python_version(), "platform": platform.platform(),
                              "cpus": os.cpu_count(), "load_average_at_start": load_start},
                  "setup": {"service": "easeml serve (subprocess; process executor, 1 worker, "
                                       + ("PostgreSQL" if args.db else "SQLite") + ")",
                            "serve_args": list(serve_args)},
                  "many_clients": many, "wall_seconds": round(time.monotonic() - t_start, 1),
                  "load_average_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print_many(many)
        print(f"load average {load_start} -> {result['load_average_at_end']} ({result['wall_seconds']} s) -> {args.out}")
        return

    from sklearn.datasets import load_iris, load_wine

    X_iris, y_iris = load_iris(return_X_y=True)
    X_wine, y_wine = load_wine(return_X_y=True)
    X_iris, X_wine = X_iris.astype("float32"), X_wine.astype("float32")

    with tempfile.TemporaryDirectory(prefix="easeml-bench-") as tmp, fresh_database(args.db) as db_url:
        service = Service(Path(tmp), *serve_args, db_url=db_url)
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

            # 5. many clients at once
            many = many_clients(service, admin, args.clients, n_feeds, args.py_spy) if args.clients else None
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
        "setup": {"service": "easeml serve (subprocess; process executor, 1 worker, "
                              + ("PostgreSQL" if args.db else "SQLite") + ")", "serve_args": list(serve_args),
                  "client": "this process, loopback", "reads_per_endpoint": n_reads, "writes": n_writes,
                  "endpoints": READS, "train_seconds": round(train_seconds, 2),
                  "jobs_by_status": jobs_by_status},
        "read_latency_ms": {"p50": read_keepalive["p50"], "p99": read_keepalive["p99"], "max": read_keepalive["max"],
                            "path": "one keep-alive HTTP connection", "detail": read_keepalive},
        "read_latency_client_ms": {"p50": read_client["p50"], "p99": read_client["p99"], "max": read_client["max"],
                                   "path": "ease_jupyter.Client (one kept connection)", "detail": read_client},
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
        "many_clients": many,
        "wall_seconds": round(time.monotonic() - t_start, 1),
        "load_average_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    result["targets_met"]["all"] = result["targets_met"]["reads_p99_under_100ms"] and result["targets_met"]["events_under_1s"]
    if many is not None:
        result["targets_met"]["many_clients_reads_p99_under_500ms"] = many["targets_met"]["reads_p99"]
        result["targets_met"]["many_clients_feeds_p99_under_1s"] = many["targets_met"]["feeds_p99"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    brief = {k: result[k] for k in ("read_latency_ms", "read_latency_client_ms", "read_latency_under_training_ms")}
    for k, v in brief.items():
        print(f"{k}: p50 {v['p50']} p99 {v['p99']} max {v['max']}")
    print("write_latency_ms:", json.dumps(result["write_latency_ms"]))
    print("event_delay_ms:", {k: event[k] for k in ("n", "p50", "p99", "max")})
    print("metric_to_client_ms:", metric)
    print("feed_to_version_event_ms:", result["feed_to_version_event_ms"])
    if many is not None:
        print_many(many)
    print("targets_met:", result["targets_met"], f"({result['wall_seconds']} s) -> {args.out}")


if __name__ == "__main__":
    main()
