"""Per-user compute budgets and deadlines.

A user may bound what her tasks spend: ``seconds`` of worker time over all
her jobs, ``gpu_seconds`` of it on GPU workers (torch picks, where the pool
has GPU workers), a ``cost`` in the admin's price units (ACAI §4.3: each
job's runtime times the hourly price of the resources it held, see
``selection/provisioner.py``), and a ``deadline`` after which she gets no
new picks. An
admin may cap each of them per user; what applies is the smaller of the
two (the earlier deadline), and a user cannot set her own above the cap.

ACAI §3.3 bounds each user's share of the cluster by a cap on running jobs
(the loop's ``max_running_per_user``); a budget bounds the total. It is
enforced where picks are admitted (``loop.admission``): a user whose spent
time reached a limit, or whose deadline passed, gets no new picks, and her
tasks say why. Jobs already running finish and are recorded; so a budget
may be exceeded by what her running jobs spend after the last pick.

Spent is the sum over her jobs of their measured ``cost_seconds``, and for
a running job the seconds since it started, per device kind: ``gpu`` for
torch jobs while the pool has GPU workers, ``cpu`` otherwise. A failed job
is paid for as any other: it records the seconds its attempt ran as its
cost (``failures.fail_job``; one failed without, its run time), whether her
model raised, hit its timeout or made a model too large for her quota,
its profiling runs included; one that failed for the service's own
reason (storage, cluster: ``failures.held_code``) records 0. Jobs of her
deleted tasks still count: a deletion adds what they took to her
``easeml.budget.spent_deleted.<kind>`` tags (:func:`record_deleted`), so
deleting a task does not give back what it spent.

Storage: tags on the user (``easeml.budget.<field>`` for her own limits,
``easeml.budget.cap.<field>`` for the admin's), an empty value meaning
none. Tags need no schema change, and the ``easeml.`` prefix is reserved.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..errors import DataError
from ..jobspec import parse_job
from ..store import Job, JobStatus, Store
from ..zoo import Engine

SECONDS, GPU_SECONDS, COST, DEADLINE = "seconds", "gpu_seconds", "cost", "deadline"
FIELDS = (SECONDS, GPU_SECONDS, COST, DEADLINE)
OWN_PREFIX = "easeml.budget."
CAP_PREFIX = "easeml.budget.cap."
DELETED_PREFIX = "easeml.budget.spent_deleted."  # + "cpu" / "gpu": what her deleted tasks' jobs took


@dataclass(frozen=True)
class Limits:
    """Limits of one kind (a user's own, or an admin's cap); None: no limit."""

    seconds: float | None = None
    gpu_seconds: float | None = None
    deadline: datetime | None = None
    cost: float | None = None

    def json(self) -> dict[str, Any]:
        return {SECONDS: self.seconds, GPU_SECONDS: self.gpu_seconds, COST: self.cost,
                DEADLINE: None if self.deadline is None else self.deadline.isoformat()}

    @property
    def empty(self) -> bool:
        return self.seconds is None and self.gpu_seconds is None and self.deadline is None and self.cost is None

    def within(self, cap: Limits) -> Limits:
        """The limits that apply under ``cap``: the smaller of each, the earlier deadline."""
        def least(a, b):
            return b if a is None else a if b is None else min(a, b)
        return Limits(least(self.seconds, cap.seconds), least(self.gpu_seconds, cap.gpu_seconds),
                      least(self.deadline, cap.deadline), least(self.cost, cap.cost))


@dataclass(frozen=True)
class Spent:
    """Seconds a user's jobs took, per device kind, and what they cost
    (``money``: NaN where not summed, as when she has no cost limit)."""

    cpu: float = 0.0
    gpu: float = 0.0
    money: float = 0.0

    @property
    def seconds(self) -> float:
        return self.cpu + self.gpu

    def json(self) -> dict[str, Any]:
        return {SECONDS: self.seconds, GPU_SECONDS: self.gpu, COST: self.money if math.isfinite(self.money) else None,
                "by_kind": {"cpu": self.cpu, "gpu": self.gpu}}


# ------------------------------------------------------------------ input
def _seconds(field: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise DataError(field, f"{value!r} ({type(value).__name__})", "a number of seconds >= 0, or null for none")
    try:
        value = float(value)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or value < 0:
        raise DataError(field, repr(value), "a finite number of seconds >= 0, or null for none")
    return value


def _cost(value: Any) -> float | None:
    """A cost limit in the admin's price units: a finite number >= 0, or None."""
    if value is None:
        return None
    expected = "a cost >= 0 in the service's price units (easeml serve --price-cpu/--price-gb/--price-gpu), " \
               "or null for none"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise DataError(COST, f"{value!r} ({type(value).__name__})", expected)
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise DataError(COST, repr(value), expected)
    return number


