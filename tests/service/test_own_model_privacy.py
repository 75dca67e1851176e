"""A user's own model is hers: other users never learn its name or that
she trains one, neither from the scheduler's ``decision`` events (``model``
and ``model_reason``) nor from the profiler's families in ``task.profile()``
(``user:<owner id>:<digest of her code>``, docs/profiler.md)."""

from __future__ import annotations

import json
import time

import pytest
from sklearn.linear_model import LogisticRegression

from ease_jupyter.service.profiling import USER_FAMILY_PREFIX

from .conftest import serving, until

SECRET = "bob_secret_fraud_model"
WAIT = 180  # seconds the small tasks may take on a busy machine


def _decision(stream, done, timeout: float = WAIT) -> list[dict]:
    """The ``decision`` events of ``stream`` until ``done(event)`` holds for one (or time is up)."""
    seen: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = stream.get(timeout=1)
        if event is not None and event["type"] == "decision":
            seen.append(event)
            if done(event):
                break
    return seen


@pytest.fixture(scope="module")
def trained(tmp_path_factory, iris):
    """alice and bob each with a task; bob's trains his own model, until the
    profiler has learned its family. alice's and bob's event streams were
    open all along."""
    streams = {}
    with serving(tmp_path_factory.mktemp("own_model_privacy"), "alice", "bob", allow_user_models=True,
                 workers=1) as running:
        try:
            streams.update((name, running.client(name).events()) for name in ("alice", "bob"))
            X, y = iris
            alice = running.client("alice").task("alice-t", input=[4], output=[3])
            alice.feed(X[:60], y[:60])
            bob = running.client("bob").task("bob-fraud", input=[4], output=[3])
            bob.add_model(LogisticRegression(max_iter=500), name=SECRET)
            bob.feed(X, y)
            assert until(lambda: any(j["model"] == SECRET and j["status"] == "succeeded" for j in bob.jobs()), WAIT)
            bob_id = running.service.store.user_by_name("bob").id
            assert until(lambda: any(f.startswith(f"{USER_FAMILY_PREFIX}{bob_id}:")
                                     for f in bob.profile()["profiler"]["families"]), WAIT)
            yield running, streams, bob_id
        finally:
            for stream in streams.values():
                stream.close()


def test_the_profile_shows_the_zoo_and_the_callers_own_families_only(trained):
    running, _, bob_id = trained
    seen = running.call("GET", "/tasks/alice-t/profile", "alice").body["profiler"]
    assert seen["families"] and not any(f.startswith(USER_FAMILY_PREFIX) for f in seen["families"])
    assert seen["records"] == sum(f["jobs"] for f in seen["families"].values())  # his jobs not counted either
    his = running.call("GET", "/tasks/bob-fraud/profile", "bob").body["profiler"]
    own = [f for f in his["families"] if f.startswith(USER_FAMILY_PREFIX)]
    assert own and all(f.startswith(f"{USER_FAMILY_PREFIX}{bob_id}:") for f in own)
    assert not any(f in json.dumps(seen) or f.rsplit(":", 1)[-1] in json.dumps(seen) for f in own)  # nor his digest
    assert his["records"] == sum(f["jobs"] for f in his["families"].values()) > seen["records"]


def test_decisions_do_not_name_another_users_own_model(trained):
    _, streams, _ = trained
    his = _decision(streams["bob"], lambda e: e["model"] == SECRET)
    assert his and his[-1]["model"] == SECRET and his[-1]["model_reason"].startswith(f"trying {SECRET} next: ")
    number = his[-1]["decision"]
    # alice's copy of that decision: by then she has every decision before it too
    hers = _decision(streams["alice"], lambda e: e["decision"] == number)
    assert hers and hers[-1]["decision"] == number
    assert hers[-1]["model"] is None and hers[-1]["model_reason"].startswith("trying their own model next: ")
    assert SECRET not in json.dumps(hers)
