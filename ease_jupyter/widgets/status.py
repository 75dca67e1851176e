"""``%easeml status NAME``: the owner's compute budget, then the task's
leaderboard above its curves."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from .curves import Curves
from .leaderboard import Leaderboard


def _seconds(value: float) -> str:
    return f"{value:,.0f} s" if value >= 10 else f"{value:.1f} s"


def budget_text(budget: dict[str, Any]) -> str:
    """One line: spent and left of each limit, the deadline, and why no new
    picks come when none do (``GET /budget``, docs/budget.md)."""
    limits, spent, left = budget["limits"], budget["spent"], budget["left"]
    parts = []
    for field, what in (("seconds", "compute"), ("gpu_seconds", "GPU")):
        used = spent[field]
        if limits[field] is None:
            if field == "seconds" or used:
                parts.append(f"{what}: {_seconds(used)} spent, no limit")
        else:
            parts.append(f"{what}: {_seconds(used)} spent of {_seconds(limits[field])}, {_seconds(left[field])} left")
    if limits.get("cost") is not None and spent.get("cost") is not None:
        parts.append(f"cost: {spent['cost']:.4g} spent of {limits['cost']:g}, {left['cost']:.4g} left")
    if limits["deadline"] is not None:
        parts.append(f"deadline {limits['deadline']}")
    line = "; ".join(parts)
    return f"{line}. {budget['reason']}" if budget.get("blocked") else line


class BudgetLine(widgets.HTML):
    """The caller's budget in one line. It holds no event subscription of
    its own: :class:`TaskStatus` refreshes it whenever its leaderboard's jobs
    change (a job that finishes is what spends a budget); ``refresh()``
    re-reads it at any time."""

    def __init__(self, client: Any, **kwargs: Any):
        self._client = client
        self.budget: dict[str, Any] = {}
        super().__init__(**kwargs)
        self.refresh()

    def refresh(self, _change: Any = None) -> None:
        self.budget = self._client.budget()
        style = "color: #b00020" if self.budget.get("blocked") else "color: #555"
        self.value = f'<div class="easeml-budget" style="{style}">{html.escape(budget_text(self.budget))}</div>'

    def __repr__(self) -> str:
        return budget_text(self.budget) if self.budget else ""


class TaskStatus(widgets.VBox):
    """The task's ``leaderboard`` above its ``curves``, both live, and its
    owner's ``budget`` line below them (spent, left, and why no new picks
    come when none do); ``close()`` closes them all (and the shared event
    stream with the last live widget), ``stop()`` freezes them.

    Without a widget front end (a terminal, nbconvert) it shows as text and
    as HTML: the leaderboard's rows, the curves' summary and the budget line."""

    _follows = False  # before __init__ may fail: close() (also from __del__) reads it

    def __init__(self, task: Any, *, live: bool = True, **kwargs: Any):
        self._follows = False
        self.leaderboard = Leaderboard(task, live=live)
        try:
            self.curves = Curves(task, live=live)
            self.budget = BudgetLine(task.client)
        except Exception:
            self.leaderboard.close()
            if hasattr(self, "curves"):
                self.curves.close()
            raise
        self.leaderboard.observe(self.budget.refresh, names="rows")
        self._follows = True
        super().__init__(children=[self.leaderboard, self.curves, self.budget], **kwargs)

    def stop(self) -> None:
        """Stop following events (the widgets stay on screen, frozen)."""
        self.leaderboard.stop()
        self.curves.stop()

    def close(self) -> None:
        # close() may come twice (ipywidgets closes on garbage collection too),
        # and after a failed __init__ (then some parts were never made)
        parts = [getattr(self, name, None) for name in ("leaderboard", "curves", "budget")]
        if self._follows:
            self._follows = False
            self.leaderboard.unobserve(self.budget.refresh, names="rows")
        for part in parts:
            if part is not None:
                part.close()
        super().close()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        data = dict(bundle[0] if isinstance(bundle, tuple) else bundle)
        data["text/plain"] = repr(self)
        data["text/html"] = self._repr_html_()
        return data

    def _repr_html_(self) -> str:
        return (f"<div class='easeml-status'>{self.leaderboard._repr_html_()}"
                f"<div>{html.escape(repr(self.curves))}</div>{self.budget.value}</div>")

    def __repr__(self) -> str:
        return f"{self.leaderboard!r}\n{self.curves!r}\nbudget: {self.budget!r}"
