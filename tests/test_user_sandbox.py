"""User code in a child process killed at its job's deadline
(``ease_jupyter.user_sandbox``): a call that hangs ends with its process, an
error comes back with the user's own traceback, and a job's calls share one child."""

from __future__ import annotations

import os
import time

import numpy as np
import psutil
import pytest

from ease_jupyter import user_sandbox, user_zygote
from ease_jupyter.user_confine import abi_version
from ease_jupyter.user_sandbox import (
    UserModelError,
    UserModelTimeout,
    for_job,
    run_user_code,
)


def _sleeps_forever(pid_file):
    with open(pid_file, "w") as out:
        out.write(str(os.getpid()))
    while True:
        time.sleep(1)


def _my_broken_step(x):
    raise ValueError(f"my step broke on {x}")


def _pid():
    return os.getpid()


def _gone_soon(pid: int, seconds: float = 5.0) -> bool:
    """Gone within ``seconds``: the parent's background reaper may be the one
    closing it (and waiting up to a second for it to end) when the test looks."""
    end = time.monotonic() + seconds
    while psutil.pid_exists(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def test_a_call_that_hangs_times_out_at_the_deadline_and_its_process_is_gone(notes):
    pid_file = notes / "pid"
    deadline = time.time() + 3
    started = time.monotonic()
    with pytest.raises(UserModelTimeout, match="still running at the job's time limit"):
        run_user_code(_sleeps_forever, str(pid_file), deadline=deadline, what="sleeps")
    assert time.monotonic() - started < 3 + 10  # at the deadline (slack for a loaded machine), not never
    pid = int(pid_file.read_text())
    # killed at once; on a loaded machine the zygote may reap it a little later
    assert pid != os.getpid() and _gone_soon(pid, 10.0)
    # The next job gets a fresh child, unaffected.
    assert run_user_code(pow, 2, 5, deadline=time.time() + 30, what="pow") == 32


def test_an_error_comes_back_with_the_users_own_traceback():
    with pytest.raises(UserModelError) as raised:
        run_user_code(_my_broken_step, 7, deadline=time.time() + 30, what="step")
    text = str(raised.value)
    assert text.startswith("step raised:") and "Traceback" in text
    assert "_my_broken_step" in text and "ValueError: my step broke on 7" in text
    assert "child_main" not in text  # her frames, not the sandbox's


def test_a_jobs_calls_share_one_child_and_another_job_gets_its_own():
    deadline = time.time() + 30
    first = run_user_code(_pid, deadline=deadline, what="pid")
    assert first != os.getpid()
    assert run_user_code(_pid, deadline=deadline, what="pid") == first == for_job(deadline).pid
    assert run_user_code(_pid, deadline=deadline + 1, what="pid") != first


def test_a_call_past_the_deadline_does_not_start():
    with pytest.raises(UserModelTimeout, match="had passed before it started"):
        run_user_code(pow, 2, 2, deadline=time.time() - 1, what="late")


def _writes_half_a_reply_then_sleeps(size):
    import struct
    import sys

    outbox = int(sys.argv[2])  # her code can reach the child's reply pipe: the parent must not trust it
    os.write(outbox, struct.pack("!Q", size) + b"half")
    while True:
        time.sleep(1)


def _call_in_thread(fn, *args, deadline):
    """``run_user_code`` on a thread: (its outcome, whether it returned within 15 s)."""
    import threading

    box = {}

    def run():
        try:
            box["value"] = run_user_code(fn, *args, deadline=deadline, what="half")
        except BaseException as error:  # noqa: BLE001 - looked at below
            box["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(15)
    return box, not thread.is_alive()


def _half_a_reply_held_open_by_another_process(pid_file):
    """Her code hands the reply pipe to a process of its own, writes part of a
    reply and ends the child: neither the child's end nor its deadline ends the pipe."""
    import struct
    import subprocess
    import sys

    outbox = int(sys.argv[2])
    holder = subprocess.Popen(["sleep", "30"], pass_fds=(outbox,))
    with open(pid_file, "w") as out:
        out.write(str(holder.pid))
    os.write(outbox, struct.pack("!Q", 100) + b"half")
    os._exit(0)


def test_a_child_that_writes_part_of_a_reply_and_stops_times_out_at_the_deadline(notes):
    pid_file = notes / "holder"
    started = time.monotonic()
    try:
        box, returned = _call_in_thread(_half_a_reply_held_open_by_another_process, str(pid_file),
                                        deadline=time.time() + 2)
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), 9)
    assert returned, "the parent waited past the deadline on a partial reply"
    assert isinstance(box.get("error"), UserModelTimeout) and time.monotonic() - started < 2 + 10


