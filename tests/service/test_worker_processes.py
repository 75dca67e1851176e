"""The process executor's workers: they run below the service's priority and
exit when the service is SIGKILLed (an orphan would otherwise finish its job
and write to the store while the restarted service runs it again)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from sklearn.datasets import load_wine

from ease_jupyter.client import Client
from ease_jupyter.service.testing import ServeProcess, add_user, alive, worker_processes

pytestmark = pytest.mark.slow



@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_workers_are_niced_and_die_with_a_killed_service(tmp_path):
    token = add_user(tmp_path, "admin", admin=True)
    server = ServeProcess(tmp_path, "--workers", "1")  # the default executor: worker processes
    try:
        X, y = load_wine(return_X_y=True)
        task = Client(server.url, token).task("wine", input=[13], output=[3])
        task.feed(X.astype("float32"), y)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any(j["status"] == "succeeded" for j in task.jobs()):
            time.sleep(0.2)
        assert any(j["status"] == "succeeded" for j in task.jobs())
        service_nice = os.getpriority(os.PRIO_PROCESS, server.pid)
        deadline = time.monotonic() + 60  # a worker nices itself once it has imported the package
        while True:
            workers = worker_processes(server.pid)
            niced = [pid for pid in workers if os.getpriority(os.PRIO_PROCESS, pid) == min(19, service_nice + 5)]
            if len(niced) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        # Training workers are niced: the scikit-learn worker (--workers 1), the torch jobs' one
        # process and the scikit-learn express slot (easeml serve's default), started when wine's
        # first job filled the worker; the torch express slot's process never started, since no
        # net ever filled the torch slot. The one feed process (its default too) serves requests,
        # so it keeps the service's priority. All die with the service.
        assert len(niced) == 3 and len(workers) - len(niced) == 1, workers
        assert all(os.getpriority(os.PRIO_PROCESS, pid) == service_nice for pid in workers if pid not in niced)
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(alive(p) for p in workers):
            time.sleep(0.1)
        assert not any(alive(p) for p in workers), "a worker outlived the killed service"
    finally:
        server.stop()
