"""The service across all users: loss estimates, compute shares and the
scheduler's current choice with its reason (``Client.scheduler()`` plus
``decision`` events)."""

from __future__ import annotations

import pathlib
import time
from typing import Any

import anywidget
import traitlets as t

from ._hub import Event
from ._live import Live
from .leaderboard import _text_table

HERE = pathlib.Path(__file__).parent
USER_KEYS = ("name", "you", "tasks", "running", "best_accuracy", "loss_estimate", "compute_share")
NOTEBOOK_KEYS = ("id", "user", "notebook_path", "server_name", "kernel", "last_seen", "seconds_since_seen", "alive",
                 "tasks")


def _candidates(raw: Any) -> list[dict[str, Any]]:
    """GREEDY's candidate set as ``[{user, task, gap}]``, largest gap first
    (accepts the service's list or a ``{user: gap}`` mapping)."""
    if not raw:
        return []
    items = ([{"user": u, "task": None, "gap": g} for u, g in raw.items()] if isinstance(raw, dict)
             else [{"user": c.get("user"), "task": c.get("task"), "gap": c.get("gap")} for c in raw])
    return sorted(({**c, "gap": float(c["gap"])} for c in items), key=lambda c: -c["gap"])


def _user_row(raw: dict[str, Any]) -> dict[str, Any]:
    """A user as the view shows it (``Client.scheduler()``'s ``users`` entry)."""
    tasks = raw.get("n_tasks", raw.get("tasks"))
    return {"name": raw.get("name"), "you": bool(raw.get("you", False)),
            "tasks": len(tasks) if isinstance(tasks, list) else tasks, "running": raw.get("running"),
            "best_accuracy": raw.get("best_accuracy"),
            "loss_estimate": raw.get("accuracy_loss", raw.get("loss_estimate")),
            "compute_share": raw.get("compute_share")}


def _notebook_row(raw: dict[str, Any]) -> dict[str, Any]:
    """A notebook session as the view shows it (``Client.notebooks()``'s entry): the kernel id cut to 8."""
    kernel = raw.get("kernel_id")
    return {"id": raw.get("id"), "user": raw.get("user"), "notebook_path": raw.get("notebook_path"),
            "server_name": raw.get("server_name"), "kernel": None if kernel is None else str(kernel)[:8],
            "last_seen": raw.get("last_seen"), "seconds_since_seen": raw.get("seconds_since_seen"),
            "alive": bool(raw.get("alive")), "tasks": list(raw.get("tasks") or [])}


def explain(decision: dict[str, Any] | None) -> str:
    """One sentence on why the scheduler served whom it served."""
    if not decision:
        return "no scheduling decision yet"
    user, model, phase = decision.get("user"), decision.get("model"), decision.get("phase")
    task = f" task {decision['task']}," if decision.get("task") else ""
    head = f"serving {user} ({task} {model}), decision {decision.get('decision')}".replace("( ", "(")
    if phase == "greedy":
        listed = ", ".join(f"{c['user']}{'/' + c['task'] if c['task'] else ''} gap {c['gap']:.3f}"
                           for c in _candidates(decision.get("candidates")))
        return (f"{head}: GREEDY phase; candidate set (users whose confidence bound may still improve, "
                f"with their gaps): {listed or 'empty'}; {user} has the largest gap")
    if phase == "round_robin":
        return f"{head}: HYBRID's round-robin phase (GREEDY stalled), users are served in turn"
    if phase == "initial":
        return f"{head}: initial phase, every user gets a first model before GREEDY compares gaps"
    return f"{head}: policy {decision.get('policy')}"