def parse_deadline(value: Any, *, now: datetime, field: str = DEADLINE) -> datetime | None:
    """An ISO 8601 time with a UTC offset (``2030-01-01T12:00:00+00:00``,
    ``...Z``) in the future, as an aware datetime; None stays None."""
    if value is None:
        return None
    expected = "an ISO 8601 time with a UTC offset, e.g. '2030-01-01T12:00:00+00:00', or null for none"
    if not isinstance(value, str):
        raise DataError(field, f"{value!r} ({type(value).__name__})", expected)
    text = value.strip()
    try:
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise DataError(field, repr(value)[:80], expected) from None
    if when.tzinfo is None:
        raise DataError(field, f"{value!r} (no UTC offset)", expected)
    if when <= now:
        raise DataError(field, f"{when.isoformat()} (in the past)", f"a time after now ({now.isoformat(timespec='seconds')})")
    return when


def parse_limits(body: Any, *, now: datetime) -> dict[str, Any]:
    """The fields a request sets (only those present): seconds and
    gpu_seconds as floats >= 0, the deadline as an aware datetime in the
    future, None to clear one. A ``DataError`` naming the field otherwise."""
    if not isinstance(body, Mapping) or not body:
        raise DataError("budget", repr(body)[:80], f"an object with some of {list(FIELDS)}")
    unknown = sorted(str(k) for k in body if k not in FIELDS)
    if unknown:
        raise DataError(unknown[0], "an unknown budget field", f"one of {list(FIELDS)}")
    out: dict[str, Any] = {}
    for field in (SECONDS, GPU_SECONDS):
        if field in body:
            out[field] = _seconds(field, body[field])
    if COST in body:
        out[COST] = _cost(body[COST])
    if DEADLINE in body:
        out[DEADLINE] = parse_deadline(body[DEADLINE], now=now)
    return out


def check_under_cap(changes: Mapping[str, Any], cap: Limits) -> None:
    """A user's own limit may not exceed the admin's cap (nor a deadline be later)."""
    for field in FIELDS:
        value, most = changes.get(field), getattr(cap, field)
        if field in changes and most is not None and (value is None or value > most):
            shown = most.isoformat() if isinstance(most, datetime) else f"{most:g}"
            found = "none" if value is None else (value.isoformat() if isinstance(value, datetime) else f"{value:g}")
            raise DataError(field, found, f"at most {shown} (the limit an admin set for you)")


# ------------------------------------------------------------------ storage
def read_limits(store: Store, user_id: int, prefix: str) -> Limits:
    """The limits stored under ``prefix`` (``OWN_PREFIX`` or ``CAP_PREFIX``)."""
    tags = store.tags("user", user_id)
    values: dict[str, Any] = {}
    for field in FIELDS:
        text = tags.get(prefix + field, "")
        if text:
            values[field] = datetime.fromisoformat(text) if field == DEADLINE else float(text)
    return Limits(**values)


def write_limits(store: Store, user_id: int, prefix: str, changes: Mapping[str, Any]) -> Limits:
    """Store checked ``changes`` (from :func:`parse_limits`) and return the limits now."""
    for field, value in changes.items():
        text = "" if value is None else value.isoformat() if isinstance(value, datetime) else repr(float(value))
        store.set_tag("user", user_id, prefix + field, text)
    return read_limits(store, user_id, prefix)


# ------------------------------------------------------------------ spent and status
def run_seconds(job: Job, now: datetime) -> float:
    """The seconds its last attempt ran: until ``now`` while it runs, else
    until it finished; 0 for a job that never started."""
    start = job.started_at
    if start is None:
        return 0.0
    end = job.finished_at if job.status.is_finished() and job.finished_at is not None else now
    return max(0.0, (_aware(end) - _aware(start)).total_seconds())


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def job_seconds(job: Job, now: datetime) -> float:
    """A job's compute: its measured cost (a failed job's is the seconds it
    ran, ``failures.fail_job``); else, running or failed, its run time."""
    if job.cost_seconds is not None:
        return float(job.cost_seconds)
    if job.status in (JobStatus.RUNNING, JobStatus.FAILED):
        return run_seconds(job, now)
    return 0.0


def spent(jobs: Iterable[Job], *, gpu_pool: bool, now: datetime,
          price: Callable[[Job, float], float] | None = None) -> Spent:
    """What ``jobs`` took, per device kind: torch jobs are ``gpu`` when the
    pool has GPU workers; with ``price`` (a job and its seconds -> its cost),
    what they cost too (else ``money`` is NaN)."""
    cpu = gpu = money = 0.0
    for job in jobs:
        seconds = job_seconds(job, now)
        if not seconds:
            continue
        if gpu_pool and parse_job(job.model, job.config).engine is Engine.TORCH:
            gpu += seconds
        else:
            cpu += seconds
        if price is not None:
            money += price(job, seconds)
    return Spent(cpu, gpu, money if price is not None else math.nan)


def user_jobs(store: Store, user_id: int) -> list[Job]:
    return [job for task in store.list_tasks(user_id) for job in store.list_jobs(task.id)]


