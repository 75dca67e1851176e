"""One shared event stream per ``Client``, fanned out to live widgets.

Why a thread, and which one applies the updates
------------------------------------------------
``Client.events()`` reads the service's WebSocket on its own thread. The hub
adds one *dispatcher* thread per Client that takes events off that stream
and calls each subscribed widget's ``_on_event`` while holding the widget's
lock. Widget trait changes (and plotly's restyle messages) are therefore
sent from the dispatcher thread, not from the kernel's shell IO loop.

We chose this on purpose. The shell IO loop runs on the main thread and is
blocked while a cell executes, so callbacks scheduled on it (``Kernel.io_loop.
add_callback``) would freeze the curves during a ``task.wait()`` cell and
then replay every update at once. ipykernel >= 6 sends comm messages from any
thread through its IOPub thread (``IOPubThread`` owns the socket and is
thread-safe), so sending from the dispatcher is safe. What is *not* safe is
two threads mutating the same widget at once (a click handled on the shell
thread while an event is applied): every widget method that mutates state
takes the widget's ``RLock``, and the dispatcher takes the same lock.

Life cycle: the first widget of a Client opens the stream and starts the
dispatcher; ``unsubscribe`` of the last one closes the stream and joins both
threads, so an open notebook does not leak threads (tests check the thread
count returns to its baseline). If the stream ends (the service restarted),
the dispatcher reconnects (every 0.5 s, backing off to 5 s) and asks every widget to
``_resync()`` from the service, since events may have been missed.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)

Event = dict[str, Any]


class EventHub:
    """The shared stream of one Client. Get it with :meth:`EventHub.of`."""

    _registry: dict[int, "EventHub"] = {}
    _registry_lock = threading.Lock()

    def __init__(self, client: Any):
        self.client = client
        self._subs: dict[int, tuple[Callable[[Event], None], Callable[[], None] | None, Callable[[], None] | None]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread: threading.Thread | None = None
        self.delivered = 0  # events handed to at least one subscriber (for tests and diagnostics)

    @classmethod
    def of(cls, client: Any) -> "EventHub":
        """The hub of ``client`` (one per Client object)."""
        with cls._registry_lock:
            hub = cls._registry.get(id(client))
            if hub is None or hub.client is not client:
                hub = cls._registry[id(client)] = cls(client)
            return hub

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def n_subscribers(self) -> int:
        with self._lock:
            return len(self._subs)

    def subscribe(self, on_event: Callable[[Event], None], on_resync: Callable[[], None] | None = None,
                  on_quiet: Callable[[], None] | None = None) -> int:
        """Call ``on_event(event)`` on the dispatcher thread for every event the
        caller may see, ``on_resync()`` after a reconnect and ``on_quiet()``
        after each 0.2 s without events; returns a token for :meth:`unsubscribe`.
        The stream is open when this returns, so later events are not missed."""
        with self._lock:
            sid = next(self._ids)
            self._subs[sid] = (on_event, on_resync, on_quiet)
            if self._thread is None:
                self._stop.clear()
                self._stream = self.client.events()
                self._thread = threading.Thread(target=self._main, name="easeml-widgets", daemon=True)
                self._thread.start()
            return sid

    def unsubscribe(self, sid: int) -> None:
        """Forget a subscriber; the last one closes the stream and joins the threads."""
        with self._lock:
            self._subs.pop(sid, None)
            if self._subs or self._thread is None:
                return
            thread, stream, self._thread, self._stream = self._thread, self._stream, None, None
            self._stop.set()
        if stream is not None:
            stream.close()
        if thread is not threading.current_thread():
            thread.join(10)
        with EventHub._registry_lock:
            if EventHub._registry.get(id(self.client)) is self and not self._subs:
                EventHub._registry.pop(id(self.client), None)

    # ------------------------------------------------------------ dispatcher
    def _main(self) -> None:
        backoff = 0.5
        stream = self._stream
        while not self._stop.is_set():
            if stream is None:
                if self._stop.wait(backoff):
                    break
                try:
                    stream = self.client.events()
                except Exception as error:  # noqa: BLE001 - the service may be down for a while
                    log.debug("easeml widgets: reconnect failed: %s", error)
                    backoff = min(backoff * 1.5, 5.0)
                    continue
                with self._lock:
                    if self._stop.is_set():
                        stream.close()
                        break
                    self._stream = stream
                backoff = 0.5
                self._each(lambda sub: sub[1] and sub[1]())
            event = stream.get(timeout=0.2)
            if event is not None:
                self._each(lambda sub, event=event: sub[0](event))
                self.delivered += 1
            elif not stream._thread.is_alive() and not self._stop.is_set():
                stream.close()  # the service went away: reconnect and resync
                stream = None
            else:
                self._each(lambda sub: sub[2] and sub[2]())

    def _each(self, call: Callable[[tuple], Any]) -> None:
        with self._lock:
            subs = list(self._subs.values())
        for sub in subs:
            try:
                call(sub)
            except Exception:  # noqa: BLE001 - one broken widget must not stop the others
                log.exception("easeml widget update failed")


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