class ServiceView(Live, anywidget.AnyWidget):
    """Every user's current accuracy-loss estimate and share of compute, and
    which user the scheduler serves now and why: GREEDY's candidate set with
    each candidate's gap, or HYBRID's round-robin phase.

    Non-admins see the other users anonymised, as ``Client.scheduler()``
    returns them. ``decision`` events update the choice at once; the users'
    numbers are re-read from the service at most every ``min_refresh`` s
    while events arrive, once after each burst, and every ``poll_seconds``
    while some job runs (other users' job events are not sent to you).
    """

    _esm = HERE / "service_view.js"
    _css = HERE / "easeml.css"

    policy = t.Unicode("", help="the selection policy, e.g. hybrid").tag(sync=True)
    mode = t.Unicode("", help="the policy's current mode (HYBRID: greedy or round_robin)").tag(sync=True)
    users = t.List(t.Dict(), help="one dict per user: " + ", ".join(USER_KEYS)).tag(sync=True)
    serving = t.Unicode(None, allow_none=True, help="the user served by the last decision").tag(sync=True)
    phase = t.Unicode(None, allow_none=True,
                      help="initial, greedy, round_robin (or another policy's name)").tag(sync=True)
    candidates = t.List(t.Dict(), help="GREEDY's candidate set: {user, task, gap}, largest gap first").tag(sync=True)
    reason = t.Unicode("", help="why the served user was chosen").tag(sync=True)
    decisions = t.Int(0, help="decision events received").tag(sync=True)
    last_decision = t.Dict(None, allow_none=True, help="the raw last decision").tag(sync=True)
    notebooks = t.List(t.Dict(), help="your notebook sessions (admins: everyone's), one dict each: "
                                      + ", ".join(NOTEBOOK_KEYS)).tag(sync=True)
    store = t.Dict(None, allow_none=True,
                   help="admins only: the store as the control loop last met it, {writable, blocked, since, "
                        "message}; blocked is store_unavailable or storage_full while training is paused").tag(sync=True)

    def __init__(self, client: Any, *, live: bool = True, min_refresh: float = 0.5, poll_seconds: float = 2.0,
                 **kwargs: Any):
        self.client = client
        self.min_refresh, self.poll_seconds = float(min_refresh), float(poll_seconds)
        self._refreshed, self._stale = 0.0, False
        super().__init__(**kwargs)
        self._live_init(client, live)
        with self._lock:
            self.refresh()

    @t.validate("users")
    def _check_users(self, proposal: t.Bunch) -> list[dict[str, Any]]:
        for i, user in enumerate(proposal["value"]):
            missing = [k for k in USER_KEYS if k not in user]
            if missing:
                raise t.TraitError(f"users[{i}]: found keys {sorted(user)}, expected also {missing}")
            share = user["compute_share"]
            if share is not None and not 0.0 <= share <= 1.0 + 1e-9:
                raise t.TraitError(f"users[{i}].compute_share: found {share}, expected a fraction in [0, 1]")
        return list(proposal["value"])

    def refresh(self) -> None:
        """Re-read ``Client.scheduler()``."""
        with self._lock:
            self._reread(decision=True)

    _resync = refresh

    def _decide(self, decision: dict[str, Any] | None) -> None:
        self.last_decision = dict(decision) if decision else None
        if not decision:
            self.serving, self.phase, self.candidates = None, None, []
        else:
            self.serving = decision.get("user")
            self.phase = decision.get("phase")
            self.candidates = _candidates(decision.get("candidates"))
        self.reason = explain(decision)

    def _on_event(self, event: Event) -> None:
        kind = event.get("type")
        if kind == "decision":
            self.decisions += 1
            if event.get("mode"):
                self.mode = str(event["mode"])
            self._decide({k: v for k, v in event.items() if k not in ("type", "seq", "owner_id", "mode")})
        if kind in ("decision", "job", "version"):
            if time.monotonic() - self._refreshed >= self.min_refresh:
                self._reread(decision=kind != "decision")
            self._stale = True  # the service may still be settling what this event reports

    def _on_quiet(self) -> None:
        # One trailing refresh after each burst of events; and, while any job
        # runs, a poll every poll_seconds: a non-admin gets no events of the
        # other users' jobs, so their progress is only seen by asking.
        since = time.monotonic() - self._refreshed
        busy = any(u.get("running") for u in self.users)
        if (self._stale and since >= self.min_refresh) or (busy and since >= self.poll_seconds):
            self._reread(decision=True)

    def _reread(self, decision: bool) -> None:
        state = self.client.scheduler()
        self._refreshed, self._stale = time.monotonic(), False
        self.policy, self.mode = str(state.get("policy") or ""), str(state.get("mode") or "")
        self.users = [_user_row(u) for u in state.get("users", [])]
        if decision:
            self._decide(state.get("last_decision"))
        if (state.get("viewer") or {}).get("admin"):
            self.store = self._store_state()
        self.notebooks = self._notebooks()

    def _notebooks(self) -> list[dict[str, Any]]:
        """``Client.notebooks()`` as rows; none from a service without them."""
        try:
            return [_notebook_row(s) for s in self.client.notebooks()]
        except Exception:  # noqa: BLE001 - the view shows what it can; the next refresh asks again
            return []

    def _store_state(self) -> dict[str, Any] | None:
        """``/health``'s ``store`` field, which the service gives admins only."""
        try:
            return self.client.request("GET", "/health").get("store")
        except Exception:  # noqa: BLE001 - the view shows what it can; the next refresh asks again
            return None

    def close(self) -> None:
        self.stop()
        super().close()

    def __repr__(self) -> str:
        fmt = lambda v, spec: "" if v is None else format(v, spec)  # noqa: E731
        rows = [[("> " if u["name"] == self.serving else "  ") + str(u["name"]), str(u["tasks"]), str(u["running"]),
                 fmt(u["best_accuracy"], ".3f"), fmt(u["loss_estimate"], ".3f"),
                 fmt(None if u["compute_share"] is None else 100 * u["compute_share"], ".1f") + "%"]
                for u in self.users]
        head = f"Service view: policy {self.policy}, mode {self.mode}; {self.reason}"
        if self.store and self.store.get("blocked"):
            head += f"\ntraining paused ({self.store['blocked']}): {self.store.get('message')}"
        lines = [head] + _text_table(["user", "tasks", "running", "best acc", "loss est", "share"], rows)
        if self.notebooks:
            lines += ["notebooks:"] + _text_table(
                ["user", "notebook", "server", "kernel", "last seen", "state", "tasks"],
                [[str(n["user"]), str(n["notebook_path"] or ""), str(n["server_name"] or ""), str(n["kernel"] or ""),
                  f"{n['seconds_since_seen']:.0f} s ago" if n["seconds_since_seen"] is not None else "",
                  "alive" if n["alive"] else "gone", ", ".join(n["tasks"])] for n in self.notebooks])
        return "\n".join(lines)
