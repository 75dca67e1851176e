"""The torch model families: shapes, training steps, adapt, predict."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ease_jupyter.errors import DataError, EaseMLError  # noqa: E402
from ease_jupyter.zoo import Workload, ZooModule, candidates  # noqa: E402
from ease_jupyter.zoo.nets import image_plan  # noqa: E402

from .conftest import program  # noqa: E402

IMAGE_SHAPES = [(8, 8, 1), (28, 28, 1), (32, 32, 3), (64, 64, 3), (8, 8)]


def _cands(p):
    return {c.name: c for c in candidates(p)}


@pytest.mark.parametrize("shape", IMAGE_SHAPES)
def test_image_classifiers_build_and_output_logits(shape):
    torch.manual_seed(0)
    cands = _cands(program([shape], [(7,)]))
    assert set(cands) == {"lenet", "resnet_small", "vgg_small", "mobilenet_small"}
    x = torch.rand(3, *shape)
    for c in cands.values():
        net = c.build(c.configs[0])
        assert isinstance(net, ZooModule) and net.task == "classification"
        out = net(x)
        assert out.shape == (3, 7), c.name
        net.eval()
        assert net(x[:1]).shape == (1, 7)
        assert torch.isfinite(out).all()


def test_image_plan_fewer_stages_for_small_images():
    assert image_plan(8, 8) == (1, 1)
    assert image_plan(28, 28) == (1, 2)
    assert image_plan(32, 32) == (1, 3)
    assert image_plan(64, 64) == (2, 3)
    assert image_plan(4, 4) == (1, 0)
    assert image_plan(2, 2) == (1, 0)
    assert image_plan(256, 256)[0] == 8


def test_tiny_and_odd_images():
    for shape in [(2, 2, 1), (5, 7, 2), (1, 30, 1)]:
        for c in candidates(program([shape], [(3,)])):
            assert c.build(c.configs[0])(torch.rand(2, *shape)).shape == (2, 3), (shape, c.name)


def test_time_series_classifiers():
    cands = _cands(program([(3,)], [(5,)], ("next",)))
    assert set(cands) == {"cnn1d", "gru", "lstm", "bilstm"}
    x = torch.rand(4, 20, 3)
    for c in cands.values():
        net = c.build(c.configs[1])
        assert net(x).shape == (4, 5), c.name
        assert net(torch.rand(2, 7, 3)).shape == (2, 5)  # any length
        with pytest.raises(DataError):
            net(torch.rand(2, 7, 4))


def test_time_series_tail_tensors_are_concatenated():
    # per step Tensor[3] and Tensor[2, 2]: 3 + 4 = 7 features
    c = candidates(program([(3,), (2, 2)], [(5,)], ("next",)))[1]
    assert c.build(c.configs[0])(torch.rand(2, 6, 7)).shape == (2, 5)


@pytest.mark.parametrize("ishape,oshape", [((16, 16, 1), (16, 16, 1)), ((32, 32, 3), (32, 32, 3)),
                                           ((16, 16, 1), (8, 12, 2)), ((15, 15), (15, 15)), ((64, 64, 3), (64, 64, 1))])
def test_recovery_nets_output_shape(ishape, oshape):
    torch.manual_seed(0)
    cands = _cands(program([ishape], [oshape]))
    assert set(cands) == {"conv_autoencoder", "unet"}
    x = torch.rand(2, *ishape) * 255.0
    y = torch.rand(2, *oshape) * 10.0 - 5.0
    for c in cands.values():
        net = c.build(c.configs[-1]).adapt(x, y)
        assert net.task == "regression"
        out = net(x).detach()
        assert out.shape == (2, *oshape), c.name
        # outputs live in the target range seen by adapt
        assert float(out.min()) >= -5.0 - 1e-4 and float(out.max()) <= 5.0 + 1e-4


def test_seq2seq_translation():
    cands = _cands(program([(3,)], [(2,)], ("next",), ("next",)))
    assert set(cands) == {"seq2seq_gru", "seq2seq_lstm"}
    x, y = torch.rand(4, 10, 3), torch.rand(4, 6, 2)
    for c in cands.values():
        net = c.build(c.configs[0])
        assert net(x).shape == (4, 10, 2)  # default: same length as the input
        net.adapt(x, y)
        assert net(x).shape == (4, 6, 2)  # the target length seen by adapt
        assert net(x, steps=3).shape == (4, 3, 2)


def _separable_batch(shape, classes=2, n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    x = torch.randn(n, *shape, generator=g) * 0.5
    x = x + (y.float() * 2 - 1).view(-1, *([1] * len(shape)))  # class shifts every value
    return x, y


def _assert_learns(net, x, y, lr, steps=8):
    net.adapt(x, y)
    opt = net.make_optimizer(lr)
    steps_out = [net.train_step(opt, x, y) for _ in range(steps)]
    # a detached 0-d loss tensor on the net's device: read once, after the steps
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in steps_out)
    losses = [float(v) for v in steps_out]
    assert all(map(lambda v: v == v, losses))  # no NaN
    assert losses[-1] < losses[0], losses
    return losses


@pytest.mark.parametrize("name", ["lenet", "resnet_small", "vgg_small", "mobilenet_small"])
def test_sgd_steps_reduce_loss_image(name):
    torch.manual_seed(0)
    c = _cands(program([(8, 8, 1)], [(2,)]))[name]
    x, y = _separable_batch((8, 8, 1))
    net = c.build(c.configs[1])
    _assert_learns(net, x, y, lr=0.05)
    assert (net.predict(x) == y).float().mean() > 0.5


@pytest.mark.parametrize("name", ["cnn1d", "gru", "lstm", "bilstm"])
def test_sgd_steps_reduce_loss_series(name):
    torch.manual_seed(0)
    c = _cands(program([(3,)], [(2,)], ("next",)))[name]
    x, y = _separable_batch((12, 3))
    _assert_learns(c.build(c.configs[1]), x, y, lr=0.05)


@pytest.mark.parametrize("name", ["conv_autoencoder", "unet"])
def test_sgd_steps_reduce_loss_recovery(name):
    torch.manual_seed(0)
    c = _cands(program([(8, 8, 1)], [(8, 8, 1)]))[name]
    x = torch.rand(8, 8, 8, 1)
    y = 1.0 - x  # invert the image
    _assert_learns(c.build(c.configs[0]), x, y, lr=0.1, steps=10)


def test_sgd_steps_reduce_loss_seq2seq():
    torch.manual_seed(0)
    c = _cands(program([(2,)], [(1,)], ("next",), ("next",)))["seq2seq_gru"]
    x = torch.rand(16, 5, 2)
    y = x.sum(dim=2, keepdim=True)
    _assert_learns(c.build(c.configs[0]), x, y, lr=0.1, steps=10)


def test_classification_loss_accepts_one_hot():
    c = candidates(program([(8, 8, 1)], [(3,)]))[0]
    net = c.build(c.configs[0])
    x = torch.rand(4, 8, 8, 1)
    y = torch.tensor([0, 2, 1, 2])
    out = net(x)
    one_hot = torch.nn.functional.one_hot(y, 3).float()
    assert torch.allclose(net.loss(out, y), net.loss(out, one_hot))
    assert net.predict(x.numpy()).shape == (4,)


def test_adapt_standardises_inputs_and_travels_in_state_dict():
    c = candidates(program([(4, 4, 2)], [(2,)]))[0]
    x = torch.rand(10, 4, 4, 2) * 100 + 50
    net = c.build(c.configs[0]).adapt(x)
    assert torch.allclose(net.in_mean, x.reshape(-1, 2).mean(0))
    clone = c.build(c.configs[0])
    clone.load_state_dict(net.state_dict())
    assert torch.allclose(clone.in_std, net.in_std)
    with pytest.raises(DataError):
        net.adapt(torch.rand(0, 4, 4, 2))


def test_make_optimizer_validates_lr():
    net = candidates(program([(4, 4, 1)], [(2,)]))[0].build(
        candidates(program([(4, 4, 1)], [(2,)]))[0].configs[0])
    with pytest.raises(EaseMLError, match="lr"):
        net.make_optimizer(0.0)
    assert net.make_optimizer(0.1).param_groups[0]["lr"] == 0.1


def test_workload_of_candidates_match():
    assert {c.workload for c in candidates(program([(8, 8, 1)], [(2,)]))} == {Workload.TENSOR_CLASSIFICATION}


def test_documented_protocol_learns_digits():
    """build -> adapt -> make_optimizer(lr) -> train_step... -> predict, on the
    8x8 digits as images: well above chance (0.1) after three epochs."""
    import numpy as np
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X.reshape(-1, 8, 8, 1).astype(np.float32)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(X))
    tr, va = idx[:1300], idx[1300:]
    c = candidates(program([(8, 8, 1)], [(10,)]))[0]
    cfg = c.configs[0]
    torch.manual_seed(0)
    net = c.build(cfg).adapt(X[tr])
    opt = net.make_optimizer(cfg.options["lr"])
    for _ in range(3):
        perm = rng.permutation(tr)
        for i in range(0, len(perm), 32):
            b = perm[i : i + 32]
            net.train_step(opt, X[b], y[b])
    acc = float((net.predict(X[va]).numpy() == y[va]).mean())
    assert acc > 0.7, acc
