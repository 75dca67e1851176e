"""``%easeml model``'s ``--grid``: JSON, or the name of a notebook variable holding a dict."""

from __future__ import annotations

import json
from typing import Any

from ..errors import DataError


def grid_of(text: str | None, user_ns: dict) -> Any:
    """The grid ``--grid`` names (None without one); the dict itself is checked by ``Task.add_model``."""
    if text is None:
        return None
    if text in user_ns:
        return user_ns[text]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]  # IPython's argument split keeps the quotes around '{"C": [1]}'
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise DataError("--grid", repr(text[:60]), "JSON such as '{\"C\": [0.1, 1]}' or a notebook variable") from None
