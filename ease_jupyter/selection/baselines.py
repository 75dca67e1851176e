"""Model choosers and the baselines of ease.ml §6.

A *policy* is a user picker (``pickers.py``) plus a model chooser: which of the
chosen user's candidates to train next. The choosers here are

* ``"ucb"`` - cost-aware GP-UCB (Algorithm 1 with the §4.1 twist), ease.ml's;
* ``"ei"`` - GP-EI per second (expected improvement divided by the cost),
  the per-user rule of SPEARMINT* (pvldb §6.2: "Each user runs her own
  SPEARMINT instance and SPEARMINT* schedules users in a round-robin
  fashion ... the EI Per Second criterion");
* ``"capped_ei"`` - the default rule's chooser (beyond the paper): capped,
  variance-calibrated EI per second over the untried models (``capped_ei.py``);
* ``"fixed"`` - a fixed model order, the MOSTCITED / MOSTRECENT heuristics of
  §6.2 ("the strategies that most of our users were using before ease.ml").

and :func:`oracle_schedule` is pvldb §6.2's ORACLE (the ``oracle_best`` policy).

Policy names (``POLICIES``) accepted by :class:`~ease_jupyter.selection.Selector`
and ``easeml simulate``; the oracles know every quality and cost, so only
the simulator runs them (``simulator.ORACLES``, docs/selection.md):

==============  ===========  ===========================================================
name            users        models
==============  ===========  ===========================================================
hybrid          HYBRID       cost-aware GP-UCB (ease.ml's default)
greedy          GREEDY       cost-aware GP-UCB
round_robin     ROUNDROBIN   cost-aware GP-UCB
random          RANDOM       cost-aware GP-UCB
spearmint       ROUNDROBIN   GP-EI per second (SPEARMINT*)
most_cited      ROUNDROBIN   fixed order: decreasing mean quality over the history users
                             (a popularity proxy: we have no citation counts)
most_recent     ROUNDROBIN   fixed order: the catalogue (CSV column) order reversed, i.e.
                             the last column is taken as the newest model
fixed_order     ROUNDROBIN   fixed order given by the caller (``model_order=``)
ei_greedy       EI-GREEDY    GP-EI per second; the user with the largest EI per second
                             (beyond the paper, see ``pickers.EIGreedy``)
hybrid_ei       HYBRID       GP-EI per second (beyond the paper: HYBRID's user picker, unchanged,
                             with SPEARMINT*'s model chooser; GREEDY's gap and line-6 bound stay UCB)
regret_ei       REGRET       GP-EI per second; after everyone is served once, the user with the
                             largest posterior expected remaining loss (beyond the paper, a
                             measured negative result: see ``pickers.RegretGreedy``)
gain_rate       GAIN-RATE    capped, calibrated EI per second (the default rule, beyond the paper:
                             see ``pickers.GainRate`` and ``capped_ei.py``)
ei_rate_rr      ROUNDROBIN   capped, calibrated EI per second: the strong single-tenant baseline
                             (each user runs the default rule's chooser on her own)
fifo            FCFS         fixed catalogue order; one user's whole queue before the next's
default         GAIN-RATE    whatever the service uses by default (now ``gain_rate``)
oracle          (oracle)     a true lower bound on the time to reach each loss level: the
                             cheapest set of runs that reaches it, solved exactly
                             (``oracle.py``, ``scipy.optimize.milp``; beyond the paper)
oracle_best     (oracle)     pvldb §6.2's ORACLE: each user's single best model, in
                             decreasing loss drop per unit cost (Smith's rule); not a bound
oracle_greedy   (oracle)     knows every quality and cost; each step trains the pair with
                             the largest drop of the average loss per unit cost (beyond
                             the paper: a tighter reference than ``oracle_best`` when a cheap
                             model is almost as good as a user's best); not a bound
==============  ===========  ===========================================================

In cost-oblivious mode every cost is 1 for the policies (the paper's lesion
study sets ``c_ij = 1``).
"""

from __future__ import annotations

import numpy as np

from .ucb import expected_improvement

__all__ = ["POLICIES", "DEFAULT_POLICY", "policy_spec", "oracle_schedule", "fixed_order_ranks", "choose_ei"]

#: The policy name the service and :class:`~ease_jupyter.selection.Selector` use unless told otherwise.
DEFAULT_POLICY = "default"