def deleted_spent(store: Store, user_id: int) -> Spent:
    """What the jobs of her deleted tasks took (:func:`record_deleted`)."""
    tags = store.tags("user", user_id)
    return Spent(*(float(tags.get(DELETED_PREFIX + kind) or 0.0) for kind in ("cpu", "gpu", "money")))


def record_deleted(store: Store, user_id: int, jobs: Iterable[Job], *, gpu_pool: bool, now: datetime,
                   price: Callable[[Job, float], float] | None = None) -> Spent:
    """Add what ``jobs`` (of a task about to be deleted) took, and with
    ``price`` what they cost, to her deleted spent; returns what it was
    before, for :func:`restore_deleted`."""
    before, used = deleted_spent(store, user_id), spent(jobs, gpu_pool=gpu_pool, now=now, price=price)
    if used.seconds:
        money = used.money if math.isfinite(used.money) else 0.0
        restore_deleted(store, user_id, Spent(before.cpu + used.cpu, before.gpu + used.gpu, before.money + money))
    return before


def restore_deleted(store: Store, user_id: int, value: Spent) -> None:
    for kind in ("cpu", "gpu", "money"):
        store.set_tag("user", user_id, DELETED_PREFIX + kind, repr(getattr(value, kind)))


def user_spent(store: Store, user_id: int, *, gpu_pool: bool, now: datetime,
               price: Callable[[Job, float], float] | None = None) -> Spent:
    """What all her jobs took (and, with ``price``, cost): those of her tasks
    and those of tasks she deleted."""
    live = spent(user_jobs(store, user_id), gpu_pool=gpu_pool, now=now, price=price)
    gone = deleted_spent(store, user_id)
    return Spent(live.cpu + gone.cpu, live.gpu + gone.gpu, live.money + gone.money)


def blocked_reason(limits: Limits, used: Spent, *, cap: Limits, gpu_pool: bool, now: datetime) -> str | None:
    """Why the user gets no new picks (a sentence), or None while she may.
    ``limits`` are those that apply (her own within ``cap``); where the
    admin's cap is the binding one, she cannot raise it, so she is told to
    ask an admin."""
    def remedy(field: str, what: str) -> str:
        if getattr(cap, field) is not None and getattr(limits, field) == getattr(cap, field):
            return f"the limit is an admin's cap: ask an admin to {what} it"
        return f"{what} it with client.set_budget({field}=...)"

    if limits.deadline is not None and now >= limits.deadline:
        return (f"no new picks: your deadline {limits.deadline.isoformat(timespec='seconds')} has passed; "
                + remedy(DEADLINE, "extend"))
    if limits.seconds is not None and used.seconds >= limits.seconds:
        return (f"no new picks: your compute budget is spent ({used.seconds:.0f} of {limits.seconds:g} "
                "worker-seconds); " + remedy(SECONDS, "raise"))
    if limits.cost is not None and math.isfinite(used.money) and used.money >= limits.cost:
        return (f"no new picks: your cost budget is spent ({used.money:.4g} of {limits.cost:g}); "
                + remedy(COST, "raise"))
    if gpu_pool and limits.gpu_seconds is not None and used.gpu >= limits.gpu_seconds:
        return (f"no new torch picks on GPUs: your GPU budget is spent ({used.gpu:.0f} of {limits.gpu_seconds:g} "
                "GPU-seconds); " + remedy(GPU_SECONDS, "raise"))
    return None


@dataclass(frozen=True)
class BudgetStatus:
    """One user's budget as she (or an admin) reads it."""

    own: Limits
    cap: Limits
    spent: Spent
    blocked: str | None
    gpu_pool: bool

    @property
    def limits(self) -> Limits:
        return self.own.within(self.cap)

    def json(self) -> dict[str, Any]:
        limits = self.limits
        left = {SECONDS: None if limits.seconds is None else max(0.0, limits.seconds - self.spent.seconds),
                GPU_SECONDS: None if limits.gpu_seconds is None else max(0.0, limits.gpu_seconds - self.spent.gpu),
                COST: None if limits.cost is None or not math.isfinite(self.spent.money)
                else max(0.0, limits.cost - self.spent.money)}
        return {"own": self.own.json(), "cap": self.cap.json(), "limits": limits.json(), "spent": self.spent.json(),
                "left": left, "blocked": self.blocked is not None, "reason": self.blocked, "gpu_pool": self.gpu_pool}


def status(store: Store, user_id: int, *, gpu_pool: bool, now: datetime | None = None,
           price: Callable[[Job, float], float] | None = None) -> BudgetStatus:
    """The user's limits, what she spent (with ``price``: and cost) and
    whether she may get new picks."""
    now = now or datetime.now(timezone.utc)
    own, cap = read_limits(store, user_id, OWN_PREFIX), read_limits(store, user_id, CAP_PREFIX)
    used = user_spent(store, user_id, gpu_pool=gpu_pool, now=now, price=price)
    reason = blocked_reason(own.within(cap), used, cap=cap, gpu_pool=gpu_pool, now=now)
    return BudgetStatus(own, cap, used, reason, gpu_pool)
