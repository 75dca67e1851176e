"""A probe of a data dir (``holder()``: ``easeml serve``'s check before it
starts, ``Client()``'s before it starts an embedded service, ``easeml
stop``) never makes a service that starts at that instant refuse itself:
the probe takes the lock shared for a moment, and ``DataDirLock`` waits
that out. A service that holds the data dir is still refused, and two
services that start at once still settle on one."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ease_jupyter.service import embedded
from ease_jupyter.service.embedded import LOCK_FILE, DataDirInUse, DataDirLock, holder

REPO = Path(__file__).resolve().parents[2]


def _probe_in_flight(directory: Path) -> int:
    """The lock as ``holder()`` holds it between its flock and its close."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    return fd


def test_a_service_that_starts_while_a_probe_holds_the_lock_waits_it_out(tmp_path, monkeypatch):
    probe = _probe_in_flight(tmp_path)
    pauses = []

    def probe_ends(tries):  # the probe closes its descriptor while the service waits
        pauses.append(tries)
        os.close(probe)

    monkeypatch.setattr(embedded, "_wait_for_probes", probe_ends)
    lock = DataDirLock(tmp_path)  # not DataDirInUse("pid ?, still starting")
    try:
        assert pauses == [1]
        assert holder(tmp_path) == {"pid": os.getpid(), "url": None}
    finally:
        lock.release()
    assert holder(tmp_path) is None


def test_a_service_that_holds_the_data_dir_is_still_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "_wait_for_probes", lambda tries: pytest.fail("no probe was in the way"))
    lock = DataDirLock(tmp_path)
    try:
        lock.announce("http://127.0.0.1:1/api/v1")
        with pytest.raises(DataDirInUse, match=rf"pid {os.getpid()}, http://127.0.0.1:1/api/v1"):
            DataDirLock(tmp_path)
    finally:
        lock.release()


def test_two_services_that_start_at_once_settle_on_one(tmp_path):
    for _ in range(50):
        start = threading.Barrier(2)
        got: list[DataDirLock] = []
        refused: list[DataDirInUse] = []

        def take():
            start.wait()
            try:
                got.append(DataDirLock(tmp_path))
            except DataDirInUse as error:
                refused.append(error)

        threads = [threading.Thread(target=take) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(got) == 1 and len(refused) == 1, (got, refused)
        got[0].release()


PROBES = 3000

PROBER = f"""
import sys
from pathlib import Path
from ease_jupyter.service.embedded import holder

directory = Path(sys.argv[1])
print("probing", flush=True)
for _ in range({PROBES}):
    holder(directory)
"""


def test_a_service_starting_again_and_again_beside_a_busy_prober_is_never_refused(tmp_path):
    """Another process probes the data dir as fast as it can while this one
    takes and releases the lock, again and again until the prober is done:
    no start is refused (without the wait, about one in a hundred was)."""
    DataDirLock(tmp_path).release()  # the lock file exists before the prober starts
    prober = subprocess.Popen([sys.executable, "-c", PROBER, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert prober.stdout.readline().strip() == "probing"
        starts = refused = 0
        while prober.poll() is None or starts < 200:
            try:
                DataDirLock(tmp_path).release()
            except DataDirInUse:
                refused += 1
            starts += 1
    finally:
        prober.kill()
        prober.wait(60)
    assert prober.returncode == 0  # it made its probes meanwhile
    assert refused == 0, f"{refused} of {starts} starts refused"
