"""Deleting a user (``DELETE /users/{name}``, admins only): every task of hers
goes as a task deletion takes it (rows, then the blobs nobody else
references: content bob also fed stays his), her uploads, notebook
sessions, budgets, settings, token and account; the control loop forgets
her tenants; a running job of hers ends first. 403 for non-admins, 404 for
an unknown user, 409 for the caller's own account; a hub user deleted here
gets a new, empty account at her next login."""

from __future__ import annotations

import numpy as np
import pytest

from ease_jupyter.errors import InvalidStateError, NotFoundError
from ease_jupyter.service import ServiceConfig, budget, deletion, gc
from ease_jupyter.service.auth import hash_token
from ease_jupyter.service.core import Service
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.user_models import user_setting
from ease_jupyter.store.base import HUB
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor, lend_deleted_ids, serving
from .test_delete_task import _blobs_of, _data
from .test_hub_accounts import FakeHub, hub_mode  # noqa: F401 - the fixture

CAP = budget.CAP_PREFIX + "seconds"


def test_an_admin_deletes_a_user_with_all_of_hers_and_nothing_of_others(tmp_path, monkeypatch):
    monkeypatch.setattr(gc, "DELETE_GRACE_SECONDS", 0.0)  # the test's blobs are seconds old
    # alice is added last: the store lends her id to the next user once she is gone
    with serving(tmp_path, "bob", "alice", admins=("admin",), torch=False) as svc:
        store, blobs, service = svc.service.store, svc.service.blobs, svc.service
        lend_deleted_ids(monkeypatch, store)
        X, y = _data(0)
        his = svc.client("bob").task("his", input=[2], output=[2])
        his.feed(X, y)
        alice = svc.client("alice")
        shared = alice.task("shared", input=[2], output=[2])
        shared.feed(X, y)  # bob's very rows: the same blobs
        own = alice.task("own", input=[2], output=[2])
        own.feed(*_data(1))
        assert shared.wait(timeout=180) and his.wait(timeout=180)  # a trained model of hers
        assert svc.call("PUT", "/tasks/own/tags", "alice", body={"note": "mine"}).status == 200
        assert svc.call("PUT", "/users/alice/budget", "admin", body={"seconds": 5000}).status == 200
        assert svc.call("PUT", "/users/alice", "admin", body={"allow_user_models": True}).status == 200
        upload = svc.call("POST", "/uploads", "alice").body["id"]
        assert svc.call("PUT", f"/uploads/{upload}", "alice", raw=b"x" * 100).status == 200
        assert svc.call("POST", "/notebooks", "alice", body={"notebook_path": "a.ipynb"}).status == 201

        me = store.user_by_name("alice")
        tasks = store.list_tasks(me.id)
        versions = [v.id for t in tasks for v in store.list_dataset_versions(t.id)]
        jobs = [j.id for t in tasks for j in store.list_jobs(t.id)]
        assert any(j.artifact_blob for t in tasks for j in store.list_jobs(t.id))
        hers = set().union(*(_blobs_of(store, t.id) for t in tasks))
        his_blobs = _blobs_of(store, his.info["id"])
        alone, both = hers - his_blobs, hers & his_blobs
        assert alone and both and all(blobs.exists(d) for d in hers)
        bob_before = his.data(), svc.call("GET", "/tasks/his/versions", "bob").body

        # Who may: admins only; an unknown user is a 404 naming her; nobody deletes herself.
        for who in ("bob", "alice"):
            refused = svc.call("DELETE", "/users/alice", who)
            assert refused.status == 403 and refused.body["error"]["code"] == "forbidden"
        unknown = svc.call("DELETE", "/users/nobody", "admin")
        assert unknown.status == 404 and "nobody" in unknown.body["error"]["message"]
        itself = svc.call("DELETE", "/users/admin", "admin")
        assert itself.status == 409 and "own account" in itself.body["error"]["message"]
        assert svc.call("GET", "/whoami", "admin").status == 200
        assert store.list_tasks(me.id) == tasks  # the refusals changed nothing

        out = svc.call("DELETE", "/users/alice", "admin")

        assert out.status == 200, out.body
        body = out.body
        assert (body["deleted"], body["name"], body["id"], body["tasks"]) == (True, "alice", me.id, 2)
        assert sorted(body["task_names"]) == ["own", "shared"]
        # (her jobs went on training until the delete: more of them, and of their models, than seen above)
        assert body["versions"] == len(versions) and body["jobs"] >= len(jobs) >= 1
        assert body["blobs_deleted"] >= len(hers) and body["bytes_freed"] > 0  # what left her quota
        assert (body["uploads_deleted"], body["upload_bytes_freed"], body["notebooks_deleted"]) == (1, 100, 1)
        # Her rows are gone from the store.
        for gone in ([lambda: store.user_by_name("alice"), lambda: store.get_user(me.id),
                      lambda: store.user_by_token_hash(hash_token(svc.tokens["alice"])),
                      lambda: store.tags("user", me.id)]
                     + [lambda t=t: store.get_task(t.id) for t in tasks]
                     + [lambda v=v: store.get_dataset_version(v) for v in versions]
                     + [lambda j=j: store.get_job(j) for j in jobs]):
            with pytest.raises(NotFoundError):
                gone()
        assert not set(store.find_by_tag("user", CAP)) & {me.id}
        assert not {t.name for t in store.list_tasks()} & {"own", "shared"}
        # Her blobs only she held are gone from disk; bob's data, the shared blobs included, reads back exactly.
        assert not any(blobs.exists(d) for d in alone) and all(blobs.exists(d) for d in both)
        after = his.data(), svc.call("GET", "/tasks/his/versions", "bob").body
        assert all(np.array_equal(a, b) for a, b in zip(after[0], bob_before[0])) and after[1] == bob_before[1]
        assert np.array_equal(after[0][1], X) and np.array_equal(after[0][2], y)  # exactly what he fed
        # Her token, uploads and sessions are gone; the control loop has no tenant of hers.
        assert svc.call("GET", "/whoami", "alice").status == 401
        assert not (service.uploads.directory / str(me.id)).exists()
        assert not [s for s in svc.call("GET", "/notebooks", "admin").body if s["user"] == "alice"]
        loop = service.loop
        assert not [t for t in loop.state.tenants.values() if t.owner_id == me.id]
        assert not [u for t in tasks for u in loop.selector.users if u.startswith(f"{t.id}/")]
        assert svc.call("DELETE", "/users/alice", "admin").status == 404  # gone for good

        # A new alice starts from nothing, even with the old one's id, and a task
        # of bob's that takes the id of one of hers stays his.
        assert svc.call("POST", "/tasks", "bob", body={"name": "later", "input": [2], "output": [2]}).status == 201
        svc.user("alice")
        fresh = store.user_by_name("alice")
        assert fresh.id == me.id  # (lent again: the reuse that the service must not be fooled by)
        assert svc.call("GET", "/tasks", "alice").body == []
        for path in ("/tasks/shared", "/tasks/own", "/tasks/own/tags", f"/uploads/{upload}"):
            assert svc.call("GET", path, "alice").status == 404, path
        assert store.tags("user", fresh.id) == {} and user_setting(store, fresh) is None
        assert svc.call("GET", "/budget", "alice").body["cap"]["seconds"] is None
        assert svc.call("GET", "/notebooks", "alice").body == []
        assert np.array_equal(his.data()[2], y)  # bob's task is still his


