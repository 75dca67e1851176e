"""The shared event stream survives a service restart: the hub reconnects
and the widgets re-read what they may have missed."""

from __future__ import annotations

from ease_jupyter.client import Client
from ease_jupyter.widgets import Leaderboard
from ease_jupyter.widgets._hub import EventHub, wait_until

from .conftest import widget_threads
from service.conftest import start


def test_hub_reconnects_and_resyncs_after_a_service_restart(tmp_path, digit_images):
    X, y = digit_images  # without torch an image task has no arms: nothing trains, the restart is quick
    first = start(tmp_path, torch=False)
    token = first.user("alice")
    port = int(first.url.rsplit(":", 1)[1])
    client = Client(first.url, token)
    task = client.task("images_restart", input=[8, 8, 1], output=[10])
    board = Leaderboard(task)
    resyncs = []
    resync = board._resync
    board._resync = lambda: (resyncs.append(1), resync())
    hub = EventHub.of(client)
    second = None
    try:
        task.feed(X[:60], y[:60])
        assert wait_until(lambda: board.latest_version == 1, 10)
        first.thread.stop()
        second = start(tmp_path, torch=False, port=port)  # same data dir and address
        assert second.url == first.url
        assert wait_until(lambda: resyncs, 30)  # reconnected, and told the widget to re-read
        Client(second.url, token).task("images_restart").feed(X[60:], y[60:])
        assert wait_until(lambda: board.latest_version == 2, 30)  # events flow on the new connection
        assert hub.running and widget_threads() == ["easeml-events", "easeml-widgets"]
    finally:
        board.close()
        if second is not None:
            second.thread.stop()
        else:
            first.thread.stop()
    assert widget_threads() == [] and not hub.running
