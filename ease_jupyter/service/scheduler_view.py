"""The scheduler view: who the selector serves and why (``GET /scheduler``
and the ``decision`` events), shaped for one viewer.

An admin sees every name. Anyone else sees her own name and every other user
as a stable label ``"user N"``, N being the user's rank by id among all users
(ids only grow, so the label never changes), no task names but her own, and
no name of another user's own model (a zoo model's name is shown).

Per user with tasks:

* ``running``: her jobs running now (the loop's view).
* ``best_accuracy``: the mean over her tasks of each task's best validation
  score (the best finished job on the newest version that has one, as
  ``models.best_job``); None before her first model.
* ``accuracy_loss``: an estimate of how much she still stands to gain, from
  the selector's GP posterior. Per task (its latest version, a selector
  tenant): the highest posterior mean over the task's arms minus the best
  observed quality (0 before the first), clipped at 0. A tried arm's mean is
  about its observation, so this is in effect the best untried arm's expected
  gain. Per user: the mean over her tasks in the selector (cancelled tasks
  and tasks with no data are not); None when she has none. Averaging matches
  ease.ml's objective, the average accuracy loss over users (tenants).
* ``compute_seconds`` / ``compute_share``: her measured seconds (each
  finished job's ``cost_seconds``, or its run time when it has none; a
  running job's time so far) and their share of everyone's.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Iterable

from ..errors import NotFoundError
from ..selection.baselines import policy_spec
from ..store import Job, JobStatus, Store, Task, User
from .user_models import UserModels


def _seconds(when: datetime | None) -> float | None:
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def job_seconds(job: Job, now: float) -> float:
    """Compute a job has used: its measured cost, else its run time (so far)."""
    if job.status is JobStatus.RUNNING:
        start = _seconds(job.started_at)
        return max(0.0, now - start) if start is not None else 0.0
    if job.cost_seconds is not None:
        return float(job.cost_seconds)
    start, end = _seconds(job.started_at), _seconds(job.finished_at)
    return max(0.0, end - start) if start is not None and end is not None else 0.0


class Viewer:
    """How one caller sees other users: ``label(user_id)``, ``sees(owner_id)``."""

    def __init__(self, users: Iterable[User], viewer_id: int | None, admin: bool):
        self.viewer_id, self.admin = viewer_id, admin
        self._labels: dict[int, str] = {}
        for rank, user in enumerate(sorted(users, key=lambda u: u.id), start=1):
            self._labels[user.id] = user.name if admin or user.id == viewer_id else f"user {rank}"

    def sees(self, owner_id: int) -> bool:
        return self.admin or owner_id == self.viewer_id

    def label(self, user_id: int) -> str:
        return self._labels.get(user_id, f"user ?{user_id}")


# ------------------------------------------------------------ decisions in words
# Why a task was served, by the phase of its pick (``selection.Pick.phase``).
# ``{task}`` is "your task" or "their task".
_SERVED = {
    "initial": "{task} has no trained model yet, and every new task gets its first model before any task gets more",
    "gain_rate": ("{task} can gain more accuracy per second than the average waiting task, and of those it has "
                  "waited longest for a turn"),
    "greedy": ("{task} has the most room to improve for the time its next model takes, among the tasks whose "
               "results are least settled"),
    "round_robin": "the tasks take turns, and it is {task}'s turn",
    "random": "{task} was drawn by lot among the tasks with models left to try",
    "ei_greedy": "{task} has the largest expected gain in accuracy per second among the waiting tasks",
    "regret_greedy": "{task} has the most accuracy left to gain, as far as the results so far tell, among the waiting tasks",
    "fifo": "tasks are served in the order they arrived, and {task} is the first in line with models left to try",
}
_HYBRID_TURNS = "progress has levelled off, so the tasks now take turns, and it is {task}'s turn"

# Why a viewer's own task waits, by the same phase: (her task was among the
# candidates the served one was chosen from, it was not).
_WAITING = {
    "initial": ("new tasks get their first model in the order they arrived, before any task gets more",) * 2,
    "gain_rate": ("your task is among those that can gain the most per second, and another of them has waited longer",
                  "other tasks can gain more accuracy per second right now"),
    "greedy": ("another task has more room to improve for the time it takes",
               "other tasks' results are less settled, so they are explored first"),
    "round_robin": ("the tasks take turns, and yours comes later",) * 2,
    "random": ("another task was drawn by lot this time",) * 2,
    "ei_greedy": ("another task can gain more accuracy per second right now",) * 2,
    "regret_greedy": ("another task has more accuracy left to gain",) * 2,
    "fifo": ("tasks are served in the order they arrived, and an earlier one is first in line",) * 2,
}

# Why this model, by the model chooser (``selection.baselines.POLICIES``); ``{whose}``: "your task's" or "their task's".
_MODEL = {
    "capped_ei": "it has the best expected gain in accuracy per second among {whose} untried models",
    "ei": "it has the best expected gain in accuracy per second among {whose} untried models",
    "ucb": ("it is the most promising of {whose} untried models, weighing how good it may be, how much is still "
            "unknown about it, and how long it takes to train"),
}
_FIXED_ORDER = {  # the fixed-order choosers, by rule
    "fifo": "{whose} models are tried in the zoo's order, and it is the next one",
    "most_cited": "{whose} models are tried from the most to the least accurate on other tasks, and it is the next one",
    "most_recent": "{whose} models are tried newest first, and it is the next one",
}

# A rule in one sentence: how it serves tasks, then how it picks their models.
_RULE_USERS = {
    "gain_rate": ("every new task gets one model first; then the tasks that can gain more accuracy per second than "
                  "average take turns"),
    "hybrid": ("every new task gets one model first; then the task with the most room to improve goes next, until "
               "progress levels off and the tasks take turns"),
    "greedy": "every new task gets one model first; then the task with the most room to improve goes next",
    "round_robin": "the tasks take turns",
    "random": "tasks are drawn by lot",
    "ei_greedy": ("every new task gets one model first; then the task with the largest expected gain in accuracy per "
                  "second goes next"),
    "regret_greedy": "every new task gets one model first; then the task with the most accuracy left to gain goes next",
    "fifo": "tasks are served in the order they arrived, each until all its models are tried",
}
_RULE_MODELS = {
    "capped_ei": "each task trains its model with the best expected gain in accuracy per second",
    "ei": "each task trains its model with the best expected gain in accuracy per second",
    "ucb": "each task trains its most promising model, weighing how much is still unknown and how long it takes",
    "fixed": "each task tries its models in a fixed order",
}
_RULE_FIXED = {
    "fifo": "each task tries its models in the zoo's order",
    "most_cited": "each task tries its models from the most to the least accurate on other tasks",
    "most_recent": "each task tries its models newest first",
}


def rule_words(rule: str | None) -> str | None:
    """The selection rule (a ``POLICIES`` name) in one plain sentence."""
    if rule is None:
        return None
    try:
        users, chooser = policy_spec(rule)
    except ValueError:
        return None
    models = _RULE_FIXED.get(rule, _RULE_MODELS["fixed"]) if chooser == "fixed" else _RULE_MODELS.get(chooser, "")
    sentence = "; ".join(part for part in (_RULE_USERS.get(users, f"the {users} rule picks tasks"), models) if part)
    return sentence[0].upper() + sentence[1:] + "."


# A pick that started on an express slot (``Admission.pick_express``), after the reason it was served.
EXPRESS_WORDS = ("; it starts now, beside the busy workers, because it is {whose} first model and should take "
                 "only seconds")


def served_words(raw: dict[str, Any], you: bool) -> str:
    """Why the task was served, for its owner (``you``) or anyone else."""
    phase = raw.get("phase")
    template = _HYBRID_TURNS if phase == "round_robin" and raw.get("policy") == "hybrid" else _SERVED.get(phase)
    if template is None:
        return f"chosen by the {raw.get('policy')} rule"
    return template.format(task="your task" if you else "their task")


# What a viewer who may not see the owner reads for the name of a user's own model.
OWN_MODEL_WORDS = "their own model"


def model_words(raw: dict[str, Any], you: bool, *, name: str | None = None) -> str:
    """Why this model of the task, for its owner (``you``) or anyone else;
    ``name``: what to call the model instead of its name."""
    whose = "your task's" if you else "their task's"
    chooser = raw.get("chooser")
    if chooser == "fixed":
        template = _FIXED_ORDER.get(raw.get("rule"), "{whose} models are tried in a fixed order, and it is the next one")
    else:
        template = _MODEL.get(chooser, "the rule chose it among {whose} untried models")
    return f"trying {name or raw.get('model')} next: " + template.format(whose=whose)


def waiting_words(raw: dict[str, Any], viewer_id: int | None) -> str | None:
    """Why the viewer's own tasks wait, when one has models left to try and she was not served; else None."""
    if viewer_id is None or raw.get("owner_id") == viewer_id:
        return None
    if not any(w["owner_id"] == viewer_id for w in raw.get("waiting") or ()):
        return None
    among = any(c["owner_id"] == viewer_id for c in raw.get("candidates") or ())
    words = _WAITING.get(raw.get("phase"))
    if words is None:
        return f"waiting: the {raw.get('policy')} rule chose another task"
    return "waiting: " + words[0 if among else 1]