def test_a_reply_longer_than_the_limit_is_refused_and_its_child_killed(monkeypatch):
    monkeypatch.setattr(user_sandbox, "MAX_REPLY_BYTES", 1000)
    box, returned = _call_in_thread(_writes_half_a_reply_then_sleeps, 10**6, deadline=time.time() + 30)
    assert returned and isinstance(box.get("error"), UserModelError)
    assert "1000000 bytes, expected at most 1000" in str(box["error"])


def _environment_and_folder():
    with open("/proc/self/environ", "rb") as f:  # what the process started with, whatever os.environ says
        started_with = f.read()
    return dict(os.environ), started_with, os.getcwd(), os.listdir(".")


def test_the_child_sees_none_of_the_services_secrets_and_works_in_an_empty_folder(monkeypatch):
    monkeypatch.setenv("EASEML_TEST_SECRET_TOKEN", "s3cret")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    deadline = time.time() + 30
    env, started_with, cwd, listed = run_user_code(_environment_and_folder, deadline=deadline, what="env")
    assert "EASEML_TEST_SECRET_TOKEN" not in env and "s3cret" not in env.values()
    assert b"s3cret" not in started_with and b"OMP_NUM_THREADS=1" in started_with
    assert env["OMP_NUM_THREADS"] == "1" and env["PATH"] == os.environ["PATH"]
    assert cwd != os.getcwd() and listed == []
    _, _, other_cwd, other_listed = run_user_code(_environment_and_folder, deadline=deadline + 1, what="env")
    assert other_cwd != cwd and other_listed == []  # another job's child: another empty folder


def test_predictions_come_back_as_arrays_loaded_without_pickle():
    out = run_user_code(np.arange, 4, deadline=time.time() + 30, what="arange", returns="array")
    assert isinstance(out, np.ndarray) and out.tolist() == [0, 1, 2, 3]
    with pytest.raises(UserModelError, match="of objects, expected numbers"):
        run_user_code(_objects, deadline=time.time() + 30, what="objects", returns="array")


def _objects():
    return np.array([object(), object()])


def test_an_idle_child_is_closed_by_the_parent_but_never_in_the_middle_of_a_call(monkeypatch):
    import threading

    monkeypatch.setattr(user_sandbox, "IDLE_SECONDS", 0.2)
    deadline = time.time() + 30
    busy = {}
    thread = threading.Thread(target=lambda: busy.update(
        pid=run_user_code(_pid_after, 1.5, deadline=deadline, what="slow")), daemon=True)
    thread.start()
    time.sleep(0.8)  # its call is running, and idle by the clock of its last start
    user_sandbox._reap()
    thread.join(10)
    assert busy.get("pid") and psutil.pid_exists(busy["pid"])  # the call returned: its child was not closed under it
    time.sleep(0.3)
    user_sandbox._reap()  # now idle: closed and reaped (here, or by the background reaper)
    assert _gone_soon(busy["pid"])
    idle = run_user_code(_pid, deadline=deadline + 1, what="pid")
    time.sleep(0.3)
    user_sandbox._reap()
    assert _gone_soon(idle)
    assert run_user_code(_pid, deadline=deadline + 1, what="pid") != idle  # the job's next call gets a new child


def _pid_after(seconds):
    time.sleep(seconds)
    return os.getpid()


def test_a_jobs_children_end_when_its_scope_goes():
    import threading

    scope = user_sandbox.JobScope(time.time() + 30)
    deadline = scope.deadline
    pids = [run_user_code(_pid, deadline=deadline, what="pid")]
    other = threading.Thread(target=lambda: pids.append(run_user_code(_pid, deadline=deadline, what="pid")))
    other.start()
    other.join(10)
    assert len(set(pids)) == 2 and not any(not psutil.pid_exists(p) for p in pids)  # one child per thread
    del scope  # the job's candidate dropped: closed now, or at the reaper's next look if it held the registry
    assert all(_gone_soon(p, user_sandbox.REAP_SECONDS + 5.0) for p in pids)


