"""Live widgets against a real service: curves grow with metrics events,
the leaderboard follows job states and cancels, the service view follows
decisions, and the shared event stream leaves no thread behind."""

from __future__ import annotations

import threading

import pytest

from ease_jupyter.widgets import Curves, Leaderboard, ServiceView, TaskStatus
from ease_jupyter.widgets._hub import EventHub, wait_until
from ease_jupyter.widgets.curves import _lr
from ease_jupyter.widgets.service_view import _candidates, _user_row

from .conftest import updates_to, widget_threads


def test_curves_grow_as_metrics_events_arrive(service, digit_images, recorder):
    X, y = digit_images
    task = service.client("alice").task("digits_img", input=[8, 8, 1], output=[10])
    curves = Curves(task)
    applied: list[tuple[int, str, int, int]] = []  # (job, lr, event epoch, epochs plotted after the event)
    on_event = curves._on_event

    def spy(event: dict) -> None:
        on_event(event)
        if event.get("type") == "metrics":
            plotted = curves.points(event["job_id"], event["lr"])["epoch"]
            applied.append((event["job_id"], _lr(event["lr"]), event["epoch"], len(plotted)))

    curves._on_event = spy
    assert curves.traces == {}
    task.feed(X, y)
    assert task.wait(timeout=150)
    history = [h for h in task.history() if h["status"] == "succeeded"]
    assert history and all("lrs" in h["config"] for h in history)
    assert wait_until(lambda: len(applied) >= sum(len(h["config"]["lrs"]) * 2 for h in history), 10)

    # each config's curve grew one epoch per event, while training ran
    per_config: dict[tuple[int, str], list[int]] = {}
    for job, lr, epoch, n in applied:
        assert n == epoch
        per_config.setdefault((job, lr), []).append(n)
    assert all(ns == [1, 2] for ns in per_config.values()), per_config

    # what is plotted is what the store holds, trace by trace, grouped by model
    for job in history:
        for lr in job["config"]["lrs"]:
            name = f"lr={lr:g}"
            points = curves.points(job["id"], lr)
            assert points["epoch"] == [m["epoch"] for m in job["metrics"]]
            assert points["val_accuracy"] == pytest.approx([m[f"val_accuracy[{name}]"] for m in job["metrics"]])
            assert points["train_loss"] == pytest.approx([m[f"train_loss[{name}]"] for m in job["metrics"]])
            loss_i, acc_i = curves.traces[(job["id"], _lr(lr))]
            assert curves.figure.data[loss_i].legendgroup == curves.figure.data[acc_i].legendgroup == job["model"]
    assert len(curves.figure.data) == 2 * len(curves.traces) == 2 * sum(len(h["config"]["lrs"]) for h in history)

    # the browser got the new traces and their points as messages, not only Python state
    sent = [set(state) for state in updates_to(recorder, curves.figure)]
    assert any("_py2js_addTraces" in keys for keys in sent)
    assert any(keys & {"_py2js_restyle", "_py2js_update"} for keys in sent)

    # a widget opened afterwards backfills the same curves from the history
    late = Curves(task, live=False)
    assert set(late.traces) == set(curves.traces)
    for key in curves.traces:
        assert late.points(*key) == curves.points(*key)
    assert "lenet" in repr(late) or "resnet_small" in repr(late)
    late.close()
    curves.close()


def test_leaderboard_follows_job_states_and_cancel_button_cancels(service, iris):
    X, y = iris
    task = service.client("bob").task("iris_board", input=[4], output=[3])
    board = Leaderboard(task)
    seen: dict[int, list[str]] = {}

    def record(change: dict) -> None:
        for row in change["new"]:
            states = seen.setdefault(row["job_id"], [])
            if not states or states[-1] != row["state"]:
                states.append(row["state"])

    board.observe(record, "rows")
    task.feed(X, y)
    assert task.wait(timeout=90)
    jobs = {j["id"]: j for j in task.jobs()}
    assert wait_until(lambda: len(board.rows) == len(jobs) and all(r["state"] == "done" for r in board.rows), 10)
    for row in board.rows:
        job = jobs[row["job_id"]]
        assert (row["model"], row["accuracy"], row["cost"], row["version"]) == (
            job["model"], job["accuracy"], job["cost_seconds"], 1)
    order = ["queued", "running", "done"]
    for job_id, states in seen.items():
        assert states[-1] == "done" and states == sorted(states, key=order.index), (job_id, states)
    assert any("running" in states for states in seen.values())  # some state change was shown live
    assert board.best_job_id == task.best()["job_id"]
    assert [r["accuracy"] for r in board.rows] == sorted((r["accuracy"] for r in board.rows), reverse=True)
    assert board.status == f"{len(jobs)} done" and "done *" in repr(board)

    arms = task.refresh()["arms"]
    assert arms == len(jobs)
    version = task.refine(drop=[0, 1, 2, 3, 4])
    assert wait_until(lambda: board.latest_version == version["number"], 10)
    assert all(board.state_of(job_id) == "stale" for job_id in jobs)
    assert board.best_job_id not in jobs  # stale rows are not the best any more
    board.cancel_clicks += 1  # what the button does
    assert board.cancelled and task.refresh()["cancelled"] is True
    assert task.wait(timeout=60)
    after = [j for j in task.jobs() if j["dataset_version"] == version["number"]]
    assert len(after) < arms  # exploring stopped before every arm was tried
    # The board may learn of the last job an event after the store lists it: wait for its row too.
    shown = lambda: {r["job_id"]: r["state"] for r in board.rows}  # noqa: E731
    assert wait_until(lambda: all(shown().get(j["id"]) in ("done", "cancelled", "failed") for j in after), 10)
    assert board.status.startswith("cancelled")
    with pytest.raises(Exception, match="cancel_clicks"):
        board.cancel_clicks = 0
    board.close()


