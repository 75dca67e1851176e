"""In-process publish/subscribe of service events (job states, metrics,
dataset versions). Publishers may run on any thread; each subscriber gets its
events on the IOLoop it subscribed from, filtered to what its user may see.
A subscriber may also give its user and a ``close`` callback:
``close_user`` ends every subscription of a user at once (a revoke, a
deletion)."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, Callable

Event = dict[str, Any]


class EventBus:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: dict[int, tuple[int | None, Callable[[Event], None], Any]] = {}
        # sid -> (its user's id, what ends it), for close_user
        self._owners: dict[int, tuple[int, Callable[[], None] | None]] = {}
        self._ids = itertools.count(1)
        self._seq = itertools.count(1)

    def subscribe(self, user_id: int | None, callback: Callable[[Event], None], loop: Any = None, *,
                  owner: int | None = None, close: Callable[[], None] | None = None) -> int:
        """``user_id`` None sees every event (admins). ``loop`` is a tornado
        IOLoop to call back on; None calls back on the publishing thread.
        ``owner`` is the subscriber's user (an admin's too), whose
        ``close_user`` calls ``close`` (on ``loop``)."""
        with self._lock:
            sid = next(self._ids)
            self._subs[sid] = (user_id, callback, loop)
            if owner is not None:
                self._owners[sid] = (owner, close)
            return sid

    def unsubscribe(self, sid: int) -> None:
        with self._lock:
            self._subs.pop(sid, None)
            self._owners.pop(sid, None)

    def close_user(self, user_id: int) -> int:
        """End every subscription of user ``user_id`` now: it gets no event
        published after this returns, and its ``close`` is called. Returns
        how many there were."""
        with self._lock:
            sids = [sid for sid, (owner, _) in self._owners.items() if owner == user_id]
            ended = [(self._subs.pop(sid, (None, None, None))[2], self._owners.pop(sid)[1]) for sid in sids]
        for loop, close in ended:
            if close is None:
                continue
            if loop is None:
                close()
            else:
                loop.add_callback(close)
        return len(ended)

    def publish(self, owner_id: int, event: Event) -> None:
        event = {**event, "owner_id": owner_id, "seq": next(self._seq), "time": time.time()}
        with self._lock:
            targets = [(cb, loop) for uid, cb, loop in self._subs.values() if uid is None or uid == owner_id]
        for callback, loop in targets:
            if loop is None:
                callback(event)
            else:
                loop.add_callback(callback, event)

    def broadcast(self, event_for: Callable[[int | None], Event | None]) -> None:
        """An event for every subscriber, shaped per viewer: ``event_for(user_id)``
        (None for admins) gives what that user may see, or None to skip her.
        It is called once per distinct viewer; all copies share one ``seq``.
        Broadcast events carry no ``owner_id``."""
        seq, stamp = next(self._seq), time.time()
        with self._lock:
            targets = list(self._subs.values())
        shaped: dict[int | None, Event | None] = {}
        for uid, callback, loop in targets:
            if uid not in shaped:
                event = event_for(uid)
                shaped[uid] = None if event is None else {**event, "seq": seq, "time": stamp}
            event = shaped[uid]
            if event is None:
                continue
            if loop is None:
                callback(event)
            else:
                loop.add_callback(callback, event)

    @property
    def n_subscribers(self) -> int:
        with self._lock:
            return len(self._subs)
