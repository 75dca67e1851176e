"""The App. B generator: SYN(sigma_M, alpha) of Figure 8."""

import numpy as np

from ease_jupyter.selection import SYN_FIGURE8, make_synthetic, syn_dataset


def test_figure8_shapes_and_ranges():
    assert SYN_FIGURE8 == ((0.01, 0.1), (0.01, 1.0), (0.5, 0.1), (0.5, 1.0))
    q, c = syn_dataset(0.5, 1.0, random_state=0)
    assert q.shape == c.shape == (200, 100)
    assert q.min() >= 0 and q.max() <= 1
    assert c.min() >= 0.01 and c.max() <= 1


def test_deterministic_under_a_seed():
    a = syn_dataset(0.01, 0.1, random_state=3)
    b = syn_dataset(0.01, 0.1, random_state=3)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], syn_dataset(0.01, 0.1, random_state=4)[0])


def _mean_abs_model_corr(q):
    r = q - q.mean(axis=1, keepdims=True)  # remove the user baseline
    cc = np.corrcoef(r.T)
    return np.abs(cc[np.triu_indices_from(cc, 1)]).mean()


def test_sigma_m_controls_model_correlation():
    weak, _ = make_synthetic(sigma_m=0.01, alpha=0.1, users_per_group=100, random_state=0)
    strong, _ = make_synthetic(sigma_m=0.5, alpha=0.1, users_per_group=100, random_state=0)
    assert _mean_abs_model_corr(strong) > 2 * _mean_abs_model_corr(weak)


def test_baseline_groups_user_term_and_noise():
    q, _ = make_synthetic(n_models=20, sigma_m=0.5, alpha=0.0, baseline_groups=((0.8, 0.0), (0.2, 0.0)),
                          users_per_group=(3, 5), random_state=0)
    assert sorted(np.round(q[:, 0], 6).tolist()) == [0.2] * 5 + [0.8] * 3
    q2, _ = make_synthetic(n_models=20, sigma_m=0.5, alpha=0.0, baseline_groups=((0.5, 0.0),),
                           users_per_group=10, sigma_u=0.3, sigma_w=0.05, random_state=0)
    assert q2.std() > 0
