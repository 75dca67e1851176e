"""The auto-provisioner picks the known optimum of a hand-made space (ACAI §4.2.4, §5.1.2).

The space: 2 cores per worker, 2 workers, CPU only, 1 GiB reserved per task;
prices $1 per core-hour and $1 per GB-hour; runtime law
``60 + 3600 / (workers * sqrt(threads))`` (workers scale, threads less so).
By hand, (threads, workers) -> (seconds, hourly $, cost $):

    (1, 1): 3660.0, 2, 2.0333
    (2, 1): 2605.6, 3, 2.1713
    (1, 2): 1860.0, 4, 2.0667
    (2, 2): 1332.8, 6, 2.2213
"""

from __future__ import annotations

import math

import pytest

from ease_jupyter.errors import DataError
from ease_jupyter.selection.provisioner import (
    GIB,
    Pool,
    Prices,
    ResourceConfig,
    candidate_configs,
    check_deadline,
    choose,
)

PRICES = Prices(cpu=1.0, gb=1.0, gpu=0.0)
POOL = Pool(cores=2, workers=2)


def law(config: ResourceConfig) -> float:
    seconds = 60 + 3600 / (config.workers * math.sqrt(config.threads))
    return seconds / 10 if config.device == "gpu" else seconds


def space():
    return candidate_configs(POOL, memory_bytes=GIB)


def picked(choice):
    return (choice.config.threads, choice.config.workers)


def test_space_is_enumerated_whole():
    configs = candidate_configs(Pool(cores=3, workers=2, partitions=(2, 4), devices=("cpu", "gpu")), GIB)
    keys = {(c.threads, c.workers, c.partitions, c.device) for c in configs}
    assert len(configs) == len(keys) == 3 * 2 * 2 * 2
    assert all(c.memory_bytes == GIB for c in configs)  # the reservation is taken, not sized
    # no partitions given: one per worker (Cerebro)
    assert {(c.workers, c.partitions) for c in space()} == {(1, 1), (2, 2)}


def test_cost_is_acai_formula():
    config = ResourceConfig(threads=2, workers=2, memory_bytes=GIB // 2, device="gpu")
    prices = Prices(cpu=0.5, gb=0.25, gpu=2.0)
    # 4 CPUs, 1 GB (two half-GiB reservations), 2 GPUs for half an hour
    assert prices.cost(config, 1800) == pytest.approx(0.5 * (4 * 0.5 + 1 * 0.25 + 2 * 2.0))


def test_budget_buys_the_least_runtime_within_it():
    choice = choose(space(), law, PRICES, budget=2.1)
    assert choice.feasible and choice.goal == "runtime"
    assert picked(choice) == (1, 2)  # (2, 1) also costs more, and is slower
    assert choice.seconds == pytest.approx(1860.0)
    assert choice.cost == pytest.approx(1860.0 / 3600 * 4)
    assert picked(choose(space(), law, PRICES, budget=2.25)) == (2, 2)


def test_deadline_buys_the_least_cost_meeting_it():
    choice = choose(space(), law, PRICES, deadline=2000)
    assert choice.feasible and choice.goal == "cost"
    assert picked(choice) == (1, 2)
    assert picked(choose(space(), law, PRICES, deadline=1500)) == (2, 2)
    assert picked(choose(space(), law, PRICES, deadline=4000)) == (1, 1)  # all meet it: the cheapest


def test_neither_gives_the_least_runtime_within_the_fair_share():
    assert picked(choose(space(), law, PRICES)) == (2, 2)
    assert picked(choose(space(), law, PRICES, max_cpus=2)) == (1, 2)
    assert picked(choose(space(), law, PRICES, max_workers=1)) == (2, 1)
    # the share bounds a budget's goal too
    assert picked(choose(space(), law, PRICES, budget=100, max_cpus=2)) == (1, 2)


def test_both_constraints_buy_runtime():
    choice = choose(space(), law, PRICES, budget=2.2, deadline=3000)
    assert choice.feasible and picked(choice) == (1, 2)


def test_gpu_when_it_pays():
    pool = Pool(cores=2, workers=2, devices=("cpu", "gpu"))
    prices = Prices(cpu=1.0, gb=1.0, gpu=100.0)
    configs = candidate_configs(pool, GIB)
    # GPU configs run 10x faster: (2, 1) 260.6 s at $103/h, (2, 2) 133.3 s at $206/h, (1, 2) 186 s at $204/h
    fast = choose(configs, law, prices, deadline=300)  # no CPU config is that fast
    assert fast.config.device == "gpu" and picked(fast) == (2, 1)
    assert fast.cost == pytest.approx((60 + 3600 / math.sqrt(2)) / 10 / 3600 * 103)
    cheap = choose(configs, law, prices, budget=2.05)  # only (1, 1) on CPU is that cheap
    assert cheap.config.device == "cpu" and picked(cheap) == (1, 1)
    assert choose(configs, law, prices).config.device == "gpu"  # no constraint: the fastest


def test_a_budget_too_small_returns_the_cheapest_as_not_feasible():
    choice = choose(space(), law, PRICES, budget=2.0)
    assert not choice.feasible
    assert picked(choice) == (1, 1) and choice.cost == pytest.approx(3660 / 3600 * 2)
    assert "cheapest" in choice.note and "2.03333" in choice.note


def test_a_deadline_too_near_returns_the_fastest_as_not_feasible():
    choice = choose(space(), law, PRICES, deadline=1000)
    assert not choice.feasible and picked(choice) == (2, 2)
    assert "fastest" in choice.note and "1332.79" in choice.note
    within_budget = choose(space(), law, PRICES, budget=2.1, deadline=1500)
    assert not within_budget.feasible and picked(within_budget) == (1, 2)
    assert "within the budget" in within_budget.note


@pytest.mark.parametrize("field", ["cpu", "gb", "gpu"])
@pytest.mark.parametrize("bad", [-0.01, float("nan"), float("inf"), "0.03", None, True])
def test_bad_prices_name_the_field(field, bad):
    values = {"cpu": 1.0, "gb": 1.0, "gpu": 1.0, field: bad}
    with pytest.raises(DataError) as error:
        Prices(**values)
    assert error.value.field == f"price_{field}"
    assert repr(bad) in error.value.found


@pytest.mark.parametrize("bad", [-1, float("nan"), "5", float("-inf")])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(DataError) as error:
        choose(space(), law, PRICES, budget=bad)
    assert error.value.field == "budget"


@pytest.mark.parametrize("past", [0, -5.0, 0.0])
def test_a_deadline_in_the_past_is_refused(past):
    with pytest.raises(DataError) as error:
        choose(space(), law, PRICES, deadline=past)
    assert error.value.field == "deadline" and "future" in error.value.expected
    with pytest.raises(DataError):
        check_deadline(float("nan"))


def test_a_bad_prediction_is_refused_not_chosen():
    with pytest.raises(DataError) as error:
        choose(space(), lambda config: float("nan"), PRICES)
    assert error.value.field == "predict"


def test_bad_configs_and_pools_name_the_field():
    with pytest.raises(DataError, match="threads"):
        ResourceConfig(threads=0)
    with pytest.raises(DataError, match="device"):
        ResourceConfig(device="tpu")
    with pytest.raises(DataError, match="pool.devices"):
        Pool(cores=1, workers=1, devices=())
    with pytest.raises(DataError, match="configs"):
        choose([ResourceConfig(threads=2)], law, PRICES, max_cpus=1)
