"""benchmarks/provisioner.py on a tiny plan (seconds): the job log and its
leave-one-task-out errors, the profiler recovering a known law from the
log's features, the FLOPs proxy's correction, the provisioner's two
questions on a hand-made runtime table, the simulated space, the selection
replay and the JSON layout. Correctness only, never speed."""

import json
import math

import numpy as np
import pytest

from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def pb():
    return load_benchmark("provisioner")


@pytest.fixture(scope="module")
def tiny(pb):
    return pb.Plan(flat_tasks=("iris", "wine", "tiny"), fractions=(0.5, 1.0), families=("logreg", "knn"),
                   torch_tasks=("digits_images", "noise_images"), torch_fractions=(0.05,), torch_epochs=(1, 2),
                   acai_epochs=1, acai_configs=2, acai_repeats=1, seeds=1, reps=2, n_test=5)


@pytest.fixture(scope="module")
def records(pb, tiny):
    return pb.job_log(tiny)


def test_job_log_measures_every_planned_job_with_its_features(pb, tiny, records):
    # 3 tasks x 2 families x 2 sizes x 2 point counts (1 and the grid) x 2 threads, and
    # 2 image tasks x 1 net x 1 size x 2 epochs x 2 threads
    assert len(records) == 3 * 2 * 2 * 2 * 2 + 2 * 1 * 1 * 2 * 2
    assert {r["task"] for r in records} == {"iris", "wine", "tiny", "digits_images", "noise_images"}
    assert all(r["seconds"] > 0 and r["flops"] > 0 for r in records)
    iris = [r for r in records if r["task"] == "iris" and r["family"] == "logreg"]
    assert {r["n"] for r in iris} == {75, 150} and {r["d"] for r in iris} == {4} and {r["k"] for r in iris} == {3}
    assert {r["points"] for r in iris} == {1, 3} and {r["threads"] for r in iris} == {1, 2}
    images = [r for r in records if r["engine"] == "torch"]
    assert {r["d"] for r in images} == {64} and {r["epochs"] for r in images} == {1, 2}


def test_flops_proxy_is_flops_at_one_gflops_times_the_median_measured_ratio(pb):
    train = [{"engine": "sklearn", "flops": 1e9, "seconds": s} for s in (1.0, 2.0, 4.0)]
    correction = pb.flops_correction(train)
    assert correction == {"sklearn": 2.0, "torch": 2.0}  # torch has no job: the median over all
    assert pb.flops_seconds({"engine": "sklearn", "flops": 3e9}, correction) == pytest.approx(6.0)


def test_leave_one_task_out_never_trains_on_the_held_out_task(pb, records):
    held = pb.leave_one_task_out(records)
    assert len(held) == len(records)
    iris = [h for h in held if h["task"] == "iris"]
    # the proxy's correction comes from the other tasks only
    others = pb.flops_correction([r for r in records if r["task"] != "iris"])
    assert [h["flops_proxy"] for h in iris] == [pytest.approx(pb.flops_seconds(h, others)) for h in iris]
    errors = pb.prediction_errors(held)
    for arm in ("profiler", "flops"):
        e = errors[arm]
        assert math.isfinite(e["value"]) and e["value"] >= 0 and e["low"] <= e["value"] <= e["high"]
    assert errors["jobs"] == len(records)


def test_profiler_recovers_a_known_law_on_the_logs_features(pb, records):
    found = pb.synthetic_law(records)
    for name, exponent in pb.SYNTHETIC_LAW.items():
        assert found["recovered"][name] == pytest.approx(exponent, abs=0.1), name
    assert found["median_abs_log_error"] < 0.15  # the noise is 0.05 in log seconds


