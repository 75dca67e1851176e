"""ASHA emulated on MOP (Cerebro §6.3)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ._core import (
    ProcedureBase,
    check_epoch_range,
    check_eta,
    check_int,
    check_model,
    check_seed,
    ranked,
    rung_epochs,
)
from ._space import SearchSpace, as_sampler
from .base import ProcedureArgumentError, TrialResult, TrialSpec


class ASHA(ProcedureBase):
    """Asynchronous successive halving (Li et al., "Massively Parallel
    Hyperparameter Tuning", MLSys 2020, Alg. 2), emulated on MOP the way
    Cerebro §6.3 describes.

    ASHA is not an instance of the per-epoch template (Cerebro §4.2): it has
    no synchronized evaluation, and its configs depend on the order in which
    task-parallel workers finish. Cerebro therefore *emulates* it, without
    changing the system, by keeping the number of simultaneously trained
    configs ``|S|`` equal to the number of workers p (``concurrency`` here).
    Cerebro's run used R=9, eta=3: "a maximum of 13 epochs over 3 stages: 1,
    3, and 9 epochs", with new configs sampled at random until a resource
    limit.

    The emulation, at every epoch boundary:

    1. Each live trial that has finished its current stage records its score
       in that stage's rung. Stage ``k`` trains ``stages[k]`` epochs, where
       ``stages = rung_epochs(min_epochs, max_epochs, eta)`` -- ``(1, 3, 9)``.
    2. Each free slot (``concurrency`` minus the trials still mid-stage) asks
       for a job, one slot after the other, as ASHA's ``get_job`` does: from
       the highest rung below the top down to rung 0, the best config that
       is among the top ``floor(|rung k| / eta)`` of rung ``k`` and was not
       promoted from it yet is promoted to stage ``k + 1``; if none, a new
       config is sampled into stage 0, while ``max_configs`` allows; if
       neither, the slot stays empty.
    3. A trial that finished its stage and was not promoted right away is
       stopped (ASHA's "paused": it may still be promoted at a later
       boundary, when its rung has grown).

    A promoted config trains ``stages[k+1]`` *more* epochs. With
    ``resume=True`` (the default) it continues from its checkpoint: under
    its own id if it was promoted at the boundary where it finished, and
    otherwise as a new trial with ``init_from`` = its last trial, so a config
    that reaches the top rung has trained 1 + 3 + 9 = 13 epochs. With
    ``resume=False`` each stage starts from fresh weights as a new trial
    (13 epochs of work, the final model trained 9). Rung ranking uses the
    score at the end of the stage; ties are broken by arrival in the rung.

    The procedure ends at the first boundary where no trial is live and no
    job is left, or at ``max_rounds`` epoch boundaries (a time limit: with
    ``|S| = p`` an MOP epoch is the unit of time), where every live trial is
    stopped. At least one of ``max_configs`` and ``max_rounds`` is required.

    Trial ids are ``f"{id_prefix}{i}"``; a config is named by the id of its
    first trial (:meth:`config_of`).

    Args:
        model: the model every trial trains.
        space: a search space (mapping / :class:`SearchSpace`) or a sampler
            ``callable(rng) -> dict``.
        concurrency: p, the number of configs trained at once (>= 1).
        min_epochs, max_epochs, eta: the stages, see :func:`rung_epochs`.
        max_configs: how many configs may be sampled in all (>= 1).
        max_rounds: epoch boundaries after which everything stops (>= 1).
        resume: promoted configs continue from their checkpoint (True) or
            restart from fresh weights (False).
        seed: seeds the sampler (>= 0).

    Raises:
        ProcedureArgumentError: eta < 2, bad epochs, concurrency < 1, neither
            max_configs nor max_rounds given, a malformed space.
    """

    def __init__(
        self,
        model: str,
        space: Mapping[str, Any] | SearchSpace | Any,
        *,
        concurrency: int,
        max_epochs: int = 9,
        min_epochs: int = 1,
        eta: int = 3,
        max_configs: int | None = None,
        max_rounds: int | None = None,
        resume: bool = True,
        seed: int = 0,
        id_prefix: str = "t",
    ):
        super().__init__(model=check_model(model), id_prefix=id_prefix)
        self._eta = check_eta(eta)
        r, big_r = check_epoch_range(min_epochs, max_epochs)
        self._stages = rung_epochs(r, big_r, self._eta)
        self._p = check_int("concurrency", concurrency, minimum=1)
        if max_configs is None and max_rounds is None:
            raise ProcedureArgumentError(
                "max_configs/max_rounds", "neither", "at least one resource limit (ASHA runs until one is reached)"
            )
        self._max_configs = None if max_configs is None else check_int("max_configs", max_configs, minimum=1)
        self._max_rounds = None if max_rounds is None else check_int("max_rounds", max_rounds, minimum=1)
        if not isinstance(resume, bool):
            raise ProcedureArgumentError("resume", repr(resume), "True or False")
        self._resume = resume
        self._sampler = as_sampler(space, field="space")
        self._rng = np.random.default_rng(check_seed(seed))
        # configs, named by their first trial's id
        self._params: dict[str, dict[str, Any]] = {}
        self._rung_scores: list[dict[str, float]] = [{} for _ in self._stages]
        self._arrival: list[dict[str, int]] = [{} for _ in self._stages]
        self._promoted: list[set[str]] = [set() for _ in self._stages]
        # trials
        self._config: dict[str, str] = {}  # trial -> config
        self._stage: dict[str, int] = {}  # trial -> stage it is training
        self._target: dict[str, int] = {}  # trial -> epoch count that ends the stage
        self._latest: dict[str, str] = {}  # config -> its most recent trial

    # -- views ----------------------------------------------------------------
    @property
    def stages(self) -> tuple[int, ...]:
        """Epochs of each stage, e.g. ``(1, 3, 9)``."""
        return self._stages

    @property
    def rungs(self) -> tuple[dict[str, float], ...]:
        """Per rung, config -> score at the end of that stage, in arrival order."""
        return tuple(dict(r) for r in self._rung_scores)

    def config_of(self, trial_id: str) -> str:
        """The config a trial trains (the id of the config's first trial)."""
        return self._config[trial_id]

    @property
    def n_configs(self) -> int:
        """Configs sampled so far."""
        return len(self._params)

    # -- internals ------------------------------------------------------------
    def _new_config(self) -> TrialSpec:
        params = self._sampler(self._rng)
        spec = self._new_trial(params)
        self._params[spec.id] = dict(params)
        self._track(spec.id, spec.id, 0, self._stages[0])
        return spec

    def _track(self, trial: str, config: str, stage: int, target: int) -> None:
        self._config[trial], self._stage[trial], self._target[trial] = config, stage, target
        self._latest[config] = trial

    def _can_sample(self) -> bool:
        return self._max_configs is None or len(self._params) < self._max_configs

    def _promotable(self) -> tuple[str, int] | None:
        """ASHA's get_job, promotion part: (config, rung it leaves) or None."""
        for k in range(len(self._stages) - 2, -1, -1):
            scores = self._rung_scores[k]
            top = ranked(scores, scores, self._arrival[k])[: len(scores) // self._eta]
            for config in top:
                if config not in self._promoted[k]:
                    return config, k
        return None

    def _initial_trials(self) -> list[TrialSpec]:
        specs = []
        while len(specs) < self._p and self._can_sample():
            specs.append(self._new_config())
        return specs

    def _decide(self, results: Mapping[str, TrialResult]):
        done = [t for t, r in results.items() if r.epoch == self._target[t]]
        for t in done:
            config, k = self._config[t], self._stage[t]
            self._arrival[k][config] = len(self._arrival[k])
            self._rung_scores[k][config] = results[t].score
        if self._max_rounds is not None and self.rounds >= self._max_rounds:
            return list(results), ()
        going_on: set[str] = set()
        add: list[TrialSpec] = []
        free = self._p - (len(results) - len(done))
        for _ in range(free):
            job = self._promotable()
            if job is not None:
                config, k = job
                self._promoted[k].add(config)
                last = self._latest[config]
                budget = self._stages[k + 1]
                if self._resume and last in done:
                    going_on.add(last)  # promoted where it stands: keep training
                    self._track(last, config, k + 1, self._target[last] + budget)
                else:
                    spec = self._new_trial(self._params[config], init_from=last if self._resume else None)
                    self._track(spec.id, config, k + 1, budget)
                    add.append(spec)
            elif self._can_sample():
                add.append(self._new_config())
            else:
                break
        return [t for t in done if t not in going_on], add