def test_a_job_that_ends_while_the_registry_is_held_is_closed_at_the_next_look():
    import threading

    deadline = time.time() + 30
    pid = run_user_code(_pid, deadline=deadline, what="pid")
    with user_sandbox._LOCK:  # as when its finalizer runs inside a call that holds it
        ender = threading.Thread(target=user_sandbox.close_job, args=(deadline,), daemon=True)
        ender.start()
        ender.join(5)
        assert not ender.is_alive(), "closing a job waited on the registry's lock"
    assert psutil.pid_exists(pid)
    user_sandbox._reap()
    assert not psutil.pid_exists(pid)


def _pool_recorder():
    """A tiny estimator whose fit records the thread pools it ran under (defined
    here, so cloudpickle sends it by value and the child loads it as it would hers)."""
    from sklearn.base import BaseEstimator

    class PoolRecorder(BaseEstimator):
        def fit(self, X, y):
            from threadpoolctl import threadpool_info

            X @ X.T  # numpy's BLAS is loaded and used
            self.pools_ = {(p["user_api"], p["internal_api"]): p["num_threads"] for p in threadpool_info()}
            return self

        def predict(self, X):
            return np.zeros(len(X))

    return PoolRecorder()


def test_her_fit_in_the_child_runs_at_the_callers_thread_count():
    X, y = np.ones((8, 3)), np.zeros(8)
    deadline = time.time() + 60
    try:
        for threads in (1, 2):
            user_sandbox.set_call_threads(threads)
            fitted = run_user_code(user_sandbox.fit_estimator, _pool_recorder(), {}, X, y, deadline=deadline,
                                   what="fit")
            assert fitted.pools_ and any(api == "blas" for api, _ in fitted.pools_)
            assert set(fitted.pools_.values()) == {threads}, fitted.pools_
    finally:
        user_sandbox.set_call_threads(None)
        user_sandbox.close_job(deadline)


def test_a_jobs_threaded_builder_sets_the_threads_of_her_fit_in_the_child():
    """The runners limit a job's fits through ``ThreadedBuilder``; her fit in the child follows it."""
    from ease_jupyter.service.threads import ThreadedBuilder

    X, y = np.ones((8, 3)), np.zeros(8)
    deadline = time.time() + 60
    try:
        model = ThreadedBuilder(lambda config: _pool_recorder(), 1)(None)  # builds here, as a grid task does
        fitted = run_user_code(user_sandbox.fit_estimator, model, {}, X, y, deadline=deadline, what="fit")
        assert set(fitted.pools_.values()) == {1}, fitted.pools_
    finally:
        user_sandbox.set_call_threads(None)
        user_sandbox.close_job(deadline)


def _is_loaded(name):
    import sys

    return name in sys.modules


def test_children_fork_from_one_zygote_that_imports_this_processs_libraries():
    import sklearn.linear_model  # noqa: F401 - loaded here, so the zygote imports it too

    deadline = time.time() + 60
    jobs = [deadline]
    try:
        first, second = (run_user_code(_pid, deadline=deadline + i, what="pid") for i in (0, 1))
        zygote = psutil.Process(first).ppid()
        assert psutil.Process(second).ppid() == zygote != os.getpid()
        assert psutil.Process(zygote).ppid() == os.getpid()
        # it imports them once it has answered, while idle: a later job's child starts with them
        while not run_user_code(_is_loaded, "sklearn.linear_model", deadline=jobs[-1], what="loaded"):
            assert time.time() < deadline - 10, "the zygote never imported this process's scikit-learn"
            time.sleep(0.5)
            jobs.append(jobs[-1] + 1)
    finally:
        for job in {*jobs, deadline + 1}:
            user_sandbox.close_job(job)


