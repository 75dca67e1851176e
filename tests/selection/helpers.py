"""Small helpers shared by the selection tests."""

from __future__ import annotations


def pairs(picks) -> list[tuple[str, str]]:
    """The (user, model) of each :class:`~ease_jupyter.selection.Pick`, to compare with plain pairs."""
    return [(p.user, p.model) for p in picks]
