"""``easeml fsck``: report the rows whose blobs cannot be read; ``--repair``
rebuilds, drops or retrains them; exit code 1 while problems remain."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from ease_jupyter import datasets
from ease_jupyter.service import models
from ease_jupyter.service.embedded import DataDirLock
from ease_jupyter.service.testing import train_now
from ease_jupyter.cli import main
from ease_jupyter.store import JobStatus, open_store


@pytest.fixture
def data_dir(tmp_path):
    """alice's task 't': two feeds (versions 1, 2) and one trained model on version 2."""
    store, blobs = open_store(None, tmp_path)
    try:
        user = store.create_user("alice", "h" * 64)
        task = store.create_task(user.id, "t", "input: [4] output: [3]")
        rng = np.random.default_rng(0)
        for _ in range(2):
            datasets.feed(store, blobs, task, rng.normal(size=(60, 4)).astype("float32"), np.arange(60) % 3)
        job = train_now(store, blobs, task, "logreg", {"C": 0.1})
        assert job.status is JobStatus.SUCCEEDED
    finally:
        store.close()
    return tmp_path


def _fsck(data_dir, *args):
    return CliRunner().invoke(main, ["fsck", "--data-dir", str(data_dir), *args])


def _lose(data_dir, *digests):
    store, blobs = open_store(None, data_dir)
    for digest in digests:
        blobs.path(digest).unlink()
    store.close()


def _rows(data_dir):
    store, blobs = open_store(None, data_dir)
    task = store.list_tasks()[0]
    return store, blobs, task, store.list_dataset_versions(task.id), store.list_jobs(task.id)


def test_a_sound_store_passes(data_dir):
    result = _fsck(data_dir)
    assert result.exit_code == 0, result.output
    assert "0 unreadable" in result.output


def test_report_then_repair_every_kind(data_dir):
    store, blobs, task, versions, jobs = _rows(data_dir)
    first_chunk = store.list_chunks(task.id)[0]
    model, members = jobs[0].artifact_blob, versions[1].members_blob
    store.close()
    _lose(data_dir, members, first_chunk.x_blob, model)

    report = _fsck(data_dir, "--json")
    assert report.exit_code == 1
    found = json.loads(report.output)
    assert found["open"] == 3 and {p["kind"] for p in found["problems"]} == {"members", "chunk", "model"}
    assert all(str(data_dir) not in p["what"] for p in found["problems"])
    table = _fsck(data_dir)
    assert table.exit_code == 1 and "alice's task 't', dataset version 2" in table.output
    assert "needs --repair" in table.output

    repaired = _fsck(data_dir, "--repair")
    assert repaired.exit_code == 0, repaired.output

    store, blobs, task, after, jobs_after = _rows(data_dir)
    try:
        assert blobs.exists(members)  # rebuilt with the same digest: the row is unchanged
        # The lost examples 0-59 are dropped from the latest data by a refine.
        assert len(after) == 3 and after[-1].kind.value == "refine"
        latest = datasets.load(store, blobs, after[-1])
        assert latest.example_ids.min() == 60 and latest.example_ids.size == 60
        # The lost model is unusable (its data is no longer the latest: not retrained).
        assert models.best_job(store, task) is None
        assert store.tags("job", jobs[0].id)[models.UNUSABLE_TAG]
    finally:
        store.close()
    again = _fsck(data_dir)  # the lost chunk stays in the old versions: reported, not open
    assert again.exit_code == 0, again.output
    assert "1 unreadable, 0 needing attention" in again.output


def test_a_lost_model_on_the_latest_data_is_retrained(data_dir):
    store, blobs, task, versions, jobs = _rows(data_dir)
    store.close()
    _lose(data_dir, jobs[0].artifact_blob)

    result = _fsck(data_dir, "--repair", "--json")

    assert result.exit_code == 0, result.output
    problem = json.loads(result.output)["problems"][0]
    store, blobs, task, _, after = _rows(data_dir)
    try:
        retrain = after[-1]
        assert problem["repair"] == f"marked unusable; job {retrain.id} retrains it"
        assert retrain.status is JobStatus.QUEUED and retrain.model == jobs[0].model
        assert retrain.dataset_version_id == versions[-1].id
        assert models.best_job(store, task) is None  # best and infer skip the lost model
    finally:
        store.close()


def test_damaged_content_counts_as_unreadable(data_dir):
    store, blobs, task, versions, _ = _rows(data_dir)
    blobs.path(versions[0].members_blob).write_bytes(b"not the list it was")
    store.close()
    result = _fsck(data_dir, "--repair", "--json")
    assert result.exit_code == 0
    assert json.loads(result.output)["problems"][0]["repair"] == "rebuilt from the version's rows"
    # the damaged file was replaced by the rebuilt content, not merely touched
    again = _fsck(data_dir, "--json")
    assert again.exit_code == 0 and json.loads(again.output)["problems"] == [], again.output
    store, blobs, task, versions, _ = _rows(data_dir)
    try:
        assert datasets.load(store, blobs, versions[0]).example_ids.size == 60
    finally:
        store.close()


def test_help():
    result = CliRunner().invoke(main, ["fsck", "--help"])
    assert result.exit_code == 0 and "--repair" in result.output
    assert "fsck" in CliRunner().invoke(main, ["--help"]).output


def test_a_replace_feeds_members_are_rebuilt_from_its_chunk_alone(tmp_path):
    """A "replace" feed holds exactly the rows it fed, not its parent's as
    well: its lost list of examples is rebuilt as such (the same digest), and
    a lost chunk that only the replaced version used needs no attention."""
    store, blobs = open_store(None, tmp_path)
    try:
        user = store.create_user("alice", "h" * 64)
        task = store.create_task(user.id, "t", "input: [4] output: [3]")
        rng = np.random.default_rng(0)
        datasets.feed(store, blobs, task, rng.normal(size=(30, 4)).astype("float32"), np.arange(30) % 3)
        datasets.feed(store, blobs, task, rng.normal(size=(10, 4)).astype("float32"), np.arange(10) % 3,
                      mode=datasets.REPLACE)
        first, replaced = store.list_dataset_versions(task.id)
        assert replaced.n_examples == 10
        old_chunk = store.list_chunks(task.id)[0]
    finally:
        store.close()
    _lose(tmp_path, replaced.members_blob, old_chunk.x_blob)
    result = _fsck(tmp_path, "--repair", "--json")
    assert result.exit_code == 0, result.output
    repairs = {p["kind"]: p["repair"] for p in json.loads(result.output)["problems"]}
    assert repairs["members"] == "rebuilt from the version's rows"
    store, blobs, task, versions, _ = _rows(tmp_path)
    try:
        assert len(versions) == 2  # no refine: the latest version does not use the lost chunk
        assert datasets.load(store, blobs, versions[-1]).example_ids.size == 10
    finally:
        store.close()


def test_one_refine_per_task_drops_every_lost_chunk(tmp_path):
    """One label blob shared by six chunks of two tasks: --repair makes one
    refine per task, which drops all of that task's lost examples."""
    store, blobs = open_store(None, tmp_path)
    try:
        user = store.create_user("alice", "h" * 64)
        rng = np.random.default_rng(0)
        shared_y, other_y = np.arange(20) % 3, (np.arange(20) + 1) % 3
        for name in ("a", "b"):
            task = store.create_task(user.id, name, "input: [4] output: [3]")
            for y in (shared_y, shared_y, shared_y, other_y):
                datasets.feed(store, blobs, task, rng.normal(size=(20, 4)).astype("float32"), y)
        chunks = store.list_chunks(task.id)
        lost = chunks[0].y_blob
        assert [c.y_blob == lost for c in chunks] == [True, True, True, False]
    finally:
        store.close()
    _lose(tmp_path, lost)

    result = _fsck(tmp_path, "--repair", "--json")

    assert result.exit_code == 0, result.output
    problems = json.loads(result.output)["problems"]
    assert len(problems) == 6 and all(not p["open"] for p in problems)
    store, blobs = open_store(None, tmp_path)
    try:
        for task in store.list_tasks():
            versions = store.list_dataset_versions(task.id)
            assert [v.kind.value for v in versions] == ["feed"] * 4 + ["refine"]  # one refine, not three
            assert datasets.load(store, blobs, versions[-1]).example_ids.tolist() == list(range(60, 80))
            repairs = {p["repair"] for p in problems if p["task_id"] == task.id}
            assert repairs == {"examples lost; dropped from the latest data by a refine (dataset version 5)"}
    finally:
        store.close()


def test_repair_is_refused_while_a_service_holds_the_data_dir(data_dir):
    """A report may run beside the service; --repair only once it stopped."""
    store, blobs, task, versions, jobs = _rows(data_dir)
    store.close()
    _lose(data_dir, jobs[0].artifact_blob)
    lock = DataDirLock(data_dir)  # what a running service holds
    lock.announce("http://127.0.0.1:8585/api/v1")
    try:
        refused = _fsck(data_dir, "--repair")
        assert refused.exit_code != 0
        assert "stop it first" in refused.output and "http://127.0.0.1:8585" in refused.output
        report = _fsck(data_dir)
        assert report.exit_code == 1 and "needs --repair" in report.output
    finally:
        lock.release()
    store, blobs, task, _, after = _rows(data_dir)
    try:
        assert len(after) == len(jobs) and models.UNUSABLE_TAG not in store.tags("job", jobs[0].id)  # nothing done
    finally:
        store.close()
    repaired = _fsck(data_dir, "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert "stop it first" not in repaired.output
    DataDirLock(data_dir).release()  # the repair let go of the lock