def test_how_her_child_ended_comes_back_as_its_exit_code():
    with pytest.raises(UserModelError, match=r"ended \(exit code 3\) before it returned"):
        run_user_code(os._exit, 3, deadline=time.time() + 30, what="exit")
    deadline = time.time() + 30
    # her child leads a process group of its own (checked first: otherwise the kill below would reach this process)
    assert run_user_code(os.getpgid, 0, deadline=deadline, what="pgid") == run_user_code(_pid, deadline=deadline,
                                                                                       what="pid")
    with pytest.raises(UserModelError, match=r"ended \(exit code -9\) before it returned"):
        run_user_code(os.kill, 0, 9, deadline=deadline, what="kill")  # her process group: the child alone


def _sleeps_then_pid(seconds):
    time.sleep(seconds)
    return os.getpid()


def _kills_my_parent():
    import signal

    os.kill(os.getppid(), signal.SIGKILL)  # the zygote, shared by other users' children
    return "killed"


def test_a_zygote_her_code_kills_leaves_other_calls_running_and_the_next_job_gets_a_new_one():
    import threading

    bobs, hers = time.time() + 30, time.time() + 31
    try:
        child = run_user_code(_pid, deadline=bobs, what="pid")
        zygote = psutil.Process(child).ppid()
        box = {}

        def his_call():
            try:
                box["value"] = run_user_code(_sleeps_then_pid, 2, deadline=bobs, what="bob.fit")
            except Exception as error:  # noqa: BLE001 - shown by the assert below
                box["value"] = error

        running = threading.Thread(target=his_call)
        running.start()
        time.sleep(0.5)
        if abi_version() >= 6:  # confined: her signal cannot leave her child, so the zygote dies another way
            with pytest.raises(UserModelError, match="PermissionError"):
                run_user_code(_kills_my_parent, deadline=hers, what="alice.fit")
            os.kill(zygote, 9)
        else:
            assert run_user_code(_kills_my_parent, deadline=hers, what="alice.fit") == "killed"
        running.join(15)
        assert isinstance(box["value"], int), box["value"]  # his call ran to its end
        assert run_user_code(_pid, deadline=bobs, what="pid") == child  # and his idle child serves on
        fresh = run_user_code(_pid, deadline=bobs + 1, what="pid")  # a new job: a new zygote
        assert psutil.Process(fresh).ppid() not in (zygote, os.getpid())
        started = time.monotonic()
        user_sandbox.close_job(bobs)  # its end is seen through its pidfd: no wait for a report that never comes
        assert _gone_soon(child) and time.monotonic() - started < user_sandbox.END_SECONDS
    finally:
        for job in (bobs, hers, bobs + 1):
            user_sandbox.close_job(job)


def test_a_child_of_a_lost_zygote_is_killed_and_seen_ended_through_its_pidfd():
    deadline = time.time() + 30
    try:
        box = for_job(deadline)
        assert box.call(_pid, what="pid") == box.pid
        os.kill(psutil.Process(box.pid).ppid(), 9)
        assert box.proc.exited(1.0) is False and box.alive()  # not taken for ended: it runs on
        box.proc.kill()
        assert box.proc.exited(5.0) and box.proc.wait(5.0) is None  # how it ended: no one reaped it for us
        assert _gone_soon(box.pid)
    finally:
        user_sandbox.close_job(deadline)


def test_a_changed_environment_gets_a_new_zygote_and_the_old_ones_children_work_on(monkeypatch):
    old_job, new_job = time.time() + 30, time.time() + 31
    try:
        before = run_user_code(_pid, deadline=old_job, what="pid")
        old_zygote = psutil.Process(before).ppid()
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        env = run_user_code(_environment_and_folder, deadline=new_job, what="env")[0]
        after = run_user_code(_pid, deadline=new_job, what="pid")
        assert env["OMP_NUM_THREADS"] == "3" and psutil.Process(after).ppid() != old_zygote
        assert run_user_code(_pid, deadline=old_job, what="pid") == before  # the old job's child serves on
        user_sandbox.close_job(old_job)
        assert _gone_soon(before) and _gone_soon(old_zygote)  # its last child gone, the retired zygote exits
    finally:
        user_sandbox.close_job(old_job)
        user_sandbox.close_job(new_job)


