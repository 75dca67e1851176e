"""Users see the profiler: GET /tasks/NAME/profile and ``task.profile()``
(each candidate's predicted seconds, source, chosen configuration and cost),
each job's predicted seconds in the jobs listing, and ``%easeml models``."""

from __future__ import annotations

import math

import pytest
from IPython.core.interactiveshell import InteractiveShell

from ease_jupyter.errors import NotFoundError
from ease_jupyter.service.profiling import TAG_PREDICTED, TAG_SOURCE, full_seconds

from .conftest import serving

RESOURCE_KEYS = {"threads", "workers", "partitions", "device", "memory_bytes"}


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    """One service for the module (the tests only read): alice, bob and an admin."""
    with serving(tmp_path_factory.mktemp("profile_view"), "alice", "bob") as running:
        running.user("admin", admin=True)  # after alice and bob, as before
        yield running


@pytest.fixture(scope="module")
def trained(svc, iris):
    """alice's iris task, fed and trained to idle."""
    X, y = iris
    task = svc.client("alice").task("iris", input=[4], output=[3])
    task.feed(X, y)
    assert task.wait(timeout=120)
    return task


def test_profile_before_data_has_no_candidates(svc):
    task = svc.client("alice").task("empty", input=[4], output=[3])
    profile = task.profile()
    assert profile["task"] == "empty" and profile["examples"] == 0 and profile["candidates"] == []
    assert set(profile["prices"]) == {"cpu", "gb", "gpu"}


def test_profile_route_is_the_owners(svc, trained):
    mine = svc.call("GET", "/tasks/iris/profile", "alice")
    assert mine.status == 200
    # other users (an admin too, as on every task route) see no such task; no token: 401
    for who in ("bob", "admin"):
        other = svc.call("GET", "/tasks/iris/profile", who)
        assert other.status == 404 and other.body["error"]["code"] == "not_found", other.body
    assert svc.call("GET", "/tasks/iris/profile").status == 401
    with pytest.raises(NotFoundError):
        svc.client("bob").task("iris").profile()


def test_profile_prices_every_candidate_of_the_task(svc, trained):
    profile = trained.profile()
    info = trained.refresh()
    assert profile["examples"] == info["latest_version"]["n_examples"] == 150
    plans = profile["candidates"]
    assert len(plans) == info["candidates"]  # one plan per arm the selector explores
    assert {p["model"] for p in plans} >= {j["model"] for j in trained.jobs()}
    seconds = [p["predicted_seconds"] for p in plans]
    assert seconds == sorted(seconds) and all(s > 0 for s in seconds)  # cheapest predicted first
    for plan in plans:
        assert plan["source"] in ("family", "pooled", "flops") and plan["engine"] == "sklearn"
        assert set(plan["resources"]) >= RESOURCE_KEYS and plan["cost"] >= 0
        assert plan["goal"] in ("runtime", "cost") and isinstance(plan["feasible"], bool)
    assert profile["profiler"]["records"] == sum(f["jobs"] for f in profile["profiler"]["families"].values())


def test_jobs_carry_their_prediction_and_its_error(svc, trained):
    store = svc.service.store
    jobs = trained.jobs()
    assert jobs and all(j["status"] == "succeeded" for j in jobs)
    for job in jobs:
        tags = store.tags("job", job["id"])
        assert job["predicted_seconds"] == float(tags[TAG_PREDICTED]) > 0
        assert job["source"] == tags[TAG_SOURCE]
        # the error is the job's own seconds' (its cost less the profiling runs it paid for first)
        own = full_seconds(store.get_job(job["id"]), tags)
        assert own <= job["cost_seconds"]
        assert job["log_error"] == pytest.approx(math.log(own / job["predicted_seconds"]))
    assert {j["id"]: j["predicted_seconds"] for j in trained.history()} == {
        j["id"]: j["predicted_seconds"] for j in jobs}


def test_models_magic_shows_predicted_and_candidate_costs(svc, trained):
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ease_jupyter")
    try:
        shell.run_line_magic("easeml", f"connect {svc.url} --token {svc.tokens['alice']}")
        result = shell.run_line_magic("easeml", "models iris")
    finally:
        InteractiveShell.clear_instance()
    jobs = {(j["model"], j["cost_seconds"]): j for j in trained.jobs()}
    assert len(result.rows) == len(jobs)
    for row in result.rows:  # measured seconds beside the prediction made before the job ran
        job = jobs[(row["model"], row["seconds"])]
        assert row["predicted_s"] == job["predicted_seconds"] > 0 and row["source"] == job["source"]
    plans = trained.profile()["candidates"]
    assert [c["candidate"] for c in result.candidates] == [p["model"] for p in plans]
    for row, plan in zip(result.candidates, plans):
        assert row["predicted_s"] == pytest.approx(plan["predicted_seconds"], rel=1e-6)
        assert row["source"] == plan["source"] and row["cost"] == pytest.approx(plan["cost"], rel=1e-6)
        assert f"{plan['resources']['threads']} thread" in row["resources"] and plan["resources"]["device"] in row["resources"]
    text, page = repr(result), result._repr_html_()
    assert "predicted cost of each candidate" in text and "150 examples" in text
    assert text.count("\n") >= len(jobs) + len(plans) + 3 and page.count("<table>") == 2
    for plan in plans:
        assert plan["model"] in text.split("predicted cost of each candidate")[1]
