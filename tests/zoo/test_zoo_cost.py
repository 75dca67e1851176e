"""Cost estimates: FLOP counting for torch, complexity proxies for sklearn."""

from __future__ import annotations

import pytest

from ease_jupyter.zoo import Engine, candidates
from ease_jupyter.zoo import cost as zcost

from .conftest import program


def _flops(shape, out=(10,)):
    return {c.name: c.flops_per_example for c in candidates(program([shape], [out]))}


def test_bigger_images_cost_more():
    sizes = [(8, 8, 1), (16, 16, 1), (32, 32, 3), (64, 64, 3)]
    table = [_flops(s) for s in sizes]
    for name in table[0]:
        series = [t[name] for t in table]
        assert series == sorted(series) and len(set(series)) == len(series), (name, series)


def test_longer_sequences_and_more_features_cost_more():
    p = program([(3,)], [(4,)], ("next",))
    short = {c.name: c.flops_per_example for c in candidates(p, seq_len=10)}
    long = {c.name: c.flops_per_example for c in candidates(p, seq_len=40)}
    wide = {c.name: c.flops_per_example for c in candidates(program([(30,)], [(4,)], ("next",)), seq_len=10)}
    for name in short:
        assert long[name] > short[name] and wide[name] > short[name], name


def test_torch_flops_are_three_forward_passes():
    torch = pytest.importorskip("torch")
    c = candidates(program([(8, 8, 1)], [(10,)]))[0]
    net = c.build(c.configs[0])
    fwd = zcost.forward_flops(net, (8, 8, 1))
    assert c.flops_per_example == pytest.approx(3 * fwd)
    # the counted forward FLOPs match LeNet's layers: 2 x multiply-adds
    convs = sum(2 * m.weight.numel() * 8 * 8 for m in net.modules() if isinstance(m, torch.nn.Conv2d))
    linears = sum(2 * m.weight.numel() for m in net.modules() if isinstance(m, torch.nn.Linear))
    assert fwd == pytest.approx(convs + linears + zcost.INPUT_ELEMENT_FLOPS * 64, rel=1e-6)


def test_lstm_flops_are_counted():
    names = {c.name: c.flops_per_example for c in candidates(program([(3,)], [(4,)], ("next",)))}
    # a bi-LSTM does about twice the work of an LSTM, which does about 4/3 of a GRU
    assert names["bilstm"] == pytest.approx(2 * names["lstm"], rel=0.05)
    assert names["lstm"] > names["gru"]


@pytest.mark.parametrize("p", [program([(8, 8, 1)], [(10,)]), program([(64,)], [(10,)]), program([(5,)], [(1,)])])
def test_cost_is_linear_in_epochs_and_torch_linear_in_examples(p):
    for c in candidates(p):
        assert c.cost(1000, 4) == pytest.approx(4 * c.cost(1000, 1))
        assert c.cost(1000) == pytest.approx(c.epochs * c.cost(1000, 1))
        assert c.cost(2000) > c.cost(1000)
        if c.engine is Engine.TORCH:
            assert c.cost(2000, 3) == pytest.approx(2 * c.cost(1000, 3))
            assert c.cost(1000, 1) == pytest.approx(1000 * c.flops_per_example)
        else:
            assert c.cost(zcost.NOMINAL_N, 1) == pytest.approx(zcost.NOMINAL_N * c.flops_per_example)


def test_sklearn_proxies_scale_as_documented():
    cands = {c.name: c for c in candidates(program([(64,)], [(10,)]))}
    # SVM ~ n^2, logistic regression ~ n, forests ~ n log^2 n
    assert cands["svm_rbf"].cost(2000, 1) == pytest.approx(4 * cands["svm_rbf"].cost(1000, 1))
    assert cands["logreg"].cost(2000, 1) == pytest.approx(2 * cands["logreg"].cost(1000, 1))
    rf = cands["random_forest"].cost(2000, 1) / cands["random_forest"].cost(1000, 1)
    assert 2.0 < rf < 3.0
    wide = {c.name: c for c in candidates(program([(640,)], [(10,)]))}
    for name, c in cands.items():
        assert wide[name].cost(1000) > c.cost(1000), name


def test_descriptor_helper():
    d = zcost.descriptor(1e6, 1e3, True, "resnet")
    assert d[:3] == (6.0, 3.0, 1.0)
    assert d[3 + zcost.FAMILY_KINDS.index("resnet")] == 1.0
    with pytest.raises(ValueError):
        zcost.descriptor(1.0, 1.0, False, "transformer")
