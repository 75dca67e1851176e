import numpy as np
import pytest

from ease_jupyter.selection import ModelPrior


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def small_prior(rng):
    """A fitted prior over 6 models from 12 history users."""
    base = rng.uniform(0.5, 0.9, size=(12, 1))
    hist = np.clip(base + 0.08 * rng.standard_normal((12, 6)), 0, 1)
    return ModelPrior(random_state=0).fit(hist)


def random_spd_prior(rng, k=8, alpha=1e-4):
    a = rng.standard_normal((k, k))
    cov = 0.01 * (a @ a.T / k + 0.5 * np.eye(k))
    return ModelPrior.from_arrays(rng.uniform(0.4, 0.8, k), cov, alpha=alpha)


@pytest.fixture(autouse=True, scope="session")
def _one_blas_thread():
    """Small dense algebra is fastest on one BLAS thread; on a shared 2-core
    machine multi-threaded OpenBLAS is often 10x slower for 100 x 100 matrices."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield
