"""Shared machinery of the procedures: argument checks, ranking, and a base
class that keeps the trial book and enforces the protocol of ``base.py``."""

from __future__ import annotations

import abc
import math
import numbers
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .base import (
    EpochDecision,
    FrozenParams,
    Procedure,
    ProcedureArgumentError,
    ProtocolError,
    TrialResult,
    TrialSpec,
)

# -- argument checks ---------------------------------------------------------


def check_int(field: str, value: Any, *, minimum: int) -> int:
    """``value`` as an int >= ``minimum``; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ProcedureArgumentError(field, f"{value!r} ({type(value).__name__})", f"an integer >= {minimum}")
    if value < minimum:
        raise ProcedureArgumentError(field, repr(value), f"an integer >= {minimum}")
    return int(value)


def check_real(field: str, value: Any, *, expected: str, ok) -> float:
    """``value`` as a finite float for which ``ok(value)`` holds."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ProcedureArgumentError(field, f"{value!r} ({type(value).__name__})", expected)
    value = float(value)
    if not math.isfinite(value) or not ok(value):
        raise ProcedureArgumentError(field, repr(value), expected)
    return value


def check_model(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ProcedureArgumentError("model", repr(value), "a non-empty model name (str)")
    return value


def check_prefix(value: Any) -> str:
    if not isinstance(value, str):
        raise ProcedureArgumentError("id_prefix", repr(value), "a str")
    return value


def check_seed(value: Any) -> int:
    return check_int("seed", value, minimum=0)


def check_eta(value: Any) -> int:
    return check_int("eta", value, minimum=2)


def derived_seed(seed: int, *path: int) -> int:
    """An independent child seed of ``seed`` (for sub-procedures)."""
    return int(np.random.SeedSequence([seed, *path]).generate_state(1)[0])


# -- ranking -------------------------------------------------------------------


def rank_value(score: float) -> float:
    """NaN ranks below every number, -inf included."""
    return -math.inf if math.isnan(score) else score


def ranked(ids: Iterable[str], scores: Mapping[str, float], order: Mapping[str, int]) -> list[str]:
    """``ids`` best first: higher score first, then NaN last; ties keep ``order``.

    NaN and -inf tie with each other and are broken by ``order`` too.
    """
    return sorted(ids, key=lambda i: (-rank_value(scores[i]), order[i]))


def rung_epochs(min_epochs: int, max_epochs: int, eta: int) -> tuple[int, ...]:
    """Rung boundaries of successive halving, in epochs.

    ``min_epochs * eta**k`` for ``k = 0..K-1`` followed by ``max_epochs``, where
    ``K`` is the largest ``k`` with ``min_epochs * eta**k <= max_epochs``. When
    ``max_epochs`` is ``min_epochs * eta**K`` (R=9, r=1, eta=3: ``(1, 3, 9)``)
    these are exactly Hyperband's ``r_i`` (Li et al. 2017, Alg. 1); otherwise
    the last rung is stretched to ``max_epochs`` (R=10: ``(1, 3, 10)``).
    """
    rungs = [min_epochs]
    while rungs[-1] * eta <= max_epochs:
        rungs.append(rungs[-1] * eta)
    rungs[-1] = max_epochs
    return tuple(rungs)


def check_epoch_range(min_epochs: Any, max_epochs: Any) -> tuple[int, int]:
    r = check_int("min_epochs", min_epochs, minimum=1)
    big_r = check_int("max_epochs", max_epochs, minimum=1)
    if big_r < r:
        raise ProcedureArgumentError("max_epochs", repr(big_r), f"an integer >= min_epochs ({r})")
    return r, big_r


# -- the base class ----------------------------------------------------------


class ProcedureBase(Procedure):
    """Keeps the trial book and enforces the runner protocol of ``base.py``.

    Subclasses implement :meth:`_initial_trials` and :meth:`_decide`, create
    trials with :meth:`_new_trial`, and never touch the book directly. The
    base class checks the runner's results before a subclass sees them
    (raising :class:`ProtocolError`) and checks the subclass's own decisions
    (raising ``RuntimeError``, which would be a bug here).
    """

    def __init__(self, *, model: str, id_prefix: str):
        self._model = model
        self._prefix = check_prefix(id_prefix)
        self._next_index = 0
        self._trials: dict[str, TrialSpec] = {}
        self._order: dict[str, int] = {}
        self._live: dict[str, TrialSpec] = {}
        self._epochs: dict[str, int] = {}
        self._best: TrialResult | None = None
        self._started = False
        self._finished = False
        self._round = 0

    # -- hooks ---------------------------------------------------------------
    @abc.abstractmethod
    def _initial_trials(self) -> Sequence[TrialSpec]:
        """The first epoch's trials (made with :meth:`_new_trial`)."""

    @abc.abstractmethod
    def _decide(self, results: Mapping[str, TrialResult]) -> tuple[Iterable[str], Sequence[TrialSpec]]:
        """(ids to stop, specs to add) at this boundary. ``results`` holds every
        live trial, in creation order; the book already counts this epoch."""

    def _new_trial(self, params: Mapping[str, Any], *, init_from: str | None = None) -> TrialSpec:
        tid = f"{self._prefix}{self._next_index}"
        self._next_index += 1
        return TrialSpec(id=tid, model=self._model, params=FrozenParams(params), init_from=init_from)

    # -- Procedure -------------------------------------------------------------
    def start(self) -> list[TrialSpec]:
        if self._started:
            raise ProtocolError("start() was already called: a procedure runs once; build a new one")
        specs = list(self._initial_trials())
        if not specs:
            raise RuntimeError(f"internal error: {type(self).__name__} started with no trials")
        self._register(specs)
        self._started = True
        return specs

    def epoch_end(self, results: Mapping[str, TrialResult]) -> EpochDecision:
        self._check_results(results)
        ordered = {tid: results[tid] for tid in self._live}
        self._round += 1
        for tid, result in ordered.items():
            self._epochs[tid] = result.epoch
            if not math.isnan(result.score) and (self._best is None or result.score > self._best.score):
                self._best = result
        stop, add = self._decide(ordered)
        return self._commit(frozenset(stop), tuple(add))

    def best(self) -> tuple[str, float] | None:
        return None if self._best is None else (self._best.id, self._best.score)

    # -- read-only views ---------------------------------------------------------
    def best_result(self) -> TrialResult | None:
        """The full :class:`TrialResult` behind :meth:`best` (its epoch included)."""
        return self._best

    @property
    def live(self) -> dict[str, TrialSpec]:
        """The live trials (a copy), in creation order."""
        return dict(self._live)

    @property
    def trials(self) -> dict[str, TrialSpec]:
        """Every trial ever proposed (a copy), in creation order."""
        return dict(self._trials)

    @property
    def epochs_trained(self) -> dict[str, int]:
        """Epochs trained under each trial id so far (a copy)."""
        return dict(self._epochs)

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def rounds(self) -> int:
        """Epoch boundaries processed so far."""
        return self._round

    # -- internals -----------------------------------------------------------------
    def _check_results(self, results: Mapping[str, TrialResult]) -> None:
        if not self._started:
            raise ProtocolError("epoch_end() called before start()")
        if self._finished:
            raise ProtocolError("epoch_end() called after a finished decision; the procedure is over")
        if not isinstance(results, Mapping):
            raise ProtocolError(
                f"results: found {type(results).__name__}, expected a mapping of trial id to TrialResult"
            )
        missing = [t for t in self._live if t not in results]
        extra = sorted(str(k) for k in results if k not in self._live)
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing live trials {missing}")
            if extra:
                parts.append(f"trials that are not live {extra}")
            raise ProtocolError(f"results must hold exactly the live trials: {'; '.join(parts)}")
        for tid in self._live:
            r = results[tid]
            if not isinstance(r, TrialResult):
                raise ProtocolError(f"results[{tid!r}]: found {type(r).__name__}, expected TrialResult")
            if r.id != tid:
                raise ProtocolError(f"results[{tid!r}].id: found {r.id!r}, expected {tid!r}")
            expected_epoch = self._epochs[tid] + 1
            if isinstance(r.epoch, bool) or not isinstance(r.epoch, numbers.Integral) or r.epoch != expected_epoch:
                raise ProtocolError(
                    f"results[{tid!r}].epoch: found {r.epoch!r}, expected {expected_epoch} "
                    "(epochs trained under this id, 1 after the first)"
                )
            if isinstance(r.score, bool) or not isinstance(r.score, numbers.Real):
                raise ProtocolError(f"results[{tid!r}].score: found {r.score!r}, expected a real number (NaN allowed)")

    def _register(self, specs: Sequence[TrialSpec]) -> None:
        known = set(self._trials)  # init_from must name a trial with weights already
        for spec in specs:
            if spec.id in self._trials:
                raise RuntimeError(f"internal error: duplicate trial id {spec.id!r}")
            if spec.init_from is not None and spec.init_from not in known:
                raise RuntimeError(f"internal error: init_from {spec.init_from!r} is not a known trial")
            self._order[spec.id] = len(self._order)
            self._trials[spec.id] = spec
            self._live[spec.id] = spec
            self._epochs[spec.id] = 0

    def _commit(self, stop: frozenset[str], add: tuple[TrialSpec, ...]) -> EpochDecision:
        unknown = stop - self._live.keys()
        if unknown:
            raise RuntimeError(f"internal error: stopping trials that are not live: {sorted(unknown)}")
        for tid in stop:
            del self._live[tid]
        self._register(add)
        self._finished = not self._live
        return EpochDecision(stop=stop, add=add, finished=self._finished)