def test_a_zygote_whose_socket_fails_is_replaced_at_the_next_fork():
    import socket

    from ease_jupyter import user_zygote

    deadline = time.time() + 30
    if user_zygote._ZYGOTE is not None:  # one whose only child is this test's: children of earlier tests'
        user_zygote._ZYGOTE.retire()     # jobs would keep it from exiting below
    try:
        child = run_user_code(_pid, deadline=deadline, what="pid")
        stale = user_zygote._ZYGOTE
        stale.sock.shutdown(socket.SHUT_WR)  # requests fail; it still reports on its live child
        assert stale.usable()
        fresh = run_user_code(_pid, deadline=deadline + 1, what="pid")
        assert psutil.Process(fresh).ppid() not in (stale.proc.pid, os.getpid())
        assert run_user_code(_pid, deadline=deadline, what="pid") == child  # the stale one's child serves on
        user_sandbox.close_job(deadline)
        assert _gone_soon(child) and _gone_soon(stale.proc.pid)  # its end reported: the stale zygote exits
    finally:
        user_sandbox.close_job(deadline)
        user_sandbox.close_job(deadline + 1)


def test_a_zygote_that_dies_before_it_answers_is_replaced_at_once():
    import signal
    import threading

    deadline = time.time() + 60
    try:
        zygote = psutil.Process(run_user_code(_pid, deadline=deadline, what="pid")).ppid()
        os.kill(zygote, signal.SIGSTOP)  # it will not answer the next request
        box = {}
        waiting = threading.Thread(target=lambda: box.update(pid=run_user_code(_pid, deadline=deadline + 1,
                                                                                what="pid")), daemon=True)
        waiting.start()
        time.sleep(0.5)
        os.kill(zygote, signal.SIGKILL)
        waiting.join(15)  # not at the job's deadline, a minute away
        assert not waiting.is_alive() and psutil.Process(box["pid"]).ppid() not in (zygote, os.getpid())
    finally:
        user_sandbox.close_job(deadline)
        user_sandbox.close_job(deadline + 1)


def test_a_zygote_that_does_not_answer_by_the_deadline_is_a_timeout_and_retired():
    import signal

    from ease_jupyter import user_zygote

    deadline = time.time() + 30
    try:
        zygote = psutil.Process(run_user_code(_pid, deadline=deadline, what="pid")).ppid()
        stuck = user_zygote._ZYGOTE
        os.kill(zygote, signal.SIGSTOP)
        try:
            with pytest.raises(UserModelTimeout, match="^late: the process for her code had not started by"):
                run_user_code(_pid, deadline=time.time() + 1.5, what="late")
            assert stuck.retired and not stuck.usable()
        finally:
            os.kill(zygote, signal.SIGCONT)
        assert psutil.Process(run_user_code(_pid, deadline=deadline + 1, what="pid")).ppid() != zygote
    finally:
        user_sandbox.close_job(deadline)
        user_sandbox.close_job(deadline + 1)


def _ignoring_timeout(fn, *args, **kwargs):
    try:
        run_user_code(fn, *args, **kwargs)
    except UserModelTimeout:
        pass


def test_a_stopped_zygote_holds_a_later_call_no_longer_than_its_own_limit():
    import signal
    import threading

    deadline, firsts = time.time() + 30, time.time() + 6
    try:
        zygote = psutil.Process(run_user_code(_pid, deadline=deadline, what="pid")).ppid()
        os.kill(zygote, signal.SIGSTOP)  # her code stopped it: the first request waits up to its own deadline
        try:
            first = threading.Thread(target=_ignoring_timeout, args=(_pid,), kwargs=dict(deadline=firsts, what="first"))
            lock = user_zygote._ZYGOTE._lock  # the first caller's fork request holds it until its answer
            first.start()
            waited = time.monotonic() + 5
            while not lock.locked():
                assert time.monotonic() < waited, "the first call never took the fork lock"
                time.sleep(0.01)
            started = time.monotonic()
            with pytest.raises(UserModelTimeout, match="^second: the process for her code had not started by"):
                run_user_code(_pid, deadline=time.time() + 1, what="second")
            assert time.monotonic() - started < 3  # its own second, not the first caller's six
        finally:
            os.kill(zygote, signal.SIGCONT)
        first.join(15)  # it forks once the zygote runs again, or times out
    finally:
        user_sandbox.close_job(deadline)
        user_sandbox.close_job(firsts)


