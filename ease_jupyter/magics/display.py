"""What a magic returns: data with an HTML table and a plain-text form, and
for ``status``, ``refine`` (no ids) and ``provenance`` a live widget.

The widget is built on first display (or first ``.widget`` access), not when
the magic runs: a magic called from code that never shows its result starts
no event-stream threads. When the widget cannot be built (no service events,
no widget support), the table is shown instead.

A result made with ``static=True`` (``status NAME``) also carries its
widget's own text and HTML forms (the leaderboard's rows, the budget line),
so a front end without widgets (a terminal, nbconvert) shows what the
widget shows. A result with a ``key`` (``status NAME``, ``provenance
NAME``) stops the live updates of the previous result's widget with the same
key when its own widget is built: showing a task's status again and again
keeps one live widget per task, not one per display.
"""

from __future__ import annotations

import html
import logging
import threading
from typing import Any, Callable, Hashable, Mapping, Sequence

from .errors import full_traceback, one_line

log = logging.getLogger(__name__)

# key -> the last widget built for it (held here: ipywidgets keeps every open widget alive anyway)
_LIVE: dict[Hashable, Any] = {}
_LIVE_LOCK = threading.Lock()


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items())
    return "" if value is None else str(value)


class Result:
    """``data`` is the raw answer; ``rows`` (list of dicts) is what is shown.

    ``widget`` (optional) is a zero-argument factory of the live widget that
    the notebook displays in place of the table.

    A failed line (``Result.failed``) has ``error``: the full traceback as
    text (the notebook showed only its last line), ``exception`` the
    exception itself; both are None on success.
    """

    def __init__(self, title: str, data: Any, rows: Sequence[Mapping[str, Any]] | None = None,
                 columns: Sequence[str] | None = None, widget: Callable[[], Any] | None = None,
                 error: BaseException | None = None, *, key: Hashable | None = None, static: bool = False):
        self.title, self.data = title, data
        self.key, self.static = key, static
        self.exception = error
        self.error = None if error is None else full_traceback(error)
        self._factory, self._widget = widget, None
        if rows is None:
            rows = [{"field": k, "value": v} for k, v in data.items()] if isinstance(data, Mapping) else []
        self.rows = list(rows)
        self.columns = list(columns) if columns else list(dict.fromkeys(k for r in self.rows for k in r))

    @classmethod
    def failed(cls, error: BaseException, command: str | None = None) -> "Result":
        """What a failed line leaves in the notebook as ``_easeml_error``."""
        return cls(one_line(error, command), None, [], error=error)

    @property
    def widget(self) -> Any:
        """The live widget (built on first access), or None for a plain result."""
        if self._widget is None and self._factory is not None:
            self._widget = self._factory()
            if self.key is not None:
                with _LIVE_LOCK:
                    previous = _LIVE.get(self.key)
                    _LIVE[self.key] = self._widget
                if previous is not None and previous is not self._widget:
                    _stop(previous)
        return self._widget

    def close(self) -> None:
        """Close the widget, if one was built (stops its live updates)."""
        if self._widget is not None:
            with _LIVE_LOCK:
                if _LIVE.get(self.key) is self._widget:
                    del _LIVE[self.key]
            self._widget.close()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle = {"text/plain": repr(self), "text/html": self._repr_html_()}
        if self._factory is None:
            return bundle
        try:
            view = self.widget._repr_mimebundle_()
        except Exception as error:  # noqa: BLE001 - show the table rather than nothing
            log.warning("easeml: showing a table, the widget failed: %s", error)
            return bundle
        view = dict((view[0] if isinstance(view, tuple) else view) or {})
        if self.static:  # the widget's own static forms follow the summary
            if view.get("text/plain"):
                bundle["text/plain"] += "\n" + view["text/plain"]
            if view.get("text/html"):
                bundle["text/html"] += view.pop("text/html")
        return {**bundle, **{k: v for k, v in view.items() if k != "text/plain"}}

    def __getitem__(self, key: Any) -> Any:
        return self.data[key]

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        lines = [self.title]
        if self.rows:
            widths = {c: max(len(c), *(len(_cell(r.get(c))) for r in self.rows)) for c in self.columns}
            lines.append("  ".join(c.ljust(widths[c]) for c in self.columns))
            lines += ["  ".join(_cell(r.get(c)).ljust(widths[c]) for c in self.columns) for r in self.rows]
        return "\n".join(line.rstrip() for line in lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in self.columns) + "</tr>"
                       for r in self.rows)
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" if self.rows else ""
        return f"<div class='easeml-result'><b>{html.escape(self.title)}</b>{table}</div>"


def _stop(widget: Any) -> None:
    """Stop a superseded widget's live updates; it stays on screen, frozen."""
    try:
        (getattr(widget, "stop", None) or widget.close)()
    except Exception as error:  # noqa: BLE001 - the new widget matters, not the old one
        log.warning("easeml: could not stop an earlier widget: %s", error)
