"""The contract between AutoML procedures and MOP execution (Cerebro §4.2).

A procedure proposes configs, and at every epoch boundary gets back each live
config's validation score, then decides which configs stop, which are added
and whether the search is over. Procedures are pure: no torch, no Dask, no
clock; randomness comes from a seed.

Cerebro §4.2 ("Supporting Multiple AutoML Procedures") observes that grid and
random search, Hyperband and PBT all fit one template: create a config set S,
train every config in S for one epoch, hand control back to the procedure,
and continue with the set S' it returns. ASHA does not fit the template; it is
*emulated* on it (Cerebro §6.3, see :class:`~ease_jupyter.execution.automl.ASHA`).

The protocol a runner follows
-----------------------------
A runner (the MOP runner, or :func:`~ease_jupyter.execution.automl.run_procedure`
in tests) drives one procedure object, once, from one thread:

1. ``specs = procedure.start()`` -- exactly once. ``specs`` is non-empty and
   its ids are unique. The live set is ``L = {s.id for s in specs}``; every
   trial's epoch count is 0. (The constructor already validated the
   arguments and raised :class:`ProcedureArgumentError` on bad ones.)
2. Train every trial in ``L`` for one full MOP epoch: each config visits every
   data partition once (Cerebro §3.1: a ``MOPScheduler`` over ``L`` for the
   first epoch, ``next_epoch(L)`` after that, scheduling until
   ``epoch_done()``). A trial's id is its MOP config id.
   A trial whose ``init_from`` is ``X`` does not start from fresh weights: its
   first unit loads ``X``'s latest checkpoint (the weights ``X`` had after the
   last epoch it completed; ``X`` may be live or already stopped) and then
   trains with its *own* ``params``. ``init_from is None`` means fresh weights.
3. When the epoch is done for every trial in ``L``, call
   ``decision = procedure.epoch_end(results)`` where ``results`` maps *exactly*
   the ids in ``L`` to ``TrialResult(id, epoch=n, score=s)``: ``n`` is the
   number of epochs trained *under that id* (1 after its first; a trial made
   with ``init_from`` still starts counting at 0) and ``s`` is the validation
   score, higher is better. ``s`` may be NaN (a diverged trial); NaN ranks
   below every number and is never ``best()``. ``extra`` is passed through and
   ignored by the procedures here.
4. Apply the decision: ``L := (L - decision.stop) | {s.id for s in decision.add}``.
   The procedure guarantees:

   * ``decision.stop`` is a subset of the ``L`` it was given (never an unknown
     or already stopped trial);
   * every id in ``decision.add`` is new: never used before in this
     procedure, by a live or a stopped trial;
   * every ``init_from`` in ``decision.add`` names a trial seen in an earlier
     ``start``/``epoch_end`` answer -- possibly one this same decision stops,
     so save checkpoints at the boundary before discarding stopped trials;
   * ``decision.finished`` is True exactly when the new ``L`` is empty: a
     finished decision stops every live trial and adds none, and a decision
     that is not finished leaves at least one live trial.

   "Stopped" covers both a trial killed early and one that completed its
   budget; the runner treats them alike. Keep the last checkpoint of every
   trial until the procedure is finished: ``init_from`` may name a stopped
   trial (ASHA resumes paused configs that way) and the best trial may be a
   stopped one.
5. If ``decision.finished``: stop. Never call ``epoch_end`` again. Otherwise go
   to 2 with the new ``L``.

``best()`` may be called at any time after ``start()``: it returns the
``(id, score)`` of the highest score in any result so far, or None before
the first non-NaN score. Ties keep the earlier result (within one epoch, the
trial proposed first). The score may come from an epoch before the trial's
last one, so a runner that serves ``best()``'s weights keeps each trial's
best-scoring checkpoint (``best_result().epoch`` says which epoch).

Violations by the runner -- ``start`` twice, ``epoch_end`` before ``start`` or
after finishing, results with missing or extra ids, a wrong epoch count, a
non-numeric score -- raise :class:`ProtocolError`, and leave the procedure's
state as it was before the call.

Restart recovery: every procedure here is a deterministic function of its
constructor arguments (seed included) and the sequence of ``results`` it was
fed. To recover after a crash, build it again with the same arguments, call
``start()`` and replay the stored results of each finished epoch: it returns
the same decisions.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from ease_jupyter.errors import EaseMLError, InvalidStateError


class ProcedureArgumentError(EaseMLError, ValueError):
    """A bad argument to a procedure's constructor.

    ``field`` names the argument (``"eta"``, ``"grid['lr']"``, ...), ``found``
    describes what was given and ``expected`` what is allowed.
    """

    def __init__(self, field: str, found: str, expected: str):
        self.field, self.found, self.expected = field, found, expected
        super().__init__(f"{field}: found {found}, expected {expected}")


class ProtocolError(InvalidStateError):
    """The runner broke the start/epoch_end protocol (see the module docstring)."""


class FrozenParams(Mapping[str, Any]):
    """A read-only, picklable mapping of hyperparameter names to values.

    Procedures hand these out in :class:`TrialSpec` so that a runner cannot
    change a procedure's state by editing a spec (STYLE.md anti-pattern 3).
    Compare it with a plain dict freely; ``dict(params)`` gives a mutable copy.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None):
        self._data = dict(data or {})

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __repr__(self) -> str:
        return f"FrozenParams({self._data!r})"

    def __reduce__(self):
        return (FrozenParams, (dict(self._data),))


@dataclass(frozen=True)
class TrialSpec:
    """A config to train. ``init_from`` names a trial whose current weights the
    new one starts from (PBT's exploit step); None means fresh weights."""

    id: str
    model: str
    params: Mapping[str, Any]
    init_from: str | None = None


@dataclass(frozen=True)
class EpochDecision:
    """A procedure's answer at one epoch boundary (protocol step 4)."""

    stop: frozenset[str] = frozenset()
    add: tuple[TrialSpec, ...] = ()
    finished: bool = False


@dataclass(frozen=True)
class TrialResult:
    """What a procedure learns about one trial at an epoch boundary."""

    id: str
    epoch: int  # epochs this trial has completed (1 after its first)
    score: float  # validation score, higher is better
    extra: Mapping[str, float] = field(default_factory=dict)


class Procedure(abc.ABC):
    """One model-selection procedure run as a single MOP workload.

    Single use and not thread-safe: one runner loop calls ``start`` once and
    then ``epoch_end`` once per epoch until a decision says ``finished``.
    """

    @abc.abstractmethod
    def start(self) -> list[TrialSpec]:
        """The configs of the first epoch."""

    @abc.abstractmethod
    def epoch_end(self, results: Mapping[str, TrialResult]) -> EpochDecision:
        """Called once per epoch boundary with every live trial's result."""

    @abc.abstractmethod
    def best(self) -> tuple[str, float] | None:
        """(trial id, score) of the best trial seen so far."""
