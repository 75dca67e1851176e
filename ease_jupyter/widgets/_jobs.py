"""What the widgets say about a task's jobs: the name of the score a job's
``accuracy`` holds (accuracy for classification, R² for regression, as the
model card words it), a failed job's error in one line, and a task whose
every job failed."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..schema import parse
from ..schema.scores import ACCURACY, score_key

MAX_ERROR = 160
SHOWN_CLASSES = 10


def metric_name(program: str | None) -> str:
    """``accuracy`` for a classification task, ``r2`` for a regression task
    (its jobs' ``accuracy`` field then holds R² clipped to [0, 1])."""
    if not program:
        return ACCURACY
    try:
        return score_key(parse(program))
    except Exception:  # noqa: BLE001 - an unreadable program: keep the usual word
        return ACCURACY


def short_error(error: str | None, limit: int = MAX_ERROR) -> str:
    """A job's error in one line: the traceback's last line, without the
    exception's module path (``ease_jupyter.errors.EaseMLError: x`` -> ``EaseMLError: x``)."""
    if not error:
        return ""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    head, sep, rest = last.partition(": ")
    if sep and " " not in head and "." in head:
        last = head.rsplit(".", 1)[1] + sep + rest
    return last if len(last) <= limit else last[:limit - 3] + "..."


def all_failed(jobs: Iterable[dict[str, Any]]) -> str | None:
    """``all N jobs failed: <first error>`` when the task has jobs and every
    one of them failed; None otherwise."""
    jobs = list(jobs)
    if not jobs or any(j.get("status") != "failed" for j in jobs):
        return None
    first = next((short_error(j.get("error")) for j in sorted(jobs, key=lambda j: j.get("id", 0))
                  if j.get("error")), "")
    what = f"all {len(jobs)} jobs failed" if len(jobs) > 1 else "the only job failed"
    return what + (f": {first}" if first else "")


def classes_text(names: Sequence[str], shown: int = SHOWN_CLASSES) -> str:
    """The class names for a title: all of a few, the first ``shown`` and a
    count of the rest otherwise."""
    names = [str(n) for n in names]
    if len(names) <= shown:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f", ... ({len(names) - shown} more, {len(names)} in all)"
