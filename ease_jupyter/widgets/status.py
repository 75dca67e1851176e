"""``%easeml status NAME``: a task's leaderboard above its curves."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from .curves import Curves
from .leaderboard import Leaderboard


class TaskStatus(widgets.VBox):
    """``leaderboard`` and ``curves`` of one task, both live; ``close()``
    closes both (and the shared event stream with the last live widget)."""

    def __init__(self, task: Any, *, live: bool = True, **kwargs: Any):
        self.leaderboard = Leaderboard(task, live=live)
        try:
            self.curves = Curves(task, live=live)
        except Exception:
            self.leaderboard.close()
            raise
        super().__init__(children=[self.leaderboard, self.curves], **kwargs)

    def close(self) -> None:
        self.leaderboard.close()
        self.curves.close()
        super().close()

    def __repr__(self) -> str:
        return f"{self.leaderboard!r}\n{self.curves!r}"
