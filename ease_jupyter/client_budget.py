"""The notebook side of budgets (docs/budget.md): the request body of
``Client.set_budget``, with times as people write them in Python, and the
``?origin=`` of an admin's ``/users/{name}`` routes."""

from __future__ import annotations

import urllib.parse
from datetime import datetime, timedelta, timezone
from typing import Any

from .errors import DataError


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # a field left as it is (None clears it)


def deadline_json(value: Any) -> str | None:
    """An aware ISO 8601 string: a ``datetime`` (a naive one is local time),
    a ``timedelta`` from now, or a string passed on as is (the service checks it)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, timedelta):
        return (datetime.now(timezone.utc) + value).isoformat()
    if isinstance(value, datetime):
        return (value if value.tzinfo is not None else value.astimezone()).isoformat()
    raise DataError("deadline", f"{value!r} ({type(value).__name__})",
                    "a datetime, a timedelta from now, an ISO 8601 string, or None for none")


def budget_body(seconds: Any = UNSET, gpu_seconds: Any = UNSET, deadline: Any = UNSET,
                cost: Any = UNSET) -> dict[str, Any]:
    """The fields given (None: clear that limit); at least one."""
    body = {k: v for k, v in (("seconds", seconds), ("gpu_seconds", gpu_seconds), ("cost", cost)) if v is not UNSET}
    if deadline is not UNSET:
        body["deadline"] = deadline_json(deadline)
    if not body:
        raise DataError("budget", "no field", "some of seconds=, gpu_seconds=, cost=, deadline=")
    return body


ORIGINS = ("local", "hub")  # budget_api.user_named: a local account or the hub user of a name


def origin_query(origin: str | None) -> dict[str, str] | None:
    """The query of an admin's ``/users/{name}`` route: ``?origin=`` picks
    one of a local account and a hub user of one name (None: the service's
    default for the name). Anything but "local" or "hub" is a DataError
    naming ``origin`` before a request goes out."""
    if origin is None:
        return None
    if origin not in ORIGINS:
        raise DataError("origin", repr(origin)[:80], "'local' or 'hub' (which account of the name), or None")
    return {"origin": origin}


def budget_path(user: str | None, origin: str | None) -> str:
    """``/budget`` (the caller's own) or ``/users/{user}/budget``; ``origin``
    needs a user: it says which account of that user's name."""
    if user is None:
        if origin is not None:
            raise DataError("origin", repr(origin)[:80], "no origin without user=: it picks which account of "
                            "the user's name (your own budget is yours)")
        return "/budget"
    return f"/users/{urllib.parse.quote(str(user), safe='')}/budget"
