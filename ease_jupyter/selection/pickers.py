"""User pickers: which tenant to serve next (the "user-picking phase" of ease.ml).

Each picker is a small strategy object with one decision method,
``pick_user(state) -> slot | None``, and a hook ``on_pick(state, slot)`` that
the caller invokes after the pick is made. ``state`` is a :class:`PickState`:
plain numpy vectors indexed by user *slot* (users in arrival order), which the
:class:`~ease_jupyter.selection.Selector` keeps up to date and which the
pickers only read. Pickers never touch a GP, a store or a clock.

References: ease.ml, PVLDB 2018 (arXiv:1708.07308 §4): ROUNDROBIN (§5.2),
GREEDY (Algorithm 2), HYBRID (§5.4); RANDOM is the baseline of §6.3.
Beyond the paper: :class:`GainRate`, the default rule's picker (it replaces
GREEDY / HYBRID), :class:`EIGreedy`, :class:`RegretGreedy`, and
:class:`FirstComeFirstServed` (the FCFS queue of §5.1's example, a baseline).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PickState", "UserPicker", "RoundRobin", "RandomPicker", "Greedy", "Hybrid", "EIGreedy", "RegretGreedy",
           "GainRate", "FirstComeFirstServed", "make_picker"]


@dataclass
class PickState:
    """What a picker may look at. All arrays are indexed by user slot.

    Attributes:
        eligible: the user is active and has at least one model she may be
            given: with ``arms="all"`` (the paper's GP-UCB) any model that is
            not running, else one that is neither tried nor running.
        n_obs: number of finished observations of the user.
        busy: the user has a pick that is still running.
        sigma_bar: the empirical confidence gap of Algorithm 2 line 6 (times the
            user's weight); for a user with no observation yet, ``gap``.
        gap: the pick rule's score, ``max_k UCB(k) - best so far`` (times the
            user's weight), over the same models as ``eligible``, with running
            picks hallucinated (see ``parallel.py``). Over all arms (the
            paper's Algorithm 2, line 8), a user whose highest UCB is a model
            she has trained already (mean ~ observed quality, std ~ noise) has
            a gap ~ 0: she has converged.
        weight: the user's weight in the objective (1 by default).
        total_best: sum over active users of weight x best quality so far. The
            true regret is ``sum w (mu* - best)`` with unknown but fixed
            ``mu*``, so it drops exactly when ``total_best`` rises: HYBRID's
            "regret does not drop" test is observable.
        rng: the selector's random generator.
        served_before: the user succeeds one who was served (a task's new
            data version replacing the tenant of its previous one,
            ``Selector.add_user(succeeds=...)``): no newcomer, whatever her
            ``n_obs``. None: nobody does.
    """

    eligible: np.ndarray
    n_obs: np.ndarray
    busy: np.ndarray
    sigma_bar: np.ndarray
    gap: np.ndarray
    weight: np.ndarray
    total_best: float
    rng: np.random.Generator
    served_before: np.ndarray | None = None

    def first_arrivals(self) -> np.ndarray:
        """The users owed a first model before anyone else is served
        (Algorithm 2, lines 1-4): eligible, no result, nothing running,
        and not the successor of a user who was served. Without that last
        condition a task fed again and again would be a newcomer at every
        feed and take every turn."""
        fresh = self.n_obs == 0
        if self.served_before is not None:
            fresh = fresh & ~self.served_before
        return self.eligible & fresh & ~self.busy


class UserPicker:
    """Base class. Subclasses implement :meth:`pick_user`."""

    name = "base"
    needs_stats = False  # whether pick_user reads sigma_bar / gap
    stat = "ucb"  # what the selector puts in ``gap``: "ucb" (max UCB - best) or "ei" (max EI per cost)

    def pick_user(self, state: PickState) -> int | None:  # pragma: no cover - interface
        raise NotImplementedError

    def on_pick(self, state: PickState, slot: int) -> None:
        """Called once the pick for ``slot`` has been made."""

    def on_new_slot(self, state: PickState, slot: int) -> None:
        """Called when a user joins (slot is new)."""

    def on_successor(self, state: PickState, slot: int, predecessor: int) -> None:
        """Called instead of ``on_new_slot`` when the user in ``slot`` takes
        the place of the one in ``predecessor`` (still registered; she
        leaves next): by default, a new user."""
        self.on_new_slot(state, slot)

    def on_membership_change(self) -> None:
        """Called when users join or leave."""

    def get_state(self) -> dict:
        return {}

    def set_state(self, d: dict) -> None:
        pass


class RoundRobin(UserPicker):
    """ROUNDROBIN (§5.2): serve user ``i = t mod n``, i.e. every user in turn.

    Implemented as stride scheduling: each user has a "pass" that grows by
    ``1/weight`` when served, and the eligible user with the smallest pass
    goes next (ties: arrival order). With equal weights this is exactly the
    paper's cycle; with weights it is weighted round robin (beyond the paper,
    §5.5 suggests weighted objectives). A user who joins starts at the
    smallest pass of the active users, so she neither jumps the queue forever
    nor waits a full cycle of arrears.
    """

    name = "round_robin"

    def __init__(self, weighted: bool = True):
        self.weighted = weighted
        self._pass = np.zeros(0)

    def _ensure(self, n: int) -> None:
        if self._pass.size < n:
            self._pass = np.concatenate([self._pass, np.zeros(n - self._pass.size)])

    def on_new_slot(self, state: PickState, slot: int) -> None:
        self._ensure(slot + 1)
        others = state.eligible[: self._pass.size].copy()
        others[slot] = False
        self._pass[slot] = float(self._pass[: others.size][others].min()) if others.any() else 0.0

    def on_successor(self, state: PickState, slot: int, predecessor: int) -> None:
        """She keeps her predecessor's pass: a task fed again keeps its place
        in the turns, neither ahead of those it was served before nor owed
        a turn it did not wait for."""
        self._ensure(max(slot, predecessor) + 1)
        self._pass[slot] = self._pass[predecessor]

    def pick_user(self, state: PickState) -> int | None:
        n = state.eligible.size
        self._ensure(n)
        elig = state.eligible
        if not elig.any():
            return None
        p = np.where(elig, self._pass[:n], np.inf)
        return int(np.argmin(p))  # argmin returns the first (lowest slot) on ties

    def on_pick(self, state: PickState, slot: int) -> None:
        self._ensure(slot + 1)
        w = float(state.weight[slot]) if self.weighted else 1.0
        self._pass[slot] += 1.0 / max(w, 1e-12)

    def reset(self) -> None:
        self._pass[:] = 0.0

    def get_state(self) -> dict:
        return {"pass": self._pass.tolist()}

    def set_state(self, d: dict) -> None:
        self._pass = np.asarray(d.get("pass", []), dtype=float)


class RandomPicker(UserPicker):
    """RANDOM (§6.3): a uniformly random eligible user (proportional to weight
    when weighted)."""

    name = "random"

    def __init__(self, weighted: bool = True):
        self.weighted = weighted

    def pick_user(self, state: PickState) -> int | None:
        idx = np.flatnonzero(state.eligible)
        if idx.size == 0:
            return None
        if self.weighted:
            w = state.weight[idx].astype(float)
            return int(state.rng.choice(idx, p=w / w.sum()))
        return int(state.rng.choice(idx))


class Greedy(UserPicker):
    """GREEDY, Algorithm 2 of ease.ml.

    * Lines 1-4: every user is served once first (here: users with no
      observation and no running pick, in arrival order).
    * Line 6 (kept by the selector): the empirical confidence bound
      ``e_i = min(B(a), previous e_i)`` and ``sigma_bar_i = e_i - y_i``.
    * Line 7: the candidate set ``V_t = {i : sigma_bar_i >= mean_j sigma_bar_j}``.
    * Line 8: ease.ml's rule, the user in ``V_t`` with the largest gap between
      her highest upper confidence bound and her best accuracy so far.

    The cost-aware version replaces ``sqrt(beta)`` by ``sqrt(beta / c)``
    everywhere (§5.3); that happens where ``sigma_bar`` and ``gap`` are computed.

    Attributes:
        last_candidates_: the candidate set ``V_t`` of the last pick (a
            frozenset of slots), or None if the last pick was an initial one.
    """

    name = "greedy"
    needs_stats = True

    def __init__(self):
        self.last_candidates_: frozenset[int] | None = None

    def candidate_set(self, state: PickState) -> np.ndarray:
        """Boolean mask of ``V_t`` (line 7) among eligible users that have an observation."""
        pool = state.eligible & (state.n_obs > 0)
        if not pool.any():
            pool = state.eligible.copy()
        if not pool.any():
            return pool
        sb = state.sigma_bar[pool]
        mean = float(np.mean(sb))
        tol = 1e-12 * max(1.0, abs(mean))
        return pool & (state.sigma_bar >= mean - tol)

    def pick_user(self, state: PickState) -> int | None:
        init = state.first_arrivals()
        if init.any():  # Algorithm 2, lines 1-4
            self.last_candidates_ = None
            return int(np.flatnonzero(init)[0])
        V = self.candidate_set(state)
        if not V.any():
            self.last_candidates_ = None
            return None
        self.last_candidates_ = frozenset(np.flatnonzero(V).tolist())
        g = np.where(V, state.gap, -np.inf)
        return int(np.argmax(g))


class Hybrid(UserPicker):
    """HYBRID (§5.4), ease.ml's default: GREEDY until it freezes, then ROUNDROBIN.

    "When we notice that the candidate set remains unchanged and the overall
    regret does not drop for s steps, we know that the algorithm has entered
    the freezing stage. We then switch to the round-robin user-selection
    strategy" (s = 10 in the paper). A step counts towards ``s`` when GREEDY's
    candidate set equals the previous step's and ``total_best`` (see
    :class:`PickState`) has not risen since the previous step.

    Beyond the paper: with ``rearm_on_change`` (default), users joining or
    leaving put HYBRID back into GREEDY mode, because the freeze it detected
    concerned a population that no longer exists. Off, it behaves as in the
    paper (the switch is for good).

    Attributes:
        mode: "greedy" or "round_robin".
        switched_at_: the step index of the switch (None if not switched).
    """

    name = "hybrid"
    needs_stats = True

    def __init__(self, s: int = 10, *, rearm_on_change: bool = True, weighted: bool = True):
        if s < 1:
            raise ValueError(f"s: found {s!r}, expected an integer >= 1")
        self.s = int(s)
        self.rearm_on_change = rearm_on_change
        self.greedy = Greedy()
        self.rr = RoundRobin(weighted=weighted)
        self.mode = "greedy"
        self.stall = 0
        self.step = 0
        self.switched_at_: int | None = None
        self._last_V: frozenset[int] | None = None
        self._last_total: float | None = None

    def on_new_slot(self, state: PickState, slot: int) -> None:
        self.rr.on_new_slot(state, slot)

    def on_successor(self, state: PickState, slot: int, predecessor: int) -> None:
        self.rr.on_successor(state, slot, predecessor)

    def on_membership_change(self) -> None:
        if self.rearm_on_change:
            self.mode = "greedy"
            self.stall = 0
            self._last_V = None
            self._last_total = None

    def pick_user(self, state: PickState) -> int | None:
        self.step += 1
        if self.mode == "greedy":
            slot = self.greedy.pick_user(state)
            V = self.greedy.last_candidates_
            if V is None:  # initial round: nothing to compare yet
                self.stall = 0
                self._last_V, self._last_total = None, state.total_best
                return slot
            improved = self._last_total is None or state.total_best > self._last_total + 1e-12
            if self._last_V is not None and V == self._last_V and not improved:
                self.stall += 1
            else:
                self.stall = 0
            self._last_V, self._last_total = V, state.total_best
            if self.stall < self.s:
                return slot
            self.mode = "round_robin"
            self.switched_at_ = self.step
            self.rr.reset()
        return self.rr.pick_user(state)

    def on_pick(self, state: PickState, slot: int) -> None:
        if self.mode == "round_robin":
            self.rr.on_pick(state, slot)

    def get_state(self) -> dict:
        return {"mode": self.mode, "stall": self.stall, "step": self.step, "switched_at": self.switched_at_,
                "last_V": sorted(self._last_V) if self._last_V is not None else None,
                "last_total": self._last_total, "rr": self.rr.get_state()}

    def set_state(self, d: dict) -> None:
        self.mode = d["mode"]; self.stall = d["stall"]; self.step = d["step"]
        self.switched_at_ = d["switched_at"]
        self._last_V = frozenset(d["last_V"]) if d["last_V"] is not None else None
        self._last_total = d["last_total"]
        self.rr.set_state(d["rr"])


class EIGreedy(UserPicker):
    """Beyond the paper: serve the user with the largest expected improvement
    per unit cost, ``max_k w_i EI_i(k) / c_ik`` (``gap`` holds it; the selector
    computes it with ``stat = "ei"``), after serving everyone once.

    With the EI-per-second model chooser this is one global rule over all
    (user, model) pairs: train the pair whose expected drop of the weighted
    total loss per second is largest. It answers the weakness we measure in
    GREEDY's rule, whose UCB gap is dominated by the exploration bonus
    ``sqrt(beta_t) sigma`` (about 0.5 accuracy points for beta_t ~ 20) and so
    hardly tells a user who is done from one who is not.
    """

    name = "ei_greedy"
    needs_stats = True
    stat = "ei"

    def pick_user(self, state: PickState) -> int | None:
        init = state.first_arrivals()
        if init.any():
            return int(np.flatnonzero(init)[0])
        if not state.eligible.any():
            return None
        return int(np.argmax(np.where(state.eligible, state.gap, -np.inf)))


class RegretGreedy(EIGreedy):
    """Beyond the paper: serve the user with the largest *expected remaining loss*
    ``E[max_k f_i(k)] - best_i`` under her GP posterior (a Monte Carlo estimate
    with common random numbers; the selector puts it in ``gap`` with
    ``stat = "regret"``), after serving everyone once.

    GREEDY's gap ``max_k UCB(k) - best`` is meant to estimate the same thing,
    "how much each user could further benefit" (pvldb §5.3), but in the
    cost-aware case it is dominated by the cost factor of the user's cheapest
    uncertain model. This is the posterior mean of the quantity itself, with
    no exploration bonus and no cost: it decides *who* still has something to
    gain, the model chooser decides how to spend on her.
    """

    name = "regret_greedy"
    stat = "regret"  # the pick rule is EIGreedy's: everyone once, then the largest ``gap``


class GainRate(UserPicker):
    """The default rule's user picker (beyond the paper; it replaces GREEDY /
    HYBRID of pvldb §5.3-5.4).

    * First, every user with no observation and nothing running, in arrival
      order (as Algorithm 2, lines 1-4): an unserved user carries her whole
      loss.
    * Then, with ``g_i = max_k r_i(k)`` her best *capped expected improvement
      per second* (``gap`` holds it; the selector computes it with
      ``stat = "gain_rate"``, see ``capped_ei.py``), the candidate set is
      ``V = {eligible i : g_i >= mean g}`` and among ``V`` the user with the
      smallest weighted round-robin pass goes next (``pass += 1/w_i`` when
      served; ties: the larger ``g``, then arrival order).

    Why: GREEDY's "highest UCB - best so far" is dominated by the exploration
    bonus of the user's cheapest uncertain model (about one accuracy unit
    against 0.01-0.1 of loss left), so it ranks users by who still has a
    cheap uncertain model rather than by what they stand to gain. ``g_i`` is
    what one more second spent on her is expected to remove from her loss.
    ``V`` drops the users with little to gain; the pass shares the workers
    fairly among the rest, so one user with a large but slow-to-realise gain
    cannot starve the others. There is no freeze switch: a converged user
    (best so far at the cap, or nothing left that could beat it) has
    ``g ~ 0`` and leaves ``V`` by herself.

    Attributes:
        last_candidates_: ``V`` of the last pick (a frozenset of slots), or
            None when the last pick was an initial one.
        last_phase_: "initial" or "gain_rate".
    """

    name = "gain_rate"
    needs_stats = True
    stat = "gain_rate"

    def __init__(self, weighted: bool = True):
        self.rr = RoundRobin(weighted=weighted)
        self.last_candidates_: frozenset[int] | None = None
        self.last_phase_ = "initial"

    def on_new_slot(self, state: PickState, slot: int) -> None:
        self.rr.on_new_slot(state, slot)

    def on_successor(self, state: PickState, slot: int, predecessor: int) -> None:
        self.rr.on_successor(state, slot, predecessor)

    def candidate_set(self, state: PickState) -> np.ndarray:
        """Boolean mask of ``V = {eligible i : g_i >= mean g}``."""
        elig = state.eligible
        if not elig.any():
            return elig.copy()
        g = state.gap[elig]
        mean = float(np.mean(g))
        return elig & (state.gap >= mean - 1e-12 * max(1.0, abs(mean)))

    def pick_user(self, state: PickState) -> int | None:
        init = state.first_arrivals()
        if init.any():
            self.last_candidates_, self.last_phase_ = None, "initial"
            return int(np.flatnonzero(init)[0])
        V = self.candidate_set(state)
        if not V.any():
            self.last_candidates_ = None
            return None
        n = V.size
        self.rr._ensure(n)
        idx = np.flatnonzero(V)
        # smallest pass, then the largest g, then the earliest arrival (lexsort: last key first)
        best = idx[np.lexsort((idx, -state.gap[idx], self.rr._pass[idx]))[0]]
        self.last_candidates_, self.last_phase_ = frozenset(idx.tolist()), "gain_rate"
        return int(best)

    def on_pick(self, state: PickState, slot: int) -> None:
        self.rr.on_pick(state, slot)

    def get_state(self) -> dict:
        return {"rr": self.rr.get_state()}

    def set_state(self, d: dict) -> None:
        self.rr.set_state(d["rr"])


class FirstComeFirstServed(UserPicker):
    """A first-come-first-served queue (pvldb §5.1's FCFS example; what a
    shared cluster without a model-selection scheduler does): the earliest
    arrived user who still has a model to try is served, so each user's whole
    queue is given out before the next user's. With the fixed catalogue-order
    chooser this is the ``fifo`` policy."""

    name = "fifo"

    def pick_user(self, state: PickState) -> int | None:
        idx = np.flatnonzero(state.eligible)
        return int(idx[0]) if idx.size else None


def make_picker(name: str, *, s: int = 10, weighted: bool = True, rearm_on_change: bool = True) -> UserPicker:
    """Picker by name: ``round_robin``, ``random``, ``greedy``, ``hybrid``, ``ei_greedy``, ``regret_greedy``,
    ``gain_rate`` or ``fifo``."""
    if name == "round_robin":
        return RoundRobin(weighted=weighted)
    if name == "random":
        return RandomPicker(weighted=weighted)
    if name == "greedy":
        return Greedy()
    if name == "hybrid":
        return Hybrid(s, rearm_on_change=rearm_on_change, weighted=weighted)
    if name == "ei_greedy":
        return EIGreedy()
    if name == "regret_greedy":
        return RegretGreedy()
    if name == "gain_rate":
        return GainRate(weighted=weighted)
    if name == "fifo":
        return FirstComeFirstServed()
    raise ValueError(f"picker: found {name!r}, expected one of round_robin, random, greedy, hybrid, ei_greedy, "
                     "regret_greedy, gain_rate, fifo")