def test_provision_answers_acais_two_questions_on_a_hand_made_table(pb):
    from ease_jupyter.selection.provisioner import DEFAULT_PRICES, ResourceConfig

    small, big = 256 * 2**20, pb.WORKER_MEMORY
    seconds = {(1, 1): 100.0, (2, 1): 60.0, (1, 2): 55.0}
    space = [ResourceConfig(threads=t, workers=w, memory_bytes=m) for (t, w) in seconds for m in (small, big)]
    baseline = ResourceConfig(threads=1, workers=1, memory_bytes=big)
    out = pb.provision(space, lambda c: seconds[(c.threads, c.workers)], baseline)
    base_cost = DEFAULT_PRICES.cost(baseline, 100.0)
    # fastest within the baseline's cost: two workers at Seneca's size (2 small reservations)
    assert out["at_cost_cap"]["config"] == {"threads": 1, "workers": 2, "partitions": 1, "memory_bytes": small,
                                            "device": "cpu"}
    assert out["speedup_at_cost_cap"] == pytest.approx(100.0 / 55.0)
    # cheapest within the baseline's runtime: the same single thread with less memory
    assert out["at_deadline"]["config"]["memory_bytes"] == small and out["at_deadline"]["config"]["threads"] == 1
    cheap = DEFAULT_PRICES.cost(ResourceConfig(threads=1, workers=1, memory_bytes=small), 100.0)
    assert out["cost_cut_at_deadline"] == pytest.approx(1 - cheap / base_cost)


def test_simulated_space_follows_the_amdahl_fit_of_the_measured_curve(pb):
    m = {"seconds": {"threads=1,workers=1": 10.0, "threads=2,workers=1": 6.0, "threads=1,workers=2": 5.0},
         "configs": 2, "seneca_memory_bytes": 256 * 2**20}
    sim = pb.acai_simulated(m)
    assert sim["SIMULATED"] is True
    assert sim["model"]["amdahl_parallel_fraction"] == pytest.approx(0.8)  # 6/10 = 0.2 + 0.8/2
    assert sim["model"]["worker_efficiency"] == pytest.approx(1.0)
    assert sim["baseline"]["seconds"] == pytest.approx(5.0 * pb.SIM_CONFIGS)  # 5 s a config, one after another
    assert sim["speedup_at_cost_cap"] > 1 and 0 < sim["cost_cut_at_deadline"] < 1


def test_replay_advances_by_the_true_costs_and_stops_at_the_level(pb):
    from ease_jupyter.selection import ModelPrior

    rng = np.random.default_rng(0)
    q = rng.uniform(0.5, 1.0, (12, 4))
    true = np.full(q.shape, 2.0)
    prior = ModelPrior(random_state=0).fit(q[4:])
    told = rng.uniform(0.1, 10.0, q.shape)  # whatever the selector is told, time is the true cost
    hit = pb.replay(q[:4], true[:4], told[:4], prior, budget=1e6, seed=0)
    assert hit is not None and hit % 2.0 == 0 and 4 * 2.0 <= hit <= 16 * 2.0  # each user needs a run
    assert pb.replay(q[:4], true[:4], told[:4], prior, budget=7.0, seed=0) is None  # 3 runs cannot serve 4 users


def test_run_writes_the_issues_keys_with_finite_figures(pb, tiny, records, monkeypatch):
    monkeypatch.setattr(pb, "job_log", lambda plan, progress=None: records)  # measured once, above
    doc = pb.run(tiny)
    text = json.dumps(doc, default=float)
    back = json.loads(text)
    assert set(back["median_abs_log_error"]) == {"profiler", "flops"}
    assert set(back["autoprovision"]) == {"speedup_at_cost_cap", "cost_cut_at_deadline"}
    assert set(back["selection"]) == {"t_0.02_predicted_costs", "t_0.02_flops_costs"}
    for group in ("median_abs_log_error", "autoprovision", "selection"):
        assert all(isinstance(v, float) and math.isfinite(v) for v in back[group].values()), group
    assert back["autoprovision"]["speedup_at_cost_cap"] > 0 and back["autoprovision"]["cost_cut_at_deadline"] < 1
    measured = back["details"]["autoprovision"]["measured"]
    assert set(measured["seconds"]) == {"threads=1,workers=1", "threads=2,workers=1", "threads=1,workers=2"}
    assert measured["seneca_memory_bytes"] < pb.WORKER_MEMORY
    assert back["details"]["autoprovision"]["simulated"]["SIMULATED"] is True
    assert len(back["machine"]["load_after"]) == 3
