"""The :class:`Selector` facade: multi-tenant, cost-aware model selection as a
plain object the scheduler service drives with ask/tell calls.

It decides; it never runs anything. The caller registers users and their
candidate models with cost estimates, asks ``next_picks(n_free_workers)`` for
frozen :class:`Pick` records (user, model, and why that user was served),
trains them, and reports each result with ``observe``.
The whole state is a plain dict (``to_dict`` / ``from_dict``) for restart
recovery.

Per decision the work is O(number of users) vectorised numpy plus O(K) for the
chosen user; an observation is a rank-one GP update of one user only (see
``gp.UserGP``). Per-user scalars (GREEDY's gap, the empirical confidence gap)
are cached and recomputed only for users whose state changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .baselines import DEFAULT_POLICY, choose_ei, fixed_order_ranks, policy_spec
from .capped_ei import first_pick, gain_per_second, near_best_margin, variance_scale
from .gp import ModelPrior, UserGP, default_kernel
from .parallel import pending_aware_std
from .pickers import Greedy, PickState, make_picker
from .ucb import BETA_SCHEDULES, expected_improvement

__all__ = ["Selector", "Pick", "ARMS", "COST_NORMS"]

#: What GP-UCB ranges over: ``"all"`` arms (the paper's Algorithms 1-2) or the ``"untried"`` ones.
ARMS = ("all", "untried")
#: How costs are normalised in ``sqrt(beta_t c*/c_k)``: by the largest cost of all active users
#: (``"global"``, the paper's: pvldb §4.1 "normalize execution time across all users and all
#: applications"; Theorems 2-3 ``c* = max_{i,k} c_ik``) or by each user's own largest cost
#: (``"user"``, beyond the paper).
COST_NORMS = ("global", "user")


@dataclass(frozen=True)
class Pick:
    """One pick of :meth:`Selector.next_picks`: train ``model`` for ``user``,
    with the explanation of why she was served (pvldb Algorithm 2: the phase
    that chose her and, in GREEDY's phase, the candidate set ``V_t`` of line 7
    with each candidate's gap, what line 8 maximises).

    Frozen, so a pick keeps its own explanation however many picks follow it
    in the same call."""

    user: str
    model: str
    # "initial" (a user with no result yet is served first: GREEDY's and the default rule's),
    # "greedy" (GREEDY's), "round_robin" (HYBRID's), "gain_rate" (the default rule's), else the picker name
    phase: str
    policy: str  # the user picker's name
    # (user, gap) of V_t, in slot order: GREEDY's "highest UCB - best so far", or in the default rule's
    # "gain_rate" phase each candidate's best capped expected improvement per second; None otherwise
    candidates: tuple[tuple[str, float], ...] | None
    decision: int  # how many picks the selector had made before this one

    def explain(self) -> dict[str, Any]:
        """The explanation as a plain dict (what :attr:`Selector.last_decision` holds)."""
        return {"user": self.user, "model": self.model, "phase": self.phase, "policy": self.policy,
                "candidates": None if self.candidates is None else dict(self.candidates),
                "decision": self.decision}


@dataclass
class _User:
    name: str
    slot: int
    models: np.ndarray  # catalogue indices of the candidates (her own models come after them in ``names``)
    names: list[str]
    index: dict[str, int]
    cost: np.ndarray  # raw cost estimates (seconds), per local model
    weight: float
    gp: UserGP
    tried: np.ndarray  # bool per local model
    pending: dict[int, float] = field(default_factory=dict)  # local model -> UCB when picked
    best_y: float | None = None
    best_k: int | None = None
    e_bar: float = math.inf  # empirical confidence bound y + sigma_bar (Alg. 2 line 6)
    sigma_bar: float = math.nan
    obs: list[tuple[int, float, float, float | None]] = field(default_factory=list)  # (k, y, B, cost)
    refits: int = 0
    # caches, valid while not dirty
    scores: np.ndarray | None = None
    avail: np.ndarray | None = None
    rate: np.ndarray | None = None  # the default rule's gain per second, per local model
    own: int = 0  # her own models, outside the catalogue: the last ``own`` of ``names``
    served_before: bool = False  # she succeeds a user who was served (add_user's ``succeeds``)
    # Her predecessors' results, the latest per model name (add_user's ``succeeds``): evidence for
    # her GP and her best so far, but no model of hers is tried by them (her data is new).
    inherited: dict[str, float] = field(default_factory=dict)
    refresh: np.ndarray | None = None  # bool per local model: a model of ``inherited`` (None: none)


class Selector:
    """Multi-tenant, cost-aware model selection (ease.ml; PVLDB 2018 §4-5).

    The default rule (``policy="default"``, the same as ``"gain_rate"``) goes
    beyond the paper: it replaces GP-UCB (§4.1) and GREEDY / HYBRID (§5.3-5.4)
    by capped, variance-calibrated expected improvement per second, ``r_i(k) =
    w_i EI_i(k) c*/c_ik`` over each user's untried models (her first model: the
    likeliest near-best one per second, ``capped_ei.first_pick``), and serves first the
    users who have no result yet, then, among the users whose best ``r`` is at
    least the mean, the one with the smallest weighted round-robin pass (see
    ``capped_ei.py`` and ``pickers.GainRate`` for what each part fixes). The
    paper's rules stay selectable by name (``"hybrid"``, ``"greedy"``, ...).

    Parameters
    ----------
    models : sequence of str
        The model catalogue (unique names). Users pick from subsets of it.
    history : array (n_history_users, K), optional
        Qualities of the catalogue on other, finished users: the GP kernel is
        built from it (arXiv App. A). NaN marks missing cells.
    descriptors : array (K, d), optional
        Model descriptors for the kernel when there is no history.
    prior : ModelPrior, optional
        A prior fitted already (overrides ``history`` / ``descriptors``).
    costs : mapping or sequence, optional
        Default cost estimate (seconds) per catalogue model, used for users
        registered without their own costs. Default 1.
    policy : str, default "default"
        See ``baselines.POLICIES`` (``oracle`` needs the truth and exists only
        in the simulator). ``"default"`` is the default rule above; ``"hybrid"``
        is ease.ml's own.
    cost_aware : bool, default True
        Cost-aware GP-UCB (sqrt(beta_t / c_k), §4.1) and cost-aware GREEDY.
    delta : float, default 0.1
        Confidence parameter of ``beta_t``.
    beta_schedule : {"alg1", "theorem"}, default "alg1"
        ``"alg1"`` is what the algorithms run: ``beta = log(K t^2 / delta)``
        with ``t`` the user's own step count (pvldb Algorithm 1 line 3;
        Algorithm 2 line 9, ``beta^j_{t_j} = log(K^j t_j^2 / delta)``), and
        ``sqrt(beta / c_k)`` with costs normalised by ``c*`` (§4.1).
        ``"theorem"`` is the larger schedule of Theorems 1-3
        (``2 c* log(pi^2 n K t^2 / 6 delta)``), under which the regret bounds
        are proved; it is kept for comparison.
    beta_scale : float, default 1.0
        Multiplies ``beta_t``. 1 is the paper's schedule. Srinivas et al.
        (ICML 2010, §6) scale the theoretical beta_t down by 5 in practice
        (``beta_scale=0.2``); the benchmark measures both.
    s : int, default 10
        HYBRID's freeze window (§5.4).
    hallucinate : bool, default True
        GP-BUCB hallucination of pending picks (see ``parallel.py``).
    arms : {"all", "untried"}, default "all"
        Which models the GP-UCB rule (and GREEDY's gap "highest UCB - best so
        far") ranges over. ``"all"`` is the paper's: Algorithm 1 line 4 and
        Algorithm 2 line 10 take ``argmax_{k in [K]}`` over every arm, with no
        exclusion of arms already played, so a tried model competes with its
        posterior (mean ~ its observed quality, std ~ the noise) and, when it
        wins, it is trained again ("Observe y_t by playing bandit a_t"). A
        user whose best model is found keeps re-picking it, her empirical gap
        (Alg. 2 line 6) settles at ~0 or below, and once such re-runs dominate,
        ``V_t`` stops changing while the regret stops dropping: the "freezing
        stage" HYBRID's switch detects (pvldb §5.4, "stick to these users
        forever ... if the optimal models for these users have been found").
        ``"untried"`` (the previous behaviour) ranges over models neither tried
        nor running, so a model is never trained twice. Only the GP-UCB chooser is affected: the
        EI and fixed-order baselines always skip tried models. Running
        (pending) picks are never picked again in either mode.
    cost_norm : {"global", "user"}, default "global"
        ``c*`` in ``sqrt(beta_t c*/c_k)``. ``"global"`` is the paper's: the
        largest cost over all active users (pvldb §4.1 normalises execution
        time "across all users and all applications"; Theorems 2-3 use
        ``c* = max_{i,k} c_ik``). ``"user"`` (beyond the paper) divides each
        user's costs by her own largest cost, so a user whose models are all
        fast is not given a larger exploration bonus than one whose models
        are slow.
    weighted : bool, default True
        Use per-user weights in the user pickers (weights default to 1).
    rearm_on_change : bool, default True
        HYBRID returns to GREEDY mode when users join or leave.
    model_order : sequence of str, optional
        The order for the ``fixed_order`` policy.
    refit_every_doubling : bool or None, default None
        Refit a user's kernel hyperparameters from her own observations at
        3, 6, 12, ... observations. None: only when the prior has no history
        (decided again by :meth:`set_prior`).
    random_state : int or None

    Examples
    --------
    >>> import numpy as np
    >>> hist = np.array([[0.9, 0.6, 0.7], [0.8, 0.5, 0.7], [0.7, 0.4, 0.6], [0.95, 0.5, 0.8]])
    >>> sel = Selector(["a", "b", "c"], history=hist, random_state=0)
    >>> sel.add_user("alice", costs={"a": 10.0, "b": 1.0, "c": 2.0})
    >>> sel.add_user("bob")
    >>> picks = sel.next_picks(2)
    >>> len(picks), len({p.user for p in picks})
    (2, 2)
    >>> sel.observe(picks[0].user, picks[0].model, quality=0.8)
    """

    def __init__(self, models: Sequence[str], *, history: np.ndarray | None = None,
                 descriptors: np.ndarray | None = None, prior: ModelPrior | None = None,
                 costs: Mapping[str, float] | Sequence[float] | None = None, policy: str = DEFAULT_POLICY,
                 cost_aware: bool = True, delta: float = 0.1, beta_schedule: str = "alg1",
                 beta_scale: float = 1.0, s: int = 10,
                 hallucinate: bool = True, weighted: bool = True, rearm_on_change: bool = True,
                 arms: str = "all", cost_norm: str = "global", model_order: Sequence[str] | None = None, refit_every_doubling: bool | None = None,
                 random_state: int | None = None):
        names = [str(m) for m in models]
        if not names:
            raise ValueError("models: expected at least one model name")
        if len(set(names)) != len(names):
            dup = sorted({m for m in names if names.count(m) > 1})
            raise ValueError(f"models: duplicate names {dup}")
        picker_name, chooser = policy_spec(policy)
        if chooser == "oracle":
            raise ValueError("policy: 'oracle' needs the true qualities; it exists only in the simulator")
        if beta_schedule not in BETA_SCHEDULES:
            raise ValueError(f"beta_schedule: found {beta_schedule!r}, expected one of {BETA_SCHEDULES}")
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta: found {delta!r}, expected a number in (0, 1)")
        self.model_names = names
        self._model_index = {m: i for i, m in enumerate(names)}
        self.policy = policy
        self.cost_aware = bool(cost_aware)
        self.delta = float(delta)
        self.beta_schedule = beta_schedule
        if not (beta_scale >= 0 and math.isfinite(beta_scale)):
            raise ValueError(f"beta_scale: found {beta_scale!r}, expected a finite number >= 0")
        self.beta_scale = float(beta_scale)
        self.s = int(s)
        if arms not in ARMS:
            raise ValueError(f"arms: found {arms!r}, expected one of {ARMS}")
        self.arms = arms
        if cost_norm not in COST_NORMS:
            raise ValueError(f"cost_norm: found {cost_norm!r}, expected one of {COST_NORMS}")
        self.cost_norm = cost_norm
        self.hallucinate = bool(hallucinate)
        self.weighted = bool(weighted)
        self.rearm_on_change = bool(rearm_on_change)
        self.random_state = random_state
        self._rng = np.random.default_rng(random_state)
        K = len(names)
        if prior is None:
            prior = ModelPrior(random_state=random_state).fit(history, descriptors=descriptors, n_models=K)
        if prior.n_models != K:
            raise ValueError(f"prior: covers {prior.n_models} models, expected {K} (one per catalogue model)")
        self.prior = prior
        self._default_cost = self._cost_vector(costs, names, "costs")
        self._picker_name, self._chooser = picker_name, chooser
        # pvldb Alg. 1 line 4 / Alg. 2 line 10: argmax over all K arms, played ones included
        self._replay = arms == "all" and chooser == "ucb"
        self.picker = make_picker(picker_name, s=s, weighted=weighted, rearm_on_change=rearm_on_change)
        self._model_order = list(model_order) if model_order is not None else None
        if chooser == "fixed":
            order = None if model_order is None else [self._model_index_of(m) for m in model_order]
            self._ranks = fixed_order_ranks(policy, K, prior.mean_ if policy == "most_cited" else None, order)
        else:
            self._ranks = None
        self._refit_auto = refit_every_doubling is None
        self.refit_every_doubling = (prior.source_ != "history") if refit_every_doubling is None else bool(refit_every_doubling)
        self._users: dict[str, _User] = {}
        self._slots: list[_User | None] = []
        cap = 16
        self._elig = np.zeros(cap, bool)
        self._nobs = np.zeros(cap, np.int64)
        self._busy = np.zeros(cap, bool)
        self._sbar = np.zeros(cap)
        self._gap = np.zeros(cap)
        self._w = np.ones(cap)
        self._served = np.zeros(cap, bool)
        self._dirty: set[int] = set()
        self._total_best = 0.0
        self._c_star = 1.0
        self._cost_max: dict[int, float] = {}  # each active user's largest cost, by slot (c* is their max)
        self.n_decisions = 0
        self.last_decision: dict[str, Any] | None = None  # the last pick's explain()
        self._force_scores = False
        self._crn: np.ndarray | None = None  # common random numbers of the "regret" statistic

    # ------------------------------------------------------------------ helpers
    def _model_index_of(self, m: str) -> int:
        try:
            return self._model_index[str(m)]
        except KeyError:
            raise KeyError(f"model: unknown model {m!r}; the catalogue has {len(self.model_names)} models") from None

    def _cost_vector(self, costs, names: Sequence[str], field_name: str) -> np.ndarray:
        if costs is None:
            return np.ones(len(names)) if field_name == "costs" else None
        if isinstance(costs, Mapping):
            out = np.empty(len(names))
            for i, m in enumerate(names):
                if m in costs:
                    out[i] = float(costs[m])
                elif field_name != "costs":
                    out[i] = self._default_cost[self._model_index_of(m)]
                else:
                    out[i] = 1.0
            unknown = set(costs) - set(names)
            if unknown:
                raise KeyError(f"{field_name}: unknown models {sorted(unknown)[:5]}")
        else:
            out = np.asarray(list(costs), dtype=float)
            if out.shape != (len(names),):
                raise ValueError(f"{field_name}: found {out.shape[0] if out.ndim else 0} costs, expected {len(names)}")
        if not np.all(np.isfinite(out)) or np.any(out <= 0):
            raise ValueError(f"{field_name}: costs must be finite and > 0")
        return out

    def _grow(self, n: int) -> None:
        cap = self._elig.size
        if n <= cap:
            return
        new = max(n, 2 * cap)
        def ext(a, fill):
            b = np.full(new, fill, dtype=a.dtype); b[:cap] = a; return b
        self._elig, self._nobs, self._busy = ext(self._elig, False), ext(self._nobs, 0), ext(self._busy, False)
        self._sbar, self._gap, self._w = ext(self._sbar, 0.0), ext(self._gap, 0.0), ext(self._w, 1.0)
        self._served = ext(self._served, False)

    def _active_users(self):
        return (u for u in self._slots if u is not None)

    def _track_cost(self, slot: int, largest: float | None) -> None:
        """Keep c*, the largest cost of any active user (1 with none), as the
        user in ``slot`` gets new costs (``largest``: her largest) or leaves
        (None). O(1) unless she held c* and her largest fell or she left:
        a reprice of every user stays linear in users, not quadratic."""
        old = self._cost_max.pop(slot, None)
        if largest is not None:
            self._cost_max[slot] = largest
        if largest is not None and largest >= self._c_star:
            c = largest
        elif (old is not None and old >= self._c_star) or len(self._cost_max) <= 1:
            c = max(self._cost_max.values(), default=1.0)
        else:
            return
        if c != self._c_star:
            self._c_star = c
            self._dirty.update(u.slot for u in self._active_users())

    def _n_active(self) -> int:
        return len(self._users)

    def _beta(self, u: _User) -> float:
        t = u.gp.n_obs + len(u.pending) + 1
        K = len(u.names)
        if self.beta_schedule == "theorem":
            b = 2.0 * math.log(math.pi ** 2 * max(self._n_active(), 1) * K * t * t / (6.0 * self.delta))
        else:
            b = math.log(K * t * t / self.delta)
        return self.beta_scale * max(b, 0.0)

    def _c_star_of(self, u: _User) -> float:
        return float(u.cost.max()) if self.cost_norm == "user" else self._c_star

    def _scale(self, u: _User):
        return (self._c_star_of(u) / u.cost) if self.cost_aware else 1.0

    def _std(self, u: _User) -> np.ndarray:
        return pending_aware_std(u.gp, list(u.pending), self.hallucinate)

    def _refresh(self, u: _User) -> None:
        avail = np.ones(u.tried.size, bool) if self._replay else ~u.tried
        if u.pending:
            avail = avail.copy()
            avail[list(u.pending)] = False
        u.avail = avail
        s = u.slot
        self._elig[s] = bool(avail.any())
        self._busy[s] = bool(u.pending)
        self._nobs[s] = len(u.obs)  # her own results (not inherited ones)
        self._served[s] = u.served_before
        w = u.weight if self.weighted else 1.0
        self._w[s] = u.weight
        gain_rate = self.picker.stat == "gain_rate"
        need_ucb = self._force_scores or self._chooser == "ucb" or (self.picker.needs_stats and not gain_rate)
        std = None
        if gain_rate or self._chooser == "capped_ei":
            std = self._std(u)
            # A model she had on her previous data (``refresh``) gains her nothing but a new draw of
            # its noise: it counts 0, and trains again when her turn finds nothing better.
            fresh = avail if u.refresh is None else avail & ~u.refresh
            u.rate = np.where(fresh, self._gain_rate(u, std), 0.0)
            if gain_rate:
                self._gap[s] = self._sbar[s] = float(np.max(u.rate)) if self._elig[s] else -math.inf
        if std is None and not need_ucb:
            u.scores = None
            return
        std = self._std(u) if std is None else std
        # the UCB of every arm: GP-UCB's score, and the bound of Algorithm 2 line 6 kept with each pick
        u.scores = u.gp.mean_ + np.sqrt(self._beta(u) * self._scale(u)) * std
        if need_ucb and not gain_rate:  # the default rule's picker reads its own gain, set above
            if not self._elig[s]:
                gap = -math.inf
            elif self.picker.stat == "regret":
                gap = self._expected_remaining_loss(u)
            elif self.picker.stat == "ei":
                best = u.best_y if u.best_y is not None else 0.0
                ei = expected_improvement(u.gp.mean_, std, best)
                if self.cost_aware:
                    ei = ei * (self._c_star_of(u) / u.cost)
                gap = float(np.max(ei[avail]))
            else:
                gap = float(np.max(u.scores[avail])) - (u.best_y if u.best_y is not None else 0.0)
            self._gap[s] = w * gap
            self._sbar[s] = w * (u.sigma_bar if u.obs else gap)

    def _gain_rate(self, u: _User, std: np.ndarray) -> np.ndarray:
        """The default rule's ``r(k) = w EI_capped(mu, sqrt(s) sigma, b) c*/c_k``, with ``std``
        the posterior std with running picks hallucinated (weight included when ``weighted``;
        costs 1 when cost-oblivious)."""
        return gain_per_second(u.gp.mean_, std, u.gp.innovations_, u.best_y, self._scale(u),
                               u.weight if self.weighted else 1.0)

    _N_DRAWS = 128

    def _expected_remaining_loss(self, u: _User) -> float:
        """Monte Carlo ``E[max(max_k f(k) - best, 0)]`` under the user's posterior
        (common random numbers: the same standard normal draws for everyone)."""
        cov = u.gp.posterior_cov()
        cov = 0.5 * (cov + cov.T)
        w, v = np.linalg.eigh(cov)
        root = v * np.sqrt(np.clip(w, 0.0, None))
        K = cov.shape[0]
        z = self._crn
        if z is None or z.shape[1] < K:
            z = self._crn = np.random.default_rng(12345).standard_normal((self._N_DRAWS, max(K, 1)))
        f = u.gp.mean_ + z[:, :K] @ root.T
        best = u.best_y if u.best_y is not None else 0.0
        return float(np.mean(np.maximum(f.max(axis=1) - best, 0.0)))

    def _refresh_dirty(self) -> None:
        if not self._dirty:
            return
        for s in self._dirty:
            u = self._slots[s]
            if u is not None:
                self._refresh(u)
        self._dirty.clear()

    def _state(self) -> PickState:
        n = len(self._slots)
        return PickState(eligible=self._elig[:n], n_obs=self._nobs[:n], busy=self._busy[:n],
                         sigma_bar=self._sbar[:n], gap=self._gap[:n], weight=self._w[:n],
                         total_best=self._total_best, rng=self._rng, served_before=self._served[:n])

    def _choose_model(self, u: _User) -> int | None:
        avail = u.avail
        if avail is None or not avail.any():
            return None
        if self._chooser == "ucb":
            return int(np.argmax(np.where(avail, u.scores, -np.inf)))
        if self._chooser == "ei":
            chat = (u.cost / self._c_star_of(u)) if self.cost_aware else None
            best = u.best_y if u.best_y is not None else 0.0
            return choose_ei(u.gp.mean_, self._std(u), best, chat, avail)
        if self._chooser == "capped_ei":
            if u.gp.n_obs == 0 and not u.pending:  # her first pick: the likeliest near-best model per second
                p = u.gp.near_best_probability(near_best_margin(u.gp.alpha))
                k = first_pick(p, u.cost if self.cost_aware else 1.0, avail, n_draws=self.prior.N_DRAWS,
                               tie_break=u.rate)
                if k is not None:
                    return k
            rate = np.where(avail, u.rate, -np.inf)
            k = int(np.argmax(rate))
            if not rate[k] > 0.0:  # nothing left can beat her best (or EI underflowed): best mean per second
                score = u.gp.mean_ * self._scale(u)
                k = int(np.argmax(np.where(avail, score, -np.inf)))
            return k
        ranks = self._ranks[u.models]
        if u.own:  # her own models come after the catalogue's, in the order she added them
            ranks = np.concatenate([ranks, ranks.max(initial=0) + 1 + np.arange(u.own)])
        return int(np.argmin(np.where(avail, ranks, np.inf)))

    def _ucb_of(self, u: _User, k: int) -> float:
        std = self._std(u)
        scale = self._scale(u)
        sc = scale[k] if isinstance(scale, np.ndarray) else scale
        return float(u.gp.mean_[k] + math.sqrt(self._beta(u) * sc) * std[k])

    # ------------------------------------------------------------------ users
    def _user_gp(self, prior: ModelPrior, models: np.ndarray, own: int) -> UserGP:
        """A user's GP over her catalogue models (``models``) and ``own`` models of her own
        (``ModelPrior.with_own_models``)."""
        if own:
            k = prior.n_models
            return UserGP(prior.with_own_models(own), np.concatenate([models, k + np.arange(own)]))
        full = models.size == prior.n_models and np.array_equal(models, np.arange(models.size))
        return UserGP(prior, None if full else models)

    def add_user(self, user: str, *, models: Sequence[str] | None = None,
                 costs: Mapping[str, float] | Sequence[float] | None = None, weight: float = 1.0,
                 own: Sequence[str] = (), succeeds: str | None = None) -> None:
        """Register a user (a tenant) and her candidate models.

        Args:
            user: a unique name.
            models: her candidate models (catalogue names); default: all.
            costs: cost estimate per candidate (a mapping by name, or a sequence
                aligned with ``models``); missing ones default to the
                catalogue's ``costs``.
            weight: her weight in the objective (> 0).
            own: names of models of her own, outside the catalogue (Seneca
                §II and Cerebro §4.1 take the user's own model): arms of
                hers only, with the prior of ``ModelPrior.with_own_models``.
                Their costs come from a ``costs`` mapping (default 1).
            succeeds: a registered user whose place she takes (the tenant of
                her task's previous data version, which the caller removes
                next; beyond the paper, whose users never change data). She
                keeps its place in the user picker's turns
                (``UserPicker.on_successor``); if it was served, she is no
                newcomer for the first-arrivals rule
                (``PickState.first_arrivals``); and its results (the latest
                per model) are evidence for her GP and her best so far, so
                that what she can still gain is measured against the models
                she has, not from nothing. Her models are all untried on
                her data; one she had gains her nothing but a new draw of
                its noise, so it counts no gain (the default rule's
                ``gain_rate``) and trains again on her data when her turn
                finds nothing better.

        Raises:
            ValueError: the name is taken, a cost is not > 0, the weight is not > 0.
            KeyError: an unknown model name, or an unknown ``succeeds``.
        """
        user = str(user)
        if user in self._users:
            raise ValueError(f"user: {user!r} is already registered")
        predecessor = None if succeeds is None else self._get(str(succeeds))
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError(f"weight: found {weight!r}, expected a finite number > 0")
        if models is None:
            names = list(self.model_names)
        else:
            names = [str(m) for m in models]
            if not names:
                raise ValueError("models: expected at least one candidate model")
            if len(set(names)) != len(names):
                raise ValueError("models: duplicate names")
        idx = np.asarray([self._model_index_of(m) for m in names], dtype=np.intp)
        own_names = self._own_names(own, names)
        if costs is None:
            cost = self._default_cost[idx].copy()
        elif isinstance(costs, Mapping):
            cost = self._cost_vector({m: c for m, c in costs.items() if m not in own_names}, names,
                                     "costs of " + user)
        else:
            cost = self._cost_vector(list(costs)[:len(names)], names, "costs of " + user)
        if own_names:
            cost = np.concatenate([cost, self._own_costs(costs, own_names, user, offset=len(names))])
        slot = len(self._slots)
        self._grow(slot + 1)
        all_names = names + own_names
        u = _User(name=user, slot=slot, models=idx, names=all_names, index={m: i for i, m in enumerate(all_names)},
                  cost=cost, weight=float(weight), gp=self._user_gp(self.prior, idx, len(own_names)),
                  tried=np.zeros(len(all_names), bool), own=len(own_names),
                  served_before=predecessor is not None and (
                      predecessor.served_before or bool(predecessor.obs) or bool(predecessor.pending)))
        if predecessor is not None:
            self._inherit(u, {**predecessor.inherited,
                              **{predecessor.names[k]: y for k, y, _b, _c in predecessor.obs}})
        self._users[user] = u
        self._slots.append(u)
        self._w[slot] = u.weight
        if u.best_y is not None:  # (her inherited best)
            self._total_best += u.weight * u.best_y
        self._track_cost(slot, float(cost.max()))
        # beta_t has n (the number of users) in its log: everyone's scores move
        self._dirty.update(x.slot for x in self._active_users())
        self._refresh(u)  # the others stay dirty until the next decision (lazy, O(1) here)
        if predecessor is None:
            self.picker.on_new_slot(self._state(), slot)
        else:
            self.picker.on_successor(self._state(), slot, predecessor.slot)
        self.picker.on_membership_change()

    def inherit(self, user: str, model: str, quality: float) -> None:
        """Evidence from an earlier version of her data (a result that came
        in after her task's new version replaced its tenant, or one in the
        store from before): her GP observes it and her best so far counts
        it, but it tries none of her models and is not a result of hers
        (see ``add_user``'s ``succeeds``). The same evidence twice is taken
        once. Raises KeyError for an unknown user or model."""
        u = self._get(user)
        if str(model) not in u.index:
            raise KeyError(f"model: {model!r} is not a candidate of user {u.name!r}")
        if u.inherited.get(str(model)) == float(quality):
            return
        before = u.best_y
        self._take_evidence(u, str(model), float(quality))
        if u.best_y is not None and u.best_y != before:
            self._total_best += u.weight * (u.best_y - (before if before is not None else 0.0))
        self._dirty.add(u.slot)

    def _inherit(self, u: _User, inherited: Mapping[str, float]) -> None:
        """Take a predecessor's results (by model name) as ``inherit`` does,
        on a user being registered. Models she lacks are skipped."""
        for m, y in inherited.items():
            if m in u.index:
                self._take_evidence(u, m, float(y))

    def _take_evidence(self, u: _User, model: str, y: float) -> None:
        u.inherited[model] = y
        if u.refresh is None:
            u.refresh = np.zeros(len(u.names), bool)
        k = u.index[model]
        u.refresh[k] = True
        u.gp.observe(k, y)
        if u.best_y is None or y > u.best_y:
            u.best_y, u.best_k = y, k

    def _own_names(self, own: Sequence[str], taken: Sequence[str]) -> list[str]:
        names = [str(m) for m in own]
        clash = sorted(set(names) & (set(self._model_index) | set(taken)))
        if clash:
            raise ValueError(f"own: found {clash[:5]}, expected names that are neither catalogue models nor hers already")
        if len(set(names)) != len(names):
            raise ValueError("own: duplicate names")
        return names

    def _own_costs(self, costs: Any, names: Sequence[str], user: str, offset: int) -> np.ndarray:
        if costs is None:
            out = np.ones(len(names))
        elif isinstance(costs, Mapping):
            out = np.asarray([float(costs.get(m, 1.0)) for m in names])
        else:
            out = np.asarray(list(costs)[offset:offset + len(names)], dtype=float)
            if out.shape != (len(names),):
                raise ValueError(f"costs of {user}: found {out.size} costs of own models, expected {len(names)}")
        if not np.all(np.isfinite(out)) or np.any(out <= 0):
            raise ValueError(f"costs of {user}: costs must be finite and > 0")
        return out

    def add_models(self, user: str, own: Sequence[str], costs: Mapping[str, float] | None = None) -> None:
        """Give a registered user more models of her own (see ``add_user``'s
        ``own``), e.g. one she added while her task trains. Her observations
        are replayed on the grown GP, as ``set_prior`` does; running picks
        stay pending.

        Raises:
            KeyError: an unknown user.
            ValueError: a name she or the catalogue has, a cost that is not > 0.
        """
        u = self._get(user)
        names = self._own_names(own, u.names)
        if not names:
            return
        cost = self._own_costs(costs, names, u.name, offset=0)
        u.names = u.names + names
        u.index = {m: i for i, m in enumerate(u.names)}
        u.cost = np.concatenate([u.cost, cost])
        u.tried = np.concatenate([u.tried, np.zeros(len(names), bool)])
        if u.refresh is not None:
            u.refresh = np.concatenate([u.refresh, np.zeros(len(names), bool)])
        u.own += len(names)
        self._rebuild_gp(u)
        self._track_cost(u.slot, float(u.cost.max()))
        self._dirty.update(x.slot for x in self._active_users())  # K in beta_t grew, c* may have moved

    def _rebuild_gp(self, u: _User) -> None:
        """Her GP on the current prior, with her observations replayed in order."""
        u.gp = self._user_gp(self.prior, u.models, u.own)
        u.refits = 0
        for m, y in u.inherited.items():
            u.gp.observe(u.index[m], y)
        for k, y, _b, _c in u.obs:
            u.gp.observe(k, y)
            self._maybe_refit(u)
        self._dirty.add(u.slot)

    def remove_user(self, user: str) -> list[tuple[str, str]]:
        """Unregister a user. Returns her picks that were still pending (the
        caller should cancel those jobs). Raises KeyError for an unknown user."""
        u = self._get(user)
        dropped = [(u.name, u.names[k]) for k in u.pending]
        del self._users[u.name]
        self._slots[u.slot] = None
        s = u.slot
        self._elig[s] = False; self._busy[s] = False; self._nobs[s] = 0; self._served[s] = False
        self._gap[s] = -math.inf; self._sbar[s] = -math.inf
        if u.best_y is not None:
            self._total_best -= u.weight * u.best_y
        self._track_cost(s, None)
        self._dirty.update(x.slot for x in self._active_users())
        self.picker.on_membership_change()
        return dropped

    def set_costs(self, user: str, costs: Mapping[str, float]) -> None:
        """Replace cost estimates of a user's candidates (the ``c_k`` of
        cost-aware GP-UCB, pvldb §4.1), e.g. once the devices they train on
        were measured; candidates not named keep theirs.

        Raises:
            KeyError: an unknown user, or a model that is not her candidate.
            ValueError: a cost that is not finite and > 0.
        """
        u = self._get(user)
        unknown = set(costs) - set(u.names)
        if unknown:
            raise KeyError(f"costs of {user}: unknown models {sorted(unknown)[:5]}")
        cost = u.cost.copy()
        new = self._cost_vector(costs, [m for m in u.names if m in costs], f"costs of {user}")
        for m, c in zip([m for m in u.names if m in costs], new):
            cost[u.index[m]] = c
        u.cost = cost
        self._track_cost(u.slot, float(cost.max()))
        self._dirty.add(u.slot)

    def set_weight(self, user: str, weight: float) -> None:
        """Change a user's weight in the objective."""
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError(f"weight: found {weight!r}, expected a finite number > 0")
        u = self._get(user)
        if u.best_y is not None:
            self._total_best += (weight - u.weight) * u.best_y
        u.weight = float(weight)
        self._dirty.add(u.slot)

    def set_prior(self, prior: ModelPrior) -> None:
        """Replace the GP prior (arXiv App. A: the kernel from other users'
        quality vectors) of a running selector, e.g. refitted on the tasks
        that have finished since.

        Each user's GP is rebuilt on the new prior and her observations are
        replayed in their order (with the kernel refits of
        ``refit_every_doubling``, which is decided again from the new prior
        when it was left to the default); running picks stay pending and are
        hallucinated on the new posterior. Best-so-far, Algorithm 2's
        empirical bound and the picker's state are kept: they are facts about
        the runs, not beliefs.

        Raises:
            ValueError: the prior does not cover the catalogue.
        """
        if not isinstance(prior, ModelPrior):
            raise TypeError(f"prior: found {type(prior).__name__}, expected a fitted ModelPrior")
        if prior.n_models != len(self.model_names):
            raise ValueError(f"prior: covers {prior.n_models} models, expected {len(self.model_names)} "
                             "(one per catalogue model)")
        self.prior = prior
        if self._refit_auto:
            self.refit_every_doubling = prior.source_ != "history"
        if self.policy == "most_cited":
            self._ranks = fixed_order_ranks(self.policy, prior.n_models, prior.mean_)
        for u in self._active_users():
            self._rebuild_gp(u)

    def _get(self, user: str) -> _User:
        try:
            return self._users[str(user)]
        except KeyError:
            raise KeyError(f"user: unknown user {user!r}") from None

    @property
    def users(self) -> list[str]:
        return list(self._users)

    # ------------------------------------------------------------------ ask / tell
    def next_picks(self, n_workers: int = 1) -> list[Pick]:
        """Up to ``n_workers`` picks (user, model, and why) to train next.

        Each returned pick is *pending* until :meth:`observe` or :meth:`cancel`
        is called for its (user, model). Pending pairs are not returned again while pending
        (with ``arms="all"`` a finished pair can be returned again: the
        paper's GP-UCB re-plays an arm whose UCB is the highest), and with
        ``hallucinate`` they lower their user's variance (GP-BUCB), so the
        picks of one call are diverse. Fewer pairs come back when fewer are
        left to try. Each pick carries its own explanation;
        :attr:`last_decision` keeps the last one's, as a dict.
        """
        if not isinstance(n_workers, (int, np.integer)) or n_workers < 0:
            raise ValueError(f"n_workers: found {n_workers!r}, expected an integer >= 0")
        picks: list[Pick] = []
        for _ in range(int(n_workers)):
            self._refresh_dirty()
            state = self._state()
            slot = self.picker.pick_user(state)
            if slot is None:
                break
            u = self._slots[slot]
            k = self._choose_model(u)
            if k is None:  # should not happen: eligible users have an available model
                self._elig[slot] = False
                continue
            B = float(u.scores[k]) if u.scores is not None else self._ucb_of(u, k)
            u.pending[k] = B
            pick = self._explain(state, u, k)
            self.last_decision = pick.explain()
            self.picker.on_pick(state, slot)
            self._dirty.add(slot)
            self.n_decisions += 1
            picks.append(pick)
        return picks

    def observe(self, user: str, model: str, quality: float, cost: float | None = None) -> None:
        """Report the quality (e.g. best validation accuracy) of a finished pick.

        A result for a pair that was not picked (e.g. trained by hand) is
        accepted too. A second result for the same pair is treated as a noisy
        re-measurement. ``cost`` (measured seconds) is recorded with it.

        Raises:
            KeyError: unknown user, or a model that is not among her candidates.
            ValueError: a quality that is not a finite number.
        """
        u = self._get(user)
        try:
            k = u.index[str(model)]
        except KeyError:
            raise KeyError(f"model: {model!r} is not a candidate of user {u.name!r}") from None
        try:
            y = float(quality)
        except (TypeError, ValueError):
            raise ValueError(f"quality: found {quality!r}, expected a finite number") from None
        if not math.isfinite(y):
            raise ValueError(f"quality: found {quality!r}, expected a finite number")
        if cost is not None and not (math.isfinite(float(cost)) and float(cost) >= 0):
            raise ValueError(f"cost: found {cost!r}, expected a finite number >= 0")
        B = u.pending.pop(k, None)
        if B is None:
            B = self._ucb_of(u, k)
        self._apply(u, k, y, B, cost)

    def _apply(self, u: _User, k: int, y: float, B: float, cost: float | None) -> None:
        u.gp.observe(k, y)
        u.tried[k] = True
        u.obs.append((k, y, B, None if cost is None else float(cost)))
        # Algorithm 2 line 6: e = min(B_{t-1}(a), previous e); sigma_bar = e - y
        u.e_bar = min(u.e_bar, B)
        u.sigma_bar = u.e_bar - y
        if u.best_y is None or y > u.best_y:
            self._total_best += u.weight * (y - (u.best_y if u.best_y is not None else 0.0))
            u.best_y, u.best_k = y, k
        self._maybe_refit(u)
        self._dirty.add(u.slot)

    def _maybe_refit(self, u: _User) -> None:
        """With ``refit_every_doubling``: refit her kernel at 3, 6, 12, ... observations."""
        n = u.gp.n_obs
        if self.refit_every_doubling and n >= 3 and (n / 3) == 2 ** int(math.log2(n / 3)):
            u.gp.refit(random_state=0)  # deterministic: no draw from the picking rng
            u.refits += 1

    def cancel(self, user: str, model: str) -> None:
        """Forget a pending pick that will not report (failed or cancelled job);
        the pair becomes available again."""
        u = self._get(user)
        k = u.index.get(str(model))
        if k is None or k not in u.pending:
            raise KeyError(f"pick: ({user!r}, {model!r}) is not pending")
        del u.pending[k]
        self._dirty.add(u.slot)

    def hold(self, user: str, model: str) -> None:
        """Make a pair pending as if it had been picked: a job of it is
        queued or running that this selector did not hand out (one found in
        the store after a restart, or one still running when its user came
        back). It is not picked again until :meth:`observe` or :meth:`cancel`."""
        u = self._get(user)
        k = u.index.get(str(model))
        if k is None:
            raise KeyError(f"model: {model!r} is not a candidate of user {u.name!r}")
        if k not in u.pending:
            u.pending[k] = float(u.scores[k]) if u.scores is not None else self._ucb_of(u, k)
            self._dirty.add(u.slot)

    def pending(self) -> list[tuple[str, str]]:
        """The picks handed out and not yet observed or cancelled."""
        return [(u.name, u.names[k]) for u in self._active_users() for k in u.pending]

    def best(self, user: str) -> tuple[str, float] | None:
        """The user's best (model, quality) so far, or None."""
        u = self._get(user)
        return None if u.best_k is None else (u.names[u.best_k], float(u.best_y))

    def cost(self, user: str, model: str) -> float:
        """The cost estimate ``c_k`` (seconds) the user's candidate is ranked with.

        Raises:
            KeyError: an unknown user, or a model that is not her candidate.
        """
        u = self._get(user)
        if model not in u.index:
            raise KeyError(f"model: {model!r} is not a candidate of user {user!r}")
        return float(u.cost[u.index[model]])

    def posterior(self, user: str) -> dict[str, tuple[float, float]]:
        """model -> (posterior mean, std) for one user."""
        u = self._get(user)
        std = u.gp.std_
        return {m: (float(u.gp.mean_[i]), float(std[i])) for i, m in enumerate(u.names)}

    def stats(self, user: str) -> dict[str, Any]:
        """What the user pickers see of one user: observations, running picks,
        best so far, Algorithm 2's empirical bound ``e_bar`` and gap
        ``sigma_bar``, the pick-rule ``gap`` (max UCB - best), ``beta``, and the
        default rule's ``gain_per_second`` (her best ``r(k)``, weight included;
        None under rules that do not compute it) and ``variance_scale`` ``s``."""
        u = self._get(user)
        self._refresh_dirty()
        if u.scores is None:
            self._force_scores = True
            try:
                self._refresh(u)
            finally:
                self._force_scores = False
        avail = u.avail if u.avail is not None else (np.ones(u.tried.size, bool) if self._replay else ~u.tried)
        if u.scores is not None and avail.any():
            gap = float(np.max(u.scores[avail])) - (u.best_y if u.best_y is not None else 0.0)
        else:
            gap = None
        rate = None
        if u.rate is not None and avail.any():
            rate = float(np.max(u.rate[avail]))
        return {"n_obs": len(u.obs), "pending": [u.names[k] for k in u.pending], "best": self.best(u.name),
                "e_bar": u.e_bar, "sigma_bar": u.sigma_bar, "gap": gap, "beta": self._beta(u),
                "gain_per_second": rate, "variance_scale": variance_scale(u.gp.innovations_),
                "weight": u.weight, "eligible": bool(avail.any())}

    def _explain(self, state: PickState, u: _User, k: int) -> Pick:
        """The pick of model ``k`` for ``u``, with why she was served: the
        phase that chose her and, in GREEDY's phase, the candidate set ``V_t``
        of Algorithm 2 line 7 with each candidate's gap (what line 8 maximises)."""
        greedy = getattr(self.picker, "greedy", self.picker)
        V = getattr(greedy, "last_candidates_", None)
        mode = self.mode
        if isinstance(greedy, Greedy) and mode == "greedy":
            phase = "initial" if V is None else "greedy"
        else:
            phase = getattr(self.picker, "last_phase_", mode)
        candidates = None
        if phase in ("greedy", "gain_rate") and V is not None:
            candidates = tuple((self._slots[i].name, float(state.gap[i])) for i in sorted(V))
        return Pick(user=u.name, model=u.names[k], phase=phase, policy=self.picker.name,
                    candidates=candidates, decision=self.n_decisions)

    @property
    def mode(self) -> str:
        """HYBRID's current mode ("greedy" / "round_robin"), else the picker name."""
        return getattr(self.picker, "mode", self.picker.name)

    # ------------------------------------------------------------------ state
    def to_dict(self) -> dict[str, Any]:
        """The whole state as plain lists/dicts/numbers (JSON-serialisable)."""
        p = self.prior
        prior = {"mean": p.mean_.tolist(), "cov": p.cov_.tolist(), "alpha": p.alpha, "source": p.source_,
                 "features": p.features_.tolist() if p.features_ is not None else None,
                 "theta": p.kernel_.theta.tolist() if p.kernel_ is not None else None}
        users = []
        for u in self._slots:
            if u is None:
                users.append(None)
                continue
            # "models": every local name (the indices of "obs" and "pending"), her own ones last
            users.append({"name": u.name, "models": u.names, "own": u.own, "cost": u.cost.tolist(), "weight": u.weight,
                          "obs": [list(o) for o in u.obs], "served_before": u.served_before,
                          "inherited": dict(u.inherited),
                          "pending": [[int(k), float(b)] for k, b in u.pending.items()]})
        return {
            "version": 1,
            "models": list(self.model_names),
            "config": {"policy": self.policy, "cost_aware": self.cost_aware, "delta": self.delta,
                       "beta_schedule": self.beta_schedule, "beta_scale": self.beta_scale, "s": self.s, "hallucinate": self.hallucinate, "arms": self.arms,
                       "cost_norm": self.cost_norm,
                       "weighted": self.weighted, "rearm_on_change": self.rearm_on_change,
                       "model_order": self._model_order,
                       "refit_every_doubling": None if self._refit_auto else self.refit_every_doubling,
                       "random_state": self.random_state},
            "default_cost": self._default_cost.tolist(),
            "prior": prior,
            "users": users,
            "picker": self.picker.get_state(),
            "rng": self._rng.bit_generator.state,
            "n_decisions": self.n_decisions,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Selector":
        """Rebuild a selector from :meth:`to_dict` output (restart recovery)."""
        if d.get("version") != 1:
            raise ValueError(f"version: found {d.get('version')!r}, expected 1")
        pd_ = d["prior"]
        prior = ModelPrior.from_arrays(pd_["mean"], np.asarray(pd_["cov"]), alpha=pd_["alpha"])
        prior.source_ = pd_["source"]
        if pd_.get("features") is not None:
            prior.features_ = np.asarray(pd_["features"], dtype=float)
        if pd_.get("theta") is not None:
            kern = default_kernel(0.01, 0.01, 1.0, 0.001)
            try:
                prior.kernel_ = kern.clone_with_theta(np.asarray(pd_["theta"]))
            except Exception:  # a custom kernel: refits are unavailable after restore
                prior.kernel_ = None
        cfg = dict(d["config"])
        cfg.setdefault("arms", "untried")  # states saved before ``arms`` existed never re-trained a model
        sel = cls(d["models"], prior=prior, costs=d["default_cost"], **cfg)
        for ud in d["users"]:
            if ud is None:  # keep slot numbering (round-robin order) intact
                sel._slots.append(None)
                sel._grow(len(sel._slots))
                continue
            n_own = int(ud.get("own", 0))
            names = list(ud["models"])
            sel.add_user(ud["name"], models=names[:len(names) - n_own], costs=ud["cost"], weight=ud["weight"],
                         own=names[len(names) - n_own:])
            u = sel._users[ud["name"]]
            u.served_before = bool(ud.get("served_before", False))  # (states saved before it: False)
            sel._inherit(u, ud.get("inherited", {}))
            if u.best_y is not None:
                sel._total_best += u.weight * u.best_y
            for k, y, B, c in ud["obs"]:
                sel._apply(u, int(k), float(y), float(B), c)
            for k, B in ud["pending"]:
                u.pending[int(k)] = float(B)
            sel._dirty.add(u.slot)
        for s, u in enumerate(sel._slots):
            if u is None:
                sel._elig[s] = False; sel._gap[s] = -math.inf; sel._sbar[s] = -math.inf
        sel.picker.set_state(d["picker"])
        sel._rng.bit_generator.state = d["rng"]
        sel.n_decisions = d["n_decisions"]
        sel._refresh_dirty()
        return sel
