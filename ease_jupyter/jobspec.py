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
A user's own model (``service/user_models.py``) adds ``"code"``, the blob of
its pickled estimator or factory, and ``"limit"``, the seconds its job may
run; a torch one may add ``"grid"``, its options besides the rate.
Per-config metrics are named ``<metric>[<label>]``: ``val_score[C=0.1]`` for
a grid point, ``val_accuracy[lr=0.01]`` for a torch config
(:func:`metric_name`, :func:`split_metric`).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, Union

from .errors import DataError
from .zoo import Candidate, Engine, ModelConfig

DEFAULT_EPOCHS = 3
DEFAULT_LRS = (0.1, 0.01, 0.001)  # a torch candidate whose configs name no rate
PER_CONFIG_SCORES = ("val_score", "val_accuracy")  # the held-out score of each config
MAX_USER_CONFIGS = 64  # configs of one user model's grid
# A config's label names its per-config metrics (``val_accuracy[lr=0.1,...]``),
# which the store bounds (``store._validate.MAX_KEY_BYTES``, 1,000 bytes in UTF-8).
MAX_LABEL_BYTES = 900


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
    code: str | None = None  # a user's own model: the blob of its pickled estimator
    limit: float | None = None  # a user's own model: seconds its job may run

    engine: ClassVar[Engine] = Engine.SKLEARN

    @property
    def is_user_model(self) -> bool:
        """A user's own model (its code in a blob), not one of the zoo's."""
        return self.code is not None

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

    @property
    def n_points(self) -> int:
        """``len(points())``, without making them (pricing asks it for every arm)."""
        return math.prod(len(v) for _, v in self.grid)

    def config(self) -> dict[str, Any]:
        return {"grid": self.options, **_own(self.code, self.limit)}

    def describe(self) -> str:
        return "grid " + " ".join(f"{k}={'|'.join(_value(v) for v in vs)}" for k, vs in self.grid)


def _own(code: str | None, limit: float | None) -> dict[str, Any]:
    """The config keys of a user's own model (none for a zoo model)."""
    return {} if code is None else {"code": code, "limit": limit}


@dataclass(frozen=True)
class SingleConfig:
    """One scikit-learn config, as jobs stored before picks trained grids
    hold it. Its arm is the config's key, which no selector has: it is
    never reported, but it still trains (a one-point grid) and serves."""

    model: str
    params: tuple[tuple[str, Any], ...]

    engine: ClassVar[Engine] = Engine.SKLEARN
    is_user_model: ClassVar[bool] = False  # stored before user models existed

    @property
    def arm(self) -> str:
        return ModelConfig(self.model, self.params).key

    @property
    def options(self) -> dict[str, list[Any]]:
        return {k: [v] for k, v in self.params}

    def points(self) -> list[dict[str, Any]]:
        return [dict(self.params)]

    n_points: ClassVar[int] = 1

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
    options: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # a user's own model: its options besides the rate
    code: str | None = None  # a user's own model: the blob of its pickled factory
    limit: float | None = None  # a user's own model: seconds its job may run

    engine: ClassVar[Engine] = Engine.TORCH

    @property
    def is_user_model(self) -> bool:
        """A user's own model (its code in a blob), not one of the zoo's."""
        return self.code is not None

    @classmethod
    def of(cls, candidate: Candidate, epochs: int = DEFAULT_EPOCHS) -> "TorchWorkload":
        """The candidate's rates (ease.ml pvldb §3.1: the rates of its configs)."""
        lrs = tuple(float(c.options["lr"]) for c in candidate.configs if "lr" in c.options)
        return cls(candidate.name, lrs or DEFAULT_LRS, int(epochs))

    @property
    def arm(self) -> str:
        return self.model

    def points(self) -> list[dict[str, Any]]:
        """Every config: each rate with each combination of ``options``."""
        keys = [k for k, _ in self.options]
        rest = [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in self.options))]
        return [{"lr": lr, **other} for lr in self.lrs for other in rest]

    @property
    def n_points(self) -> int:
        """``len(points())``, without making them."""
        return len(self.lrs) * math.prod(len(v) for _, v in self.options)

    def config(self) -> dict[str, Any]:
        grid = {"grid": {k: list(v) for k, v in self.options}} if self.options else {}
        return {"lrs": list(self.lrs), "epochs": self.epochs, **grid, **_own(self.code, self.limit)}

    def describe(self) -> str:
        other = "".join(f", {k}={'|'.join(_value(v) for v in vs)}" for k, vs in self.options)
        return f"lr={'|'.join(_value(lr) for lr in self.lrs)}{other}, up to {self.epochs} epochs"  # halving stops poor configs sooner


