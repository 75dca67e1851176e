"""What a service job trains, as one type.

A pick is a (user, model) pair whose configs are trained within one job
(ease.ml pvldb §3): a scikit-learn pick evaluates its candidate's grid
(Seneca §II, :class:`SklearnGrid`), a torch pick trains its learning-rate
grid as one MOP workload (Cerebro §4.2, :class:`TorchWorkload`). A job
stored before picks trained grids holds one scikit-learn config's options
(:class:`SingleConfig`).

The store keeps a job's spec as its model name and a JSON config
(``{"grid": {option: [values]}}``, ``{"lrs": [...], "epochs": E}`` or the
options); :func:`parse_job` is the one place that reads that config back.
Per-config metrics are named ``<metric>[<label>]``: ``val_score[C=0.1]`` for
a grid point, ``val_accuracy[lr=0.01]`` for a torch config
(:func:`metric_name`, :func:`split_metric`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, Union

from .errors import DataError
from .zoo import Candidate, Engine, ModelConfig

DEFAULT_EPOCHS = 3
DEFAULT_LRS = (0.1, 0.01, 0.001)  # a torch candidate whose configs name no rate
PER_CONFIG_SCORES = ("val_score", "val_accuracy")  # the held-out score of each config


def _value(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def point_label(params: Mapping[str, Any]) -> str:
    """``C=0.1`` or ``lr=0.01``: names one config of a pick in its metric names."""
    return ",".join(f"{k}={_value(v)}" for k, v in sorted(params.items()))


def metric_name(metric: str, label: str) -> str:
    """``val_score[C=0.1]``: a per-config metric."""
    return f"{metric}[{label}]"


def split_metric(name: str) -> tuple[str, str | None]:
    """``("val_score", "C=0.1")`` from ``val_score[C=0.1]``; ``(name, None)``
    for a job-level metric such as ``val_score``."""
    if name.endswith("]") and "[" in name:
        base, _, label = name[:-1].partition("[")
        return base, label
    return name, None


@dataclass(frozen=True)
class SklearnGrid:
    """A scikit-learn pick: its candidate's grid, every point fitted in the job."""

    model: str
    grid: tuple[tuple[str, tuple[Any, ...]], ...]  # (option, values) in the candidate's order

    engine: ClassVar[Engine] = Engine.SKLEARN

    @classmethod
    def of(cls, candidate: Candidate) -> "SklearnGrid":
        """The candidate's configs as option lists (their Cartesian product is
        the configs again: the zoo tunes one option per model)."""
        grid: dict[str, list[Any]] = {}
        for config in candidate.configs:
            for option, value in config.options.items():
                values = grid.setdefault(option, [])
                if value not in values:
                    values.append(value)
        return cls(candidate.name, tuple((k, tuple(v)) for k, v in grid.items()))

    @property
    def arm(self) -> str:
        return self.model

    @property
    def options(self) -> dict[str, list[Any]]:
        return {k: list(v) for k, v in self.grid}

    def points(self) -> list[dict[str, Any]]:
        keys = [k for k, _ in self.grid]
        return [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in self.grid))]

    def config(self) -> dict[str, Any]:
        return {"grid": self.options}

    def describe(self) -> str:
        return "grid " + " ".join(f"{k}={'|'.join(_value(v) for v in vs)}" for k, vs in self.grid)


@dataclass(frozen=True)
class SingleConfig:
    """One scikit-learn config, as jobs stored before picks trained grids
    hold it. Its arm is the config's key, which no selector has: it is
    never reported, but it still trains (a one-point grid) and serves."""

    model: str
    params: tuple[tuple[str, Any], ...]

    engine: ClassVar[Engine] = Engine.SKLEARN

    @property
    def arm(self) -> str:
        return ModelConfig(self.model, self.params).key

    @property
    def options(self) -> dict[str, list[Any]]:
        return {k: [v] for k, v in self.params}

    def points(self) -> list[dict[str, Any]]:
        return [dict(self.params)]

    def config(self) -> dict[str, Any]:
        return dict(self.params)

    def describe(self) -> str:
        return ", ".join(f"{k}={_value(v)}" for k, v in self.params)


@dataclass(frozen=True)
class TorchWorkload:
    """A torch pick: its candidate's learning rates, each a config of one MOP
    workload trained for ``epochs`` epochs."""

    model: str
    lrs: tuple[float, ...]
    epochs: int = DEFAULT_EPOCHS

    engine: ClassVar[Engine] = Engine.TORCH

    @classmethod
    def of(cls, candidate: Candidate, epochs: int = DEFAULT_EPOCHS) -> "TorchWorkload":
        """The candidate's rates (ease.ml pvldb §3.1: the rates of its configs)."""
        lrs = tuple(float(c.options["lr"]) for c in candidate.configs if "lr" in c.options)
        return cls(candidate.name, lrs or DEFAULT_LRS, int(epochs))

    @property
    def arm(self) -> str:
        return self.model

    def points(self) -> list[dict[str, Any]]:
        return [{"lr": lr} for lr in self.lrs]

    def config(self) -> dict[str, Any]:
        return {"lrs": list(self.lrs), "epochs": self.epochs}

    def describe(self) -> str:
        return f"lr={'|'.join(_value(lr) for lr in self.lrs)}, {self.epochs} epochs"


JobSpec = Union[SklearnGrid, SingleConfig, TorchWorkload]


def parse_job(model: str, config: Mapping[str, Any]) -> JobSpec:
    """The spec of a stored job (its model and config); a ``DataError``
    naming ``config`` when the config is none of the three forms."""
    config = dict(config)
    if "lrs" in config and "epochs" in config:
        lrs, epochs = config["lrs"], config["epochs"]
        if not (isinstance(lrs, (list, tuple)) and lrs and isinstance(epochs, int) and epochs > 0):
            raise DataError("config", repr(config)[:80], "{'lrs': [rates], 'epochs': a positive integer}")
        return TorchWorkload(model, tuple(float(lr) for lr in lrs), epochs)
    if "grid" in config:
        grid = config["grid"]
        if not (isinstance(grid, Mapping) and grid and all(isinstance(v, (list, tuple)) and v for v in grid.values())):
            raise DataError("config", repr(config)[:80], "{'grid': {option: [values]}}")
        return SklearnGrid(model, tuple((k, tuple(v)) for k, v in grid.items()))
    return SingleConfig(model, tuple(sorted(config.items())))


def describe_job(model: str, config: Mapping[str, Any]) -> str:
    """How people read a job's config: ``grid C=0.1|1|10``,
    ``lr=0.1|0.01, 3 epochs`` or ``C=0.1``."""
    return parse_job(model, config).describe()


def best_point(metrics: Iterable[Mapping[str, Any]]) -> str | None:
    """The config (``C=0.1``, ``lr=0.01``) with the highest held-out score
    among a job's per-config metrics (any epoch); None if it has none."""
    scores = []
    for row in metrics:
        for key, value in row.items():
            base, label = split_metric(key)
            if label is not None and base in PER_CONFIG_SCORES and value is not None and value == value:
                scores.append((float(value), label))
    return max(scores)[1] if scores else None