#: name -> (user picker, model chooser)
POLICIES: dict[str, tuple[str, str]] = {
    "hybrid": ("hybrid", "ucb"),
    "greedy": ("greedy", "ucb"),
    "round_robin": ("round_robin", "ucb"),
    "random": ("random", "ucb"),
    "spearmint": ("round_robin", "ei"),
    "most_cited": ("round_robin", "fixed"),
    "most_recent": ("round_robin", "fixed"),
    "fixed_order": ("round_robin", "fixed"),
    "ei_greedy": ("ei_greedy", "ei"),
    "oracle": ("oracle", "oracle"),
    "oracle_greedy": ("oracle_greedy", "oracle"),
    # beyond the paper (appended last: a policy's index seeds its random stream)
    "hybrid_ei": ("hybrid", "ei"),
    "regret_ei": ("regret_greedy", "ei"),
    "gain_rate": ("gain_rate", "capped_ei"),
    "ei_rate_rr": ("round_robin", "capped_ei"),
    "fifo": ("fifo", "fixed"),
    DEFAULT_POLICY: ("gain_rate", "capped_ei"),  # an alias: what the service runs unless told otherwise
}


def policy_spec(name: str) -> tuple[str, str]:
    """``(user picker, model chooser)`` of a policy name; raises ValueError."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"policy: found {name!r}, expected one of {', '.join(POLICIES)}") from None


def fixed_order_ranks(policy: str, n_models: int, prior_mean: np.ndarray | None = None,
                      model_order: list[int] | None = None) -> np.ndarray:
    """Rank (0 = first tried) of each catalogue model for a fixed-order policy."""
    if policy == "most_cited":
        if prior_mean is None:
            raise ValueError("most_cited needs the prior mean (history) to order models")
        order = np.argsort(-np.asarray(prior_mean), kind="stable")
    elif policy == "most_recent":
        order = np.arange(n_models)[::-1]
    else:
        if model_order is None:
            order = np.arange(n_models)
        else:
            seen = list(dict.fromkeys(int(m) for m in model_order))
            rest = [m for m in range(n_models) if m not in set(seen)]
            order = np.asarray(seen + rest, dtype=int)
    ranks = np.empty(n_models, dtype=float)
    ranks[order] = np.arange(n_models)
    return ranks


def choose_ei(mean: np.ndarray, std: np.ndarray, best: float, chat: np.ndarray | None,
              avail: np.ndarray) -> int | None:
    """SPEARMINT*'s model: argmax of EI per (normalised) cost among ``avail``."""
    if not avail.any():
        return None
    ei = expected_improvement(mean, std, best)
    if chat is not None:
        ei = ei / chat
    ei = np.where(avail, ei, -np.inf)
    k = int(np.argmax(ei))
    if not ei[k] > 0.0:  # EI underflowed everywhere: fall back to the best mean per cost
        score = mean if chat is None else mean / chat
        k = int(np.argmax(np.where(avail, score, -np.inf)))
    return k


def oracle_schedule(quality: np.ndarray, cost: np.ndarray | None = None,
                    weights: np.ndarray | None = None) -> list[tuple[int, int]]:
    """ORACLE: train each user's best model, in the order that lowers the
    (weighted) average loss fastest per unit of cost.

    A user with no model has loss ``a*_i`` (her best accuracy; pvldb §5.1's
    FCFS example charges an unserved user her full regret). Training her best
    model drops that to 0 at cost ``c_i``. Serving jobs in decreasing
    ``w_i a*_i / c_i`` (Smith's rule) minimises the area under the loss curve
    among all orders of these jobs. Among several best models the cheapest
    is taken.

    Args:
        quality: users x models, NaN = not available.
        cost: users x models (None: every run costs 1).
        weights: per-user weights (None: 1).

    Returns:
        ``[(user, model), ...]`` in the order to train.
    """
    q = np.asarray(quality, dtype=float)
    n, k = q.shape
    c = np.ones_like(q) if cost is None else np.asarray(cost, dtype=float)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    jobs = []
    for i in range(n):
        row = q[i]
        ok = ~np.isnan(row)
        if not ok.any():
            continue
        best = np.nanmax(row)
        tied = np.flatnonzero(ok & (row >= best - 1e-12))
        j = int(tied[np.argmin(c[i, tied])])
        jobs.append((-(w[i] * best) / max(c[i, j], 1e-300), i, j))
    jobs.sort()
    return [(i, j) for _, i, j in jobs]
