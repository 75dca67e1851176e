"""The ``Store`` contract (``ease_jupyter/store/base.py``) as a reusable pytest suite.

Every ``Store`` backend must pass the ``test_*`` functions below. Each test
gets an empty store from a ``store`` fixture that the test module provides;
the suite's own fixtures (``fed``, ``dag``) build on it. To run the suite
against a backend, import it into a test module::

    import pytest
    from ease_jupyter.testing.store_contract import *  # noqa: F401,F403

    @pytest.fixture
    def store(tmp_path):
        backend = MyStore(tmp_path)  # empty, one per test
        yield backend
        backend.close()

pytest collects the imported tests as the module's own; parametrise the
``store`` fixture to run them over several backends (``tests/store/`` does
memory, SQLite and PostgreSQL).

What the suite expects of a backend beyond ``Store`` itself:

* it is safe to call from several threads at once (the concurrency tests);
* it builds a dataset version's edge, the last step of creating a version,
  through a method named ``_new_edge``: the fault-injection test replaces it
  to check that a failure midway stores nothing.

A backend that needs to deviate must say so here with an explicit, commented
check. ``feed``, ``refine`` and ``digest`` build well-formed versions for a
backend's own tests.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import threading
from datetime import datetime, timedelta, timezone

import pytest

from ..errors import AlreadyExistsError, DataError, InvalidStateError, NotFoundError, StaleParentError
from ..store import (
    JOB_TRANSITIONS,
    Edge,
    EdgeKind,
    JobStatus,
    JobUpdate,
    NewChunk,
    Node,
    NodeKind,
    Store,
    VersionKind,
)
from ..store.base import HUB, LOCAL

# -- helpers ------------------------------------------------------------------


def digest(seed: object) -> str:
    """A well-formed blob digest (the store never reads the blobs)."""
    return hashlib.sha256(repr(seed).encode()).hexdigest()


LATEST = object()  # feed's default parent: the task's latest version, read first


def feed(store: Store, task_id: int, count: int, *, parent_id: object = LATEST, seed: object = None):
    """A FEED version of ``count`` examples in one chunk, its blobs named
    after ``seed``, on ``parent_id`` (default: the latest version)."""
    if parent_id is LATEST:
        latest = store.latest_dataset_version(task_id)
        parent_id = None if latest is None else latest.id
    return store.create_dataset_version(
        task_id,
        kind=VersionKind.FEED,
        parent_id=parent_id,
        members_blob=digest(("members", seed, count)),
        n_examples=count,
        chunk=NewChunk(digest(("x", seed)), digest(("y", seed)), count),
    )


def refine(store: Store, task_id: int, parent_id: int, toggles: dict[int, bool], n_examples: int = 1):
    """A REFINE version of ``parent_id`` that sets ``toggles`` (example id -> active)."""
    return store.create_dataset_version(
        task_id,
        kind=VersionKind.REFINE,
        parent_id=parent_id,
        members_blob=digest(("refine", parent_id, sorted(toggles.items()))),
        n_examples=n_examples,
        toggles=toggles,
    )


def user(store: Store, name: str = "ada", *, is_admin: bool = False):
    return store.create_user(name, token_hash=f"hash-of-{name}", is_admin=is_admin)


def task(store: Store, owner=None, name: str = "galaxy"):
    owner = owner or user(store)
    return store.create_task(owner.id, name, "input: [2] output: [3]")


def assert_recent_utc(moment: datetime) -> None:
    assert moment.tzinfo is not None and moment.utcoffset() == timedelta(0)
    assert abs(datetime.now(timezone.utc) - moment) < timedelta(minutes=5)


def snapshot(store: Store, task_id: int):
    """Everything a version creation could have touched in a task."""
    versions = store.list_dataset_versions(task_id)
    edges = {e for v in versions for e in store.edges_into(Node(NodeKind.DATASET, v.id))}
    edges |= {e for v in versions for e in store.edges_out_of(Node(NodeKind.DATASET, v.id))}
    toggles = {v.id: store.list_toggles(v.id) for v in versions}
    return versions, store.list_chunks(task_id), frozenset(edges), toggles


def job_in(store: Store, status: JobStatus, task_id: int, version_id: int):
    """A new job brought to ``status`` along allowed transitions."""
    paths = {
        JobStatus.QUEUED: [],
        JobStatus.RUNNING: [JobStatus.RUNNING],
        JobStatus.SUCCEEDED: [JobStatus.RUNNING, JobStatus.SUCCEEDED],
        JobStatus.FAILED: [JobStatus.RUNNING, JobStatus.FAILED],
        JobStatus.CANCELLED: [JobStatus.CANCELLED],
    }
    job = store.create_job(task_id, version_id, "mlp", {"lr": 0.1})
    for step in paths[status]:
        job = store.update_job(job.id, step)
    assert job.status is status
    return job


@pytest.fixture
def fed(store: Store):
    """A user, a task and its first version (3 examples)."""
    owner = user(store)
    t = task(store, owner)
    return owner, t, feed(store, t.id, 3)


# -- frozen records -------------------------------------------------------------


def test_every_record_is_frozen(store: Store, fed) -> None:
    owner, t, v1 = fed
    v2 = refine(store, t.id, v1.id, {0: False})
    job = store.create_job(t.id, v2.id, "mlp", {"lr": 0.1, "layers": [64, 32], "opt": {"name": "adam"}})
    metric = store.add_metric(job.id, 0, "loss", 1.5)
    records = [
        owner,
        t,
        v1,
        store.list_chunks(t.id)[0],
        store.list_toggles(v2.id)[0],
        job,
        metric,
        store.edges_into(Node(NodeKind.DATASET, v2.id))[0],
    ]
    for record in records:
        field = dataclasses.fields(record)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, field, 0)
    # Containers inside records are frozen too, all the way down.
    with pytest.raises(TypeError):
        job.config["lr"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        job.config["opt"]["name"] = "sgd"  # type: ignore[index]
    assert job.config["layers"] == (64, 32)
    assert store.get_job(job.id).config == {"lr": 0.1, "layers": (64, 32), "opt": {"name": "adam"}}
    # ...and still what the service needs: JSON-serialisable, hashable, copyable.
    assert json.loads(json.dumps(job.config)) == {"lr": 0.1, "layers": [64, 32], "opt": {"name": "adam"}}
    hash(job)
    copy = dict(job.config)
    copy["lr"] = 2.0
    assert store.get_job(job.id).config["lr"] == 0.1


def test_returned_tuples_and_tags_cannot_change_the_store(store: Store, fed) -> None:
    _, t, v1 = fed
    versions = store.list_dataset_versions(t.id)
    assert isinstance(versions, tuple)
    store.set_tag("task", t.id, "owner", "ada")
    tags = store.tags("task", t.id)
    with pytest.raises(TypeError):
        tags["owner"] = "eve"  # type: ignore[index]
    assert store.tags("task", t.id) == {"owner": "ada"}


def test_there_is_no_way_to_change_or_delete_a_version() -> None:
    mutators = {
        name
        for name in dir(Store)
        if not name.startswith("_")
        and name.split("_")[0] in {"update", "set", "delete", "remove", "change", "replace", "drop", "edit", "link"}
    }
    # The only mutators touch users, tasks, jobs and tags; nothing reaches a dataset
    # version except the deletion of its whole task.
    assert mutators == {"set_user_token_hash", "set_user_admin", "link_user_to_hub", "update_job",
                        "set_task_cancelled", "set_tag", "delete_task", "delete_user"}


# -- users ----------------------------------------------------------------------


def test_users_are_created_and_found(store: Store) -> None:
    ada = user(store, "ada", is_admin=True)
    bob = user(store, "bob")
    assert (ada.name, ada.is_admin, bob.is_admin) == ("ada", True, False)
    assert_recent_utc(ada.created_at)
    assert store.get_user(ada.id) == ada
    assert store.user_by_name("bob") == bob
    assert store.user_by_token_hash("hash-of-ada") == ada
    assert store.list_users() == (ada, bob)
    assert ada.id < bob.id


def test_user_names_and_token_hashes_are_unique(store: Store) -> None:
    ada = user(store, "ada")
    with pytest.raises(AlreadyExistsError):
        store.create_user("ada", "another-hash")
    with pytest.raises(AlreadyExistsError):
        store.create_user("eve", "hash-of-ada")
    assert store.list_users() == (ada,)


def test_each_origin_is_its_own_namespace_of_names(store: Store) -> None:
    local = user(store, "carol")
    hub = store.create_user("carol", None, origin=HUB)
    assert (local.origin, hub.origin) == (LOCAL, HUB) and local.id != hub.id
    assert store.user_by_name("carol") == local == store.user_by_name("carol", LOCAL)
    assert store.user_by_name("carol", HUB) == hub
    with pytest.raises(AlreadyExistsError):
        store.create_user("carol", None, origin=HUB)
    with pytest.raises(NotFoundError):
        store.user_by_name("ada", HUB)
    with pytest.raises(DataError) as info:
        store.create_user("dave", "h", origin="ldap")
    assert info.value.field == "origin"
    assert store.list_users() == (local, hub)


def test_a_token_hash_can_be_replaced_or_revoked(store: Store) -> None:
    ada, bob = user(store, "ada"), user(store, "bob")
    assert store.set_user_token_hash(ada.id, "new-hash") == ada
    assert store.user_by_token_hash("new-hash") == ada
    with pytest.raises(NotFoundError):
        store.user_by_token_hash("hash-of-ada")  # the old one is gone
    with pytest.raises(AlreadyExistsError):
        store.set_user_token_hash(ada.id, "hash-of-bob")
    assert store.user_by_token_hash("new-hash") == ada  # a refused change changes nothing
    store.set_user_token_hash(ada.id, None)
    with pytest.raises(NotFoundError):
        store.user_by_token_hash("new-hash")
    assert store.get_user(ada.id) == ada and store.user_by_token_hash("hash-of-bob") == bob
    # users without a token never collide with each other
    store.set_user_token_hash(bob.id, None)
    assert store.create_user("eve", None).name == "eve"
    with pytest.raises(NotFoundError):
        store.set_user_token_hash(999, None)
    with pytest.raises(DataError):
        store.set_user_token_hash(ada.id, "")


def test_an_admin_flag_is_given_and_taken_and_nothing_else_changes(store: Store) -> None:
    ada, bob = user(store, "ada", is_admin=True), user(store, "bob")
    galaxy = task(store, ada)
    store.set_tag("user", ada.id, "easeml.budget.seconds", "10.0")
    demoted = store.set_user_admin(ada.id, False)
    assert demoted == dataclasses.replace(ada, is_admin=False) == store.get_user(ada.id)
    assert store.user_by_token_hash("hash-of-ada") == demoted and store.user_by_name("ada") == demoted
    assert store.task_by_name(ada.id, "galaxy") == galaxy
    assert store.tags("user", ada.id) == {"easeml.budget.seconds": "10.0"}
    assert store.set_user_admin(ada.id, False) == demoted  # already so: no change
    assert store.set_user_admin(bob.id, True) == dataclasses.replace(bob, is_admin=True) == store.get_user(bob.id)
    assert store.list_users() == (demoted, dataclasses.replace(bob, is_admin=True))
    with pytest.raises(NotFoundError):
        store.set_user_admin(999, True)
    for bad in ("false", 0, None):
        with pytest.raises(DataError) as info:
            store.set_user_admin(ada.id, bad)  # type: ignore[arg-type]
        assert info.value.field == "is_admin"
    assert store.get_user(ada.id) == demoted  # a refused change changes nothing


def test_a_local_account_is_linked_to_the_hub_user_of_its_name(store: Store) -> None:
    carol = user(store, "carol", is_admin=True)
    galaxy = task(store, carol)
    linked = store.link_user_to_hub(carol.id)
    assert linked == dataclasses.replace(carol, origin=HUB)  # same id, so its tasks come along
    assert store.user_by_name("carol", HUB) == linked == store.get_user(carol.id)
    assert store.task_by_name(linked.id, "galaxy") == galaxy
    with pytest.raises(NotFoundError):
        store.user_by_token_hash("hash-of-carol")  # its token is revoked
    with pytest.raises(NotFoundError):
        store.user_by_name("carol", LOCAL)  # the local name is free again
    with pytest.raises(InvalidStateError):
        store.link_user_to_hub(carol.id)
    with pytest.raises(NotFoundError):
        store.link_user_to_hub(999)


def test_an_empty_hub_account_trades_places_with_the_linked_one(store: Store) -> None:
    dave = user(store, "dave")
    task(store, dave)
    fresh = store.create_user("dave", None, origin=HUB)  # the hub user logged in before the link
    linked = store.link_user_to_hub(dave.id)
    assert store.user_by_name("dave", HUB) == linked and linked.id == dave.id
    # kept, not deleted (so its id is never reused), as a local account no token reaches
    assert store.user_by_name("dave", LOCAL) == dataclasses.replace(fresh, origin=LOCAL)
    assert store.list_tasks(fresh.id) == ()
    assert [(u.name, u.origin) for u in store.list_users()] == [("dave", HUB), ("dave", LOCAL)]


def test_a_hub_account_that_owns_tasks_is_never_replaced(store: Store) -> None:
    erin = user(store, "erin")
    hub = store.create_user("erin", None, origin=HUB)
    task(store, hub, "hub-side")
    with pytest.raises(AlreadyExistsError) as info:
        store.link_user_to_hub(erin.id)
    assert "1 task" in str(info.value)
    # nothing changed
    assert store.list_users() == (erin, hub)
    assert store.user_by_token_hash("hash-of-erin") == erin


def test_unknown_users_raise_not_found(store: Store) -> None:
    user(store)
    with pytest.raises(NotFoundError):
        store.get_user(999)
    with pytest.raises(NotFoundError):
        store.user_by_name("nobody")
    with pytest.raises(NotFoundError):
        store.user_by_token_hash("no-such-hash")


@pytest.mark.parametrize("name, token_hash", [("", "h"), ("  ", "h"), ("ada", ""), (None, "h")])
def test_bad_user_arguments_name_the_field(store: Store, name, token_hash) -> None:
    with pytest.raises(DataError) as info:
        store.create_user(name, token_hash)
    assert info.value.field in ("name", "token_hash")
    assert store.list_users() == ()


def test_ids_must_be_integers(store: Store) -> None:
    ada = user(store)
    with pytest.raises(DataError) as info:
        store.get_user(str(ada.id))  # type: ignore[arg-type]
    assert info.value.field == "user_id"
    with pytest.raises(DataError):
        store.get_task(True)  # type: ignore[arg-type]


# -- tasks ----------------------------------------------------------------------


def test_tasks_are_created_and_found(store: Store) -> None:
    ada = user(store, "ada")
    t = store.create_task(ada.id, "galaxy", "input: [64,64,3] output: [2]")
    assert (t.owner_id, t.name, t.program, t.cancelled) == (ada.id, "galaxy", "input: [64,64,3] output: [2]", False)
    assert_recent_utc(t.created_at)
    assert store.get_task(t.id) == t
    assert store.task_by_name(ada.id, "galaxy") == t


def test_task_names_are_unique_per_owner(store: Store) -> None:
    ada, bob = user(store, "ada"), user(store, "bob")
    mine = task(store, ada, "galaxy")
    theirs = task(store, bob, "galaxy")  # another owner may reuse the name
    with pytest.raises(AlreadyExistsError):
        task(store, ada, "galaxy")
    assert store.list_tasks() == (mine, theirs)
    # Each owner sees only their own task under that name.
    assert store.task_by_name(bob.id, "galaxy") == theirs
    eve = user(store, "eve")
    with pytest.raises(NotFoundError):
        store.task_by_name(eve.id, "galaxy")


def test_tasks_are_listed_by_id_per_owner(store: Store) -> None:
    ada, bob = user(store, "ada"), user(store, "bob")
    a1, b1, a2 = task(store, ada, "one"), task(store, bob, "two"), task(store, ada, "three")
    assert store.list_tasks(ada.id) == (a1, a2)
    assert store.list_tasks(bob.id) == (b1,)
    assert store.list_tasks() == (a1, b1, a2)


def test_unknown_owners_and_tasks_raise_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.create_task(42, "galaxy", "")
    with pytest.raises(NotFoundError):
        store.get_task(42)
    with pytest.raises(NotFoundError):
        store.list_tasks(42)
    with pytest.raises(NotFoundError):
        store.task_by_name(42, "galaxy")
    with pytest.raises(NotFoundError):
        store.set_task_cancelled(42, True)
    assert store.list_tasks() == ()


def test_a_task_can_be_cancelled_and_resumed(store: Store) -> None:
    t = task(store)
    cancelled = store.set_task_cancelled(t.id, True)
    assert cancelled == dataclasses.replace(t, cancelled=True)
    assert store.get_task(t.id).cancelled
    assert store.set_task_cancelled(t.id, False) == t


def _everything_of(store: Store, task_id: int):
    """Every row a task owns, and its provenance, as records."""
    versions, chunks, edges, toggles = snapshot(store, task_id)
    jobs = store.list_jobs(task_id)
    edges |= {e for j in jobs for e in store.edges_into(Node(NodeKind.MODEL, j.id))}
    return (store.get_task(task_id), versions, chunks, frozenset(edges), toggles, jobs,
            {j.id: store.list_metrics(j.id) for j in jobs}, store.tags("task", task_id),
            {v.id: store.tags("dataset", v.id) for v in versions}, {j.id: store.tags("job", j.id) for j in jobs})


def _a_task_with_history(store: Store, owner, name: str, seed: object):
    """A task with two feeds, a refine, finished and queued jobs, metrics and tags."""
    t = store.create_task(owner.id, name, "input: [2] output: [3]")
    v1 = feed(store, t.id, 3, seed=(seed, 1))
    v2 = feed(store, t.id, 2, seed=(seed, 2))
    v3 = refine(store, t.id, v2.id, {0: False})
    done = job_in(store, JobStatus.RUNNING, t.id, v3.id)
    done = store.update_job(done.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.9, artifact_blob=digest((seed, "m"))))
    store.add_metric(done.id, 0, "val_score", 0.9)
    failed = job_in(store, JobStatus.FAILED, t.id, v1.id)
    store.add_metric(failed.id, 1, "train_loss", 2.0)
    job_in(store, JobStatus.QUEUED, t.id, v3.id)
    job_in(store, JobStatus.CANCELLED, t.id, v2.id)
    store.set_tag("task", t.id, "owner", name)
    store.set_tag("dataset", v2.id, "source", "csv")
    store.set_tag("job", done.id, "note", "best")
    return t


def test_a_blob_is_referenced_while_a_version_chunk_or_model_names_it(store: Store) -> None:
    ada = user(store, "ada")
    t = _a_task_with_history(store, ada, "galaxy", "g")
    versions, chunks = store.list_dataset_versions(t.id), store.list_chunks(t.id)
    models = [j.artifact_blob for j in store.list_jobs(t.id) if j.artifact_blob is not None]
    held = {v.members_blob for v in versions} | {d for c in chunks for d in (c.x_blob, c.y_blob)} | set(models)
    assert len(held) == 8 and all(store.blob_referenced(d) for d in held)  # 3 members, 2 chunks x 2, 1 model
    assert not store.blob_referenced(digest("nobody's"))
    store.delete_task(t.id)
    assert not any(store.blob_referenced(d) for d in held)


def test_deleting_a_task_removes_all_of_it_and_nothing_else(store: Store) -> None:
    ada, bob = user(store, "ada"), user(store, "bob")
    gone = _a_task_with_history(store, ada, "galaxy", "g")
    mine = _a_task_with_history(store, ada, "stars", "s")
    theirs = _a_task_with_history(store, bob, "galaxy", "b")
    before = {t.id: _everything_of(store, t.id) for t in (mine, theirs)}
    versions, chunks = store.list_dataset_versions(gone.id), store.list_chunks(gone.id)
    jobs = store.list_jobs(gone.id)

    referenced = store.delete_task(gone.id)

    assert referenced == ({v.members_blob for v in versions} | {d for c in chunks for d in (c.x_blob, c.y_blob)}
                          | {j.artifact_blob for j in jobs if j.artifact_blob is not None})
    assert {t.id: _everything_of(store, t.id) for t in (mine, theirs)} == before
    assert store.list_tasks() == (mine, theirs)
    with pytest.raises(NotFoundError):
        store.get_task(gone.id)
    with pytest.raises(NotFoundError):
        store.task_by_name(ada.id, "galaxy")
    for v in versions:
        with pytest.raises(NotFoundError):
            store.get_dataset_version(v.id)
    for j in jobs:
        with pytest.raises(NotFoundError):
            store.get_job(j.id)
    assert not {j.id for j in jobs} & {j.id for j in store.list_jobs()}
    assert store.find_by_tag("task", "owner") == tuple(sorted((mine.id, theirs.id)))
    assert not set(store.find_by_tag("job", "note")) & {j.id for j in jobs}
    assert not set(store.find_by_tag("dataset", "source")) & {v.id for v in versions}


def test_a_deleted_task_name_can_be_used_again_from_scratch(store: Store) -> None:
    ada = user(store, "ada")
    old = _a_task_with_history(store, ada, "galaxy", "old")
    store.delete_task(old.id)
    new = store.create_task(ada.id, "galaxy", "input: [2] output: [3]")
    v1 = feed(store, new.id, 2, seed="new")
    assert (v1.number, store.list_chunks(new.id)[0].first_example_id) == (1, 0)
    assert store.list_jobs(new.id) == () and store.tags("task", new.id) == {}
    # No edge, tag or toggle of the old task hangs on to a reused id.
    (into,) = store.edges_into(Node(NodeKind.DATASET, v1.id))
    assert into.src is None and store.edges_out_of(Node(NodeKind.DATASET, v1.id)) == ()
    assert store.tags("dataset", v1.id) == {} and store.list_toggles(v1.id) == ()
    job = store.create_job(new.id, v1.id, "mlp", {})
    assert store.list_metrics(job.id) == () and store.tags("job", job.id) == {}
    assert store.edges_into(Node(NodeKind.MODEL, job.id)) == ()


def _ids_of_task(store: Store, task_id: int) -> dict[str, set[int]]:
    versions = store.list_dataset_versions(task_id)
    edges = {e.id for v in versions for e in store.edges_into(Node(NodeKind.DATASET, v.id))}
    return {"task": {task_id}, "version": {v.id for v in versions}, "chunk": {c.id for c in store.list_chunks(task_id)},
            "job": {j.id for j in store.list_jobs(task_id)}, "edge": edges}


def test_the_id_of_a_deleted_row_is_never_given_again(store: Store) -> None:
    # The newest rows of every kind go, so a store that gives the largest id in use
    # plus one (SQLite without AUTOINCREMENT) would hand their ids out again.
    ada, bob = user(store, "ada"), user(store, "bob")
    _a_task_with_history(store, ada, "stars", "s")
    newest = _a_task_with_history(store, ada, "galaxy", "g")
    gone = _ids_of_task(store, newest.id)
    store.delete_task(newest.id)
    store.delete_user(bob.id)
    again = _ids_of_task(store, _a_task_with_history(store, ada, "galaxy", "again").id)
    for kind, ids in gone.items():
        assert min(again[kind]) > max(ids), kind
    assert user(store, "carol").id > bob.id


def test_a_task_with_a_running_job_or_an_unknown_task_is_not_deleted(store: Store) -> None:
    ada = user(store, "ada")
    t = _a_task_with_history(store, ada, "galaxy", "g")
    running = job_in(store, JobStatus.RUNNING, t.id, store.latest_dataset_version(t.id).id)
    before = _everything_of(store, t.id)
    with pytest.raises(InvalidStateError, match=f"job {running.id} is running"):
        store.delete_task(t.id)
    assert _everything_of(store, t.id) == before
    store.update_job(running.id, JobStatus.FAILED)
    store.delete_task(t.id)
    for unknown in (t.id, 999):
        with pytest.raises(NotFoundError):
            store.delete_task(unknown)
    with pytest.raises(DataError, match="task_id"):
        store.delete_task("1")  # type: ignore[arg-type]


def test_deleting_a_user_removes_her_row_tags_and_token_and_nothing_else(store: Store) -> None:
    ada, bob = user(store, "ada"), user(store, "bob")
    hub_ada = store.create_user("ada", None, origin=HUB)  # another account of her name
    theirs = _a_task_with_history(store, bob, "galaxy", "b")
    for who in (ada, bob, hub_ada):
        store.set_tag("user", who.id, "easeml.budget.cap.seconds", str(who.id))
    before = _everything_of(store, theirs.id)

    assert store.delete_user(ada.id) == ada

    assert store.list_users() == (bob, hub_ada)
    for gone in (lambda: store.get_user(ada.id), lambda: store.user_by_name("ada", LOCAL),
                 lambda: store.user_by_token_hash("hash-of-ada"), lambda: store.tags("user", ada.id),
                 lambda: store.list_tasks(ada.id)):
        with pytest.raises(NotFoundError):
            gone()
    assert store.find_by_tag("user", "easeml.budget.cap.seconds") == tuple(sorted((bob.id, hub_ada.id)))
    assert store.tags("user", bob.id) == {"easeml.budget.cap.seconds": str(bob.id)}
    assert store.user_by_token_hash("hash-of-bob") == bob and store.user_by_name("ada", HUB) == hub_ada
    assert _everything_of(store, theirs.id) == before
    # Her name and token hash are free again; a new account of the name starts empty.
    again = store.create_user("ada", "hash-of-ada")
    assert again.name == "ada" and store.user_by_token_hash("hash-of-ada") == again
    assert store.tags("user", again.id) == {} and store.list_tasks(again.id) == ()


def test_a_user_who_owns_a_task_or_an_unknown_user_is_not_deleted(store: Store) -> None:
    ada = user(store, "ada")
    t = _a_task_with_history(store, ada, "galaxy", "g")
    store.set_tag("user", ada.id, "k", "v")
    before = _everything_of(store, t.id)
    with pytest.raises(InvalidStateError, match="owns 1 task"):
        store.delete_user(ada.id)
    assert store.list_users() == (ada,) and store.tags("user", ada.id) == {"k": "v"}
    assert store.user_by_token_hash("hash-of-ada") == ada and _everything_of(store, t.id) == before
    store.delete_task(t.id)
    store.delete_user(ada.id)
    for unknown in (ada.id, 999):
        with pytest.raises(NotFoundError):
            store.delete_user(unknown)
    with pytest.raises(DataError, match="user_id"):
        store.delete_user("1")  # type: ignore[arg-type]


# -- dataset versions -------------------------------------------------------------


def test_versions_count_from_one_without_gaps(store: Store, fed) -> None:
    _, t, v1 = fed
    v2 = refine(store, t.id, v1.id, {1: False}, n_examples=2)
    v3 = feed(store, t.id, 4, parent_id=v2.id)
    assert [v.number for v in (v1, v2, v3)] == [1, 2, 3]
    assert [v.kind for v in (v1, v2, v3)] == [VersionKind.FEED, VersionKind.REFINE, VersionKind.FEED]
    assert [v.parent_id for v in (v1, v2, v3)] == [None, v1.id, v2.id]
    assert store.list_dataset_versions(t.id) == (v1, v2, v3)
    assert store.latest_dataset_version(t.id) == v3
    assert store.get_dataset_version(v2.id) == v2
    assert v2.n_examples == 2 and v2.members_blob == digest(("refine", v1.id, [(1, False)]))
    for v in (v1, v2, v3):
        assert_recent_utc(v.created_at)
    assert v1.created_at <= v2.created_at <= v3.created_at


def test_a_version_must_build_on_the_latest_one(store: Store, fed) -> None:
    """Two writers that read the same latest version cannot both build on
    it: the second is refused and stores nothing."""
    _, t, v1 = fed
    v2 = feed(store, t.id, 2, parent_id=v1.id)
    before = snapshot(store, t.id)
    for stale in (v1.id, None):
        with pytest.raises(StaleParentError):
            feed(store, t.id, 1, parent_id=stale)
    with pytest.raises(StaleParentError):
        refine(store, t.id, v1.id, {0: False})
    assert snapshot(store, t.id) == before
    assert feed(store, t.id, 1, parent_id=v2.id).number == 3


def test_each_task_numbers_its_own_versions(store: Store) -> None:
    ada = user(store)
    a, b = task(store, ada, "a"), task(store, ada, "b")
    numbers = {a.id: [], b.id: []}
    for task_id in (a.id, b.id, b.id, a.id, b.id):
        numbers[task_id].append(feed(store, task_id, 1).number)
    assert numbers == {a.id: [1, 2], b.id: [1, 2, 3]}
    assert store.latest_dataset_version(task(store, ada, "empty").id) is None


def test_example_ids_count_from_zero_in_feed_order(store: Store, fed) -> None:
    owner, t, v1 = fed
    v2 = feed(store, t.id, 5, parent_id=v1.id, seed=2)
    v3 = refine(store, t.id, v2.id, {7: False})
    v4 = feed(store, t.id, 2, parent_id=v3.id, seed=4)
    chunks = store.list_chunks(t.id)
    expected = [(0, 3, v1.id), (3, 5, v2.id), (8, 2, v4.id)]
    assert [(c.first_example_id, c.count, c.version_id) for c in chunks] == expected
    assert chunks[1].x_blob == digest(("x", 2)) and chunks[1].y_blob == digest(("y", 2))
    assert all(c.task_id == t.id for c in chunks)
    assert store.next_example_id(t.id) == 10
    # up_to_version takes a version id and keeps chunks fed at or before it.
    assert store.list_chunks(t.id, up_to_version=v1.id) == chunks[:1]
    assert store.list_chunks(t.id, up_to_version=v3.id) == chunks[:2]
    assert store.list_chunks(t.id, up_to_version=v4.id) == chunks
    # Example ids are per task.
    other = task(store, owner, "other")
    feed(store, other.id, 2)
    assert store.list_chunks(other.id)[0].first_example_id == 0
    assert store.next_example_id(other.id) == 2


def test_refine_stores_its_toggles_in_example_order(store: Store, fed) -> None:
    _, t, v1 = fed
    v2 = refine(store, t.id, v1.id, {2: False, 0: False})
    v3 = refine(store, t.id, v2.id, {0: True})
    assert [(x.version_id, x.example_id, x.active) for x in store.list_toggles(v2.id)] == [
        (v2.id, 0, False),
        (v2.id, 2, False),
    ]
    assert [(x.example_id, x.active) for x in store.list_toggles(v3.id)] == [(0, True)]
    assert store.list_toggles(v1.id) == ()
    # An empty refine is allowed: the new version equals its parent.
    assert store.list_toggles(refine(store, t.id, v3.id, {}).id) == ()


def test_a_refine_may_toggle_only_examples_its_parent_knew(store: Store, fed) -> None:
    _, t, v1 = fed  # examples 0..2
    v2 = feed(store, t.id, 2, parent_id=v1.id)  # examples 3..4
    before = snapshot(store, t.id)
    with pytest.raises(NotFoundError):
        refine(store, t.id, v1.id, {3: False})  # fed after v1
    with pytest.raises(NotFoundError):
        refine(store, t.id, v2.id, {5: False})  # never fed
    assert snapshot(store, t.id) == before
    assert refine(store, t.id, v2.id, {4: False}).number == 3


def test_versions_add_feed_and_refine_edges(store: Store, fed) -> None:
    _, t, v1 = fed
    v2 = refine(store, t.id, v1.id, {0: False})
    (first,) = store.edges_into(Node(NodeKind.DATASET, v1.id))
    assert (first.kind, first.src, first.job_id) == (EdgeKind.FEED, None, None)
    assert first.dst == Node(NodeKind.DATASET, v1.id)
    (second,) = store.edges_into(Node(NodeKind.DATASET, v2.id))
    assert (second.kind, second.src, second.dst) == (
        EdgeKind.REFINE,
        Node(NodeKind.DATASET, v1.id),
        Node(NodeKind.DATASET, v2.id),
    )
    assert store.edges_out_of(Node(NodeKind.DATASET, v1.id)) == (second,)
    assert_recent_utc(second.created_at)


BAD_VERSION_ARGUMENTS = {
    "feed without chunk": (dict(kind="feed", chunk=None), "chunk"),
    "feed with toggles": (dict(kind="feed", toggles={0: False}), "toggles"),
    "refine without parent": (dict(kind="refine", parent_id=None, chunk=None, toggles={0: False}), "parent_id"),
    "refine with chunk": (dict(kind="refine", toggles={0: False}), "chunk"),
    "refine without toggles": (dict(kind="refine", chunk=None, toggles=None), "toggles"),
    "refine with a non-bool toggle": (dict(kind="refine", chunk=None, toggles={0: 1}), "toggles[0]"),
    "refine with a negative example": (dict(kind="refine", chunk=None, toggles={-1: True}), "toggles key"),
    "unknown kind": (dict(kind="merge"), "kind"),
    "bad members digest": (dict(members_blob="../../etc/passwd"), "members_blob"),
    "negative n_examples": (dict(n_examples=-1), "n_examples"),
    "empty chunk": (dict(chunk=NewChunk(digest(1), digest(2), 0)), "chunk.count"),
    "bad chunk digest": (dict(chunk=NewChunk("abc", digest(2), 1)), "chunk.x_blob"),
}


@pytest.mark.parametrize("case", sorted(BAD_VERSION_ARGUMENTS))
def test_bad_version_arguments_name_the_field_and_store_nothing(store: Store, fed, case: str) -> None:
    _, t, v1 = fed
    overrides, field = BAD_VERSION_ARGUMENTS[case]
    arguments = dict(
        kind="feed", parent_id=v1.id, members_blob=digest("m"), n_examples=1,
        chunk=NewChunk(digest(1), digest(2), 1), toggles=None,
    )  # fmt: skip
    arguments.update(overrides)
    before = snapshot(store, t.id)
    with pytest.raises(DataError) as info:
        store.create_dataset_version(t.id, **arguments)
    assert info.value.field == field
    assert snapshot(store, t.id) == before


def test_a_parent_from_another_task_is_refused_and_nothing_is_stored(store: Store) -> None:
    ada = user(store)
    mine, other = task(store, ada, "mine"), task(store, ada, "other")
    theirs = feed(store, other.id, 3)
    v1 = feed(store, mine.id, 2)
    before_mine, before_other = snapshot(store, mine.id), snapshot(store, other.id)
    with pytest.raises(NotFoundError):
        refine(store, mine.id, theirs.id, {0: False})
    with pytest.raises(NotFoundError):
        feed(store, mine.id, 2, parent_id=theirs.id)
    assert snapshot(store, mine.id) == before_mine
    assert snapshot(store, other.id) == before_other
    assert store.edges_out_of(Node(NodeKind.DATASET, theirs.id)) == ()
    # The failures took no number.
    assert feed(store, mine.id, 1, parent_id=v1.id).number == 2


def test_a_failure_midway_through_a_version_leaves_nothing(store: Store, fed, monkeypatch) -> None:
    """Fault injection: the edge is the last thing a version creation builds."""
    _, t, v1 = fed
    before = snapshot(store, t.id)

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(type(store), "_new_edge", staticmethod(broken))
    with pytest.raises(RuntimeError):
        feed(store, t.id, 4, parent_id=v1.id)
    with pytest.raises(RuntimeError):
        refine(store, t.id, v1.id, {0: False, 1: False})
    monkeypatch.undo()
    assert snapshot(store, t.id) == before
    v2 = feed(store, t.id, 4, parent_id=v1.id)
    assert v2.number == 2
    assert store.list_chunks(t.id)[-1].first_example_id == 3


def test_unknown_versions_raise_not_found(store: Store, fed) -> None:
    owner, t, v1 = fed
    other = task(store, owner, "other")
    with pytest.raises(NotFoundError):
        feed(store, 999, 1)
    with pytest.raises(NotFoundError):
        store.get_dataset_version(999)
    with pytest.raises(NotFoundError):
        store.list_dataset_versions(999)
    with pytest.raises(NotFoundError):
        store.list_chunks(999)
    with pytest.raises(NotFoundError):
        store.list_chunks(other.id, up_to_version=v1.id)  # a version of another task
    with pytest.raises(NotFoundError):
        store.list_toggles(999)
    with pytest.raises(NotFoundError):
        refine(store, t.id, 999, {0: False})


# -- jobs ------------------------------------------------------------------------------


def test_a_new_job_is_queued(store: Store, fed) -> None:
    _, t, v1 = fed
    job = store.create_job(t.id, v1.id, "resnet18", {"lr": 0.01, "normalize": True, "sizes": (1, 2)})
    assert (job.task_id, job.dataset_version_id, job.model, job.status) == (t.id, v1.id, "resnet18", JobStatus.QUEUED)
    assert job.config == {"lr": 0.01, "normalize": True, "sizes": (1, 2)}
    assert (job.started_at, job.finished_at, job.accuracy, job.cost_seconds) == (None, None, None, None)
    assert (job.artifact_blob, job.error, job.attempts) == (None, None, 0)
    assert_recent_utc(job.created_at)
    assert store.get_job(job.id) == job


def test_jobs_need_a_version_of_their_own_task(store: Store, fed) -> None:
    owner, t, v1 = fed
    other = task(store, owner, "other")
    with pytest.raises(NotFoundError):
        store.create_job(other.id, v1.id, "mlp", {})
    with pytest.raises(NotFoundError):
        store.create_job(999, v1.id, "mlp", {})
    with pytest.raises(NotFoundError):
        store.create_job(t.id, 999, "mlp", {})
    with pytest.raises(NotFoundError):
        store.get_job(999)
    with pytest.raises(NotFoundError):
        store.update_job(999, JobStatus.RUNNING)
    assert store.list_jobs() == ()


@pytest.mark.parametrize(
    "config, field",
    [
        ({1: "a"}, "config key 1"),
        ({"lr": float("nan")}, "config.lr"),
        ({"lr": float("inf")}, "config.lr"),
        ({"f": object()}, "config.f"),
        ({"deep": [{"x": {2, 3}}]}, "config.deep[0].x"),
        ("lr=0.1", "config"),
    ],
)
def test_a_job_config_must_be_json(store: Store, fed, config, field: str) -> None:
    _, t, v1 = fed
    with pytest.raises(DataError) as info:
        store.create_job(t.id, v1.id, "mlp", config)
    assert info.value.field == field
    assert store.list_jobs() == ()


def test_every_job_transition_is_allowed_or_refused_as_the_life_cycle_says(store: Store, fed) -> None:
    _, t, v1 = fed
    for start, target in itertools.product(JobStatus, JobStatus):
        job = job_in(store, start, t.id, v1.id)
        if target in JOB_TRANSITIONS[start]:
            assert store.update_job(job.id, target).status is target, (start, target)
        else:
            with pytest.raises(InvalidStateError):
                store.update_job(job.id, target)
            assert store.get_job(job.id) == job, (start, target)


def test_the_documented_transitions(store: Store) -> None:
    # The table itself is the ACAI life cycle named in base.py.
    allowed = {(a, b) for a, targets in JOB_TRANSITIONS.items() for b in targets}
    Q, R, S, F, C = JobStatus  # noqa: N806
    assert allowed == {(Q, R), (Q, C), (R, S), (R, F), (R, C), (R, Q)}
    assert {s for s in JobStatus if s.is_finished()} == {S, F, C}


def test_a_job_is_stamped_and_counts_attempts(store: Store, fed) -> None:
    _, t, v1 = fed
    job = store.create_job(t.id, v1.id, "mlp", {})
    first = store.update_job(job.id, JobStatus.RUNNING)
    assert first.attempts == 1 and first.finished_at is None
    assert_recent_utc(first.started_at)
    # A lost worker: back to the queue, with a reason; the attempt is remembered.
    requeued = store.update_job(job.id, JobStatus.QUEUED, JobUpdate(error="worker lost"))
    assert (requeued.status, requeued.started_at, requeued.attempts, requeued.error) == (
        JobStatus.QUEUED,
        None,
        1,
        "worker lost",
    )
    second = store.update_job(job.id, JobStatus.RUNNING)
    assert second.attempts == 2 and second.started_at >= first.started_at
    done = store.update_job(
        job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.91, cost_seconds=12.5, artifact_blob=digest("model"))
    )
    assert (done.accuracy, done.cost_seconds, done.artifact_blob) == (0.91, 12.5, digest("model"))
    assert done.error == "worker lost"  # None in an update means unchanged
    assert done.finished_at >= done.started_at == second.started_at
    assert_recent_utc(done.finished_at)
    assert store.get_job(job.id) == done


def test_cancelling_a_queued_job_stamps_only_its_end(store: Store, fed) -> None:
    _, t, v1 = fed
    job = store.update_job(store.create_job(t.id, v1.id, "mlp", {}).id, JobStatus.CANCELLED)
    assert (job.started_at, job.attempts) == (None, 0)
    assert_recent_utc(job.finished_at)


def test_a_failed_job_keeps_its_error(store: Store, fed) -> None:
    _, t, v1 = fed
    job = job_in(store, JobStatus.RUNNING, t.id, v1.id)
    failed = store.update_job(job.id, "failed", JobUpdate(error="CUDA out of memory"))
    assert (failed.status, failed.error) == (JobStatus.FAILED, "CUDA out of memory")


@pytest.mark.parametrize(
    "update, field",
    [
        (JobUpdate(accuracy=float("nan")), "update.accuracy"),
        (JobUpdate(cost_seconds=-1.0), "update.cost_seconds"),
        (JobUpdate(artifact_blob="model.pt"), "update.artifact_blob"),
        (JobUpdate(error=3), "update.error"),  # type: ignore[arg-type]
    ],
)
def test_bad_job_updates_change_nothing(store: Store, fed, update: JobUpdate, field: str) -> None:
    _, t, v1 = fed
    job = job_in(store, JobStatus.RUNNING, t.id, v1.id)
    with pytest.raises(DataError) as info:
        store.update_job(job.id, JobStatus.SUCCEEDED, update)
    assert info.value.field == field
    assert store.get_job(job.id) == job
    assert store.edges_into(Node(NodeKind.MODEL, job.id)) == ()


def test_an_unknown_status_is_a_data_error(store: Store, fed) -> None:
    _, t, v1 = fed
    job = store.create_job(t.id, v1.id, "mlp", {})
    with pytest.raises(DataError):
        store.update_job(job.id, "paused")  # type: ignore[arg-type]
    with pytest.raises(DataError):
        store.list_jobs(status="paused")  # type: ignore[arg-type]


def test_success_with_an_artifact_adds_a_train_edge(store: Store, fed) -> None:
    _, t, v1 = fed
    job = job_in(store, JobStatus.RUNNING, t.id, v1.id)
    done = store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(artifact_blob=digest("weights")))
    (edge,) = store.edges_into(Node(NodeKind.MODEL, job.id))
    assert (edge.kind, edge.src, edge.dst, edge.job_id) == (
        EdgeKind.TRAIN,
        Node(NodeKind.DATASET, v1.id),
        Node(NodeKind.MODEL, job.id),
        job.id,
    )
    assert edge.created_at == done.finished_at
    assert edge in store.edges_out_of(Node(NodeKind.DATASET, v1.id))


def test_no_train_edge_without_an_artifact_or_success(store: Store, fed) -> None:
    _, t, v1 = fed
    plain = job_in(store, JobStatus.RUNNING, t.id, v1.id)
    store.update_job(plain.id, JobStatus.SUCCEEDED)
    failed = job_in(store, JobStatus.RUNNING, t.id, v1.id)
    store.update_job(failed.id, JobStatus.FAILED, JobUpdate(artifact_blob=digest("half-trained")))
    for job in (plain, failed):
        assert store.edges_into(Node(NodeKind.MODEL, job.id)) == ()
    assert [e.kind for e in store.edges_out_of(Node(NodeKind.DATASET, v1.id))] == []


def test_jobs_are_listed_by_id_and_filtered(store: Store, fed) -> None:
    owner, t, v1 = fed
    other = task(store, owner, "other")
    w1 = feed(store, other.id, 1)
    a = store.create_job(t.id, v1.id, "a", {})
    b = store.create_job(other.id, w1.id, "b", {})
    c = store.create_job(t.id, v1.id, "c", {})
    c = store.update_job(c.id, JobStatus.RUNNING)
    assert store.list_jobs() == (a, b, c)
    assert store.list_jobs(t.id) == (a, c)
    assert store.list_jobs(status=JobStatus.QUEUED) == (a, b)
    assert store.list_jobs(t.id, status="running") == (c,)
    assert store.list_jobs(other.id, status=JobStatus.RUNNING) == ()
    with pytest.raises(NotFoundError):
        store.list_jobs(999)


# -- metrics ---------------------------------------------------------------------------


def test_metrics_are_listed_by_epoch_then_name(store: Store, fed) -> None:
    _, t, v1 = fed
    job = job_in(store, JobStatus.RUNNING, t.id, v1.id)
    reports = [(2, "loss", 0.2), (0, "val_acc", 0.5), (1, "loss", 0.4), (0, "loss", 0.9), (10, "loss", 0.1)]
    for epoch, name, value in reports:
        metric = store.add_metric(job.id, epoch, name, value)
        assert (metric.job_id, metric.epoch, metric.name, metric.value) == (job.id, epoch, name, value)
        assert_recent_utc(metric.created_at)
    listed = store.list_metrics(job.id)
    assert [(m.epoch, m.name, m.value) for m in listed] == [
        (0, "loss", 0.9),
        (0, "val_acc", 0.5),
        (1, "loss", 0.4),
        (2, "loss", 0.2),
        (10, "loss", 0.1),
    ]
    assert store.list_metrics(job_in(store, JobStatus.QUEUED, t.id, v1.id).id) == ()


def test_reporting_a_metric_again_replaces_it(store: Store, fed) -> None:
    _, t, v1 = fed
    job = job_in(store, JobStatus.RUNNING, t.id, v1.id)
    store.add_metric(job.id, 3, "loss", 0.5)
    again = store.add_metric(job.id, 3, "loss", 0.25)  # e.g. the epoch re-ran after a re-queue
    assert store.list_metrics(job.id) == (again,)
    assert again.value == 0.25


def test_bad_metrics_are_refused(store: Store, fed) -> None:
    _, t, v1 = fed
    job = job_in(store, JobStatus.RUNNING, t.id, v1.id)
    with pytest.raises(NotFoundError):
        store.add_metric(999, 0, "loss", 1.0)
    with pytest.raises(NotFoundError):
        store.list_metrics(999)
    bad = [(0, "loss", float("nan"), "value"), (-1, "loss", 1.0, "epoch"), (0, "", 1.0, "name")]
    for epoch, name, value, field in bad:
        with pytest.raises(DataError) as info:
            store.add_metric(job.id, epoch, name, value)
        assert info.value.field == field
    assert store.list_metrics(job.id) == ()


# -- provenance ------------------------------------------------------------------------


@pytest.fixture
def dag(store: Store, fed):
    """feed v1 -> refine v2 -> feed v3, and a job on v2 that produced a model."""
    _, t, v1 = fed
    v2 = refine(store, t.id, v1.id, {0: False})
    v3 = feed(store, t.id, 2, parent_id=v2.id)
    job = job_in(store, JobStatus.RUNNING, t.id, v2.id)
    store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.8, artifact_blob=digest("model")))
    nodes = {
        "v1": Node(NodeKind.DATASET, v1.id),
        "v2": Node(NodeKind.DATASET, v2.id),
        "v3": Node(NodeKind.DATASET, v3.id),
        "model": Node(NodeKind.MODEL, job.id),
    }
    (feed1,) = store.edges_into(nodes["v1"])
    (refine2,) = store.edges_into(nodes["v2"])
    (feed3,) = store.edges_into(nodes["v3"])
    (train,) = store.edges_into(nodes["model"])
    return nodes, {"feed1": feed1, "refine2": refine2, "feed3": feed3, "train": train}


def kinds(edges: tuple[Edge, ...]) -> list[tuple[EdgeKind, Node | None, Node]]:
    return [(e.kind, e.src, e.dst) for e in edges]


def test_edges_in_and_out_of_each_node(store: Store, dag) -> None:
    nodes, edges = dag
    assert store.edges_out_of(nodes["v1"]) == (edges["refine2"],)
    assert store.edges_out_of(nodes["v2"]) == (edges["feed3"], edges["train"])  # by id
    assert store.edges_out_of(nodes["v3"]) == ()
    assert store.edges_out_of(nodes["model"]) == ()
    assert edges["feed1"].src is None and edges["feed3"].src == nodes["v2"]
    assert len({e.id for e in edges.values()}) == 4


def test_lineage_backward_is_the_ancestry(store: Store, dag) -> None:
    nodes, edges = dag
    # Breadth first: nearest edge first.
    assert store.lineage(nodes["model"]) == (edges["train"], edges["refine2"], edges["feed1"])
    assert store.lineage(nodes["v3"], direction="backward") == (edges["feed3"], edges["refine2"], edges["feed1"])
    assert store.lineage(nodes["v1"]) == (edges["feed1"],)


def test_lineage_forward_is_everything_derived(store: Store, dag) -> None:
    nodes, edges = dag
    assert store.lineage(nodes["v1"], direction="forward") == (edges["refine2"], edges["feed3"], edges["train"])
    assert store.lineage(nodes["v2"], direction="forward") == (edges["feed3"], edges["train"])
    assert store.lineage(nodes["v3"], direction="forward") == ()
    assert store.lineage(nodes["model"], direction="forward") == ()


def test_lineage_visits_each_edge_once_in_a_diamond(store: Store, fed) -> None:
    # Two jobs train on one version; both models lead back to the same feed.
    _, t, v1 = fed
    jobs = [job_in(store, JobStatus.RUNNING, t.id, v1.id) for _ in range(2)]
    for job in jobs:
        store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(artifact_blob=digest(job.id)))
    forward = store.lineage(Node(NodeKind.DATASET, v1.id), direction="forward")
    assert kinds(forward) == [(EdgeKind.TRAIN, Node(NodeKind.DATASET, v1.id), Node(NodeKind.MODEL, j.id)) for j in jobs]


def test_provenance_of_unknown_nodes(store: Store, dag) -> None:
    nodes, _ = dag
    with pytest.raises(NotFoundError):
        store.edges_into(Node(NodeKind.DATASET, 999))
    with pytest.raises(NotFoundError):
        store.edges_out_of(Node(NodeKind.MODEL, 999))
    with pytest.raises(NotFoundError):
        store.lineage(Node(NodeKind.MODEL, 999))
    with pytest.raises(ValueError):
        store.lineage(nodes["v1"], direction="sideways")
    with pytest.raises(DataError):
        store.edges_into(("dataset", 1))  # type: ignore[arg-type]


# -- tags ------------------------------------------------------------------------------


def test_tags_are_set_overwritten_and_read(store: Store, fed) -> None:
    _, t, v1 = fed
    assert store.tags("dataset", v1.id) == {}
    store.set_tag("dataset", v1.id, "source", "telescope")
    store.set_tag("dataset", v1.id, "quality", "raw")
    store.set_tag("dataset", v1.id, "quality", "clean")
    assert store.tags("dataset", v1.id) == {"quality": "clean", "source": "telescope"}
    # The same id under another entity kind is another thing.
    assert store.tags("task", t.id) == {}


def test_entities_are_found_by_tag(store: Store, fed) -> None:
    _, t, v1 = fed
    jobs = [store.create_job(t.id, v1.id, "mlp", {}) for _ in range(4)]
    for job, model in zip(reversed(jobs), ["bert", "mlp", "bert", "mlp"]):
        store.set_tag("job", job.id, "model", model)
    store.set_tag("job", jobs[0].id, "note", "baseline")
    store.set_tag("task", t.id, "model", "bert")
    ids = [j.id for j in jobs]
    assert store.find_by_tag("job", "model") == tuple(ids)
    assert store.find_by_tag("job", "model", "bert") == (ids[1], ids[3])
    assert store.find_by_tag("job", "note") == (ids[0],)
    assert store.find_by_tag("job", "missing") == ()
    assert store.find_by_tag("task", "model", "bert") == (t.id,)
    assert store.find_by_tag("dataset", "model") == ()


def test_long_tag_values_and_keys_up_to_the_bound_are_stored(store: Store, fed) -> None:
    """A tag value of many KB (a torch job's progress record) and model
    names, metric names and tag keys up to ``MAX_KEY_BYTES`` are stored on
    every backend (PostgreSQL once refused both); a longer key is refused
    by every backend alike, naming the field."""
    from ease_jupyter.store._validate import MAX_KEY_BYTES

    _, t, v1 = fed
    long_key = "k" * MAX_KEY_BYTES
    job = store.create_job(t.id, v1.id, "m" * MAX_KEY_BYTES, {})
    value = "".join(f"{i:08x}" for i in range(4096))  # 32 KiB, unlike any other
    store.set_tag("job", job.id, long_key, value)
    store.add_metric(job.id, 0, f"val_score[{long_key[:MAX_KEY_BYTES - 11]}]", 0.5)
    assert store.tags("job", job.id) == {long_key: value}
    assert store.find_by_tag("job", long_key, value) == (job.id,)
    assert store.get_job(job.id).model == "m" * MAX_KEY_BYTES
    assert [m.name for m in store.list_metrics(job.id)] == [f"val_score[{long_key[:MAX_KEY_BYTES - 11]}]"]
    accented = "é" * (MAX_KEY_BYTES // 2)  # two bytes each in UTF-8: at the bound
    store.set_tag("job", job.id, accented, "v")
    assert store.tags("job", job.id)[accented] == "v"
    with pytest.raises(DataError):
        store.set_tag("job", job.id, accented + "é", "v")
    too_long = "x" * (MAX_KEY_BYTES + 1)
    for field, call in (("key", lambda: store.set_tag("job", job.id, too_long, "v")),
                        ("name", lambda: store.add_metric(job.id, 0, too_long, 0.5)),
                        ("model", lambda: store.create_job(t.id, v1.id, too_long, {}))):
        with pytest.raises(DataError) as refused:
            call()
        assert refused.value.field == field


def test_tags_of_unknown_entities(store: Store, fed) -> None:
    _, t, _ = fed
    with pytest.raises(NotFoundError):
        store.set_tag("job", 999, "k", "v")
    with pytest.raises(NotFoundError):
        store.tags("dataset", 999)
    with pytest.raises(NotFoundError):
        store.set_tag("user", 999, "k", "v")
    for bad in ("users", "model", ""):
        with pytest.raises(DataError):
            store.set_tag(bad, t.id, "k", "v")
        with pytest.raises(DataError):
            store.find_by_tag(bad, "k")
    with pytest.raises(DataError):
        store.set_tag("task", t.id, "", "v")
    with pytest.raises(DataError):
        store.set_tag("task", t.id, "k", 3)  # type: ignore[arg-type]
    assert store.tags("task", t.id) == {}


# -- timestamps ------------------------------------------------------------------------


def test_every_timestamp_is_timezone_aware_utc(store: Store, dag) -> None:
    nodes, edges = dag
    job = store.get_job(nodes["model"].id)
    moments = [job.created_at, job.started_at, job.finished_at]
    moments += [e.created_at for e in edges.values()]
    moments += [store.get_dataset_version(nodes["v1"].id).created_at]
    for moment in moments:
        assert moment.tzinfo is not None and moment.utcoffset() == timedelta(0)


# -- the feed's reads: each in one statement where the store can ------------------------
# (``feed_state``, ``owner_blobs_stamp`` and ``feed_reads`` agree with the
# single-purpose calls; unknown tasks and users are NotFoundError, not empty answers)


def test_feed_state_is_the_latest_version_and_the_chunks(store: Store) -> None:
    ada = store.create_user("ada", "h-ada")
    task = store.create_task(ada.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    other = store.create_task(ada.id, "o", "x: {a: [4]} -> y: {c: [3]}")
    assert store.feed_state(task.id) == (None, ())
    feed(store, task.id, 5, seed="a")
    feed(store, other.id, 2, seed="x")
    v2 = feed(store, task.id, 3, seed="b")
    latest, chunks = store.feed_state(task.id)
    assert latest == v2 == store.latest_dataset_version(task.id)
    assert chunks == store.list_chunks(task.id) and [c.count for c in chunks] == [5, 3]
    with pytest.raises(NotFoundError, match="task 999: not found"):
        store.feed_state(999)


def test_tags_of_an_unknown_entity_are_not_found(store: Store) -> None:
    ada = store.create_user("ada", "h-ada")
    task = store.create_task(ada.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    assert store.tags("task", task.id) == {}
    store.set_tag("task", task.id, "k", "1")
    store.set_tag("task", task.id, "k", "2")
    assert store.tags("task", task.id) == {"k": "2"}
    for entity, what in (("task", "task"), ("user", "user"), ("dataset", "dataset version"), ("job", "job")):
        with pytest.raises(NotFoundError, match=f"{what} 999: not found"):
            store.tags(entity, 999)
        with pytest.raises(NotFoundError, match=f"{what} 999: not found"):
            store.set_tag(entity, 999, "k", "v")


def test_the_owner_blobs_stamp_never_comes_back_after_a_delete(store: Store) -> None:
    ada = user(store, "ada")
    gone = store.create_task(ada.id, "gone", "input: [2] output: [3]")
    feed(store, gone.id, 2, seed="a")
    feed(store, gone.id, 1, seed="b")
    before = store.owner_blobs_stamp(ada.id)
    if before is None:  # a store without a cheap stamp: its callers count every time
        return
    store.delete_task(gone.id)
    again = store.create_task(ada.id, "again", "input: [2] output: [3]")
    feed(store, again.id, 2, seed="c")  # a store that reused ids would give these the deleted versions'
    feed(store, again.id, 1, seed="d")
    assert store.owner_blobs_stamp(ada.id) != before  # other blobs: a count kept for the old stamp is stale


def test_the_owner_blobs_stamp_moves_with_every_referencing_write(store: Store) -> None:
    ada = store.create_user("ada", "h-ada")
    bob = store.create_user("bob", "h-bob")
    task = store.create_task(ada.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    theirs = store.create_task(bob.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    stamps = [store.owner_blobs_stamp(ada.id)]
    v1 = feed(store, task.id, 5, seed="a")
    stamps.append(store.owner_blobs_stamp(ada.id))
    feed(store, theirs.id, 5, seed="b")  # another owner's write
    assert store.owner_blobs_stamp(ada.id) == stamps[-1]
    job = store.create_job(task.id, v1.id, "lr", {})
    store.update_job(job.id, JobStatus.RUNNING)
    assert store.owner_blobs_stamp(ada.id) == stamps[-1]  # no model yet
    store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, artifact_blob="ab" * 32))
    stamps.append(store.owner_blobs_stamp(ada.id))
    if stamps[0] is not None:  # (a store without a cheap stamp says None)
        assert len(set(stamps)) == len(stamps)
    with pytest.raises(NotFoundError, match="user 999: not found"):
        store.owner_blobs_stamp(999) if stamps[0] is not None else store.owner_blobs(999)


def test_feed_reads_are_the_tags_the_feed_state_and_the_stamp(store: Store) -> None:
    ada = store.create_user("ada", "h-ada")
    task = store.create_task(ada.id, "t", "x: {a: [4]} -> y: {c: [3]}")
    assert store.feed_reads(task.id, ada.id) == ({}, None, (), store.owner_blobs_stamp(ada.id))
    store.set_tag("task", task.id, "classes", '["cat"]')
    feed(store, task.id, 5, seed="a")
    feed(store, task.id, 3, seed="b")
    tags, latest, chunks, stamp = store.feed_reads(task.id, ada.id)
    assert tags == store.tags("task", task.id) == {"classes": '["cat"]'}
    assert (latest, chunks) == store.feed_state(task.id) and latest.number == 2 and len(chunks) == 2
    assert stamp == store.owner_blobs_stamp(ada.id)
    with pytest.raises(NotFoundError, match="task 999: not found"):
        store.feed_reads(999, ada.id)
    if stamp is not None:  # (a store without a cheap stamp says None)
        with pytest.raises(NotFoundError, match="user 999: not found"):
            store.feed_reads(task.id, 999)


# -- concurrency -----------------------------------------------------------------------


def run_threads(count: int, target) -> list[BaseException]:
    """Run ``target(i)`` in ``count`` threads started together; return their errors."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        barrier.wait()
        try:
            target(i)
        except BaseException as error:  # noqa: BLE001 - reported by the caller
            errors.append(error)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return errors


def test_concurrent_feeds_get_unique_gapless_numbers(store: Store, fed) -> None:
    _, t, _ = fed
    threads, feeds_each = 6, 5

    def work(i: int) -> None:
        for k in range(feeds_each):
            while True:  # as datasets.feed does: read the latest again when another feed got in first
                try:
                    feed(store, t.id, 1 + (i + k) % 3, seed=(i, k))
                    break
                except StaleParentError:
                    continue

    assert run_threads(threads, work) == []
    versions = store.list_dataset_versions(t.id)
    assert [v.number for v in versions] == list(range(1, threads * feeds_each + 2))
    assert [v.parent_id for v in versions] == [None] + [v.id for v in versions[:-1]]  # a chain: no feed lost
    chunks = store.list_chunks(t.id)
    ends = [c.first_example_id + c.count for c in chunks]
    assert [c.first_example_id for c in chunks] == [0] + ends[:-1]  # contiguous, no reuse


def test_concurrent_starts_of_one_job_let_exactly_one_through(store: Store, fed) -> None:
    _, t, v1 = fed
    for _ in range(3):
        job = store.create_job(t.id, v1.id, "mlp", {})
        errors = run_threads(4, lambda i: store.update_job(job.id, JobStatus.RUNNING))
        assert len(errors) == 3 and all(isinstance(e, InvalidStateError) for e in errors), errors
        assert store.get_job(job.id).attempts == 1


def test_concurrent_writers_of_one_key_do_not_collide(store: Store, fed) -> None:
    owner, t, v1 = fed
    job = store.create_job(t.id, v1.id, "mlp", {})

    def work(i: int) -> None:
        store.set_tag("task", t.id, "stage", f"writer-{i}")
        store.add_metric(job.id, 0, "loss", float(i))

    assert run_threads(6, work) == []
    assert store.tags("task", t.id)["stage"].startswith("writer-")
    assert len(store.list_metrics(job.id)) == 1

    errors = run_threads(4, lambda i: store.create_task(owner.id, "contested", ""))
    assert len(errors) == 3 and all(isinstance(e, AlreadyExistsError) for e in errors), errors


# What ``import *`` brings into a test module: the tests and the fixtures they
# use (computed, so that a new test cannot be left out of the suite).
__all__ = [name for name in dict(globals()) if name.startswith("test_")] + ["dag", "fed"]