def is_own_model(store: Store, raw: dict[str, Any] | None) -> bool:
    """Whether the pick ``raw`` trains a user's own model (one she added to
    her task, ``user_models.py``), not one of the zoo's."""
    if raw is None or raw.get("model") is None:
        return False
    try:
        return UserModels(store).get(raw["task_id"], raw["model"]) is not None
    except NotFoundError:  # the task was deleted since: whatever it was, its name stays hidden
        return True


def decision_view(raw: dict[str, Any] | None, viewer: Viewer, task_names: dict[int, str], *,
                  own_model: bool = False) -> dict[str, Any] | None:
    """A launched pick as ``viewer`` may see it (``loop.admission.Admission.decided``),
    explained in words: ``reason`` (why that task was served), ``model_reason``
    (why that model) and ``your_wait`` (why the viewer's own tasks wait, or
    None); the numbers stay in ``candidates``. ``own_model``: the pick trains
    its owner's own model (``is_own_model``), whose name only those who see
    the owner may read: the zoo's names are public, hers are not."""
    if raw is None:
        return None
    mine = viewer.sees(raw["owner_id"])
    you = raw["owner_id"] == viewer.viewer_id
    hidden = own_model and not mine
    candidates = raw.get("candidates")
    return {
        "user": viewer.label(raw["owner_id"]),
        "task": task_names.get(raw["task_id"]) if mine else None,
        "model": None if hidden else raw.get("model"),
        "reason": f"serving {'you' if you else viewer.label(raw['owner_id'])} next: {served_words(raw, you)}"
                  + (EXPRESS_WORDS.format(whose="your task's" if you else "their task's") if raw.get("express") else ""),
        "model_reason": model_words(raw, you, name=OWN_MODEL_WORDS if hidden else None),
        "your_wait": waiting_words(raw, viewer.viewer_id),
        "phase": raw.get("phase"),
        "policy": raw.get("policy"),
        "candidates": None if candidates is None else [
            {"user": viewer.label(c["owner_id"]),
             "task": task_names.get(c["task_id"]) if viewer.sees(c["owner_id"]) else None,
             "gap": c["gap"]} for c in candidates],
        "decision": raw.get("decision"),
        "job_id": raw.get("job_id") if mine else None,
        "time": raw.get("time"),
    }


