"""What her code prints and raises stays hers: a failed profiling run of
her model logs the error's type only (her job's error keeps the text),
while our own failures keep their traceback in the log."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import numpy as np
import pytest

from ease_jupyter import user_sandbox
from ease_jupyter.errors import EaseMLError
from ease_jupyter.selection.profile_plan import ProfileRun
from ease_jupyter.service import profile_runs
from ease_jupyter.user_sandbox import UserModelError, from_user_code, run_user_code

SECRET = "ALICE_PRINTED: patient 4711"


def _her_fit():
    print(SECRET)
    raise ValueError("her fit gave up")


def _her_error(deadline):
    with pytest.raises(UserModelError) as caught:
        run_user_code(_her_fit, deadline=deadline, what="chatty.fit")
    assert SECRET in str(caught.value)  # the job's error keeps it, for her
    return caught.value


def _data():
    return SimpleNamespace(X=np.zeros((40, 2)), y=np.arange(40) % 2, split_keys=np.arange(40))


def test_her_failed_profiling_run_logs_no_text_of_hers(monkeypatch, caplog):
    deadline = time.time() + 60
    try:
        error = _her_error(deadline)

        def grid_search(*args, **kwargs):  # as the grid reports a point's failure: her text in our message
            raise EaseMLError(f"grid: every combination failed (first error: UserModelError: {error})")

        monkeypatch.setattr(profile_runs, "grid_search", grid_search)
        monkeypatch.setattr(profile_runs, "limit_threads", lambda candidate, threads: candidate)
        hers = SimpleNamespace(name="chatty", build=SimpleNamespace(deadline=deadline))
        with caplog.at_level(logging.WARNING, logger=profile_runs.log.name):
            assert profile_runs.profile_sklearn(hers, {}, _data(), True, None, [ProfileRun(20, 1)]) == []
            assert profile_runs.profile_in_units([ProfileRun(20, 1)], np.zeros((40, 2), np.float32), np.arange(40) % 2,
                                                 np.arange(40), lambda *a: (_ for _ in ()).throw(error), name="net") == []
        text = caplog.text + "".join(str(r.exc_info) for r in caplog.records)
        assert "profiling run" in text and "chatty" in text and "EaseMLError" in text and "UserModelError" in text
        assert SECRET not in text and "her fit gave up" not in text and not any(r.exc_info for r in caplog.records)
    finally:
        user_sandbox.close_job(deadline)


def test_our_own_failed_profiling_run_keeps_its_traceback(monkeypatch, caplog):
    def grid_search(*args, **kwargs):
        raise EaseMLError("grid: our own bug")

    monkeypatch.setattr(profile_runs, "grid_search", grid_search)
    monkeypatch.setattr(profile_runs, "limit_threads", lambda candidate, threads: candidate)
    zoo = SimpleNamespace(name="logreg")
    with caplog.at_level(logging.WARNING, logger=profile_runs.log.name):
        profile_runs.profile_sklearn(zoo, {}, _data(), True, None, [ProfileRun(20, 1)])
    assert caplog.records and caplog.records[0].exc_info and "our own bug" in caplog.text


def test_an_error_that_wraps_hers_is_hers():
    try:
        try:
            raise UserModelError("her traceback")
        except UserModelError as inner:
            raise RuntimeError("a unit failed") from inner
    except RuntimeError as outer:
        assert from_user_code(outer)
    assert not from_user_code(RuntimeError("ours"))


@pytest.mark.parametrize("hers", [True, False])
def test_a_failed_torch_job_logs_her_errors_type_only_and_our_own_traceback(monkeypatch, caplog, hers):
    from ease_jupyter.service import mop, user_models
    from ease_jupyter.store import JobStatus

    config = {"lrs": [0.1], "epochs": 1, **({"code": "0" * 64, "limit": 60.0} if hers else {})}
    job = SimpleNamespace(id=7, task_id=1, model="my_net" if hers else "lenet", config=config,
                          status=JobStatus.QUEUED)
    store = SimpleNamespace(get_job=lambda job_id: job, update_job=lambda *a, **k: job,
                            get_task=lambda task_id: SimpleNamespace(id=1))

    def candidate_of(*args):
        if hers:
            raise UserModelError(f"my_net raised:\nprinted before the error:\n{SECRET}\n\nValueError: x")
        raise RuntimeError("our own bug")

    monkeypatch.setattr(mop, "candidate_of", candidate_of)
    monkeypatch.setattr(user_models, "fail_any_job", lambda store, job, error, **_: job)
    with caplog.at_level(logging.WARNING, logger=mop.log.name):
        mop.run_torch_job(store, None, None, job.id)
    assert "torch job 7" in caplog.text
    if hers:
        assert "UserModelError" in caplog.text and SECRET not in caplog.text
        assert not any(r.exc_info for r in caplog.records)
    else:
        assert caplog.records[0].exc_info and "our own bug" in caplog.text