def _draws():
    import numpy as np
    import torch

    return float(np.random.rand()), float(torch.rand(1))


def _loaded_both():
    import sys

    return "numpy.random" in sys.modules and "torch" in sys.modules


def test_children_of_different_jobs_draw_different_random_numbers():
    import torch  # noqa: F401 - loaded here, so the zygote imports it (and numpy) for later children

    deadline = time.time() + 90
    jobs = [deadline]
    try:
        while not run_user_code(_loaded_both, deadline=jobs[-1], what="loaded"):  # children forked with both loaded
            assert time.time() < deadline - 30, "the zygote never imported numpy and torch"
            time.sleep(0.5)
            jobs.append(jobs[-1] + 1)
        first, second = (run_user_code(_draws, deadline=jobs[-1] + i, what="draw") for i in (1, 2))
        jobs += [jobs[-1] + 1, jobs[-1] + 2]
        assert first[0] != second[0]  # numpy's global state: seeded per child, as in a fresh interpreter
        assert first[1] != second[1]  # torch's default generator too
    finally:
        for job in jobs:
            user_sandbox.close_job(job)


def _close_my_reply_pipe_then_sleep():
    import sys

    os.close(int(sys.argv[2]))  # the child's end of the pipe its replies go back on
    time.sleep(120)


def test_a_child_that_closes_its_reply_pipe_and_lingers_is_killed_soon(monkeypatch):
    monkeypatch.setattr(user_sandbox, "END_SECONDS", 1.0)
    deadline = time.time() + 60
    started = time.monotonic()
    try:
        with pytest.raises(UserModelError, match=r"the process running it ended \(exit code -9\)"):
            run_user_code(_close_my_reply_pipe_then_sleep, deadline=deadline, what="linger")
        assert time.monotonic() - started < 15  # not at the job's deadline, a minute away
    finally:
        user_sandbox.close_job(deadline)


def test_a_kill_reaches_the_process_its_pidfd_names_not_whoever_has_its_pid_now():
    import subprocess

    from ease_jupyter.user_zygote import ForkedChild

    bystander, child = (subprocess.Popen(["sleep", "60"]) for _ in range(2))
    try:
        forked = ForkedChild(bystander.pid, os.pidfd_open(child.pid))  # as if the child's pid were reused
        forked.kill()
        assert child.wait(5) == -9
        assert bystander.poll() is None
        forked.release()
        forked.release()  # nothing left to close the second time
    finally:
        for proc in (bystander, child):
            proc.kill()
            proc.wait()


_FAIL_SECOND_FORK = """\
import errno, os
_real, _calls = os.fork, []
def _fork():
    _calls.append(1)
    if len(_calls) == 2:
        raise OSError(errno.EAGAIN, "no more processes for now")
    return _real()
os.fork = _fork
"""


def test_a_fork_that_fails_fails_that_call_alone(monkeypatch):
    import errno

    from ease_jupyter import user_zygote

    monkeypatch.setattr(user_zygote, "_MAIN", _FAIL_SECOND_FORK + user_zygote._MAIN)
    zygote = user_zygote.Zygote(user_sandbox._child_env())
    monkeypatch.setattr(user_zygote, "_ZYGOTE", zygote)
    first_job, second_job = time.time() + 30, time.time() + 31
    try:
        child = run_user_code(_pid, deadline=first_job, what="pid")
        with pytest.raises(UserModelError, match=rf"^the process for her code could not be started: \[Errno {errno.EAGAIN}\]"):
            run_user_code(_pid, deadline=second_job, what="pid")
        assert zygote.usable() and psutil.Process(child).ppid() == zygote.proc.pid
        assert run_user_code(_pid, deadline=first_job, what="pid") == child  # the other job's child serves on
        assert run_user_code(_pid, deadline=second_job, what="pid") != child  # and the zygote forks again
    finally:
        user_sandbox.close_job(first_job)
        user_sandbox.close_job(second_job)
        zygote.retire()


