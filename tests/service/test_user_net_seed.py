"""A user's own net starts from reproducible weights: built in her child
process (whose generators are randomly reseeded at its fork), under the seed
a zoo net of the same trial is built under (``units.build_net``), so two
runs of a job with the same service seed train from the same weights."""

from __future__ import annotations

import io

import cloudpickle
import numpy as np
import torch

from ease_jupyter.execution.units import Hooks, UnitSpec, build_net, initial_checkpoint, read_checkpoint, unit_seed
from ease_jupyter.service.user_models import NetBuilder


def _her_factory():
    """Her factory, defined in a function so that cloudpickle sends it by
    value, as it sends a notebook's; it draws from torch and from numpy."""

    def factory(input_shape, output_shape, hidden=8):
        import math

        import numpy as np
        import torch
        from torch import nn

        net = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),
                            nn.Linear(hidden, output_shape[0]))
        net.register_buffer("noise", torch.as_tensor(np.random.rand(3)))
        return net

    return factory


def _first_weights(builder, seed, trial, X, y):
    spec = UnitSpec.of(trial, "mine", {"lr": 0.01, "hidden": 8}, builder, seed=seed)
    data = read_checkpoint(initial_checkpoint(spec, X, y))
    return torch.load(io.BytesIO(data), weights_only=True)["model"]


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_her_nets_first_weights_depend_only_on_the_seed_and_the_trial():
    factory = _her_factory()
    builder = NetBuilder("mine", cloudpickle.dumps(factory), (4,), (3,), True, 60.0)
    rng = np.random.default_rng(0)
    X, y = rng.random((40, 4)).astype(np.float32), rng.integers(0, 3, 40)
    first = _first_weights(builder, 7, "t0", X, y)
    assert _same(first, _first_weights(builder, 7, "t0", X, y)), "two runs of one trial started apart"
    assert not _same(first, _first_weights(builder, 8, "t0", X, y))
    assert not _same(first, _first_weights(builder, 7, "t1", X, y))
    # the zoo's seed material: her factory here, under unit_seed(seed, trial, -1, -1), gives the same weights
    seed = unit_seed(7, "t0", -1, -1)
    numpy_state = np.random.get_state()
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            np.random.seed(seed % 2**32)
            here = factory((4,), (3,), hidden=8).state_dict()
    finally:
        np.random.set_state(numpy_state)
    assert all(torch.equal(first[f"net.{k}"], v) for k, v in here.items())


class _Recording:
    """A builder that builds elsewhere (``draws_global_rng = False``) and records the seed it was built with."""

    draws_global_rng = False
    built: list = []

    def __init__(self, seed=None):
        self.seed = seed

    def with_seed(self, seed):
        return _Recording(seed)

    def __call__(self, config):
        self.built.append(self.seed)
        return torch.nn.Linear(1, 1)


def test_only_a_trials_first_build_is_seeded_later_ones_load_their_checkpoint():
    _Recording.built = []
    spec = UnitSpec.of("t0", "mine", {"lr": 0.01}, _Recording(), seed=7)
    build_net(Hooks(), spec, seed=unit_seed(7, "t0", -1, -1))  # initial_checkpoint's build
    build_net(Hooks(), spec)  # a unit's, or load_model's: its weights come from the checkpoint
    assert _Recording.built == [unit_seed(7, "t0", -1, -1), None]
    assert spec.builder.seed is None
