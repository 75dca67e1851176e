"""Requests that run a model (export, suspicion, infer) may wait minutes on a
user's own code: they run on threads of their own, at most
``MODEL_CALLS_PER_USER`` per user at once, so that neither another user's
model calls nor anyone's reads queue behind them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from ease_jupyter.service.handlers import MODEL_CALLS_PER_USER, READ_THREADS

from .conftest import http, until

ROUTES = [("GET", "/tasks/t/model", "export_model"), ("GET", "/tasks/t/suspicion", "suspicion"),
          ("POST", "/tasks/t/infer", "infer")]


def hold_model_calls(svc, monkeypatch, names: set[str]) -> threading.Event:
    """Each model-running method of the service waits for the event when
    one of ``names`` calls it (her model hangs), and answers at once otherwise."""
    release = threading.Event()
    answers = {"export_model": (b"{}", "application/json", "t.json"), "suspicion": {}, "infer": {}}
    for _, _, method in ROUTES:
        def call(caller, *args, _answer=answers[method]):
            if caller.name in names:
                release.wait(60)
            return _answer
        monkeypatch.setattr(svc.service, method, call)
    return release


def test_a_user_holds_at_most_her_share_of_model_calls_and_no_one_waits_behind_them(svc, monkeypatch):
    users = [f"u{i}" for i in range(READ_THREADS // MODEL_CALLS_PER_USER + 1)]
    for name in users + ["carol"]:
        svc.user(name)
    release = hold_model_calls(svc, monkeypatch, set(users))
    hanging = len(users) * MODEL_CALLS_PER_USER  # more than there are read threads
    pool = ThreadPoolExecutor(hanging)
    try:
        calls = [pool.submit(svc.call, *ROUTES[i % len(ROUTES)][:2], name, body={"X": [[1.0]]})
                 for name in users for i in range(MODEL_CALLS_PER_USER)]
        assert until(lambda: sum(svc.service.model_calls.values()) == hanging, 30), svc.service.model_calls
        for method, path, _ in ROUTES:  # one more of hers: refused at once, naming the limit
            refused = svc.call(method, path, users[0], body={"X": [[1.0]]})
            assert refused.status == 429, refused.body
            assert refused.body["error"]["code"] == "too_many_model_calls"
            assert refused.body["error"]["field"] == "requests"
        # another user's model call and anyone's read are answered while theirs hang
        for method, path, _ in ROUTES:
            assert svc.call(method, path, "carol", body={"X": [[1.0]]}).status == 200
        assert http(svc.url, "GET", "/api/v1/tasks", token=svc.tokens["carol"]).status == 200
        assert not any(call.done() for call in calls)
        release.set()
        assert all(call.result(timeout=30).status == 200 for call in calls)
    finally:
        release.set()
        pool.shutdown(wait=True)
    assert not svc.service.model_calls  # every slot given back
    assert svc.call("GET", "/tasks/t/model", users[0]).status == 200
