"""Data as JSON takes it: what a record, a tensor or a label becomes on the wire and in a blob."""

from __future__ import annotations

from typing import Any

import numpy as np


def to_jsonable(value: Any) -> Any:
    """``value`` with numpy arrays as lists, numpy scalars as Python ones and
    dict keys as strings, recursively; other values as they are."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value
