"""AutoML procedures on MOP (Cerebro §4.2, §6.3; ease.ml pvldb §3.1).

Every procedure implements :class:`Procedure` (``start``, ``epoch_end``,
``best``) and is driven by a runner through the protocol documented in
:mod:`ease_jupyter.execution.automl.base`. They are pure: no torch, no Dask,
no clock, no I/O; randomness comes from a seed.

* :class:`GridSearch`, :class:`RandomSearch` -- one-shot search.
* :class:`LearningRateGrid` -- ease.ml's learning rates {0.1, 0.01, 0.001}.
* :class:`SuccessiveHalving`, :class:`Hyperband` -- early stopping at rungs.
* :class:`ASHA` -- asynchronous successive halving emulated on MOP.
* :class:`PBT` -- population based training.
* :func:`pick_procedure` -- how one service pick trains its configs
  (successive halving), with :func:`pick_schedule` saying which epochs each reaches.
* :func:`run_procedure` -- an in-process driver on simulated epochs.
"""

from ._asha import ASHA
from ._driver import EpochRecord, RunHistory, TrainEpoch, run_procedure
from ._grid import FixedConfigs, GridSearch, LearningRateGrid, RandomSearch
from ._halving import (
    Bracket,
    Hyperband,
    RungRecord,
    SuccessiveHalving,
    hyperband_brackets,
    rung_sizes,
)
from ._core import rung_epochs
from ._pbt import PBT
from ._pick import PICK_ETA, PickSchedule, pick_procedure, pick_schedule, pick_survivors
from ._space import Categorical, Continuous, Sampler, SearchSpace, expand_grid
from .base import (
    EpochDecision,
    FrozenParams,
    Procedure,
    ProcedureArgumentError,
    ProtocolError,
    TrialResult,
    TrialSpec,
)

__all__ = [
    "ASHA",
    "PBT",
    "PICK_ETA",
    "PickSchedule",
    "Bracket",
    "Categorical",
    "Continuous",
    "EpochDecision",
    "EpochRecord",
    "FixedConfigs",
    "FrozenParams",
    "GridSearch",
    "Hyperband",
    "LearningRateGrid",
    "Procedure",
    "ProcedureArgumentError",
    "ProtocolError",
    "RandomSearch",
    "RunHistory",
    "RungRecord",
    "Sampler",
    "SearchSpace",
    "SuccessiveHalving",
    "TrainEpoch",
    "TrialResult",
    "TrialSpec",
    "expand_grid",
    "hyperband_brackets",
    "pick_procedure",
    "pick_schedule",
    "pick_survivors",
    "rung_epochs",
    "rung_sizes",
    "run_procedure",
]
