"""How a failed ``%easeml`` line shows in the notebook: one line, not a traceback.

A service error reaches the Client as a JSON answer and is raised again as
the same exception class (``client._raise_for``); its message is already the
whole story (field, found, expected). The urllib and handler frames above it
only bury that sentence, so the magic shows ``DataError: X: found ...,
expected ...`` plus a hint where one is known. The exception is still raised
(a failed cell stays failed, ``Run All`` stops there) and keeps its class;
only its rendering changes, through IPython's ``_render_traceback_`` hook on
the instance. ``%easeml --debug ...`` raises it untouched (the full
traceback), and ``_easeml_error.error`` in the notebook holds the full
traceback of the last failed line.
"""

from __future__ import annotations

import math
import re
import traceback
import urllib.error

from ..errors import AlreadyExistsError, DataError, EaseMLError, NotFoundError

# What counts as the user's error (shown in one line). Anything else is a bug
# of ours, or of a library, and keeps its whole traceback.
SHORT = (EaseMLError, ValueError, ConnectionError, TimeoutError, urllib.error.URLError)

_SHAPE = re.compile(r"shape \(([^)]*)\)")


def _dims(text: str) -> list[str]:
    return [d.strip() for d in text.split(",") if d.strip()]


def _reshape_hint(error: DataError) -> str | None:
    """How to lay out X as the task expects: ``X.transpose(0, 2, 3, 1)`` when
    the found dims are the expected ones in another order (channels first,
    say: a reshape would scramble the pixels), ``X.reshape(-1, 28, 28, 1)``
    when the found rows are flat and hold exactly the expected numbers, or
    differ from the expected ones by axes of size 1 only."""
    found, expected = _SHAPE.search(error.found or ""), _SHAPE.search(error.expected or "")
    if not found or not expected:
        return None
    have, want = _dims(found.group(1)), _dims(expected.group(1))
    if len(have) < 2 or len(want) < 2 or not all(d.isdigit() for d in have[1:] + want[1:]) or have[1:] == want[1:]:
        return None
    axes = _permutation(have[1:], want[1:])
    if axes is not None:
        return f"transpose it: {error.field}.transpose(0, {', '.join(str(a + 1) for a in axes)})"
    flat = len(have) == 2 and int(have[1]) == math.prod(int(d) for d in want[1:])
    # axes of size 1 added or dropped ((n, 28, 28) for (n, 28, 28, 1)) keep the layout too
    if flat or [d for d in have[1:] if d != "1"] == [d for d in want[1:] if d != "1"]:
        return f"reshape it: {error.field}.reshape(-1, {', '.join(want[1:])})"
    return None


def _permutation(have: list[str], want: list[str]) -> list[int] | None:
    """The axes of ``have`` in the order of ``want`` (equal sizes keep their
    order: H before W); None unless ``have`` is ``want`` reordered."""
    if sorted(have) != sorted(want):
        return None
    free = list(range(len(have)))
    axes = []
    for size in want:
        axis = next(a for a in free if have[a] == size)
        free.remove(axis)
        axes.append(axis)
    return axes


_NO_TASK = re.compile(r"task '([^']*)': user '[^']*' has no task by that name")
_NO_MODEL = re.compile(r"task '([^']*)' has no trained model yet")


# Commands for which a task that does not exist needs no next step: there is nothing to undo.
_NOTHING_TO_DECLARE = ("delete", "cancel")


def hint(error: BaseException, command: str | None = None) -> str | None:
    """A next step for the errors where one is known, else None; ``command``
    is the ``%easeml`` subcommand that failed, where known."""
    if isinstance(error, DataError) and error.field.split("[")[0] in ("X", "y"):
        return _reshape_hint(error)
    if isinstance(error, AlreadyExistsError):
        return None  # the service's message says how to open or replace the task
    if isinstance(error, NotFoundError) and (found := _NO_TASK.search(str(error))):
        if command in _NOTHING_TO_DECLARE:
            return None  # the message says there is no such task; declaring one to delete it is no step
        return f"declare it first: %easeml task {found.group(1)} --input SHAPE --output SHAPE (or --program ...)"
    if isinstance(error, NotFoundError) and (found := _NO_MODEL.search(str(error))):
        return f"feed it, then wait for a model: %easeml status {found.group(1)} --timeout 120"
    if isinstance(error, PermissionError):  # the client's AuthError: a missing or unknown token
        return "check the token: %easeml connect URL --token T (or set $EASEML_TOKEN)"
    reason = getattr(error, "reason", error)
    if isinstance(reason, (ConnectionError, TimeoutError)) or isinstance(error, urllib.error.URLError):
        return "is the service running? `%easeml connect URL --token T` (or no URL: the embedded service)"
    return None


def one_line(error: BaseException, command: str | None = None) -> str:
    """``DataError: X: found ..., expected ...`` and, on a second line, the hint."""
    message = " ".join(str(error).split()) or type(error).__name__
    text = f"{type(error).__name__}: {message}"
    tip = hint(error, command)
    return text + (f"\n  hint: {tip}" if tip else "")


def full_traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def shorten(error: BaseException, command: str | None = None) -> bool:
    """Make ``error`` render as ``one_line`` in IPython (it keeps its class
    and its traceback); False for errors that keep the full traceback."""
    if not isinstance(error, SHORT):
        return False
    lines = one_line(error, command).splitlines()
    error._render_traceback_ = lambda: lines  # type: ignore[attr-defined]  # IPython's hook, per instance
    return True


__all__ = ["SHORT", "full_traceback", "hint", "one_line", "shorten"]
