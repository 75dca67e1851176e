"""Multi-tenant, cost-aware model selection (ease.ml), its baselines and a simulator.

Pure numpy / scipy / scikit-learn: no I/O, no service, no clock.

* ``gp``: :class:`ModelPrior` (the kernel from other users' quality vectors,
  arXiv App. A; descriptor fallback) and :class:`UserGP` (rank-one updates).
* ``ucb``: ``beta_t`` and the cost-aware GP-UCB score (Algorithm 1, §4.1);
  :class:`GPUCB` is the single-tenant algorithm.
* ``pickers``: ROUNDROBIN, RANDOM, GREEDY (Algorithm 2) and HYBRID (§5.4);
  beyond the paper, GAIN-RATE (the default rule's user picker) and FCFS.
* ``capped_ei``: the default rule's acquisition, capped and variance-calibrated
  expected improvement per second (beyond the paper).
* ``baselines``: SPEARMINT* (EI per second), MOSTCITED/MOSTRECENT-style
  fixed orders, ORACLE; the policy names.
* ``parallel``: several picks for W workers (GP-BUCB hallucination).
* ``selector``: :class:`Selector`, the facade the service drives; its default
  policy is :data:`DEFAULT_POLICY`.
* ``simulator``: the paper's protocol and metrics; ``synthetic``: App. B's generator.
"""

from .baselines import DEFAULT_POLICY, POLICIES, oracle_schedule, policy_spec
from .capped_ei import ACCURACY_CAP, capped_expected_improvement, gain_per_second, variance_scale
from .gp import ModelPrior, UserGP, impute_history
from .pickers import (EIGreedy, FirstComeFirstServed, GainRate, Greedy, Hybrid, PickState, RandomPicker, RegretGreedy,
                      RoundRobin, UserPicker, make_picker)
from .selector import Pick, Selector
from .simulator import LEVELS, Episode, run_episode, simulate, summarise, time_to_loss, validate_matrices
from .single import GPUCB
from .synthetic import SYN_FIGURE8, make_synthetic, syn_dataset
from .ucb import beta_t, cost_scale, expected_improvement, ucb_scores

__all__ = [
    "POLICIES", "DEFAULT_POLICY", "policy_spec", "oracle_schedule",
    "ACCURACY_CAP", "capped_expected_improvement", "gain_per_second", "variance_scale",
    "ModelPrior", "UserGP", "impute_history",
    "PickState", "UserPicker", "RoundRobin", "RandomPicker", "Greedy", "Hybrid", "EIGreedy", "RegretGreedy", "GainRate",
    "FirstComeFirstServed", "make_picker",
    "Selector", "Pick", "GPUCB",
    "LEVELS", "Episode", "run_episode", "simulate", "summarise", "time_to_loss", "validate_matrices",
    "SYN_FIGURE8", "make_synthetic", "syn_dataset",
    "beta_t", "cost_scale", "expected_improvement", "ucb_scores",
]