JobSpec = Union[SklearnGrid, SingleConfig, TorchWorkload]


def parse_job(model: str, config: Mapping[str, Any]) -> JobSpec:
    """The spec of a stored job (its model and config); a ``DataError``
    naming ``config`` when the config is none of the three forms."""
    config = dict(config)
    code, limit = config.get("code"), config.get("limit")
    if code is not None and not (isinstance(code, str) and isinstance(limit, (int, float)) and limit > 0):
        raise DataError("config", repr(config)[:80], "{'code': a blob digest, 'limit': positive seconds}")
    own = {"code": code, "limit": None if code is None else float(limit)}
    if "lrs" in config and "epochs" in config:
        lrs, epochs = config["lrs"], config["epochs"]
        if not (isinstance(lrs, (list, tuple)) and lrs and isinstance(epochs, int) and epochs > 0):
            raise DataError("config", repr(config)[:80], "{'lrs': [rates], 'epochs': a positive integer}")
        options = _grid(config, config.get("grid")) if "grid" in config else ()
        return TorchWorkload(model, tuple(float(lr) for lr in lrs), epochs, options, **own)
    if "grid" in config:
        return SklearnGrid(model, _grid(config, config["grid"]), **own)
    return SingleConfig(model, tuple(sorted(config.items())))


def _grid(config: Mapping[str, Any], grid: Any) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if not (isinstance(grid, Mapping) and grid and all(isinstance(v, (list, tuple)) and v for v in grid.values())):
        raise DataError("config", repr(dict(config))[:80], "{'grid': {option: [values]}}")
    return tuple((k, tuple(v)) for k, v in grid.items())


def describe_job(model: str, config: Mapping[str, Any]) -> str:
    """How people read a job's config: ``grid C=0.1|1|10``,
    ``lr=0.1|0.01, up to 3 epochs`` or ``C=0.1``."""
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


def recorded_point(record: Any) -> str | None:
    """The label of the config whose model a job stored, from the job's own
    record of it (a scikit-learn grid's best: ``{"params": {...}}``; a torch
    job's best trial: ``{"params": {...}}``, or ``{"lr": rate}`` before it
    had options): ties are broken there as the job broke them, which
    ``best_point`` cannot know. None where the record names no config."""
    if not isinstance(record, Mapping):
        return None
    params = record.get("params")
    if isinstance(params, Mapping):
        return point_label(params)
    lr = record.get("lr")
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        return point_label({"lr": float(lr)})
    return None


def check_user_grid(grid: Any, kind: str) -> dict[str, list[Any]]:
    """A user model's grid (``kind`` "estimator" or "factory"): a dict of
    non-empty lists of JSON values, at most :data:`MAX_USER_CONFIGS` configs
    (a factory's without ``lr`` train each of :data:`DEFAULT_LRS`); a
    ``DataError`` naming the key otherwise. None is no grid."""
    if grid is None:
        return {}
    if not isinstance(grid, Mapping):
        raise DataError("grid", type(grid).__name__, "a dict of option -> list of values")
    out: dict[str, list[Any]] = {}
    for key, values in grid.items():
        if not isinstance(key, str) or not key:
            raise DataError("grid", repr(key), "option names that are non-empty strings")
        if not isinstance(values, (list, tuple)):
            raise DataError(f"grid[{key!r}]", type(values).__name__, "a list of values")
        if not values:
            raise DataError(f"grid[{key!r}]", "an empty list", "at least one value")
        try:
            json.dumps(list(values), allow_nan=False)
        except (TypeError, ValueError):
            raise DataError(f"grid[{key!r}]", repr(values)[:80], "numbers, strings, booleans or None") from None
        out[key] = list(values)
    if kind == "factory":
        for lr in out.get("lr", ()):
            if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (math.isfinite(lr) and lr > 0):
                raise DataError("grid['lr']", repr(lr), "positive learning rates")
    n = math.prod(len(v) for v in out.values()) * (1 if kind == "estimator" or "lr" in out else len(DEFAULT_LRS))
    if n > MAX_USER_CONFIGS:
        raise DataError("grid", f"{n} configs", f"at most {MAX_USER_CONFIGS}")
    # its longest label: each option at its longest value (checked now, not when the job's metrics are stored)
    longest = point_label({k: max(v, key=lambda x: len(_value(x).encode("utf-8", "surrogatepass")))
                           for k, v in out.items()})
    size = len(longest.encode("utf-8", "surrogatepass"))
    if size > MAX_LABEL_BYTES:
        raise DataError("grid", f"a config whose label takes {size} bytes in UTF-8",
                        f"options and values that name a config in at most {MAX_LABEL_BYTES} bytes")
    return out
