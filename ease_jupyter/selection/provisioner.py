"""The auto-provisioner: the resources a pick runs on (ACAI §4.2.4, §4.3, §5.1.2).

ACAI prices a job as its runtime times the hourly price of what it holds
(§5.1.2)::

    cost = runtime × (CPUs × CPU price + memory GB × GB price [+ GPUs × GPU price])

and, since the configuration space is small and discrete, searches it
whole: it asks the profiler for the predicted runtime of every
configuration, drops those that break the user's constraint and keeps the
best of the rest (§4.2.4). Here a configuration is what a pick can be
given on our pool (:class:`ResourceConfig`): threads per fit, the Dask
workers a grid fans out to (each holding one task's memory reservation at
a time), the MOP partitions of a torch pick, and the device kind. The goal
(:func:`choose`):

- with a cost ``budget``: the least predicted runtime whose cost is within it;
- with a ``deadline`` (seconds from now): the least cost whose runtime meets it;
- with both: the least runtime among the configurations that meet both
  (she named a sum she is willing to spend, so it buys speed);
- with neither: the least runtime within the pool's fair share.

The fair share (``max_cpus``, ``max_workers``) bounds every goal: it is what
the pool can give one user, whatever she would pay.

When no configuration meets the constraint, :func:`choose` does not raise:
it returns a :class:`Choice` with ``feasible=False`` holding the nearest
miss (the cheapest configuration when the budget is too small; the fastest
when the deadline is too near), and a ``note`` that says so, because the
caller (the control loop) decides whether to run it anyway or wait.

The memory reservation is an input: Seneca's sizing
(``execution/memory.py``, ``execution/gpu_memory.py``) stays its source.
Pure: no I/O, no store; ``predict`` is any callable from a configuration to
seconds (the profiler's, ``selection/profiler.py``, or a FLOPs proxy).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import DataError

__all__ = [
    "DEFAULT_PRICES",
    "DEVICES",
    "GIB",
    "Choice",
    "Pool",
    "Prices",
    "ResourceConfig",
    "candidate_configs",
    "check_budget",
    "check_deadline",
    "choose",
]

GIB = 1024**3
HOUR = 3600.0
DEVICES = ("cpu", "gpu")


def _number(field: str, value: object, expected: str, *, positive: bool = False) -> float:
    """A finite real number >= 0 (> 0 with ``positive``), or DataError naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise DataError(field, f"{value!r} ({type(value).__name__})", expected)
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise DataError(field, repr(value), expected)
    return number