def test_a_cancelled_task_that_goes_idle_stays_cancelled(service, iris):
    X, y = iris
    task = service.client("bob").task("iris_idle", input=[4], output=[3])
    board = Leaderboard(task)
    task.feed(X, y)
    board.cancel()
    assert board.status.startswith("cancelled")
    assert task.wait(timeout=60)
    # the loop's "idle" event for the task, whenever it arrives, does not undo the cancel
    board._on_event({"type": "task", "task_id": board.task_id, "status": "idle"})
    assert board.cancelled and board.status.startswith("cancelled")
    board.close()


def test_service_view_follows_decisions(service, iris):
    X, y = iris
    alice, bob, root = service.client("alice"), service.client("bob"), service.client("root")
    mine, admin = ServiceView(alice, min_refresh=0.0), ServiceView(root, min_refresh=0.0)
    before = mine.decisions
    a, b = alice.task("iris_view", input=[4], output=[3]), bob.task("iris_view", input=[4], output=[3])
    a.feed(X, y)
    b.feed(X[::-1].copy(), y[::-1].copy())
    done = lambda t: sum(j["status"] == "succeeded" for j in t.jobs())  # noqa: E731
    assert wait_until(lambda: done(a) >= 3 and done(b) >= 3, 90)
    a.cancel(), b.cancel()  # enough decisions seen; let the service settle
    assert a.wait(timeout=60) and b.wait(timeout=60)
    assert wait_until(lambda: mine.users == [_user_row(u) for u in alice.scheduler()["users"]], 10)
    state = alice.scheduler()
    assert mine.decisions > before and wait_until(lambda: admin.decisions == mine.decisions, 5)
    names = {u["name"] for u in mine.users}
    assert "alice" in names and "bob" not in names  # the other user anonymised for a non-admin
    assert {"alice", "bob"} <= {u["name"] for u in admin.users}
    shares = [u["compute_share"] for u in mine.users]
    assert sum(shares) == pytest.approx(1.0) and all(0 < s < 1 for s in shares)

    decision = state["last_decision"]
    assert (mine.serving, mine.phase) == (decision["user"], decision["phase"])
    assert mine.candidates == _candidates(decision["candidates"])
    if mine.phase == "greedy":
        gaps = [c["gap"] for c in mine.candidates]
        assert gaps == sorted(gaps, reverse=True) and "GREEDY" in mine.reason
        assert mine.serving in {c["user"] for c in mine.candidates}
    elif mine.phase == "round_robin":
        assert "round-robin" in mine.reason
    assert any(line.startswith("> ") and mine.serving in line for line in repr(mine).splitlines())
    mine.close()
    admin.close()


def test_one_stream_per_client_and_no_thread_leak(service):
    client = service.client("bob")
    task = client.task("iris_board")  # from the leaderboard test: trained, cancelled, idle
    assert task.wait(timeout=30)
    baseline = threading.active_count()
    assert widget_threads() == []
    status, view, extra = TaskStatus(task), ServiceView(client), Curves(task)
    hub = EventHub.of(client)
    assert hub.n_subscribers == 4 and widget_threads() == ["easeml-events", "easeml-widgets"]
    status.close()
    assert hub.running and hub.n_subscribers == 2
    view.close()
    extra.close()
    assert not hub.running and widget_threads() == []
    assert wait_until(lambda: threading.active_count() == baseline, 10), threading.enumerate()