def _best_by_task(jobs: Iterable[Job]) -> dict[int, float]:
    """task id -> best score on the newest version with a finished job (training.best_job)."""
    newest: dict[int, int] = {}
    scores: dict[tuple[int, int], float] = {}
    for job in jobs:
        if job.status is not JobStatus.SUCCEEDED or job.accuracy is None:
            continue
        newest[job.task_id] = max(newest.get(job.task_id, 0), job.dataset_version_id)
        key = (job.task_id, job.dataset_version_id)
        scores[key] = max(scores.get(key, float("-inf")), float(job.accuracy))
    return {task_id: scores[(task_id, version)] for task_id, version in newest.items()}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def scheduler_view(store: Store, state: dict[str, Any], caller: User) -> dict[str, Any]:
    """``GET /scheduler`` for ``caller``; ``state`` is ``ControlLoop.scheduler_state()``."""
    users = store.list_users()
    viewer = Viewer(users, caller.id, caller.is_admin)
    tasks: list[Task] = list(store.list_tasks())
    task_names = {t.id: t.name for t in tasks}
    jobs = store.list_jobs()
    now = time.time()
    best = _best_by_task(jobs)
    seconds_by_task: dict[int, float] = {}
    for job in jobs:
        seconds_by_task[job.task_id] = seconds_by_task.get(job.task_id, 0.0) + job_seconds(job, now)
    total = sum(seconds_by_task.values())
    loss_by_task: dict[int, float] = {}
    for tenant in state["tenants"].values():
        if tenant["max_mean"] is not None:
            loss_by_task[tenant["task_id"]] = max(0.0, tenant["max_mean"] - (tenant["best"] or 0.0))
    running_by_task: dict[int, int] = {}
    for run in state["running"]:
        running_by_task[run["task_id"]] = running_by_task.get(run["task_id"], 0) + 1

    rows = []
    for user in sorted(users, key=lambda u: u.id):
        own = [t for t in tasks if t.owner_id == user.id]
        if not own:
            continue
        seconds = sum(seconds_by_task.get(t.id, 0.0) for t in own)
        row: dict[str, Any] = {
            "name": viewer.label(user.id),
            "you": user.id == caller.id,
            "n_tasks": len(own),
            "tasks": [t.name for t in own] if viewer.sees(user.id) else None,
            "running": sum(running_by_task.get(t.id, 0) for t in own),
            "best_accuracy": _mean([best[t.id] for t in own if t.id in best]),
            "accuracy_loss": _mean([loss_by_task[t.id] for t in own if t.id in loss_by_task]),
            "compute_seconds": seconds,
            "compute_share": seconds / total if total > 0 else None,
        }
        if viewer.sees(user.id):
            row["per_task"] = [{"task": t.name, "running": running_by_task.get(t.id, 0), "best_accuracy": best.get(t.id),
                                "accuracy_loss": loss_by_task.get(t.id), "compute_seconds": seconds_by_task.get(t.id, 0.0)}
                               for t in own]
        rows.append(row)
    return {
        "policy": state["policy"],
        "rule": rule_words(state["policy"]),
        "mode": state["mode"],
        "last_decision": decision_view(state["last_decision"], viewer, task_names,
                                       own_model=is_own_model(store, state["last_decision"])),
        "users": rows,
        "running": len(state["running"]),
        "compute_seconds": total,
        "viewer": {"name": caller.name, "admin": caller.is_admin},
    }


def decision_event(store: Store, raw: dict[str, Any]):
    """``event_for(user_id)`` for ``EventBus.broadcast``: the ``decision``
    event shaped for each viewer (None: an admin, who sees everything).

    The subscription alone says who is an admin: a stream subscribes with
    None only when its token gave admin rights (``websocket.py``). The
    stored admin flag is not asked: in hub mode it is the one of the user's
    first login, and a demoted admin or a token without the admin scope
    subscribed with her own id."""
    users = store.list_users()
    task_names = {t.id: t.name for t in store.list_tasks()}
    own_model = is_own_model(store, raw)

    def event_for(user_id: int | None) -> dict[str, Any]:
        viewer = Viewer(users, user_id, user_id is None)
        return {"type": "decision", "mode": raw.get("mode"),
                **decision_view(raw, viewer, task_names, own_model=own_model)}

    return event_for


__all__ = ["OWN_MODEL_WORDS", "Viewer", "decision_event", "decision_view", "is_own_model", "job_seconds",
           "model_words", "rule_words", "scheduler_view", "served_words", "waiting_words"]