@dataclass(frozen=True)
class ResourceConfig:
    """One point of the configuration space.

    ``memory_bytes`` is one task's reservation (Seneca's sizing); each of
    the ``workers`` runs one task at a time, so the pick holds ``workers``
    reservations, ``workers × threads`` CPU cores and, on ``"gpu"``, one GPU
    per worker."""

    threads: int = 1
    workers: int = 1
    partitions: int = 1
    memory_bytes: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        for name in ("threads", "workers", "partitions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DataError(name, repr(value), "an integer >= 1")
        if isinstance(self.memory_bytes, bool) or not isinstance(self.memory_bytes, int) or self.memory_bytes < 0:
            raise DataError("memory_bytes", repr(self.memory_bytes), "an integer number of bytes >= 0")
        if self.device not in DEVICES:
            raise DataError("device", repr(self.device), f"one of {', '.join(DEVICES)}")

    @property
    def cpus(self) -> int:
        return self.threads * self.workers

    @property
    def gpus(self) -> int:
        return self.workers if self.device == "gpu" else 0

    @property
    def memory_gb(self) -> float:
        return self.workers * self.memory_bytes / GIB

    def json(self) -> dict:
        return {"threads": self.threads, "workers": self.workers, "partitions": self.partitions,
                "memory_bytes": self.memory_bytes, "device": self.device}


@dataclass(frozen=True)
class Prices:
    """Unit prices per hour: a CPU core, a GB of memory, a GPU (ACAI §4.3).

    Checked: each a finite number >= 0, else :class:`DataError` naming the
    field (``price_cpu``, ``price_gb``, ``price_gpu``, the service's option
    names)."""

    cpu: float
    gb: float
    gpu: float

    def __post_init__(self) -> None:
        for name in ("cpu", "gb", "gpu"):
            value = _number(f"price_{name}", getattr(self, name), "a finite price per hour >= 0")
            object.__setattr__(self, name, value)

    def hourly(self, config: ResourceConfig) -> float:
        """What ``config`` costs per hour it is held."""
        return config.cpus * self.cpu + config.memory_gb * self.gb + config.gpus * self.gpu

    def cost(self, config: ResourceConfig, seconds: float) -> float:
        """ACAI's cost of a run: runtime × the hourly price of its resources."""
        return seconds / HOUR * self.hourly(config)


#: Google Cloud's N1 on-demand list prices in us-east1 (the baseline ACAI §4.3
#: prices from): $0.031611 per vCPU-hour, $0.004237 per GB-hour, and an NVIDIA
#: T4 at $0.35 per GPU-hour. Placeholders for an admin's own
#: (``--price-cpu``, ``--price-gb``, ``--price-gpu``).
DEFAULT_PRICES = Prices(cpu=0.0316, gb=0.0042, gpu=0.35)


@dataclass(frozen=True)
class Pool:
    """What the pool offers one pick: cores per worker, workers, the MOP
    partition counts to consider (empty: one per worker, Cerebro §3.1), and
    the device kinds present."""

    cores: int
    workers: int
    partitions: tuple[int, ...] = ()
    devices: tuple[str, ...] = ("cpu",)

    def __post_init__(self) -> None:
        for name in ("cores", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DataError(f"pool.{name}", repr(value), "an integer >= 1")
        for p in self.partitions:
            if isinstance(p, bool) or not isinstance(p, int) or p < 1:
                raise DataError("pool.partitions", repr(self.partitions), "integers >= 1")
        if not self.devices or any(d not in DEVICES for d in self.devices):
            raise DataError("pool.devices", repr(self.devices), f"a non-empty subset of {', '.join(DEVICES)}")


def candidate_configs(pool: Pool, memory_bytes: int = 0) -> list[ResourceConfig]:
    """The whole space: threads 1..cores × workers 1..W × partitions ×
    device kinds, every configuration reserving ``memory_bytes`` per task
    (Seneca's reservation, sized elsewhere)."""
    configs = []
    for device in dict.fromkeys(pool.devices):
        for workers in range(1, pool.workers + 1):
            for partitions in (pool.partitions or (workers,)):
                for threads in range(1, pool.cores + 1):
                    configs.append(ResourceConfig(threads=threads, workers=workers, partitions=partitions,
                                                  memory_bytes=memory_bytes, device=device))
    return configs


@dataclass(frozen=True)
class Choice:
    """The provisioner's answer. ``feasible`` False: nothing met the
    constraint, ``config`` is the nearest miss and ``note`` says which."""

    config: ResourceConfig
    seconds: float
    cost: float
    goal: str  # "runtime" (least runtime) or "cost" (least cost)
    feasible: bool = True
    note: str = ""

    def json(self) -> dict:
        return {"config": self.config.json(), "predicted_seconds": self.seconds, "cost": self.cost,
                "goal": self.goal, "feasible": self.feasible, "note": self.note}


def check_budget(budget: object) -> float | None:
    """A cost budget: None, or a finite number >= 0 (DataError ``budget``)."""
    return None if budget is None else _number("budget", budget, "a finite cost >= 0, or None for no budget")


def check_deadline(deadline: object) -> float | None:
    """A deadline in seconds from now: None, or a finite number > 0; zero or
    less is a deadline in the past (DataError ``deadline``)."""
    if deadline is None:
        return None
    return _number("deadline", deadline, "seconds from now > 0 (a deadline in the future), or None for none",
                   positive=True)


def choose(configs: Iterable[ResourceConfig], predict: Callable[[ResourceConfig], float], prices: Prices, *,
           budget: float | None = None, deadline: float | None = None,
           max_cpus: int | None = None, max_workers: int | None = None) -> Choice:
    """Search ``configs`` whole (ACAI §4.2.4) for the goal the constraints
    set (module docstring). Ties go to the other objective, then to the
    smaller configuration (fewer CPUs, workers, memory)."""
    budget, deadline = check_budget(budget), check_deadline(deadline)
    if not isinstance(prices, Prices):
        raise DataError("prices", repr(prices), "a Prices")
    for name, value in (("max_cpus", max_cpus), ("max_workers", max_workers)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise DataError(name, repr(value), "an integer >= 1, or None for no cap")
    share = [c for c in configs if (max_cpus is None or c.cpus <= max_cpus)
             and (max_workers is None or c.workers <= max_workers)]
    if not share:
        raise DataError("configs", "none within the fair share", f"a configuration with at most {max_cpus} CPUs "
                        f"and {max_workers} workers")
    rated = [_rated(c, predict, prices) for c in share]
    by_runtime = lambda r: (r[1], r[2], _size(r[0]))
    by_cost = lambda r: (r[2], r[1], _size(r[0]))
    goal = "cost" if deadline is not None and budget is None else "runtime"
    fits = [r for r in rated if (budget is None or r[2] <= budget) and (deadline is None or r[1] <= deadline)]
    if fits:
        best = min(fits, key=by_cost if goal == "cost" else by_runtime)
        return Choice(best[0], best[1], best[2], goal)
    # Nothing fits: the nearest miss of the constraint that bit first.
    affordable = [r for r in rated if budget is None or r[2] <= budget]
    if not affordable:
        miss = min(rated, key=by_cost)
        note = f"no configuration costs at most {budget:g}; the cheapest costs {miss[2]:g}"
    else:
        miss = min(affordable, key=by_runtime)
        note = f"no configuration runs within {deadline:g} s; the fastest is predicted {miss[1]:g} s"
        if budget is not None:
            note = note.replace("the fastest", "the fastest within the budget")
    return Choice(miss[0], miss[1], miss[2], goal, feasible=False, note=note)


def _rated(config: ResourceConfig, predict: Callable[[ResourceConfig], float],
           prices: Prices) -> tuple[ResourceConfig, float, float]:
    seconds = predict(config)
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not math.isfinite(seconds) or seconds < 0:
        raise DataError("predict", f"{seconds!r} for {config}", "finite predicted seconds >= 0")
    seconds = float(seconds)
    return config, seconds, prices.cost(config, seconds)


def _size(config: ResourceConfig) -> tuple:
    return (config.cpus, config.workers, config.memory_bytes, config.gpus, config.partitions)

