"""Paths that name where in a data set an error is, e.g. ``X[3].next.next[0]``.

A path is a linked list of segments so that walking a chain of 10,000 records
costs one small object per step; the text is only built when an error needs it.
Segments: ``[i]`` for an example or an unnamed tensor (by position), ``.name``
for a named tensor or a recursive field. A run of more than four identical
segments is shown as ``(.next*9999)``.
"""

from __future__ import annotations

from itertools import groupby

_RUN = 4  # longer runs of one segment are shown compressed


class Path:
    __slots__ = ("parent", "segment")

    def __init__(self, segment: str, parent: Path | None = None):
        self.parent, self.segment = parent, segment

    def index(self, i: int) -> Path:
        """The ``i``-th example (or element) below this path."""
        return Path(f"[{i}]", self)

    def key(self, key: int | str) -> Path:
        """A record field: ``[0]`` for an unnamed tensor, ``.name`` otherwise."""
        return Path(f"[{key}]" if isinstance(key, int) else f".{key}", self)

    def __str__(self) -> str:
        segments = []
        node: Path | None = self
        while node is not None:
            segments.append(node.segment)
            node = node.parent
        segments.reverse()
        parts = []
        for segment, run in groupby(segments):
            count = len(list(run))
            parts.append(f"({segment}*{count})" if count > _RUN else segment * count)
        return "".join(parts)

    __repr__ = __str__


def format_shape(dims) -> str:
    """``(n, 8, 8)``; a 1-tuple keeps its comma like Python's ``(5,)``."""
    dims = tuple(dims)
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"