def test_a_slow_start_holds_back_no_call_to_a_running_child():
    import signal
    import threading

    deadline = time.time() + 60
    try:
        child = run_user_code(_pid, deadline=deadline, what="pid")
        zygote = psutil.Process(child).ppid()
        os.kill(zygote, signal.SIGSTOP)  # the next start waits for it
        try:
            ended = []

            def start_another_job():
                try:
                    ended.append(run_user_code(_pid, deadline=time.time() + 4, what="late"))
                except UserModelTimeout as error:  # or it starts once the zygote runs again
                    ended.append(error)

            starting = threading.Thread(target=start_another_job, daemon=True)
            starting.start()
            time.sleep(0.5)
            began = time.monotonic()
            assert run_user_code(_pid, deadline=deadline, what="pid") == child
            assert time.monotonic() - began < 2  # not after the other job's start gave up
        finally:
            os.kill(zygote, signal.SIGCONT)
        starting.join(15)
        assert not starting.is_alive() and len(ended) == 1
    finally:
        user_sandbox.close_job(deadline)


def _my_sockets_and_pipes():
    import sys

    kinds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            kinds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
    pipes = {int(fd) for fd in sys.argv[1:3]}
    return [fd for fd, what in kinds.items() if what.startswith("socket:")], pipes <= set(kinds)


def test_her_child_holds_no_socket_so_cannot_ask_the_zygote_for_anything():
    deadline = time.time() + 30
    try:
        sockets, has_its_pipes = run_user_code(_my_sockets_and_pipes, deadline=deadline, what="fds")
        assert sockets == [] and has_its_pipes
    finally:
        user_sandbox.close_job(deadline)


