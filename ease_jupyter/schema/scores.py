"""The score a job's ``accuracy`` holds, named once: accuracy for a
classification task (a program with classes), R² clipped to [0, 1] for a
regression one (``execution/sklearn_fit.py``, ``execution/units.py``). The
model card, the widgets and ``%easeml status`` name it from here."""

from __future__ import annotations

from .types import Program

ACCURACY, R2 = "accuracy", "r2"
TITLES = {ACCURACY: "accuracy", R2: "r2 (clipped to [0, 1])"}


def score_key(program: Program) -> str:
    """``accuracy`` for a classification program, ``r2`` otherwise."""
    return ACCURACY if program.num_classes is not None else R2
