"""Per-user storage quotas (``service/quota.py``): uploads, feeds and
trained models count; a write over the quota is 413 ``quota_exceeded``
naming the limit and the usage, and leaves nothing behind."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from click.testing import CliRunner

from ease_jupyter import datasets
from ease_jupyter.service.failures import error_code, failure_code
from ease_jupyter.cli import main
from ease_jupyter.errors import QuotaExceededError
from ease_jupyter.service import ServiceConfig
from ease_jupyter.service.arrays import to_npy_bytes
from ease_jupyter.service.quota import Quota
from ease_jupyter.service.runner import grid_engine, run_sklearn_job
from ease_jupyter.store import JobStatus, open_store

from .conftest import serving, start

KIB = 1024
QUOTA = 20 * KIB


@pytest.fixture
def small_quota(tmp_path):
    with serving(tmp_path, "alice", "bob", torch=False, quota_bytes=QUOTA) as running:
        yield running


def _quota_error(reply) -> str:
    assert reply.status == 413, reply.body
    error = reply.body["error"]
    assert error["code"] == "quota_exceeded" and error["field"] == "quota"
    assert error["expected"] == f"at most {QUOTA} bytes"
    assert "quota of 20.0 KiB" in error["message"] and "in use:" in error["message"]
    return error["message"]


def test_a_feed_over_the_quota_is_refused_and_stores_nothing(small_quota, iris):
    s = small_quota
    for who in ("alice", "bob"):
        assert s.call("POST", "/tasks", who, body={"name": "t", "input": [4], "output": [3]}).status == 201
    assert s.call("POST", "/tasks/t/feed", "alice", body={"X": iris[0].tolist(), "y": iris[1].tolist()}).status == 201
    versions = s.call("GET", "/tasks/t/versions", "alice").body
    # 500 examples: X 8 KB, y 4 KB and the example list: 17 KB more, with iris's 5 KB over 20 KiB.
    X = np.random.default_rng(0).normal(size=(500, 4)).astype("float32")

    message = _quota_error(s.call("POST", "/tasks/t/feed", "alice", body={"X": X.tolist(), "y": [0] * 500}))

    assert "feed of task 't'" in message
    assert s.call("GET", "/tasks/t/versions", "alice").body == versions
    x_digest = hashlib.sha256(datasets.npy_bytes(X)).hexdigest()
    assert s.service.blobs.exists(x_digest) is False  # the refused arrays were not written
    # Quotas are per user: bob's feed of the same data fits his.
    assert s.call("POST", "/tasks/t/feed", "bob", body={"X": X.tolist(), "y": [0] * 500}).status == 201


def test_the_client_raises_the_quota_error_with_the_services_sentence(small_quota, iris):
    task = small_quota.client("alice").task("t", input=[4], output=[3])
    task.feed(*iris)
    X = np.random.default_rng(0).normal(size=(500, 4)).astype("float32")
    with pytest.raises(QuotaExceededError, match="over your quota of 20.0 KiB") as caught:
        task.feed(X, np.zeros(500, dtype="int64"))
    assert caught.value.field == "quota" and caught.value.expected == f"at most {QUOTA} bytes"


def test_uploads_count_and_a_chunk_over_the_quota_is_refused_whole(small_quota):
    s = small_quota
    uid = s.call("POST", "/uploads", "alice").body["id"]
    assert s.call("PUT", f"/uploads/{uid}?offset=0", "alice", raw=b"x" * (15 * KIB)).status == 200

    message = _quota_error(s.call("PUT", f"/uploads/{uid}?offset={15 * KIB}", "alice", raw=b"x" * (10 * KIB)))

    assert "uploads not fed yet 15.0 KiB" in message
    assert s.call("GET", f"/uploads/{uid}", "alice").body["size"] == 15 * KIB
    # bob's uploads are his own: alice's 15 KiB do not count for him.
    other = s.call("POST", "/uploads", "bob").body["id"]
    assert s.call("PUT", f"/uploads/{other}?offset=0", "bob", raw=b"x" * (15 * KIB)).status == 200


def test_a_feed_from_an_upload_counts_the_upload_as_freed(small_quota):
    s = small_quota
    assert s.call("POST", "/tasks", "alice", body={"name": "u", "input": [4], "output": [3]}).status == 201
    X = np.random.default_rng(0).normal(size=(550, 4)).astype("float32")  # 9 KB .npy
    data = to_npy_bytes(X)
    uid = s.call("POST", "/uploads", "alice").body["id"]
    assert s.call("PUT", f"/uploads/{uid}?offset=0", "alice", raw=data).status == 200
    # The feed's 18 KB (X, y, example list) with the upload's 9 KB would be over
    # 20 KiB, but the upload goes once fed.
    reply = s.call("POST", "/tasks/u/feed", "alice", body={"X": {"upload": uid}, "y": [0] * 550})
    assert reply.status == 201, reply.body


def test_a_model_over_the_quota_fails_its_job_with_the_quota_code(tmp_path, iris):
    """Larger than the room she has left: the model's own failure, not
    retried (``test_quota_models.py``), with the code ``quota_exceeded``."""
    store, blobs = open_store("memory://")
    user = store.create_user("alice", "h" * 64)
    task = store.create_task(user.id, "t", "input: [4] output: [3]")
    version = datasets.feed(store, blobs, task, *iris)
    job = store.create_job(task.id, version.id, "logreg", {"grid": {"C": [0.1]}})
    used = Quota(None).usage(store, blobs, user.id).total
    quota = Quota(used + 10)  # room for 10 bytes: no model fits
    engine = grid_engine("local")
    try:
        done = run_sklearn_job(store, blobs, job.id, engine, quota)
    finally:
        engine.close()
    assert done.status is JobStatus.FAILED and done.artifact_blob is None
    assert failure_code(store, done) is None and error_code(store, done) == "quota_exceeded"
    assert f"task 't', job {job.id}" in done.error and "quota of" in done.error
    assert Quota(None).usage(store, blobs, user.id).models == 0


def test_usage_counts_each_blob_once_by_kind(tmp_path, iris):
    store, blobs = open_store("memory://")
    user = store.create_user("alice", "h" * 64)
    task = store.create_task(user.id, "t", "input: [4] output: [3]")
    datasets.feed(store, blobs, task, *iris)
    first = Quota(None).usage(store, blobs, user.id)
    datasets.feed(store, blobs, task, *iris, mode="append")  # the same arrays again: their blobs exist once
    second = Quota(None).usage(store, blobs, user.id)
    version = store.latest_dataset_version(task.id)
    assert second.data - first.data == blobs.size(version.members_blob)
    assert second.models == second.uploads == 0


def test_the_quota_is_configurable():
    assert ServiceConfig().quota_bytes == 4 * 1024**3
    with pytest.raises(ValueError, match="quota_bytes"):
        ServiceConfig(quota_bytes=-1)
    help_text = CliRunner().invoke(main, ["serve", "--help"]).output
    assert "--quota-gb" in help_text


def test_users_models_code_counts_against_her_quota_and_a_task_holds_a_bounded_number(tmp_path):
    """The code of her own models adds up across her tasks: one more that
    would take her over her quota is refused (413, field quota) and stores
    nothing; a task takes at most MAX_MODELS_PER_TASK models."""
    import base64

    from ease_jupyter.service.user_models import MAX_MODELS_PER_TASK

    running = start(tmp_path, torch=False, quota_bytes=QUOTA, allow_user_models=True)
    running.user("alice")
    try:
        code = lambda i: base64.b64encode(bytes([i]) * (6 * KIB)).decode()  # noqa: E731 - 6 KiB each, distinct
        for t in range(3):
            running.call("POST", "/tasks", "alice", body={"name": f"t{t}", "input": [4], "output": [3]})
        for t in range(3):  # 18 KiB of code in three tasks: within 20 KiB
            reply = running.call("POST", f"/tasks/t{t}/models", "alice", body={"name": "m", "kind": "estimator",
                                                                               "code": code(t)})
            assert reply.status == 201, reply.body
        stored = sum(1 for _ in running.service.blobs.iter_blobs())
        reply = running.call("POST", "/tasks/t0/models", "alice", body={"name": "n", "kind": "estimator",
                                                                         "code": code(9)})
        assert reply.status == 413 and reply.body["error"]["field"] == "quota", reply.body
        assert "your other models" in reply.body["error"]["message"]
        assert sum(1 for _ in running.service.blobs.iter_blobs()) == stored
    finally:
        running.thread.stop()
    running = start(tmp_path / "many", torch=False, allow_user_models=True)
    running.user("alice")
    try:
        running.call("POST", "/tasks", "alice", body={"name": "t", "input": [4], "output": [3]})
        for i in range(MAX_MODELS_PER_TASK):
            body = {"name": f"m{i}", "kind": "estimator", "code": base64.b64encode(bytes([i])).decode()}
            assert running.call("POST", "/tasks/t/models", "alice", body=body).status == 201
        reply = running.call("POST", "/tasks/t/models", "alice", body={"name": "more", "kind": "estimator",
                                                                        "code": "AAAA"})
        assert reply.status == 400 and reply.body["error"]["field"] == "name"
        assert str(MAX_MODELS_PER_TASK) in reply.body["error"]["expected"]
    finally:
        running.thread.stop()
