"""JupyterLab's notification relay never brings back an embedded service that
stopped (idle shutdown, ``easeml stop``), nor keeps one up: it runs on its
own (the front end polls it every 2 s), so it listens passively and only to
a service that runs. A sidebar request the user makes still starts it, and
the relay then follows that service. Real embedded service processes; every
start goes through ``embedded.ensure_embedded``, which the tests count."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.lab.handlers import NotificationRelay, ServiceConnection
from ease_jupyter.service import embedded
from service.conftest import until  # tests/ is on sys.path

RETRY = 0.3  # the relay's wait before it looks again (5 s in the server); short, so a start would show at once
WATCH = 4.0  # seconds the tests watch for a start that must not come


@pytest.fixture
def starts(monkeypatch):
    """Each call that may start the embedded service (``Client()``, a request
    that found it stopped), in order; each goes on to the real one."""
    calls: list[object] = []
    real = embedded.ensure_embedded

    def counted(data_dir=None, **kw):
        calls.append(data_dir)
        return real(data_dir, **kw)

    monkeypatch.setattr(embedded, "ensure_embedded", counted)
    return calls


@pytest.fixture
def relay(embedded_data_dir, monkeypatch):
    monkeypatch.setattr(NotificationRelay, "RETRY_SECONDS", RETRY)
    made: list[NotificationRelay] = []

    def make(service: ServiceConnection) -> NotificationRelay:
        made.append(NotificationRelay(service))
        return made[-1]

    yield make
    for one in made:
        one.stop()


def test_the_first_poll_starts_no_service(embedded_data_dir, starts, relay):
    notifications = relay(ServiceConnection())
    assert notifications.since(None) == {"notifications": [], "last": 0, "connected": False}
    time.sleep(WATCH)
    assert starts == [] and embedded.running(embedded_data_dir) is None
    assert notifications.since(None)["connected"] is False


def test_the_relay_lets_the_embedded_service_stop_when_idle_and_starts_it_not_again(embedded_data_dir, starts, relay,
                                                                                      monkeypatch):
    monkeypatch.setenv(embedded.IDLE_ENV, "2")  # the service started below stops after 2 idle seconds
    service = ServiceConnection()
    service.call(lambda client: client.whoami())  # her sidebar's first request starts it
    pid = embedded.read_service_file(embedded_data_dir)["pid"]
    notifications = relay(service)
    notifications.start()
    assert notifications.connected.wait(30)
    assert until(lambda: embedded.running(embedded_data_dir) is None, 25), "listening kept the idle service up"
    time.sleep(WATCH)
    assert embedded.running(embedded_data_dir) is None and len(starts) == 1
    assert embedded.read_service_file(embedded_data_dir)["pid"] == pid
    assert not notifications.connected.is_set()


def test_after_easeml_stop_the_relay_starts_nothing_and_follows_the_service_she_starts(embedded_data_dir, starts,
                                                                                       relay):
    service = ServiceConnection()
    service.call(lambda client: client.whoami())  # starts it
    notifications = relay(service)
    notifications.start()
    assert notifications.connected.wait(30)
    stopped = CliRunner().invoke(main, ["stop", "--data-dir", str(embedded_data_dir)])
    assert stopped.exit_code == 0 and "stopped the ease.ml service" in stopped.output, stopped.output
    assert until(lambda: not notifications.connected.is_set(), 10)
    time.sleep(WATCH)
    assert len(starts) == 1 and embedded.running(embedded_data_dir) is None  # stays stopped

    user = service.call(lambda client: client.whoami())  # a click in her sidebar starts it again, as documented
    assert len(starts) == 2 and embedded.running(embedded_data_dir) is not None
    assert until(notifications.connected.is_set, 15)  # the relay listens to that service, on its new port
    assert len(starts) == 2 and user["id"] == service.client().whoami(start=False)["id"]
