"""Search spaces: grids to enumerate and spaces to sample from."""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .base import ProcedureArgumentError

Sampler = Callable[[np.random.Generator], Mapping[str, Any]]
"""Draws one config (parameter name -> value) from the generator it is given.
It must draw its randomness only from that generator, so that a procedure's
seed fixes the configs."""

SCALES = ("log", "uniform")


@dataclass(frozen=True)
class Continuous:
    """A real parameter drawn from ``[low, high]``, uniformly or log-uniformly."""

    low: float
    high: float
    scale: str  # "log" | "uniform"

    def sample(self, rng: np.random.Generator) -> float:
        if self.scale == "log":
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = float(rng.uniform(self.low, self.high))
        return self.clip(value)

    def clip(self, value: float) -> float:
        return float(min(max(value, self.low), self.high))


@dataclass(frozen=True)
class Categorical:
    """A parameter drawn uniformly from a list of values."""

    values: tuple[Any, ...]

    def sample(self, rng: np.random.Generator) -> Any:
        return self.values[int(rng.integers(len(self.values)))]


def _values(field: str, values: Any, expected: str) -> tuple[Any, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, range)):
        raise ProcedureArgumentError(field, f"{values!r} ({type(values).__name__})", expected)
    values = tuple(values)
    if not values:
        raise ProcedureArgumentError(field, "an empty list", expected)
    for i, a in enumerate(values):
        for b in values[:i]:
            if a == b:
                raise ProcedureArgumentError(field, f"{a!r} twice", "distinct values")
    return values


def _check_keys(field: str, mapping: Any, what: str) -> None:
    if not isinstance(mapping, Mapping):
        raise ProcedureArgumentError(field, f"{type(mapping).__name__}", f"a mapping of parameter names to {what}")
    if not mapping:
        raise ProcedureArgumentError(field, "an empty mapping", f"at least one parameter with {what}")
    for key in mapping:
        if not isinstance(key, str) or not key:
            raise ProcedureArgumentError(field, f"key {key!r}", "non-empty parameter names (str)")


def expand_grid(grid: Mapping[str, Sequence[Any]], *, field: str = "grid") -> list[dict[str, Any]]:
    """Every combination of a grid, in a fixed order.

    Keys keep the mapping's order; the last key varies fastest (like nested
    for-loops written in key order).

    >>> expand_grid({"lr": [0.1, 0.01], "batch": [32, 64]})
    [{'lr': 0.1, 'batch': 32}, {'lr': 0.1, 'batch': 64}, {'lr': 0.01, 'batch': 32}, {'lr': 0.01, 'batch': 64}]

    Raises:
        ProcedureArgumentError: an empty grid, a key with no values or the same
            value twice, or values that are not a list, tuple or range.
    """
    _check_keys(field, grid, "lists of values")
    columns = [
        _values(f"{field}[{key!r}]", values, "a non-empty list, tuple or range of values")
        for key, values in grid.items()
    ]
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*columns)]


class SearchSpace:
    """A space for random search, and the sampler of Hyperband, ASHA and PBT.

    Each entry is either

    * a list (or range) of values -- categorical, drawn uniformly; or
    * a tuple ``(low, high, "log")`` or ``(low, high, "uniform")`` -- a real
      number in ``[low, high]``, drawn log-uniformly (``low > 0``) or uniformly.

    Cerebro §6.3, Table 6 as a space::

        SearchSpace({"lr": (1e-5, 1e-1, "log"), "weight_decay": (1e-5, 1e-1, "log"),
                     "batch_size": [16, 32, 64, 128, 256]})

    Keys are sampled in the mapping's order, so a seed fixes every config.
    Values come back as plain Python objects (floats, or the list's items).

    Raises:
        ProcedureArgumentError: an empty space, a malformed entry.
    """

    def __init__(self, space: Mapping[str, Any], *, field: str = "space"):
        _check_keys(field, space, "value lists or (low, high, scale) tuples")
        dims: dict[str, Continuous | Categorical] = {}
        for key, spec in space.items():
            where = f"{field}[{key!r}]"
            if isinstance(spec, (Continuous, Categorical)):
                dims[key] = spec
            elif isinstance(spec, tuple):
                dims[key] = _continuous(where, spec)
            else:
                dims[key] = Categorical(
                    _values(where, spec, "a list of values, or a (low, high, 'log'|'uniform') tuple")
                )
        self._dims = dims

    @property
    def dimensions(self) -> dict[str, Continuous | Categorical]:
        return dict(self._dims)

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        return {key: dim.sample(rng) for key, dim in self._dims.items()}

    __call__ = sample

    def __repr__(self) -> str:
        return f"SearchSpace({self._dims!r})"


def _continuous(where: str, spec: tuple) -> Continuous:
    expected = (
        "(low, high, 'log'|'uniform') with finite low < high (and low > 0 for 'log'); "
        "use a list for categorical values"
    )
    if len(spec) != 3 or spec[2] not in SCALES:
        raise ProcedureArgumentError(where, repr(spec), expected)
    low, high, scale = spec
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, numbers.Real) or not math.isfinite(bound):
            raise ProcedureArgumentError(where, repr(spec), expected)
    if not low < high or (scale == "log" and low <= 0):
        raise ProcedureArgumentError(where, repr(spec), expected)
    return Continuous(float(low), float(high), scale)


class _CheckedSampler:
    """Wraps a user's sampler so that a bad return value is named clearly."""

    def __init__(self, fn: Sampler, field: str):
        self._fn, self._field = fn, field

    def __call__(self, rng: np.random.Generator) -> dict[str, Any]:
        config = self._fn(rng)
        if not isinstance(config, Mapping) or not all(isinstance(k, str) for k in config):
            raise ProcedureArgumentError(
                self._field, f"a sampler that returned {config!r}", "a mapping of parameter names (str) to values"
            )
        return dict(config)


def as_sampler(space: Any, *, field: str = "space") -> Callable[[np.random.Generator], dict[str, Any]]:
    """A :class:`SearchSpace` from a mapping; a checked wrapper around a callable."""
    if isinstance(space, SearchSpace):
        return space
    if isinstance(space, Mapping):
        return SearchSpace(space, field=field)
    if callable(space):
        return _CheckedSampler(space, field)
    raise ProcedureArgumentError(
        field, f"{type(space).__name__}", "a search space (mapping or SearchSpace) or a sampler callable(rng) -> dict"
    )
