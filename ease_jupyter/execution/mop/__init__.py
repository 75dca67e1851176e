"""Model Hopper Parallelism (Cerebro): the randomized, replica-aware,
fault-tolerant scheduler and a discrete-event simulator for it.

Pure: no Dask, no torch, no I/O. Engines drive :class:`MOPScheduler`;
``benchmarks/mop.py`` uses :mod:`.simulation`.

* ``scheduler``: :class:`Unit`, :class:`MOPScheduler` (§3.1, Alg. 1-2, §5.5-5.6).
* ``simulation``: :func:`simulate`, :func:`lower_bound`, :func:`figure6_grid`,
  :func:`decision_latency` (§5.4).
"""

from .scheduler import MOPScheduler, Unit
from .simulation import (
    CNN_MFLOPS,
    GPU_TFLOPS,
    SimResult,
    WorkerFailure,
    WorkerJoin,
    decision_latency,
    figure6_grid,
    figure6_workload,
    lower_bound,
    ring_availability,
    simulate,
)

__all__ = [
    "Unit", "MOPScheduler",
    "CNN_MFLOPS", "GPU_TFLOPS", "WorkerFailure", "WorkerJoin", "SimResult",
    "ring_availability", "lower_bound", "simulate", "figure6_workload", "figure6_grid", "decision_latency",
]
