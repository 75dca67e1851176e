"""Training and validation units: determinism, checkpoints, hooks, metrics."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from ease_jupyter.errors import EaseMLError
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.units import (
    DEFAULT_HOP,
    HOP_MEASUREMENTS,
    Hooks,
    UnitOutput,
    UnitSpec,
    _batches,
    combine_eval,
    default_train_fn,
    eval_unit,
    initial_checkpoint,
    load_checkpoint,
    load_model,
    measure_hop,
    read_checkpoint,
    train_unit,
    unit_seed,
)
from ease_jupyter.zoo import ModelConfig
from ease_jupyter.zoo.templates import TorchBuilder

# A tiny image classifier (8x8 digits, 10 classes) and a sequence regressor.
LENET = TorchBuilder("lenet", "LeNet", ((8, 8), 10))
SEQ2SEQ = TorchBuilder("seq2seq_gru", "Seq2Seq", (3, 2), (("cell", "gru"),))


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:300].astype(np.float32) / 16.0, d.target[:300]


def spec(trial="t0", lr=0.05, **extra):
    return UnitSpec.of(trial, "lenet", {"lr": lr, **extra}, LENET, seed=7)


def state(ref):
    return torch.load(io.BytesIO(read_checkpoint(ref)), weights_only=True)


def same_weights(a, b) -> bool:
    sa, sb = state(a)["model"], state(b)["model"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_unit_seed_is_stable_and_distinct():
    assert unit_seed(0, "t0", 1, 2) == unit_seed(0, "t0", 1, 2)
    seeds = {unit_seed(0, "t0", e, p) for e in range(3) for p in range(3)}
    assert len(seeds) == 9
    assert unit_seed(1, "t0", 0, 0) != unit_seed(0, "t0", 0, 0)
    assert 0 <= unit_seed(0, "x", 0, 0) < 2**63


def test_batches_never_hold_one_example():
    gen = torch.Generator().manual_seed(0)
    for n, bs in [(33, 32), (65, 32), (2, 32), (31, 32), (64, 32)]:
        sizes = [len(b) for b in _batches(n, bs, gen)]
        assert sum(sizes) == n and min(sizes) >= 2


def test_initial_checkpoint_is_seeded_and_adapted(digits):
    X, y = digits
    a = initial_checkpoint(spec(), X, y)
    b = initial_checkpoint(spec(), X, y)
    other = initial_checkpoint(spec("t1"), X, y)
    assert same_weights(a, b) and not same_weights(a, other)
    st = state(a)["model"]
    # adapt() statistics travel in the state dict as buffers
    assert torch.allclose(st["in_mean"], torch.tensor([X.mean()]), atol=1e-5)


def test_train_unit_is_deterministic_and_moves_the_weights(digits):
    X, y = digits
    init = initial_checkpoint(spec(), X, y)
    part = (X[:100], y[:100])
    a = train_unit(part, init, spec().at(0, 1))
    b = train_unit(part, init, spec().at(0, 1))
    assert isinstance(a, UnitOutput) and isinstance(a.checkpoint, bytes)
    assert same_weights(a.checkpoint, b.checkpoint)
    assert not same_weights(a.checkpoint, init)
    c = train_unit(part, init, spec().at(0, 2))  # another unit seed: another batch order
    assert not same_weights(a.checkpoint, c.checkpoint)
    assert a.metrics["examples"] == 100 and np.isfinite(a.metrics["loss"])
    assert a.metrics["checkpoint_bytes"] == len(a.checkpoint)


def test_checkpoint_carries_optimizer_state_and_resets_lr(digits):
    X, y = digits
    out = train_unit((X[:64], y[:64]), initial_checkpoint(spec(), X, y), spec().at(0, 0))
    st = state(out.checkpoint)
    assert st["optimizer"]["state"], "momentum buffers hop with the model"
    net = LENET(ModelConfig.of("lenet", {"lr": 0.05}))
    opt = net.make_optimizer(0.05)
    load_checkpoint(net, opt, out.checkpoint, lr=0.001)
    assert all(g["lr"] == 0.001 for g in opt.param_groups)


def test_directory_hop_writes_atomically(tmp_path, digits):
    X, y = digits
    init = initial_checkpoint(spec(), X, y)
    out = train_unit((X[:64], y[:64]), init, spec().at(0, 3), Hooks(), str(tmp_path))
    assert isinstance(out.checkpoint, str) and os.path.exists(out.checkpoint)
    assert not [p for p in tmp_path.rglob("*.tmp")]
    again = train_unit((X[:64], y[:64]), out.checkpoint, spec().at(1, 3), Hooks(), str(tmp_path))
    assert again.checkpoint != out.checkpoint and os.path.exists(out.checkpoint)
    byte_out = train_unit((X[:64], y[:64]), init, spec().at(0, 3))
    assert same_weights(out.checkpoint, byte_out.checkpoint)  # both hops give the same weights


def test_partitioned_validation_matches_whole_set(digits):
    X, y = digits
    ck = train_unit((X[:200], y[:200]), initial_checkpoint(spec(), X, y), spec().at(0, 0)).checkpoint
    Xv, yv = X[200:], y[200:]
    parts = [eval_unit((Xv[i::3], yv[i::3]), ck, spec().at(0, i)) for i in range(3)]
    merged = combine_eval(parts)
    net = load_model(ck, spec())
    acc = float((net.predict(Xv).numpy() == yv).mean())
    assert merged["score"] == pytest.approx(acc)
    assert merged["examples"] == len(Xv)
    # parameters are not trained by validation
    assert same_weights(ck, train_unit((X[:200], y[:200]), initial_checkpoint(spec(), X, y), spec().at(0, 0)).checkpoint)


def test_regression_r2_over_partitions_is_exact():
    from sklearn.metrics import r2_score

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5, 3)).astype(np.float32)
    Y = (X[:, :, :2] * 0.5).astype(np.float32)
    s = UnitSpec.of("r", "seq2seq_gru", {"lr": 0.01}, SEQ2SEQ)
    ck = initial_checkpoint(s, X, Y)
    parts = [eval_unit((X[i::2], Y[i::2]), ck, s.at(0, i)) for i in range(2)]
    merged = combine_eval(parts)
    pred = load_model(ck, s).predict(X).numpy().reshape(40, -1)
    expected = float(np.clip(r2_score(Y.reshape(40, -1), pred), 0, 1))
    assert merged["score"] == pytest.approx(expected, abs=1e-6)


def test_combine_eval_edge_cases():
    assert np.isnan(combine_eval([])["score"])
    assert np.isnan(combine_eval([{"n": 2.0, "loss_sum": float("nan"), "correct": 1.0}])["score"])
    assert combine_eval([{"n": 2.0, "loss_sum": 1.0, "correct": 1.0}, {"n": 2.0, "loss_sum": 1.0, "correct": 2.0}])["score"] == 0.75


@dataclass(frozen=True)
class CountingTrain:
    """A train_fn hook that trains on the first half of each batch order only."""

    def __call__(self, net, opt, X, y, spec, generator):
        m = default_train_fn(net, opt, X[: len(X) // 2], y[: len(y) // 2], spec, generator)
        m["hook"] = 1.0
        return m


def scaled_input(partition):
    X, y = partition
    return torch.as_tensor(np.asarray(X, dtype=np.float32) * 2.0), torch.as_tensor(np.asarray(y, dtype=np.int64))


def test_custom_hooks_are_used(digits):
    X, y = digits
    hooks = Hooks(input_fn=scaled_input, train_fn=CountingTrain())
    init = initial_checkpoint(spec(), X, y, hooks)
    out = train_unit((X[:64], y[:64]), init, spec().at(0, 0), hooks)
    assert out.metrics["hook"] == 1.0 and out.metrics["examples"] == 32


def test_bad_params_name_the_field(digits):
    X, y = digits
    with pytest.raises(EaseMLError, match="batch_size"):
        train_unit((X[:8], y[:8]), initial_checkpoint(spec(), X, y), spec(batch_size=1).at(0, 0))
    with pytest.raises(EaseMLError, match="lr"):
        initial_checkpoint(spec(lr=-1.0), X, y)


def test_hop_measurements_are_recorded():
    assert DEFAULT_HOP in HOP_MEASUREMENTS
    other = "bytes" if DEFAULT_HOP == "directory" else "directory"
    # the default is the faster mode at every measured size
    for size, seconds in HOP_MEASUREMENTS[DEFAULT_HOP].items():
        assert seconds <= HOP_MEASUREMENTS[other][size]


def test_measure_hop_on_the_local_engine(tmp_path, digits):
    X, y = digits
    with LocalEngine(2) as engine:
        for mode in ("bytes", "directory"):
            r = measure_hop(engine, spec(), (X[:32], y[:32]), mode, units=3, directory=str(tmp_path))
            assert r["median"] > 0 and r["checkpoint_bytes"] > 0
        assert engine.holders("hop-probe") == set()


def test_initial_weights_do_not_depend_on_units_running_in_other_threads(digits):
    """torch's global generator is one per process: a unit on another thread
    (an engine's worker thread, or one abandoned after its worker was
    killed) seeds and restores it while the driver builds a new trial's
    initial weights, which must come out the same."""
    import threading

    X, y = digits
    want = initial_checkpoint(spec("t1"), X, y)
    init = initial_checkpoint(spec(), X, y)
    stop = threading.Event()

    def units_meanwhile():
        while not stop.is_set():
            train_unit((X[:16], y[:16]), init, spec().at(0, 1))
            eval_unit((X[:16], y[:16]), init, spec().at(0, 1))

    others = [threading.Thread(target=units_meanwhile, daemon=True) for _ in range(2)]
    for t in others:
        t.start()
    try:
        got = [initial_checkpoint(spec("t1"), X, y) for _ in range(30)]
    finally:
        stop.set()
        for t in others:
            t.join()
    assert all(same_weights(g, want) for g in got)


def test_a_builder_that_draws_nothing_here_is_built_without_the_generators_lock(digits):
    """A user's net is built in its own child process (``draws_global_rng =
    False``): its build must not wait for, or hold up, other units' seeding."""
    import threading

    from ease_jupyter.execution.units import GLOBAL_RNG, build_net

    class OwnBuilder:
        draws_global_rng = False

        def with_seed(self, seed):
            return self

        def __call__(self, config):
            return LENET(config)

    own = UnitSpec.of("t0", "lenet", {"lr": 0.05}, OwnBuilder(), seed=7)
    held, release = threading.Event(), threading.Event()

    def hold_the_lock():
        with GLOBAL_RNG:
            held.set()
            release.wait(30)

    other = threading.Thread(target=hold_the_lock, daemon=True)
    other.start()
    held.wait(10)
    try:
        built = []
        builder = threading.Thread(target=lambda: built.append(build_net(Hooks(), own)), daemon=True)
        builder.start()
        builder.join(10)
        assert built, "a net that draws nothing from this process's generator waited for its lock"
    finally:
        release.set()
        other.join()
