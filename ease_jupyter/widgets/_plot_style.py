"""How the curves widget's figures look: a colour per model, a line or marker
style per config, a legend that stays readable with dozens of traces, and
room at the top so plotly's toolbar (the modebar, top right) covers no title.

Plain functions over plotly layout values, so tests can read what was set.
"""

from __future__ import annotations

from typing import Any

import plotly.colors

# Qualitative palettes (plotly's Dark24 then Light24): neighbours differ in hue.
PALETTE = tuple(plotly.colors.qualitative.Dark24) + tuple(plotly.colors.qualitative.Light24)
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")  # one per config of a job
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "hexagon")  # one per job of a model

MODEBAR_PX = 30  # plotly's toolbar: the top strip of the figure, at its right
TITLE_Y_PX = MODEBAR_PX + 4  # the figure title's top: below the toolbar's strip, whatever the width
TOP_MARGIN = TITLE_Y_PX + 60  # px: then the subplot titles (placed on the plots' top edge, growing upwards)
MIN_HEIGHT, MAX_HEIGHT = 340, 640
LEGEND_ROW_PX, LEGEND_GROUP_PX = 19, 26


class Styles:
    """Stable styles: a model keeps its colour, a job its symbol, a config its dash."""

    def __init__(self) -> None:
        self._colours: dict[str, str] = {}
        self._symbols: dict[str, dict[int, str]] = {}

    def colour(self, model: str) -> str:
        if model not in self._colours:
            self._colours[model] = PALETTE[len(self._colours) % len(PALETTE)]
        return self._colours[model]

    def symbol(self, model: str, job_id: int) -> str:
        jobs = self._symbols.setdefault(model, {})
        if job_id not in jobs:
            jobs[job_id] = SYMBOLS[len(jobs) % len(SYMBOLS)]
        return jobs[job_id]


def dash(index: int) -> str:
    return DASHES[index % len(DASHES)]


def base_layout(title: str) -> dict[str, Any]:
    """Margins, title and legend placement shared by the curves' figures."""
    return dict(
        template="plotly_white",
        height=MIN_HEIGHT,
        margin=dict(l=56, r=16, t=TOP_MARGIN, b=48),
        # below the modebar's strip, so that the two never meet however narrow the figure
        title=dict(text=title, x=0.0, xref="paper", xanchor="left", y=1.0, yref="container", yanchor="top",
                   pad=dict(t=TITLE_Y_PX), font=dict(size=14)),
        # beside the plots, not over them; scrolls when taller than the figure
        legend=dict(x=1.02, xanchor="left", y=1.0, yanchor="top", groupclick="toggleitem", tracegroupgap=6,
                    font=dict(size=10), itemsizing="constant"),
        modebar=dict(orientation="h"),
        hoverlabel=dict(namelength=-1),
    )


def fit_height(figure: Any) -> None:
    """Grow the figure with its legend (up to ``MAX_HEIGHT``; past that the legend scrolls)."""
    shown = [t for t in figure.data if t.showlegend is not False]
    groups = {t.legendgroup for t in shown}
    wanted = TOP_MARGIN + 48 + LEGEND_ROW_PX * len(shown) + LEGEND_GROUP_PX * len(groups)
    height = max(MIN_HEIGHT, min(MAX_HEIGHT, wanted))
    if figure.layout.height != height:
        figure.layout.height = height
