"""benchmarks/workload.py: its measures on hand-made results (the loss
curve, the time to a loss level, the pooled curve, the ratios and targets,
the JSON layout), its users and held-out split, and one tiny end-to-end
``--smoke`` run (the live service and per-user Optuna studies on three
small users)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wl():
    return load_benchmark("workload")


REFERENCE = {"a": 0.9, "b": 0.8}
RESULTS = {"a": [(1.0, 0.5), (3.0, 0.9), (9.0, 0.95)], "b": [(2.0, 0.8)]}


def test_loss_curve_steps_at_each_result_and_counts_a_user_before_her_first_result(wl):
    curve = wl.loss_curve(RESULTS, REFERENCE, end=5.0)
    # 0: nobody has a result, each loses her whole reference; the result at 9 s is past the end.
    assert curve == [[0.0, pytest.approx(0.85)], [1.0, pytest.approx(0.6)], [2.0, pytest.approx(0.2)],
                     [3.0, pytest.approx(0.0)], [5.0, pytest.approx(0.0)]]


def test_loss_curve_keeps_the_best_so_far_not_the_latest(wl):
    curve = wl.loss_curve({"a": [(1.0, 0.9), (2.0, 0.4)]}, {"a": 0.9}, end=3.0)
    assert [loss for _, loss in curve] == [pytest.approx(0.9), 0.0, 0.0, 0.0]


def test_time_to_loss_is_the_first_time_at_or_below_the_level(wl):
    curve = wl.loss_curve(RESULTS, REFERENCE, end=5.0)
    assert wl.time_to_loss(curve, 0.2) == 2.0  # reached exactly
    assert wl.time_to_loss(curve, 0.05) == 3.0
    assert wl.time_to_loss(curve, 0.7) == 1.0
    never = wl.loss_curve({"a": [(1.0, 0.5)]}, {"a": 0.9}, end=5.0)
    assert wl.time_to_loss(never, 0.05) is None


def test_reference_is_the_best_of_any_run_and_zero_without_results(wl):
    runs = [{"a": [(1.0, 0.7)]}, {"a": [(4.0, 0.93), (5.0, 0.6)], "b": [(2.0, 0.5)]}]
    assert wl.reference_accuracy(runs, ["a", "b", "c"]) == {"a": 0.93, "b": 0.5, "c": 0.0}


def test_mean_curve_holds_each_step_function_until_its_next_step(wl):
    pooled = wl.mean_curve([[[0.0, 1.0], [2.0, 0.0]], [[0.0, 0.5], [1.0, 0.1], [3.0, 0.1]]])
    assert pooled == [[0.0, 0.75], [1.0, 0.55], [2.0, 0.05], [3.0, 0.05]]


def test_ratio_is_a_lower_bound_when_the_other_arm_never_got_there(wl):
    assert wl.ratio(6.0, 2.0, budget=100.0) == {"ratio": 3.0, "lower_bound": False}
    assert wl.ratio(None, 4.0, budget=100.0) == {"ratio": 25.0, "lower_bound": True}
    assert wl.ratio(6.0, None, budget=100.0) == {"ratio": None, "lower_bound": False}


def _run(results, final, end=10.0):
    return {"results": results, "final_accuracy": final, "end": end, "load": {"mean": 1.0}, "cpu_seconds": 1.0}


def test_summarize_writes_the_arms_layout_and_judges_the_targets(wl):
    names = ["a", "b"]
    runs = {
        # easeml reaches loss 0 at 2 s, fifo at 4 s (2x: meets 1.5x), optuna at 3 s (1.5x: misses 2x).
        "easeml": [_run({"a": [(1.0, 0.9)], "b": [(2.0, 0.8)]}, {"a": 0.9, "b": 0.7})],
        "fifo": [_run({"a": [(4.0, 0.9)], "b": [(1.0, 0.8)]}, {"a": 0.9, "b": 0.7})],
        "optuna_per_user": [_run({"a": [(3.0, 0.9)], "b": [(1.0, 0.8)]}, {"a": 0.95, "b": 0.7})],
    }
    out = wl.summarize(runs, names, budget=10.0, held_out={"a": 20, "b": 10}, last_arrival=1.0)
    assert out["reference_accuracy"] == {"a": 0.9, "b": 0.8}
    assert set(out["arms"]) == {"easeml", "fifo", "optuna_per_user"}
    for arm in out["arms"].values():
        assert set(arm["time_to_loss"]) == {"0.05", "0.02", "0.01"}
        assert {"curve", "final_accuracy", "runs", "repetitions", "censored"} <= set(arm)
        assert arm["curve"][0] == [0.0, pytest.approx(0.85)]
    assert out["arms"]["easeml"]["time_to_loss"]["0.02"] == 2.0
    assert out["arms"]["fifo"]["time_to_loss"]["0.02"] == 4.0
    fifo = out["targets"]["easeml_vs_fifo_t0.02"]
    optuna = out["targets"]["easeml_vs_optuna_per_user_t0.02"]
    assert (fifo["ratio"], fifo["met"]) == (2.0, True)
    assert (optuna["ratio"], optuna["met"]) == (1.5, False)
    # Counted from the last arrival (1 s): easeml 1 s, fifo 3 s, optuna 2 s.
    assert out["arms"]["fifo"]["time_after_last_arrival"]["0.02"] == 3.0
    assert (fifo["ratio_after_last_arrival"], optuna["ratio_after_last_arrival"]) == (3.0, 2.0)
    worse = out["targets"]["final_accuracy_not_worse"]
    assert worse["met"] is False
    assert worse["worse"] == [{"user": "a", "arm": "optuna_per_user", "easeml": 0.9, "optuna_per_user": 0.95,
                               "difference": -0.05, "examples": -1.0}]
    json.dumps(out)  # the layout is JSON as it stands


def test_time_to_loss_over_repetitions_is_their_mean_and_censored_when_one_never_got_there(wl):
    runs = {"easeml": [_run({"a": [(2.0, 0.9)]}, {"a": 1.0}), _run({"a": [(4.0, 0.9)]}, {"a": 1.0})],
            "fifo": [_run({"a": [(2.0, 0.9)]}, {"a": 1.0}), _run({"a": [(3.0, 0.5)]}, {"a": 1.0})]}
    out = wl.summarize(runs, ["a"], budget=10.0)
    assert out["arms"]["easeml"]["time_to_loss"]["0.02"] == 3.0
    assert out["arms"]["fifo"]["time_to_loss"]["0.02"] is None
    assert out["arms"]["fifo"]["censored"]["0.02"] == 1
    target = out["targets"]["easeml_vs_fifo_t0.02"]
    assert target["lower_bound"] is True and target["per_repetition"] == [1.0, 2.5]
    # the mean ratio (2 + 10) / (2 + 4) = 2 clears 1.5, but one repetition gave 1: the interval's low end does not
    assert target["interval"]["low"] <= 1.0 < 1.5 and target["interval"]["high"] >= 2.0
    assert (target["verdict"], target["met"]) == ("missed", False)


def test_a_target_is_met_when_every_repetition_clears_it_and_unresolved_when_easeml_missed_the_level(wl):
    runs = {"easeml": [_run({"a": [(2.0, 0.9)]}, {"a": 1.0}), _run({"a": [(3.0, 0.9)]}, {"a": 1.0})],
            "fifo": [_run({"a": [(5.0, 0.9)]}, {"a": 1.0}), _run({"a": [(7.0, 0.9)]}, {"a": 1.0})]}
    target = wl.summarize(runs, ["a"], budget=10.0)["targets"]["easeml_vs_fifo_t0.02"]
    assert target["interval"]["low"] >= 2.0 and (target["verdict"], target["met"]) == ("met", True)
    runs["easeml"][1] = _run({"a": [(3.0, 0.5)]}, {"a": 1.0})  # never reached: counts the 10 s budget
    runs["fifo"] = [_run({"a": [(9.0, 0.9)]}, {"a": 1.0}), _run({"a": [(9.5, 0.5)]}, {"a": 1.0})]
    target = wl.summarize(runs, ["a"], budget=10.0)["targets"]["easeml_vs_fifo_t0.02"]
    assert target["verdict"] in ("unresolved", "missed") and target["met"] is False


@pytest.mark.parametrize("quick", [False, True])
def test_the_workload_has_more_users_than_workers_of_both_kinds_arriving_in_order(wl, quick):
    people = wl.users(quick)
    assert len(people) >= 8 and len({u.name for u in people}) == len(people)
    assert {u.kind for u in people} == {"flat", "image"}
    for kind in ("flat", "image"):
        assert sum(u.kind == kind for u in people) > wl.WORKERS
    arrivals = [u.arrival for u in people]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0 and arrivals[-1] > 0.0
    # some candidates are costly: an image user's examples hold at least 4x the pixels of another's
    pixels = [u.make()[0][0].size for u in people if u.kind == "image"]
    assert max(pixels) >= 4 * min(pixels)


def test_held_out_split_is_ten_percent_stratified_disjoint_and_seeded(wl):
    y = np.repeat(np.arange(3), [50, 30, 20])
    fed, held = wl.holdout_split(y, seed=4)
    assert len(held) == 10 and len(fed) == 90
    assert not set(fed) & set(held) and set(fed) | set(held) == set(range(100))
    assert np.bincount(y[held]).tolist() == [5, 3, 2]
    assert np.array_equal(wl.holdout_split(y, seed=4)[1], held)
    assert not np.array_equal(wl.holdout_split(y, seed=5)[1], held)


@pytest.mark.slow
def test_smoke_run_on_the_live_service_and_per_user_optuna(tmp_path):
    out = tmp_path / "smoke.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "workload.py"), "--smoke", "--out", str(out)],
                          capture_output=True, text=True, timeout=420, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    payload = json.loads(out.read_text())
    names = [u["name"] for u in payload["setup"]["users"]]
    assert set(payload["arms"]) == {"easeml", "optuna_per_user"}
    for name, arm in payload["arms"].items():
        run = arm["runs"][0]
        assert run["finished"] and not run["errors"], (name, run["errors"])
        assert arm["time_to_loss"]["0.05"] is not None
        losses = [loss for _, loss in arm["curve"]]
        assert losses == sorted(losses, reverse=True)  # the best so far never gets worse
        for user in names:
            assert 0.5 < arm["final_accuracy"][user] <= 1.0
            assert run["results"][user], (name, user)  # every user got results in both arms
    assert out.with_suffix(".md").exists()


def test_first_result_wait_counts_from_each_users_arrival(wl):
    runs = {"easeml": [_run({"a": [(5.0, 0.9), (3.0, 0.8)], "b": []}, {"a": 0.9, "b": 0.0}),
                       _run({"a": [(2.0, 0.9)], "b": [(9.0, 0.7)]}, {"a": 0.9, "b": 0.7})]}
    out = wl.summarize(runs, ["a", "b"], budget=10.0, arrivals={"a": 1.0, "b": 4.0})
    # a: 3 - 1 and 2 - 1, mean 1.5; b: none in one run, so none over the runs
    assert out["arms"]["easeml"]["first_result_wait"] == {"a": 1.5, "b": None}


def test_the_no_prior_arm_runs_the_default_rule_without_the_cross_user_prior_and_is_compared(wl):
    assert "easeml_no_prior" in wl.ALL_ARMS and "easeml_no_prior" not in wl.ARMS  # only when asked for
    assert wl.POLICY["easeml_no_prior"] == wl.POLICY["easeml"] == "default"
    setup = wl.Setup(workers=2, torch_epochs=2, budget=75.0, warmup=3.0, worker_nice=5, torch_workloads=2,
                     poll=1.0, quick=True)
    with_prior, without = wl.serve_args("easeml", setup), wl.serve_args("easeml_no_prior", setup)
    assert "--no-cross-user-prior" in without and "--no-cross-user-prior" not in with_prior
    assert [a for a in without if a != "--no-cross-user-prior"] == with_prior  # nothing else differs
    runs = {"easeml": [_run({"a": [(2.0, 0.9)]}, {"a": 0.9}), _run({"a": [(4.0, 0.9)]}, {"a": 0.9})],
            "easeml_no_prior": [_run({"a": [(6.0, 0.9)]}, {"a": 0.9}), _run({"a": [(6.0, 0.9)]}, {"a": 0.9})]}
    out = wl.summarize(runs, ["a"], budget=10.0)
    assert set(out["arms"]) == {"easeml", "easeml_no_prior"}
    assert out["arms"]["easeml_no_prior"]["time_to_loss"]["0.02"] == 6.0
    effect = out["cross_user_prior"]["0.02"]
    assert (effect["ratio"], effect["lower_bound"], effect["per_repetition"]) == (2.0, False, [3.0, 1.5])
    assert out["targets"] == {}  # the targets compare against fifo and optuna_per_user only
    assert "cross_user_prior" not in wl.summarize({"easeml": runs["easeml"]}, ["a"], budget=10.0)
    json.dumps(out)


def test_the_no_express_arm_differs_by_the_express_slot_alone_and_is_compared(wl):
    assert "easeml_no_express" in wl.ALL_ARMS and "easeml_no_express" not in wl.ARMS
    assert wl.POLICY["easeml_no_express"] == wl.POLICY["easeml"] == "default"
    setup = wl.Setup(workers=2, torch_epochs=2, budget=75.0, warmup=3.0, worker_nice=5, torch_workloads=2,
                     poll=1.0, quick=True)
    with_slot, without = wl.serve_args("easeml", setup), wl.serve_args("easeml_no_express", setup)
    i = without.index("--express-slots")
    assert without[i + 1] == "0" and without[:i] + without[i + 2:] == with_slot  # serve's default is one slot
    assert "--express-slots" not in with_slot
    runs = {"easeml": [_run({"a": [(2.0, 0.9)]}, {"a": 0.9}), _run({"a": [(4.0, 0.9)]}, {"a": 0.9})],
            "easeml_no_express": [_run({"a": [(6.0, 0.9)]}, {"a": 0.9}), _run({"a": [(5.0, 0.9)]}, {"a": 0.9})]}
    out = wl.summarize(runs, ["a"], budget=10.0)
    effect = out["express_slots"]["0.02"]
    assert (effect["ratio"], effect["lower_bound"], effect["per_repetition"]) == (round(5.5 / 3.0, 3), False,
                                                                                 [3.0, 1.25])
    assert "express_slots" not in wl.summarize({"easeml": runs["easeml"]}, ["a"], budget=10.0)


def test_an_unknown_arm_is_refused_naming_every_arm(wl, capsys):
    with pytest.raises(SystemExit):
        wl.main(["--arms", "easeml,nope"])
    assert "easeml_no_prior" in capsys.readouterr().err


def test_no_arm_can_reach_a_level_before_the_users_still_to_come_hold_less_than_it(wl):
    reference = {"a": 0.9, "b": 0.8, "c": 0.05}
    # 0.02 x 3 users = 0.06: b (0.8) must have arrived; c (0.05) may still be to come
    assert wl.earliest_possible(reference, {"a": 0.0, "b": 4.0, "c": 9.0}, 0.02) == 4.0
    assert wl.earliest_possible(reference, {"a": 0.0, "b": 4.0, "c": 9.0}, 0.5) == 0.0
    assert wl.earliest_possible({"a": 0.9}, {}, 0.02) == 0.0


def test_a_target_beyond_what_the_arrivals_allow_is_saturated_not_missed(wl):
    # b arrives at 4 s: no arm reaches 0.02 before, so against optuna's 5 s the most any arm shows is 1.25
    runs = {"easeml": [_run({"a": [(1.0, 0.9)], "b": [(4.5, 0.8)]}, {"a": 0.9, "b": 0.8})] * 2,
            "optuna_per_user": [_run({"a": [(1.0, 0.9)], "b": [(5.0, 0.8)]}, {"a": 0.9, "b": 0.8})] * 2,
            "fifo": [_run({"a": [(1.0, 0.9)], "b": [(9.0, 0.8)]}, {"a": 0.9, "b": 0.8})] * 2}
    out = wl.summarize(runs, ["a", "b"], budget=10.0, last_arrival=4.0, arrivals={"a": 0.0, "b": 4.0})
    assert out["floor_t0.02"] == 4.0
    optuna, fifo = out["targets"]["easeml_vs_optuna_per_user_t0.02"], out["targets"]["easeml_vs_fifo_t0.02"]
    assert optuna["reachable"]["high"] == pytest.approx(1.25)
    assert (optuna["verdict"], optuna["met"]) == ("saturated", False)
    assert fifo["reachable"]["value"] == pytest.approx(2.25) and fifo["verdict"] == "met"
    # an arm that missed the level gives only a bound on its time: its target stays a miss
    runs["optuna_per_user"] = [_run({"a": [(1.0, 0.9)], "b": [(5.0, 0.5)]}, {"a": 0.9, "b": 0.8})] * 2
    out = wl.summarize(runs, ["a", "b"], budget=4.8, last_arrival=4.0, arrivals={"a": 0.0, "b": 4.0})
    assert out["targets"]["easeml_vs_optuna_per_user_t0.02"]["verdict"] == "missed"
