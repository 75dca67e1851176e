"""Notifications in a plain kernel: one line under the next cell's output.

The service publishes a ``{"type": "notification", ...}`` event to a task's
owner when its best model improves, it goes idle, a job fails or her budget
runs out (``service/notify.py``). ``NotificationFeed`` reads them on a
background thread from the client's event stream, keeping those whose
``owner_id`` is the client's own user (an admin's stream has everyone's).
``%load_ext ease_jupyter`` registers ``CellNotices`` on IPython's
``post_run_cell`` event: after each cell it prints the notifications
received since the last one, one line each, for the client of ``%easeml
connect``. Outside IPython, ``log_notifications``
writes them as log lines (INFO, logger ``ease_jupyter.notifications``).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Callable

log = logging.getLogger("ease_jupyter.notifications")

PREFIX = "ease.ml"


def one_line(event: dict[str, Any]) -> str:
    """``ease.ml [idle] iris: done, ...``: the message, on one line."""
    message = " ".join(str(event.get("message") or event.get("task") or "").split())
    return f"{PREFIX} [{event.get('kind', 'notification')}] {message}"


def is_own_notification(event: dict[str, Any], user_id: int) -> bool:
    """Whether ``event`` is a notification for user ``user_id``. An admin's
    stream carries every user's events; her notebook shows her own."""
    return event.get("type") == "notification" and event.get("owner_id") == user_id


class NotificationFeed:
    """The notifications of ``client``'s user, from her event stream, read on
    a daemon thread: kept for ``take`` or handed to ``on_notification``.
    Only her own: an admin's stream carries everyone's, which her notebook
    (and the .ipynb it is saved to) must not show."""

    def __init__(self, client: Any, on_notification: Callable[[dict[str, Any]], None] | None = None, *,
                 user_id: int | None = None, timeout: float = 30.0):
        """``user_id``: the client's user's id where it is known already;
        ``timeout``: the most seconds to wait for the stream to open. Raises
        when the service cannot be reached; never starts a stopped embedded
        service (listening must not bring back one that stopped when idle or
        by ``easeml stop``)."""
        self.client = client
        self._on = on_notification
        self._kept: deque[dict[str, Any]] = deque(maxlen=100)  # a long cell keeps the latest 100
        self._lock = threading.Lock()
        self.user_id: int = user_id if user_id is not None else client.whoami(start=False)["id"]
        # passive: listening keeps no idle (embedded) service from stopping
        self._stream = client.events(timeout, passive=True)
        self._thread = threading.Thread(target=self._read, name="easeml-notifications", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for event in self._stream.iter():
            if not is_own_notification(event, self.user_id):
                continue
            if self._on is not None:
                self._on(event)
            else:
                with self._lock:
                    self._kept.append(event)

    @property
    def alive(self) -> bool:
        return self._stream.alive

    def take(self) -> list[dict[str, Any]]:
        """The notifications received since the last ``take``."""
        with self._lock:
            out = list(self._kept)
            self._kept.clear()
        return out

    def close(self) -> None:
        self._stream.close()


# The most seconds the hook waits for a stream to open after a cell: it runs
# after every cell, and a cell must not hang on a service that does not answer.
HOOK_OPEN_SECONDS = 3.0


class CellNotices:
    """IPython ``post_run_cell`` callback: print the notifications that came
    since the last cell, under this cell's output. Follows the client of
    ``session`` (``%easeml connect``), and opens a new stream when the old one
    ended, only to a service that is up: it never starts the embedded
    service (which stopped when idle, or by ``easeml stop``); the next
    ``%easeml`` line that needs it does."""

    def __init__(self, session: Any):
        self.session = session
        self.feed: NotificationFeed | None = None
        self._user: tuple[Any, int] | None = None  # (client, its user's id): asked once per client

    def __call__(self, result: Any = None) -> None:  # noqa: ARG002 - IPython passes the ExecutionResult
        client = getattr(self.session, "client", None)
        if client is None:
            return
        feed = self.feed
        if feed is not None and feed.client is client:
            for event in feed.take():
                print(one_line(event))
            if feed.alive:
                return
        if feed is not None:
            feed.close()
        try:
            user_id = self._user[1] if self._user is not None and self._user[0] is client else None
            self.feed = NotificationFeed(client, user_id=user_id, timeout=HOOK_OPEN_SECONDS)
            self._user = (client, self.feed.user_id)
        except Exception as error:  # noqa: BLE001 - a cell must never fail for want of notifications
            self.feed = None
            log.debug("no notification stream: %s", error)

    def close(self) -> None:
        if self.feed is not None:
            self.feed.close()
            self.feed = None


def register(ipython: Any, session: Any) -> CellNotices:
    """Print notifications under cell output in ``ipython`` (once per shell)."""
    notices = CellNotices(session)
    previous = getattr(ipython, "_easeml_notices", None)
    if previous is not None:
        ipython.events.unregister("post_run_cell", previous)
        previous.close()
    ipython.events.register("post_run_cell", notices)
    ipython._easeml_notices = notices
    return notices


def log_notifications(client: Any) -> NotificationFeed:
    """Outside IPython: log each of the user's notifications as it comes
    (INFO, logger ``ease_jupyter.notifications``); ``close()`` to stop."""
    return NotificationFeed(client, on_notification=lambda event: log.info("%s", one_line(event)))