def _data_x(seed: int):
    X, y = _data(seed)
    return {"X": X.tolist(), "y": y.tolist()}


def test_a_running_job_of_hers_ends_first_and_the_loop_forgets_her(tmp_path):
    service = Service(ServiceConfig(db_url="memory://", data_dir=tmp_path, torch=False))
    store, blobs = service.store, service.blobs
    manual = ManualExecutor(store, workers=2)
    service.loop = loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: manual}, tick_seconds=0.01)
    loop.recover()
    admin = store.create_user("admin", None, is_admin=True)
    alice, bob = store.create_user("alice", "a"), store.create_user("bob", "b")
    for who, name, seed in ((alice, "busy", 0), (alice, "idle", 1), (bob, "his", 2)):
        service.feed(who, service.create_task(who, {"name": name, "input": [2], "output": [2]})[0]["name"],
                     _data_x(seed))
    loop.step()
    busy = store.task_by_name(alice.id, "busy")
    assert any(r.task_id == busy.id for r in loop.state.running.values())

    with pytest.raises(InvalidStateError, match="still running after 0.2 s"):
        deletion.delete_user(store, blobs, loop, alice, wait_seconds=0.2)
    assert store.get_user(alice.id) == alice  # her account stays until the job ends ...
    assert all(t.cancelled for t in store.list_tasks(alice.id))  # ... and none of hers gets a new pick
    assert store.get_task(busy.id)

    manual.finish_all()
    loop.step()  # collects the finished jobs; her cancelled tasks get no new pick
    assert not any(r.task_id in {t.id for t in store.list_tasks(alice.id)} for r in loop.state.running.values())
    out = service.delete_user(admin, "alice")
    assert out["deleted"] and out["tasks"] == 2 and out["jobs"] >= 1
    with pytest.raises(NotFoundError):
        store.get_user(alice.id)
    assert {t.owner_id for t in loop.state.tenants.values()} == {bob.id}
    assert [t.name for t in store.list_tasks()] == ["his"]
    service.stop()


def test_a_deleted_hub_user_logs_in_again_to_a_new_empty_account(hub_mode):  # noqa: F811
    running, fake = hub_mode
    store = running.service.store
    token = fake.add("carol")
    me = running.call("GET", "/whoami", token=token).body
    assert me["origin"] == HUB
    made = running.call("POST", "/tasks", token=token, body={"name": "t", "input": [2], "output": [2]})
    assert made.status == 201
    running.user("carol")  # a local account of her name stays untouched
    local_id = store.user_by_name("carol").id

    out = running.call("DELETE", "/users/carol?origin=hub", "admin")

    assert out.status == 200 and (out.body["origin"], out.body["tasks"]) == (HUB, 1)
    with pytest.raises(NotFoundError):
        store.get_user(me["id"])
    assert store.user_by_name("carol").id == local_id  # the local carol is another user
    # Her next login (within the service's 30 s cache of hub names) makes a new account, not an error.
    again = running.call("GET", "/whoami", token=token)
    assert again.status == 200 and again.body["origin"] == HUB
    assert store.user_by_name("carol", HUB).id == again.body["id"]
    assert running.call("GET", "/tasks", token=token).body == []
    assert running.call("GET", "/tasks/t", token=token).status == 404
    made = running.call("POST", "/tasks", token=token, body={"name": "t", "input": [2], "output": [2]})
    assert made.status == 201, made.body


def test_the_clients_delete_user(tmp_path):
    with serving(tmp_path, "bob", admins=("admin",), torch=False) as svc:
        svc.client("bob").task("his", input=[2], output=[2]).feed(*_data(0))
        out = svc.client("admin").delete_user("bob")
        assert (out["deleted"], out["name"], out["tasks"], out["task_names"]) == (True, "bob", 1, ["his"])
        assert "bob" not in [u["name"] for u in svc.client("admin").users()]
        with pytest.raises(NotFoundError):
            svc.client("admin").delete_user("bob")
