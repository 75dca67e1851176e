"""The f_k normalisation family of template augmentation (pvldb §3.1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ease_jupyter.errors import EaseMLError
from ease_jupyter.zoo import NORMALIZATION_KS, fk_normalize, scale_unit
from ease_jupyter.zoo.normalization import fk_peak


@pytest.mark.parametrize("k", NORMALIZATION_KS)
def test_endpoints_and_peak(k):
    assert fk_normalize(0.0, k) == 0.0
    assert fk_normalize(1.0, k) == 0.0
    peak = fk_peak(k)
    assert peak**k == pytest.approx(0.5)
    assert fk_normalize(peak, k) == pytest.approx(0.25)
    grid = np.linspace(0.0, 1.0, 10001)
    values = fk_normalize(grid, k)
    assert values.max() == pytest.approx(0.25, abs=1e-6)
    assert grid[values.argmax()] == pytest.approx(peak, abs=1e-3)


def test_known_values():
    assert fk_normalize(0.5, 1) == pytest.approx(0.25)
    assert fk_normalize(0.5, 2) == pytest.approx(-(0.5**4) + 0.5**2)
    assert fk_normalize(0.25, 3) == pytest.approx(-(0.25**6) + 0.25**3)
    assert NORMALIZATION_KS == (1, 2, 3)


def test_works_on_arrays_and_tensors_alike():
    torch = pytest.importorskip("torch")
    x = np.linspace(0, 1, 7)
    t = torch.linspace(0, 1, 7, dtype=torch.float64)
    np.testing.assert_allclose(fk_normalize(t, 2).numpy(), fk_normalize(x, 2))


@settings(max_examples=200, deadline=None)
@given(x=st.floats(0.0, 1.0), k=st.sampled_from(NORMALIZATION_KS))
def test_range_on_unit_interval(x, k):
    v = fk_normalize(x, k)
    assert 0.0 <= v <= 0.25 + 1e-15
    # symmetric in x^k around 1/2: f_k folds, so it has no inverse
    assert fk_normalize((1.0 - x**k) ** (1.0 / k), k) == pytest.approx(v, abs=1e-9)


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "2"])
def test_bad_k(k):
    with pytest.raises(EaseMLError, match="normalisation k"):
        fk_normalize(0.5, k)


def test_scale_unit():
    x = np.array([2.0, 4.0, 6.0])
    np.testing.assert_allclose(scale_unit(x), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(scale_unit(x, 0.0, 4.0), [0.5, 1.0, 1.0])
    np.testing.assert_allclose(scale_unit(np.ones(3)), np.zeros(3))
