"""Model Hopper Parallelism (Cerebro): the randomized, replica-aware,
fault-tolerant scheduler and a discrete-event simulator for it.

Pure: no Dask, no torch, no I/O. Engines drive :class:`MOPScheduler`;
``benchmarks/mop.py`` uses :mod:`.simulation`.

* ``scheduler``: :class:`Unit`, :class:`MOPScheduler` (§3.1, Alg. 1-2, §5.5-5.6).
* ``simulation``: :func:`simulate`, :func:`lower_bound`, :func:`figure6_grid`,
  :func:`decision_latency` (§5.4).
* ``shared_pool``: :class:`SharedPoolScheduler`, several workloads on one pool
  of workers with per-user fairness (beyond the paper).
* ``pool_simulation``: :func:`simulate_pool`, several workloads on a fake clock.
"""

from .pool_simulation import PoolSimResult, PoolTask, simulate_pool
from .scheduler import MOPScheduler, Unit
from .shared_pool import Assignment, SharedPoolScheduler, WorkloadView
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
    "Assignment", "SharedPoolScheduler", "WorkloadView", "PoolTask", "PoolSimResult", "simulate_pool",
]
