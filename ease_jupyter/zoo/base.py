"""What the zoo hands to selection and execution: candidates and their configs.

A ``Candidate`` is one model family matched to a task's program by template
matching (pvldb §3.1, Fig. 6). Template augmentation expands it into
``ModelConfig``s (learning rates, normalisations). The cost estimate drives
cost-aware GP-UCB (arXiv §4.1), and ``descriptor`` feeds the fallback GP kernel
when no other user's history exists.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping


class Workload(str, enum.Enum):
    """The rows of pvldb Fig. 6 (plus flat features, which Fig. 6 folds into
    general classification), most specific first."""

    TENSOR_CLASSIFICATION = "tensor_classification"
    TENSOR_RECOVERY = "tensor_recovery"
    TIME_SERIES_CLASSIFICATION = "time_series_classification"
    TIME_SERIES_TRANSLATION = "time_series_translation"
    TREE_CLASSIFICATION = "tree_classification"
    FLAT_CLASSIFICATION = "flat_classification"
    FLAT_REGRESSION = "flat_regression"
    GENERAL_CLASSIFICATION = "general_classification"
    GENERAL_AUTOENCODER = "general_autoencoder"


class Engine(str, enum.Enum):
    TORCH = "torch"  # trainable by SGD epochs, can hop between workers (MOP)
    SKLEARN = "sklearn"  # fitted in one call (Seneca-style grid evaluation)


@dataclass(frozen=True)
class ModelConfig:
    """One trainable configuration: a candidate plus augmentation choices."""

    model: str
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def key(self) -> str:
        """A stable, human-readable id such as ``lenet[lr=0.01]``."""
        if not self.params:
            return self.model
        inner = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.model}[{inner}]"

    @classmethod
    def of(cls, model: str, options: Mapping[str, Any] | None = None) -> "ModelConfig":
        return cls(model, tuple(sorted((options or {}).items())))


@dataclass(frozen=True)
class Candidate:
    """A model family consistent with a program.

    ``build(config)`` returns a fresh, untrained ``torch.nn.Module`` or
    scikit-learn estimator sized for the program's shapes.
    ``flops_per_example`` is forward+backward work for one example in one
    epoch (torch), or the scikit-learn complexity proxy per example.
    """

    name: str
    family: str
    workload: Workload
    engine: Engine
    configs: tuple[ModelConfig, ...]
    flops_per_example: float
    descriptor: tuple[float, ...]
    build: Callable[[ModelConfig], Any]
    epochs: int = 1  # default training epochs for torch models
    # Optional exact cost model ``cost_fn(n_examples, epochs)``, for engines
    # whose work is not linear in n (scikit-learn: SVM ~ n^2, forests ~ n log n).
    # When set, ``flops_per_example`` is its value at a nominal n, divided by n.
    cost_fn: Callable[[int, int], float] | None = field(default=None, compare=False, repr=False)

    def cost(self, n_examples: int, epochs: int | None = None) -> float:
        """Estimated work of training one config: FLOPs x examples x epochs
        (or ``cost_fn(n_examples, epochs)`` when the candidate has one)."""
        n, e = int(n_examples), int(epochs or self.epochs)
        if self.cost_fn is not None:
            return float(self.cost_fn(n, e))
        return float(self.flops_per_example) * n * e