def test_children_started_at_once_by_many_threads_each_get_their_own():
    import threading

    from ease_jupyter.user_sandbox import for_job

    base = time.time() + 60
    seen = {}

    def start(i):
        deadline = base + i
        seen[i] = (for_job(deadline).proc.pid, run_user_code(_pid, deadline=deadline, what="pid"))

    threads = [threading.Thread(target=start, args=(i,)) for i in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(seen) == 6
        assert all(handle == actual for handle, actual in seen.values())  # each fork's answer went to its request
        assert len({actual for _, actual in seen.values()}) == 6
    finally:
        for i in range(6):
            user_sandbox.close_job(base + i)


def _prints_then_raises(lines, ok=False):
    import os
    import sys

    for line in lines:
        print(line)
    sys.stderr.write("to stderr\n")
    os.write(1, b"written by C code\n")  # as a C library writes: fd 1, past Python's buffer
    if ok:
        return 1
    raise ValueError("her error")


def test_what_her_code_printed_comes_back_above_her_traceback_and_not_into_the_log():
    deadline = time.time() + 60
    with pytest.raises(UserModelError) as error:
        run_user_code(_prints_then_raises, ["first line", "second line"], deadline=deadline, what="fit")
    text = str(error.value)
    assert "printed before the error:\nfirst line\nsecond line\nto stderr\nwritten by C code\n\nTraceback" in text
    assert text.rstrip().endswith("ValueError: her error")
    pid = run_user_code(_pid, deadline=deadline, what="pid")
    logs = {os.readlink(f"/proc/self/fd/{fd}") for fd in (1, 2) if os.path.exists(f"/proc/self/fd/{fd}")}
    drained = os.readlink(f"/proc/self/fd/{user_sandbox.for_job(deadline).output.fd}")
    for fd in (1, 2):  # her stdout and stderr are a pipe this process drains, not the worker's log
        link = os.readlink(f"/proc/{pid}/fd/{fd}")
        assert link.startswith("pipe:") and link == drained and link not in logs, link
    assert run_user_code(_prints_then_raises, ["from a call that returned"], True, deadline=deadline, what="ok") == 1
    with pytest.raises(UserModelError) as later:  # each call starts with nothing printed
        run_user_code(_prints_then_raises, [], deadline=deadline, what="fit")
    assert "from a call that returned" not in str(later.value) and "to stderr" in str(later.value)
    user_sandbox.close_job(deadline)


def _prints_megabytes(megabytes):
    import resource
    import stat

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    chunk = b"x" * 1023 + b"\n"
    for _ in range(megabytes * 1024):
        os.write(1, chunk)
    held = os.fstat(1)
    on_disk = held.st_size if stat.S_ISREG(held.st_mode) else 0
    return on_disk, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10


def test_what_her_code_prints_is_held_to_its_last_kilobytes_however_much_she_prints():
    deadline = time.time() + 60
    try:
        on_disk, grew_mib = run_user_code(_prints_megabytes, 64, deadline=deadline, what="fit")
        assert on_disk < 1 << 20 and grew_mib < 16, (on_disk, grew_mib)
        with pytest.raises(UserModelError, match="its last 4,000 characters"):  # what is kept still comes back
            run_user_code(_prints_then_raises, [f"line {i}" for i in range(3000)], deadline=deadline, what="fit")
    finally:
        user_sandbox.close_job(deadline)


def _writes_from_c_holding_the_gil(megabytes):
    import ctypes

    data = b"y" * ((megabytes << 20) - 1) + b"\n" + b"the end of what C wrote\n"
    buffer = ctypes.create_string_buffer(data, len(data))
    libc = ctypes.PyDLL(None)  # PyDLL: the GIL stays held during the call, as in a C library's printf
    libc.write.restype = ctypes.c_ssize_t
    written = libc.write(1, buffer, ctypes.c_size_t(len(data)))
    raise ValueError(f"wrote {written} of {len(data)}")


def test_c_code_that_writes_megabytes_holding_the_gil_does_not_wait_on_its_output():
    deadline = time.time() + 20  # past it, the call would fail as a timeout: it must return long before
    started = time.monotonic()
    try:
        with pytest.raises(UserModelError) as error:
            run_user_code(_writes_from_c_holding_the_gil, 8, deadline=deadline, what="fit")
        assert time.monotonic() - started < 10
        text = str(error.value)
        length = (8 << 20) + len("the end of what C wrote\n")
        assert "printed before the error (its last 4,000 characters):\n" in text and f"wrote {length} of {length}" in text
        assert "yyy\nthe end of what C wrote\n\nTraceback" in text
        assert len(user_sandbox.for_job(deadline).output._kept) <= 4 * user_sandbox.OUTPUT_TAIL_CHARS
    finally:
        user_sandbox.close_job(deadline)


def _megabytes(n):
    return b"\1" * (n << 20)


def test_a_large_reply_is_held_once_while_it_is_read_and_loaded():
    import tracemalloc

    deadline = time.time() + 60
    try:
        run_user_code(_pid, deadline=deadline, what="warm")
        tracemalloc.start()
        try:
            value = run_user_code(_megabytes, 64, deadline=deadline, what="big")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(value) == 64 << 20
        assert peak < 2.5 * (64 << 20), peak >> 20  # the reply and its value; not two more copies of the reply
    finally:
        user_sandbox.close_job(deadline)


def test_long_output_comes_back_cut_to_its_end_with_the_whole_traceback():
    deadline = time.time() + 60
    lines = [f"line {i}" for i in range(3000)]
    with pytest.raises(UserModelError) as error:
        run_user_code(_prints_then_raises, lines, deadline=deadline, what="fit")
    text = str(error.value)
    shown = text.split("printed before the error (its last 4,000 characters):\n", 1)[1].split("\n\nTraceback")[0]
    assert len(shown) <= user_sandbox.OUTPUT_TAIL_CHARS and shown.endswith("line 2999\nto stderr\nwritten by C code")
    assert "line 0\n" not in text and text.rstrip().endswith("ValueError: her error")
    user_sandbox.close_job(deadline)


_AT_NICE = """
import os, sys, time
os.nice(int(sys.argv[1]))
from ease_jupyter.user_sandbox import run_user_code

def group():
    with open("/proc/self/autogroup") as f:
        return f.read().split()[-1], os.getsid(0) == os.getpid()

print(*run_user_code(group, deadline=time.time() + 60, what="group"))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="this kernel groups no sessions (autogroup)")
def test_her_child_keeps_the_workers_priority_in_a_session_of_its_own(tmp_path):
    """A session of its own is a scheduling group of its own, which would
    compete with the whole service at nice 0: it gets the worker's nice."""
    import subprocess
    import sys

    script = tmp_path / "at_nice.py"
    script.write_text(_AT_NICE)
    root = os.path.dirname(os.path.dirname(os.path.abspath(user_sandbox.__file__)))
    out = subprocess.run([sys.executable, str(script), "7"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": root}, check=True).stdout.split()
    assert out == ["7", "True"]  # its group's nice, and it leads a session of its own
