"""Candidate models for a task: template matching and augmentation (pvldb §3.1,
Fig. 6), torch nets for tensor workloads, scikit-learn estimators for flat
features, and cost estimates for cost-aware selection.

Importing this package loads neither torch nor scikit-learn; they are imported
when a candidate list for a tensor workload is built (FLOP counting) or when a
model is built. ``ZooModule`` is resolved lazily from ``ease_jupyter.zoo.nets``.
"""

from __future__ import annotations

from typing import Any

from ease_jupyter.zoo.base import Candidate, Engine, ModelConfig, Workload
from ease_jupyter.zoo.cost import FAMILY_KINDS
from ease_jupyter.zoo.normalization import NORMALIZATION_KS, fk_normalize, scale_unit
from ease_jupyter.zoo.templates import (
    DEFAULT_SEQ_LEN,
    LEARNING_RATES,
    TEMPLATES,
    TORCH_EPOCHS,
    NoCandidatesError,
    Template,
    candidates,
    match_workload,
)

__all__ = [
    "Candidate",
    "Engine",
    "ModelConfig",
    "Workload",
    "Template",
    "TEMPLATES",
    "NoCandidatesError",
    "match_workload",
    "candidates",
    "LEARNING_RATES",
    "NORMALIZATION_KS",
    "TORCH_EPOCHS",
    "DEFAULT_SEQ_LEN",
    "FAMILY_KINDS",
    "fk_normalize",
    "scale_unit",
    "ZooModule",
]


def __getattr__(name: str) -> Any:
    if name == "ZooModule":
        from ease_jupyter.zoo.nets import ZooModule

        return ZooModule
    raise AttributeError(f"module 'ease_jupyter.zoo' has no attribute {name!r}")
