"""A file SQLite store keeps the connections its threads use at once.

QueuePool's default keeps 5 and closes every connection past them on return,
so a service with dozens of request and read threads opened (PRAGMAs, schema
parsed again, no prepared statements) and closed a connection on most
checkouts under load."""

from __future__ import annotations

import contextlib

from sqlalchemy import event, text

from ease_jupyter.store import open_store


def test_connections_used_at_once_are_kept_for_the_next_burst(tmp_path) -> None:
    store, _ = open_store(None, data_dir=tmp_path)
    opened = []
    event.listen(store.engine, "connect", lambda *_: opened.append(1))
    try:
        for burst in range(2):
            with contextlib.ExitStack() as held:  # a dozen threads' checkouts at once
                for _ in range(12):
                    held.enter_context(store.engine.connect()).execute(text("SELECT 1"))
            if burst == 0:
                first = len(opened)
        assert first >= 12 - 1  # (the store may have kept one from opening)
        assert len(opened) == first, f"the second burst opened {len(opened) - first} connections again"
    finally:
        store.close()
