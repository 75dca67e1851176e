"""What every live widget shares: a lock, a hub subscription, close()."""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..errors import NotFoundError

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

    deleted: bool = False

    def _live_init(self, client: Any, live: bool) -> None:
        info = getattr(getattr(self, "_task", None) or getattr(self, "task", None), "info", None) or {}
        self._task_created = info.get("created_at") if isinstance(info, dict) else None
        self._lock = threading.RLock()
        self._hub, self._sid = None, None
        if live:
            self._hub = EventHub.of(client)
            self._sid = self._hub.subscribe(self._dispatch, self._dispatch_resync, self._dispatch_quiet)

    def _first_read(self, read: Callable[[], Any]) -> None:
        """Run the widget's first read of the service after subscribing; if it
        fails (the task was deleted meanwhile, the service is down), close the
        widget, so its subscription (and the stream's threads with the last
        one) does not outlive the exception, and re-raise."""
        try:
            with self._lock:
                read()
        except BaseException:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - the first error is the one to see
                self.stop()
            raise

    def _task_is_gone(self, task: Any) -> bool:
        """Whether ``task`` (this widget's, id ``self.task_id``) no longer exists:
        deleted, or its name now belongs to another task (a new one declared
        after the deletion). Reads are by name, so a widget checks this before
        re-reading after a reconnect, when the deletion event may have been missed."""
        try:
            info = task.client.request("GET", task._path())
        except NotFoundError:
            return True
        return not self._same_task(info)

    def _same_task(self, info: dict[str, Any]) -> bool:
        """Whether ``info`` (``GET /tasks/{name}``) is this widget's task: the
        same id and creation time (a database from before schema 0004 may give
        a new task a freed id)."""
        created = getattr(self, "_task_created", None)
        return info.get("id") == self.task_id and (created is None or info.get("created_at") in (None, created))

    def _mark_deleted(self) -> None:
        """The task was deleted: say so and stop following events (never
        resync by name afterwards, the name may come to mean another task)."""
        self.deleted = True
        self.stop()

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
