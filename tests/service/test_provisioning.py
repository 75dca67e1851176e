"""The service's side of the auto-provisioner: prices from ``easeml serve``
and :func:`provision_pick` turning a user's budget state into constraints."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from ease_jupyter.errors import DataError
from ease_jupyter.selection.provisioner import (
    DEFAULT_PRICES,
    GIB,
    Pool,
    Prices,
    ResourceConfig,
)
from ease_jupyter.service import ServiceConfig
from ease_jupyter.service.budget import Limits, Spent
from ease_jupyter.service.provisioning import fair_share, provision_pick

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)
PRICES = Prices(cpu=1.0, gb=1.0, gpu=100.0)
POOL = Pool(cores=2, workers=2)


def law(config: ResourceConfig) -> float:
    """60 s serial + 3600 s of work: (t, w) -> (1,1) 3660, (2,1) 2605.6, (1,2) 1860, (2,2) 1332.8 s;
    ten times faster on a GPU."""
    seconds = 60 + 3600 / (config.workers * math.sqrt(config.threads))
    return seconds / 10 if config.device == "gpu" else seconds


def pick(**kw):
    kw.setdefault("now", NOW)
    return provision_pick(pool=kw.pop("pool", POOL), memory_bytes=GIB, predict=kw.pop("predict", law),
                          prices=PRICES, **kw)


def shape(provisioned):
    return provisioned.choice.config.threads, provisioned.choice.config.workers


def test_no_limits_is_the_fastest_within_the_fair_share():
    assert shape(pick()) == (2, 2)
    assert fair_share(POOL, 2) == (2, 1)
    assert shape(pick(active_users=2)) == (2, 1)  # one worker each
    assert pick().source == "profiler" and pick().json()["config"]["memory_bytes"] == GIB


def test_her_deadline_and_seconds_left_are_the_runtime_cap():
    # 2000 s to her deadline: the cheapest configuration that finishes is (1, 2)
    assert shape(pick(limits=Limits(deadline=NOW + timedelta(seconds=2000)))) == (1, 2)
    assert pick(limits=Limits(deadline=NOW + timedelta(seconds=2000))).choice.goal == "cost"
    # a seconds budget with 1500 s left is the tighter cap: only (2, 2) finishes within it
    limits = Limits(seconds=2500, deadline=NOW + timedelta(seconds=2000))
    assert shape(pick(limits=limits, spent=Spent(cpu=1000))) == (2, 2)


def test_a_deadline_past_or_a_budget_spent_is_a_nearest_miss_saying_so():
    # Refused where it is set (budget.parse_deadline); at a pick (or a read of
    # the task's profile) it has passed since, and nothing can meet it.
    for limits, spent in ((Limits(deadline=NOW - timedelta(seconds=1)), None), (Limits(seconds=100), Spent(cpu=100))):
        out = pick(limits=limits, spent=spent)
        assert not out.choice.feasible and "deadline has passed" in out.choice.note
        assert out.choice.seconds == pytest.approx(pick().choice.seconds)  # the fastest


def test_gpu_seconds_left_cap_only_gpu_configurations():
    pool = Pool(cores=2, workers=2, devices=("cpu", "gpu"))
    assert pick(pool=pool).choice.config.device == "gpu"  # fastest
    # 200 GPU seconds left: (2, 1) on GPU (260.6 s) no longer fits, (2, 2) (133.3 s) does
    assert pick(pool=pool, limits=Limits(gpu_seconds=300), spent=Spent(gpu=100)).choice.config.device == "gpu"
    # 100 GPU seconds left: no GPU configuration fits, so CPUs
    none_left = pick(pool=pool, limits=Limits(gpu_seconds=300), spent=Spent(gpu=200))
    assert none_left.choice.config.device == "cpu" and shape(none_left) == (2, 2)
    gpu_only = pick(pool=Pool(cores=2, workers=2, devices=("gpu",)), limits=Limits(gpu_seconds=50))
    assert not gpu_only.choice.feasible and "GPU seconds" in gpu_only.choice.note


def test_a_money_budget_buys_runtime_and_must_cover_a_profiling_run():
    assert shape(pick(budget=2.1)) == (1, 2)
    with pytest.raises(DataError) as error:
        pick(budget=0.5, profiling_cost=0.6)
    assert error.value.field == "budget" and "profiling run" in error.value.expected
    with pytest.raises(DataError, match="budget"):
        pick(budget=-1)


@pytest.mark.parametrize("broken", [lambda c: 1 / 0, lambda c: float("nan"), lambda c: -3.0, lambda c: "9"])
def test_a_failing_prediction_falls_back_to_the_proxy_and_says_so(broken):
    provisioned = pick(predict=broken, fallback=law)
    assert provisioned.source == "flops" and shape(provisioned) == (2, 2)
    assert "prediction failed" in provisioned.json()["note"]
    with pytest.raises(DataError, match="predict"):
        pick(predict=broken)  # no fallback
    with pytest.raises(DataError, match="fallback"):
        pick(predict=broken, fallback=broken)


def test_service_config_checks_the_prices_naming_the_field():
    assert ServiceConfig().prices == DEFAULT_PRICES
    assert ServiceConfig(price_cpu=0.05, price_gb=0.01, price_gpu=1.0).prices == Prices(0.05, 0.01, 1.0)
    for field in ("price_cpu", "price_gb", "price_gpu"):
        for bad in (-1.0, float("nan"), "0.1"):
            with pytest.raises(ValueError, match=rf"^{field}: found"):
                ServiceConfig(**{field: bad})


@pytest.mark.parametrize("option", ["--price-cpu", "--price-gb", "--price-gpu"])
@pytest.mark.parametrize("bad", ["-0.5", "nan", "inf"])
def test_serve_refuses_a_bad_price_naming_the_option(tmp_path, option, bad, monkeypatch):
    from ease_jupyter import service
    from ease_jupyter.cli import main

    monkeypatch.setattr(service, "serve", lambda config, **kw: None)  # a price let through must not start one
    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), option, bad])
    assert result.exit_code == 2
    assert f"'{option}'" in result.output and "price per hour" in result.output


def test_serve_passes_the_prices_to_the_service(tmp_path, monkeypatch):
    from ease_jupyter import service
    from ease_jupyter.cli import main

    served: list[ServiceConfig] = []
    monkeypatch.setattr(service, "serve", lambda config, **kw: served.append(config))
    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), "--db", "memory://",
                                       "--price-cpu", "0.5", "--price-gb", "0.25", "--price-gpu", "2"])
    assert result.exit_code == 0, result.output
    assert served[0].prices == Prices(cpu=0.5, gb=0.25, gpu=2.0)
