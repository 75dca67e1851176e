"""A service job's config, as people read it.

A scikit-learn pick's job config is ``{"grid": {option: [values]}}``: the
candidate's grid, evaluated inside the job (Seneca §II). A torch pick's is
``{"lrs": [...], "epochs": E}``: its learning-rate grid as one MOP workload.
A job stored before picks trained grids holds one config's options.
Per-config scores are metrics named ``val_score[C=0.1]`` (grid points) or
``val_accuracy[lr=0.01]`` (torch configs).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

PER_CONFIG_SCORES = ("val_score[", "val_accuracy[")


def _value(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def describe(config: Mapping[str, Any]) -> str:
    """``grid C=0.1|1|10``, ``lr=0.1|0.01, 3 epochs`` or ``C=0.1``."""
    if "lrs" in config and "epochs" in config:
        return f"lr={'|'.join(_value(float(lr)) for lr in config['lrs'])}, {config['epochs']} epochs"
    if isinstance(config.get("grid"), Mapping):
        return "grid " + " ".join(f"{k}={'|'.join(_value(v) for v in vs)}" for k, vs in config["grid"].items())
    return ", ".join(f"{k}={_value(v)}" for k, v in config.items())


def best_point(metrics: Iterable[Mapping[str, Any]]) -> str | None:
    """The config (``C=0.1``, ``lr=0.01``) with the highest held-out score
    among a job's per-config metrics (any epoch); None if it has none."""
    scores = [(float(v), k[k.index("[") + 1:-1]) for row in metrics for k, v in row.items()
              if k.startswith(PER_CONFIG_SCORES) and v is not None and v == v]
    return max(scores)[1] if scores else None
