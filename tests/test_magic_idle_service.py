"""The notifications under each cell never bring back an embedded service
that stopped (idle shutdown, ``easeml stop``): a plain cell then runs at
once and starts nothing. What they send goes with ``start=False``, which
follows an embedded service that runs already (started again elsewhere,
on another port) and otherwise fails at once; the next ``%easeml`` line
still starts it again, as before (``test_housekeeping.py``)."""

from __future__ import annotations

import json
import socket
import time

import pytest
from IPython.core.interactiveshell import InteractiveShell

from ease_jupyter.client import Client
from ease_jupyter.magics.notifications import CellNotices
from ease_jupyter.service import embedded
from service.conftest import start, until  # tests/ is on sys.path

PLAIN_CELL_SECONDS = 2.0  # starting the service takes several seconds; a plain cell, milliseconds


def test_plain_cells_after_the_embedded_service_stopped_when_idle_start_nothing(embedded_data_dir, monkeypatch):
    monkeypatch.setenv(embedded.IDLE_ENV, "2")  # the service the first magic starts stops after 2 idle seconds
    shell = InteractiveShell.instance()
    notices = None
    try:
        shell.run_line_magic("load_ext", "ease_jupyter")
        assert shell.run_cell("%easeml connect").success  # starts the embedded service
        assert shell.run_cell("%easeml task t --input 4 --output 3").success
        notices = shell._easeml_notices
        assert notices.feed is not None and notices.feed.alive  # listening (passively) since that cell
        pid = embedded.read_service_file(embedded_data_dir)["pid"]
        # listening does not keep it up
        assert until(lambda: embedded.running(embedded_data_dir) is None, 60, every=0.2), "still running"
        started = time.monotonic()
        for code in ("x = 1 + 1", "y = x * 2"):
            assert shell.run_cell(code).success
        assert time.monotonic() - started < PLAIN_CELL_SECONDS
        assert embedded.running(embedded_data_dir) is None and notices.feed is None  # nothing started, nothing listens
        assert embedded.read_service_file(embedded_data_dir)["pid"] == pid
    finally:
        if notices is not None:
            notices.close()
        InteractiveShell.clear_instance()


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_without_start_a_client_follows_a_running_embedded_service_or_fails_at_once(tmp_path, monkeypatch):
    """``easeml stop`` (or an idle stop) left the session's client pointing at
    a port nothing listens on. The hook's requests start nothing; once
    the service runs again (another notebook started it, on another port),
    they follow it there."""
    running = start(tmp_path / "svc", torch=False)  # stands in for the embedded service, started again
    try:
        token = running.user("root", admin=True)
        data = tmp_path / "data"
        data.mkdir()
        gone = dead_url()
        starts = []

        def ensure(data_dir=None, **kw):
            starts.append(data_dir)
            return gone, token

        monkeypatch.setattr(embedded, "ensure_embedded", ensure)
        client = Client(data_dir=data)  # the embedded service, as it was (its port is closed now)
        assert client.url == gone and starts == [data]
        (data / "service.json").write_text(json.dumps({"url": gone, "token": token, "pid": None}))

        class Session:
            pass

        session = Session()
        session.client = client
        notices = CellNotices(session)
        started = time.monotonic()
        notices()  # the hook after a cell
        assert notices.feed is None and time.monotonic() - started < PLAIN_CELL_SECONDS
        with pytest.raises(ConnectionRefusedError, match=f"nothing answers at {gone}"):
            client.whoami(start=False)
        assert starts == [data]  # nothing was started

        (data / "service.json").write_text(json.dumps({"url": running.url, "token": token, "pid": None}))
        notices()  # now it runs (started elsewhere): the hook listens there
        try:
            assert notices.feed is not None and notices.feed.alive and client.url == running.url
            assert starts == [data]
        finally:
            notices.close()
        client.whoami()  # a request that may start it is unchanged: the service answers, nothing starts
        assert starts == [data]
    finally:
        running.thread.stop()
