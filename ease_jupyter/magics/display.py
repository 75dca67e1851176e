"""What a magic returns: data with an HTML table and a plain-text form."""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items())
    return "" if value is None else str(value)


class Result:
    """``data`` is the raw answer; ``rows`` (list of dicts) is what is shown."""

    def __init__(self, title: str, data: Any, rows: Sequence[Mapping[str, Any]] | None = None,
                 columns: Sequence[str] | None = None):
        self.title, self.data = title, data
        if rows is None:
            rows = [{"field": k, "value": v} for k, v in data.items()] if isinstance(data, Mapping) else []
        self.rows = list(rows)
        self.columns = list(columns) if columns else list(dict.fromkeys(k for r in self.rows for k in r))

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
