"""Decision latency per pick (ask + tell) stays far below a from-scratch refit."""

import time

import numpy as np
import pytest

from ease_jupyter.selection import ModelPrior, Selector, make_synthetic


def _per_pick_ms(n_users, n_models=200, picks=300):
    q, c = make_synthetic(n_models=n_models, sigma_m=0.5, alpha=0.3, users_per_group=(n_users + 60) // 2,
                          random_state=0)
    hist, act, cost = q[:60], q[60:60 + n_users], c[60:60 + n_users]
    prior = ModelPrior(n_restarts_optimizer=0, random_state=0).fit(hist)
    sel = Selector([str(j) for j in range(n_models)], prior=prior, random_state=0)
    for i in range(n_users):
        sel.add_user(str(i), costs=cost[i])
    for _ in range(2 * n_users):  # warm up: everyone observed at least once
        (u, m), = sel.next_picks(1)
        sel.observe(u, m, act[int(u), int(m)])
    out = []
    for _ in range(picks):
        t0 = time.perf_counter()
        (u, m), = sel.next_picks(1)
        sel.observe(u, m, act[int(u), int(m)])
        out.append((time.perf_counter() - t0) * 1e3)
    return np.percentile(out, 50)


@pytest.mark.slow
def test_decision_latency_100_users_200_models():
    assert _per_pick_ms(100) < 5.0
