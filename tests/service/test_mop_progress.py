"""A torch job's stored MOP progress: one typed record, its JSON and the runner's resume state."""

from __future__ import annotations

import json
import math

from ease_jupyter.execution.mop.resume import TrialProgress
from ease_jupyter.service.mop_progress import JobProgress
from ease_jupyter.store import open_store


def test_progress_round_trips_through_the_stored_json_and_resumes_from_the_newest_checkpoints():
    _, blobs = open_store("memory://")
    ckpt = {name: blobs.put_bytes(name.encode()) for name in ("t0-e1", "t1-e1", "t0-u1", "t0-u2")}
    progress = JobProgress(partitions=2)
    for trial, score in (("t0", 0.5), ("t1", float("nan"))):
        progress.record_epoch(trial, 1, score, ckpt[f"{trial}-e1"])
    assert progress.complete(["t0", "t1"], 1) and progress.epoch == 1
    progress.record_unit("t0", TrialProgress(visited=(1,), loss_sum=2.0, examples=4.0, seconds=0.5), ckpt["t0-u1"])
    progress.record_unit("t0", TrialProgress(visited=(1, 0), loss_sum=3.0, examples=8.0, seconds=1.0), ckpt["t0-u2"])
    assert not progress.complete(["t0", "t1"], 2)  # no score of epoch 2 yet

    again = JobProgress.from_json(progress.to_json())
    assert json.loads(again.to_json()) == json.loads(progress.to_json())
    assert again.trained_units == 2 and again.best == {"t0": (0.5, ckpt["t0-e1"], 1)}  # a NaN score is never best
    state = again.resume_state(blobs)
    assert (state.epoch, state.partitions) == (1, 2)
    assert state.trials["t0"].visited == (1, 0) and state.trials["t0"].scores == (0.5,)
    assert state.trials["t1"].visited == () and math.isnan(state.trials["t1"].scores[0])
    assert state.checkpoints == {"t0": b"t0-u2", "t1": b"t1-e1"}  # a unit's checkpoint wins over its epoch's


def test_a_record_written_by_the_earlier_format_still_loads():
    stored = {"epoch": 1, "ckpts": {"t0": "d0"}, "scores": {"t0": [0.25]}, "best": {"t0": [0.25, "d0", 1]},
              "seconds": 3.5, "partitions": 4, "units": {"t0": {"visited": [2], "loss_sum": 1.0, "examples": 2.0,
                                                                 "seconds": 0.1, "ckpt": "d1"}},
              "trained_units": 5}
    progress = JobProgress.from_json(json.dumps(stored))
    assert json.loads(progress.to_json()) == stored
