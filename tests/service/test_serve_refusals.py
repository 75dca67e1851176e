"""`easeml serve` refuses what would break a running service, and stops cleanly:
one service per data dir, a taken port found before the start, Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.service import embedded
from ease_jupyter.service.testing import ServeProcess

_LISTENING = re.compile(r"listening on (http://[\d.]+:(\d+))/api/v1")


def _serve(data_dir, *args, timeout=60):
    """A second `easeml serve` that must refuse (a subprocess: one that started would never return)."""
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "ease_jupyter", "serve", "--data-dir", str(data_dir), *args],
                            capture_output=True, text=True, timeout=timeout)
    return result, time.monotonic() - started


def test_one_service_per_data_dir_a_taken_port_and_ctrl_c(tmp_path):
    served = tmp_path / "served"
    # its own session: the SIGINT below goes to its whole process group, as a terminal's Ctrl-C does
    log = open(tmp_path / "first.out", "w+")
    first = subprocess.Popen([sys.executable, "-m", "ease_jupyter", "serve", "--data-dir", str(served), "--port", "0"],
                             stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (match := _LISTENING.search((tmp_path / "first.out").read_text())):
            assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "first.out").read_text()
            time.sleep(0.2)
        url, port = match.group(1), match.group(2)

        second, _ = _serve(served, "--port", "0")
        assert second.returncode == 2, second.stderr
        assert "'--data-dir'" in second.stderr and "Traceback" not in second.stderr
        assert f"a service (pid {first.pid}, {url}) already uses {served}; stop it first" in second.stderr
        assert embedded.holder(served) == {"pid": first.pid, "url": url}
        with pytest.raises(embedded.DataDirInUse, match=f"pid {first.pid}"):  # Client() starts none beside it
            embedded.start_embedded(served, timeout=30)

        taken, _ = _serve(tmp_path / "other", "--port", port)
        assert taken.returncode == 2, taken.stderr
        assert f"'--port': {port}: address already in use on 127.0.0.1 (use --port 0 for a free one)" in taken.stderr
        assert "Traceback" not in taken.stderr and "listening on" not in taken.stdout + taken.stderr

        os.killpg(first.pid, signal.SIGINT)
        stopping = time.monotonic()
        assert first.wait(30) == 0
        assert time.monotonic() - stopping < 20
        log.seek(0)
        output = log.read()
        assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
        assert embedded.holder(served) is None  # the lock went with it
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(10)
        log.close()


def test_easeml_stop_stops_a_served_service(tmp_path):
    server = ServeProcess(tmp_path)
    try:
        result = CliRunner().invoke(main, ["stop", "--data-dir", str(tmp_path)])
        assert result.exit_code == 0 and f"pid {server.pid}" in result.output, result.output
        assert server.proc.wait(30) == 0
    finally:
        server.stop()


def test_easeml_stop_while_a_served_service_still_starts_stops_it_cleanly(tmp_path):
    """`easeml stop` finds a starting `easeml serve` in the lock (its URL is
    there before its store and workers are up) and sends SIGTERM then: the
    service finishes starting and stops cleanly, never killed midway."""
    proc = subprocess.Popen([sys.executable, "-m", "ease_jupyter", "serve", "--data-dir", str(tmp_path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while (embedded.holder(tmp_path) or {}).get("url") is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else ""
            time.sleep(0.01)
        # --timeout: a loaded machine may take longer than the default 30 s to finish starting, then stop
        result = CliRunner().invoke(main, ["stop", "--data-dir", str(tmp_path), "--timeout", "300"])
        assert result.exit_code == 0 and f"pid {proc.pid}" in result.output, result.output
        assert proc.wait(60) == 0, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
