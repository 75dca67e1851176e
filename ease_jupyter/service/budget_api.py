"""The budget calls of the API (``Service`` delegates to these):

* ``GET/PUT /budget``: the caller's own compute budget and deadline
  (``service.budget``), what she spent and whether she gets new picks;
* ``GET/PUT /users/{name}/budget`` (admin): that user's budget, and the cap
  on it (``PUT`` sets the cap);
* ``GET/PUT /tasks/{name}/budget``: the task's ``max_epochs`` and the epochs
  its torch picks train now (``service.task_epochs``).

Every input is checked whole before anything is stored.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..errors import DataError, NotFoundError
from ..store import User
from ..store.base import HUB, LOCAL
from . import budget as budgets
from . import task_epochs

if TYPE_CHECKING:
    from .core import Service


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _status(service: Service, user: User) -> dict[str, Any]:
    out = budgets.status(service.store, user.id, gpu_pool=service.loop.gpu_pool, price=service.loop.job_cost).json()
    out["user"] = user.name
    return out


def user_named(service: Service, name: str) -> User:
    """The user ``name`` (the hub's account in JupyterHub mode, else the local one)."""
    order = (HUB, LOCAL) if service.config.jupyterhub else (LOCAL, HUB)
    found = {u.origin: u for u in service.store.list_users() if u.name == name}
    for origin in order:
        if origin in found:
            return found[origin]
    raise NotFoundError(f"user {name!r}: not found")


def get_budget(service: Service, caller: User) -> dict[str, Any]:
    return _status(service, caller)


def set_budget(service: Service, caller: User, body: Any) -> dict[str, Any]:
    """The caller's own limits; none above the cap an admin set for her."""
    changes = budgets.parse_limits(body, now=_now())
    service.loop.check_cost_budget(changes.get(budgets.COST))
    budgets.check_under_cap(changes, budgets.read_limits(service.store, caller.id, budgets.CAP_PREFIX))
    budgets.write_limits(service.store, caller.id, budgets.OWN_PREFIX, changes)
    service.loop.budget_changed(caller.id)
    out = _status(service, caller)
    service.events.publish(caller.id, {"type": "budget", "blocked": out["blocked"], "reason": out["reason"]})
    return out


def get_user_budget(service: Service, caller: User, name: str) -> dict[str, Any]:
    service._admin(caller)
    return _status(service, user_named(service, name))


def set_user_cap(service: Service, caller: User, name: str, body: Any) -> dict[str, Any]:
    """An admin's cap on a user's limits (null clears one)."""
    service._admin(caller)
    user = user_named(service, name)
    changes = budgets.parse_limits(body, now=_now())
    service.loop.check_cost_budget(changes.get(budgets.COST))
    budgets.write_limits(service.store, user.id, budgets.CAP_PREFIX, changes)
    service.loop.budget_changed(user.id)
    out = _status(service, user)
    service.events.publish(user.id, {"type": "budget", "blocked": out["blocked"], "reason": out["reason"]})
    return out


def _task_epochs(service: Service, task) -> dict[str, Any]:
    latest = service.store.latest_dataset_version(task.id)
    return task_epochs.describe(task_epochs.task_max_epochs(service.store, task.id), service.loop.torch_epochs,
                                None if latest is None else latest.n_examples)


def get_task_budget(service: Service, caller: User, name: str) -> dict[str, Any]:
    return _task_epochs(service, service._task(caller, name))


def set_task_budget(service: Service, caller: User, name: str, body: Any) -> dict[str, Any]:
    """``{"max_epochs": N}`` (null: back to the default by data size)."""
    task = service._task(caller, name)
    if not isinstance(body, dict) or set(body) != {"max_epochs"}:
        raise DataError("budget", repr(body)[:80], "an object {'max_epochs': an integer >= 1, or null}")
    task_epochs.set_max_epochs(service.store, task.id, body["max_epochs"])
    service.loop.notify(task.id)
    return _task_epochs(service, task)
