"""How one pick trains its configs: successive halving over them (Cerebro §4.2).

A pick is one (user, model) pair whose configs (the learning rates of
ease.ml pvldb §3.1, or a user's grid) train within one MOP workload. Giving
every config the same epochs spends most of the pick on configs that were
poor after one epoch. Successive halving (Jamieson & Talwalkar, AISTATS
2016; the inner loop of Hyperband, Li et al., JMLR 18(185), 2017) trains
them all to the first rung, keeps the best ``1/eta`` and stops the rest, and
so on until ``max_epochs``: Cerebro §4.2 runs exactly this on MOP, a stop
being an ``epoch_end`` decision.

The pick's configs are a fixed, small set, so the synchronous form fits:
all configs train in lockstep (one MOP epoch is one epoch of every live
config), which keeps a job's progress record and its restart (``resume``)
epoch-aligned. ASHA (:class:`~ease_jupyter.execution.automl.ASHA`) is the
asynchronous form for configs *sampled* from a space; it emulates the same
rungs with ``|S| = p`` (Cerebro §6.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ._core import check_epoch_range, check_eta, check_int, rung_epochs
from ._halving import SuccessiveHalving, rung_sizes

#: The halving rate of a pick (Li et al. 2017 and Cerebro §4.2 use 3).
PICK_ETA = 3


@dataclass(frozen=True)
class PickSchedule:
    """Which epochs a pick's configs reach: ``sizes[i]`` configs train to
    ``rungs[i]`` epochs. ``(rungs, sizes) = ((1, 3, 12), (3, 1, 1))``: three
    configs train one epoch, the best of them goes on to twelve."""

    rungs: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def max_epochs(self) -> int:
        return self.rungs[-1]

    @property
    def configs_per_epoch(self) -> tuple[int, ...]:
        """How many configs train each epoch: ``(3, 1, 1)`` for rungs
        ``(1, 3)`` and sizes ``(3, 1)``."""
        out: list[int] = []
        for rung, size in zip(self.rungs, self.sizes):
            out += [size] * (rung - len(out))
        return tuple(out)

    @property
    def config_epochs(self) -> int:
        """Epochs trained over all configs of the pick (its work, in config-epochs)."""
        return sum(self.configs_per_epoch)

    def describe(self) -> str:
        """``"3 configs to epoch 1, 1 to epoch 12"`` (each count with the last
        rung it reaches)."""
        last = len(self.rungs) - 1
        parts = [f"{size} to epoch {rung}" for i, (rung, size) in enumerate(zip(self.rungs, self.sizes))
                 if i == last or self.sizes[i + 1] != size]
        n = self.sizes[0]
        return f"{n} config{'s' if n != 1 else ''}{parts[0][len(str(n)):]}" + "".join(", " + p for p in parts[1:])


def pick_schedule(n_configs: int, max_epochs: int, eta: int = PICK_ETA) -> PickSchedule:
    """The rungs and how many configs reach each, for ``n_configs`` configs
    and at most ``max_epochs`` epochs (:func:`rung_epochs` from 1 epoch,
    :func:`rung_sizes`; one config always reaches ``max_epochs``).

    Raises:
        ProcedureArgumentError: n_configs < 1, max_epochs < 1, eta < 2.
    """
    n = check_int("n_configs", n_configs, minimum=1)
    eta = check_eta(eta)
    _, big_r = check_epoch_range(1, max_epochs)
    rungs = rung_epochs(1, big_r, eta)
    return PickSchedule(rungs, rung_sizes(n, eta, len(rungs)))


def pick_procedure(model: str, configs: Sequence[Mapping[str, Any]], *, max_epochs: int,
                   eta: int = PICK_ETA) -> SuccessiveHalving:
    """The procedure a pick trains ``configs`` with: successive halving from
    one epoch to ``max_epochs`` (see the module docstring). Trial ``t{i}``
    trains ``configs[i]``. With one config, or ``max_epochs`` below ``eta``
    (a single rung), nothing stops early: every config trains ``max_epochs``.

    Raises:
        ProcedureArgumentError: no configs, max_epochs < 1, eta < 2.
    """
    return SuccessiveHalving(model, list(configs), min_epochs=1, max_epochs=max_epochs, eta=eta)


def pick_survivors(epochs_trained: Mapping[str, int], max_epochs: int) -> list[str]:
    """The trials that trained all ``max_epochs`` epochs (the configs
    successive halving kept to the end), in the given order. A pick's result
    is the best of these: a config stopped early lost at a rung to one of them."""
    return [t for t, n in epochs_trained.items() if n >= max_epochs]
