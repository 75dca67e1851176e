"""Successive halving and Hyperband on MOP (Cerebro §4.2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ._core import (
    ProcedureBase,
    check_epoch_range,
    check_eta,
    check_int,
    check_model,
    check_seed,
    derived_seed,
    ranked,
    rung_epochs,
)
from ._space import SearchSpace, as_sampler
from .base import ProcedureArgumentError, TrialResult, TrialSpec


@dataclass(frozen=True)
class RungRecord:
    """What happened at one rung boundary of successive halving."""

    epoch: int  # the rung, in epochs trained
    ranked: tuple[str, ...]  # the trials that reached it, best first
    kept: tuple[str, ...]  # those that go on (empty at the last rung)


def rung_sizes(n_trials: int, eta: int, n_rungs: int) -> tuple[int, ...]:
    """How many trials reach each rung: ``n_0 = n``, ``n_{i+1} = max(1, n_i // eta)``.

    ``n_i // eta`` equals Li et al.'s ``floor(n * eta**-i) // eta``; the
    ``max(1, ...)`` (our choice) keeps one trial going when fewer than ``eta``
    reach a rung, so some config is always trained to ``max_epochs``.
    """
    sizes = [n_trials]
    for _ in range(n_rungs - 1):
        sizes.append(max(1, sizes[-1] // eta))
    return tuple(sizes)


class SuccessiveHalving(ProcedureBase):
    """Successive halving (Jamieson & Talwalkar, AISTATS 2016; the inner loop
    of Hyperband, Li et al., JMLR 18(185), 2017, Alg. 1) as one MOP workload.

    All ``n`` trials start at epoch 0 and train in lockstep. The rungs are
    :func:`rung_epochs` ``(min_epochs, max_epochs, eta)`` -- ``(1, 3, 9)`` for
    r=1, R=9, eta=3. At the boundary where the trials reach a rung, the
    ``max(1, n_i // eta)`` best by score go on and the rest are stopped; at
    the last rung every trial is stopped and the procedure finishes. Ties are
    broken by trial order, NaN scores rank last. Cerebro §4.2: Hyperband's
    "kill some non-promising configs after some epochs" is exactly an
    ``epoch_end`` decision.

    Args:
        model: the model every trial trains.
        configs: either the configs themselves (a list of dicts), or a search
            space (mapping / :class:`SearchSpace`) or sampler
            ``callable(rng) -> dict`` together with ``n_trials``.
        min_epochs: r, the first rung (>= 1).
        max_epochs: R, the last rung (>= r).
        eta: the halving rate (an integer >= 2).
        n_trials: how many configs to sample (only with a space/sampler).
        seed: seeds the sampler (>= 0).
        id_prefix: prefix of the trial ids, ``f"{id_prefix}{i}"``.

    Raises:
        ProcedureArgumentError: eta < 2, r < 1, R < r, an empty config list,
            n_trials missing (sampler) or inconsistent (list).
    """

    def __init__(
        self,
        model: str,
        configs: Sequence[Mapping[str, Any]] | Mapping[str, Any] | SearchSpace | Any,
        *,
        min_epochs: int,
        max_epochs: int,
        eta: int = 3,
        n_trials: int | None = None,
        seed: int = 0,
        id_prefix: str = "t",
    ):
        super().__init__(model=check_model(model), id_prefix=id_prefix)
        self._eta = check_eta(eta)
        r, big_r = check_epoch_range(min_epochs, max_epochs)
        self._rungs = rung_epochs(r, big_r, self._eta)
        rng = np.random.default_rng(check_seed(seed))
        if isinstance(configs, (list, tuple)):
            if not configs:
                raise ProcedureArgumentError("configs", "an empty list", "at least one config")
            for i, c in enumerate(configs):
                if not isinstance(c, Mapping):
                    raise ProcedureArgumentError(f"configs[{i}]", type(c).__name__, "a mapping of parameters")
            if n_trials is not None and n_trials != len(configs):
                raise ProcedureArgumentError("n_trials", repr(n_trials), f"None or len(configs) = {len(configs)}")
            self._configs = [dict(c) for c in configs]
        else:
            sampler = as_sampler(configs, field="configs")
            if n_trials is None:
                raise ProcedureArgumentError("n_trials", "None", "an integer >= 1 when configs is a space or sampler")
            n = check_int("n_trials", n_trials, minimum=1)
            self._configs = [sampler(rng) for _ in range(n)]
        self._sizes = rung_sizes(len(self._configs), self._eta, len(self._rungs))
        self._log: list[RungRecord] = []

    @property
    def rungs(self) -> tuple[int, ...]:
        """Rung boundaries in epochs, e.g. ``(1, 3, 9)``."""
        return self._rungs

    @property
    def sizes(self) -> tuple[int, ...]:
        """How many trials reach each rung, e.g. ``(9, 3, 1)``."""
        return self._sizes

    @property
    def configs(self) -> list[dict[str, Any]]:
        return [dict(c) for c in self._configs]

    @property
    def rung_log(self) -> tuple[RungRecord, ...]:
        """One record per rung reached so far."""
        return tuple(self._log)

    def _initial_trials(self) -> list[TrialSpec]:
        return [self._new_trial(c) for c in self._configs]

    def _decide(self, results: Mapping[str, TrialResult]):
        epochs = {r.epoch for r in results.values()}
        if len(epochs) != 1:  # lockstep is this class's own invariant
            raise RuntimeError(f"internal error: successive halving trials out of step: {sorted(epochs)}")
        (epoch,) = epochs
        if epoch not in self._rungs:
            return (), ()
        order = ranked(results, {t: r.score for t, r in results.items()}, self._order)
        last = epoch == self._rungs[-1]
        keep = 0 if last else max(1, len(order) // self._eta)
        self._log.append(RungRecord(epoch, tuple(order), tuple(order[:keep])))
        return order[keep:], ()


@dataclass(frozen=True)
class Bracket:
    """One Hyperband bracket: successive halving with ``n_trials`` configs."""

    s: int  # Li et al.'s bracket index, s_max .. 0
    n_trials: int
    rung_epochs: tuple[int, ...]
    rung_sizes: tuple[int, ...]


def hyperband_brackets(max_epochs: int, eta: int = 3, min_epochs: int = 1) -> tuple[Bracket, ...]:
    """The brackets of one Hyperband iteration (Li et al., JMLR 2017, Alg. 1).

    With R counted in units of ``min_epochs``: ``s_max = floor(log_eta(R/r))``,
    ``B = (s_max + 1) R`` and bracket ``s`` (from ``s_max`` down to 0) has
    ``n = ceil(B/R * eta**s / (s + 1))`` configs whose first rung is
    ``floor(R / eta**s)`` epochs. The paper's ``r = R eta**-s`` need not be an
    integer; flooring it keeps every rung an integer number of epochs and
    gives exactly ``s + 1`` rungs (see :func:`rung_epochs`). All arithmetic is
    on integers.

    >>> [(b.n_trials, b.rung_epochs, b.rung_sizes) for b in hyperband_brackets(9, 3)]
    [(9, (1, 3, 9), (9, 3, 1)), (5, (3, 9), (5, 1)), (3, (9,), (3,))]
    """
    eta = check_eta(eta)
    r, big_r = check_epoch_range(min_epochs, max_epochs)
    s_max = 0
    while r * eta ** (s_max + 1) <= big_r:
        s_max += 1
    brackets = []
    for s in range(s_max, -1, -1):
        n = -(-((s_max + 1) * eta**s) // (s + 1))  # ceil, in integers
        rungs = rung_epochs(big_r // eta**s, big_r, eta)
        if len(rungs) != s + 1:  # cannot happen, see the docstring
            raise RuntimeError(f"internal error: bracket {s} has rungs {rungs}")
        brackets.append(Bracket(s, n, rungs, rung_sizes(n, eta, len(rungs))))
    return tuple(brackets)


class Hyperband(ProcedureBase):
    """Hyperband (Li et al., JMLR 18(185), 2017, Alg. 1) as one MOP workload.

    One Hyperband iteration: the brackets of :func:`hyperband_brackets`, each
    a :class:`SuccessiveHalving` over configs drawn from ``space``.

    **Brackets run concurrently by default.** The brackets are independent
    (Li et al. point out they can run in parallel), and MOP wants many
    configs at once: Cerebro §5 notes that when Hyperband kills configs and
    ``|S|`` drops below the number of workers p, the cluster is
    under-used. Running all brackets together keeps ``|S|`` large early on
    (R=9, eta=3: 9 + 5 + 3 = 17 trials in the first epoch) and finishes in R
    epochs instead of ``(s_max + 1) R``; each rung decision still ranks only
    its own bracket's trials. With ``concurrent=False`` the brackets run one
    after another, most exploratory first (s = s_max, ..., 0), the next one
    added in the same decision that finishes the previous, as in the paper.
    The set of configs and every rung decision are the same either way.

    Trial ids are ``f"{id_prefix}{s}-{i}"``; :meth:`bracket_of` maps back.

    Args:
        model: the model every trial trains.
        space: a search space (mapping / :class:`SearchSpace`) or a sampler
            ``callable(rng) -> dict``.
        max_epochs: R (>= min_epochs).
        eta: the halving rate (an integer >= 2).
        min_epochs: r, the smallest rung (>= 1).
        concurrent: run the brackets as one workload (True) or in sequence.
        seed: seeds every bracket's sampler (>= 0).

    Raises:
        ProcedureArgumentError: eta < 2, R < r, r < 1, a malformed space.
    """

    def __init__(
        self,
        model: str,
        space: Mapping[str, Any] | SearchSpace | Any,
        *,
        max_epochs: int,
        eta: int = 3,
        min_epochs: int = 1,
        concurrent: bool = True,
        seed: int = 0,
        id_prefix: str = "t",
    ):
        super().__init__(model=check_model(model), id_prefix=id_prefix)
        if not isinstance(concurrent, bool):
            raise ProcedureArgumentError("concurrent", repr(concurrent), "True or False")
        seed = check_seed(seed)
        sampler = as_sampler(space, field="space")
        self._concurrent = concurrent
        self._brackets = hyperband_brackets(max_epochs, eta, min_epochs)
        self._sh = [
            SuccessiveHalving(
                model,
                sampler,
                n_trials=b.n_trials,
                min_epochs=b.rung_epochs[0],
                max_epochs=b.rung_epochs[-1],
                eta=eta,
                seed=derived_seed(seed, b.s),
                id_prefix=f"{self._prefix}{b.s}-",
            )
            for b in self._brackets
        ]
        self._bracket_of: dict[str, int] = {}
        self._active: list[int] = []  # indices into self._sh
        self._next = 0  # next bracket to start

    @property
    def brackets(self) -> tuple[Bracket, ...]:
        return self._brackets

    def bracket_of(self, trial_id: str) -> int:
        """The bracket index ``s`` of a trial proposed so far."""
        return self._brackets[self._bracket_of[trial_id]].s

    def bracket_procedure(self, s: int) -> SuccessiveHalving:
        """The successive-halving run of bracket ``s`` (read its ``rung_log``)."""
        for b, sh in zip(self._brackets, self._sh):
            if b.s == s:
                return sh
        raise KeyError(f"no bracket s={s}; brackets are {[b.s for b in self._brackets]}")

    def _start_bracket(self) -> list[TrialSpec]:
        i = self._next
        self._next += 1
        self._active.append(i)
        specs = self._sh[i].start()
        for spec in specs:
            self._bracket_of[spec.id] = i
        return specs

    def _initial_trials(self) -> list[TrialSpec]:
        specs = self._start_bracket()
        while self._concurrent and self._next < len(self._sh):
            specs += self._start_bracket()
        return specs

    def _decide(self, results: Mapping[str, TrialResult]):
        stop: set[str] = set()
        add: list[TrialSpec] = []
        for i in list(self._active):
            sub = {t: r for t, r in results.items() if self._bracket_of[t] == i}
            decision = self._sh[i].epoch_end(sub)
            stop |= decision.stop
            add += decision.add
            if decision.finished:
                self._active.remove(i)
        if not self._active and self._next < len(self._sh):  # sequential mode
            add += self._start_bracket()
        return stop, add
