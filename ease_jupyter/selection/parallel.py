"""Several picks at once for W free workers (beyond ease.ml, whose §5.5 names
"the whole GPU pool treated as a single device" as a limitation).

When W workers are free, :meth:`Selector.next_picks(W) <ease_jupyter.selection.Selector.next_picks>`
makes W picks one after the other. Each pick is recorded as *pending* before
the next one is made, and a pending pick changes what the next picks see:

* the pair (user, model) is no longer available, so no pair is picked twice;
* GP-BUCB-style hallucination (Desautels, Krause & Burdick, JMLR 2014): the
  pending model is conditioned on with ``y = posterior mean``. The mean does
  not move, but the variance does, for the pending model and every model
  correlated with it. That user's upper confidence bounds, and hence GREEDY's
  gap for her, shrink, so concurrent picks spread over users and over
  dissimilar models instead of piling onto one promising corner;
* ``t_i`` (the argument of ``beta_t``) counts running picks too, as in GP-BUCB.

When the real result arrives it replaces the hallucination: the selector keeps
only real observations in each :class:`~ease_jupyter.selection.UserGP` and
recomputes the hallucinated variance from the current pending set, so nothing
has to be "un-hallucinated". ``hallucinate=False`` gives the plain version
(only the exclusion of pending pairs), which the benchmark measures against.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .gp import UserGP

__all__ = ["pending_aware_std"]


def pending_aware_std(gp: UserGP, pending: Sequence[int], hallucinate: bool = True) -> np.ndarray:
    """Posterior standard deviation of ``gp`` with ``pending`` models hallucinated."""
    if not hallucinate or len(pending) == 0:
        return gp.std_
    return np.sqrt(gp.hallucinated_var(list(pending)))
