"""What every live widget shares: a lock, a hub subscription, close()."""

from __future__ import annotations

import threading
from typing import Any

from ._hub import Event, EventHub


class Live:
    """Mixin for widgets fed by the Client's :class:`EventHub`.

    Subclasses implement ``_on_event(event)`` (called with ``self._lock``
    held, on the dispatcher thread) and ``_resync()`` (re-read the service
    after a reconnect). Every method that mutates widget state from the
    notebook side takes ``self._lock`` too.
    """

    _lock: threading.RLock
    _hub: EventHub | None = None
    _sid: int | None = None

    def _live_init(self, client: Any, live: bool) -> None:
        self._lock = threading.RLock()
        self._hub, self._sid = None, None
        if live:
            self._hub = EventHub.of(client)
            self._sid = self._hub.subscribe(self._dispatch, self._dispatch_resync, self._dispatch_quiet)

    def _dispatch(self, event: Event) -> None:
        with self._lock:
            self._on_event(event)

    def _dispatch_resync(self) -> None:
        with self._lock:
            self._resync()

    def _dispatch_quiet(self) -> None:
        with self._lock:
            self._on_quiet()

    def _on_quiet(self) -> None:
        """Called after each quiet spell of the stream; nothing by default."""

    def _on_event(self, event: Event) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _resync(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def live(self) -> bool:
        """True while the widget receives events."""
        return self._sid is not None

    def stop(self) -> None:
        """Stop receiving events (the widget stays on screen, frozen)."""
        hub, sid = self._hub, self._sid
        self._hub, self._sid = None, None
        if hub is not None and sid is not None:
            hub.unsubscribe(sid)  # not under self._lock: the dispatcher may be waiting for it
