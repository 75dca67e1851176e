"""Blob garbage collection (``service/gc.py``, ``easeml gc``, housekeeping):
superseded MOP checkpoints and old selector states go, everything a task,
a version, a job or a restart needs stays."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from ease_jupyter import datasets
from ease_jupyter.cli import main
from ease_jupyter.schema import program_from_shapes
from ease_jupyter.schema import format_program
from ease_jupyter.service import ServiceConfig
from ease_jupyter.service.gc import collect_garbage, references
from ease_jupyter.service.loop import STATE_TAG, ControlLoop
from ease_jupyter.service.mop import PROGRESS_TAG
from ease_jupyter.store import SQLStore
from ease_jupyter.store import DirectoryBlobStore, JobStatus, JobUpdate, open_store

from .conftest import start, until

EPOCHS, PARTITIONS, LRS = 2, 3, 3


_state_writes = threading.Lock()


@pytest.fixture
def guarded_state_writes(monkeypatch):
    """Selector-state writes (a blob, then its tag; after the turn, outside
    the loop's lock) under ``_state_writes``, so that a test can hold the
    loop between turns with no write half done (see ``_paused``)."""
    write = ControlLoop._write_state

    def guarded(self, job_id, data):
        with _state_writes:
            write(self, job_id, data)

    monkeypatch.setattr(ControlLoop, "_write_state", guarded)


@contextlib.contextmanager
def _paused(service):
    """No turn runs and no selector state is half written: a collection with
    no grace period is then deterministic. (The service's own collection
    takes neither lock; it relies on the grace period instead.)"""
    with service.loop._lock, _state_writes:
        yield


def _blob_files(data_dir: Path) -> dict[str, int]:
    return {str(p.relative_to(data_dir)): p.stat().st_size for p in (data_dir / "blobs").rglob("*") if p.is_file()}


def _backdate(blobs: DirectoryBlobStore, digest: str, seconds: float = 7200) -> None:
    when = time.time() - seconds
    os.utime(blobs.path(digest), (when, when))


@pytest.fixture(scope="module")
def digits_small():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images[:120] / 16.0).astype("float32")[..., None], d.target[:120].astype("int64")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, iris, digits_small):
    """A data dir after a service trained an iris task (three versions: two
    feeds and a refine) and a small image task (torch, 3 partitions, 2
    epochs), with the service stopped. Also: every per-unit checkpoint the
    torch jobs wrote, and what the tasks answered before any collection."""
    data_dir = tmp_path_factory.mktemp("trained")
    running = start(data_dir, torch_epochs=EPOCHS, mop_partitions=PARTITIONS, workers=2)
    unit_ckpts: set[str] = set()
    store = running.service.store
    set_tag = store.set_tag

    def spy(entity, entity_id, key, value):
        if key == PROGRESS_TAG:
            unit_ckpts.update(u["ckpt"] for u in json.loads(value)["units"].values())
        set_tag(entity, entity_id, key, value)

    store.set_tag = spy  # the thread executor's torch jobs write through this very store
    try:
        running.user("alice")
        client = running.client("alice")
        X, y = iris
        flat = client.task("iris", input=[4], output=[3])
        flat.feed(X[:100], y[:100])
        flat.feed(X[100:], y[100:])
        flat.refine(drop=[0, 1, 2])
        Xi, yi = digits_small
        images = client.task("digits", input=[8, 8, 1], output=[10])
        images.feed(Xi, yi)
        assert flat.wait(timeout=300) and images.wait(timeout=300)
        torch_jobs = [j for j in images.jobs() if j["status"] == "succeeded"]
        assert len(torch_jobs) == 4, images.jobs()
        before = SimpleNamespace(
            best={t.name: t.best() for t in (flat, images)},
            predictions={"iris": flat.infer(X), "digits": images.infer(Xi)},
            versions={t.name: t.versions() for t in (flat, images)},
        )
    finally:
        store.set_tag = set_tag
        running.thread.stop()
    return SimpleNamespace(dir=data_dir, tokens=running.tokens, unit_ckpts=unit_ckpts, before=before,
                           X={"iris": iris[0], "digits": digits_small[0]}, torch_jobs=torch_jobs)


def _copy(trained, tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(trained.dir, target)
    return target


def _check_tasks_answer_as_before(running, trained) -> None:
    running.tokens = trained.tokens
    client = running.client("alice")
    for name in ("iris", "digits"):
        task = client.task(name)
        assert task.best() == trained.before.best[name]
        np.testing.assert_array_equal(task.infer(trained.X[name]), trained.before.predictions[name])
        versions = task.versions()
        assert versions == trained.before.versions[name]
        for version in versions:  # every version's arrays still load, the superseded ones too
            X, y, ids = task.data(version["number"])
            assert len(X) == len(y) == len(ids) == version["n_examples"]


def test_gc_deletes_old_checkpoints_and_states_and_the_service_still_works(trained, tmp_path,
                                                                          guarded_state_writes):
    data_dir = _copy(trained, tmp_path)
    running = start(data_dir, torch_epochs=EPOCHS, mop_partitions=PARTITIONS, workers=2)  # a restart
    try:
        service = running.service
        running.tokens = trained.tokens
        assert all(running.client("alice").task(name).wait(timeout=60) for name in ("iris", "digits"))
        store, blobs = service.store, service.blobs
        with _paused(service):
            states = {store.tags("job", j)[STATE_TAG] for j in store.find_by_tag("job", STATE_TAG)}
            newest_state = store.tags("job", max(store.find_by_tag("job", STATE_TAG)))[STATE_TAG]
            files_before = _blob_files(data_dir)
            stored_before = {i.digest for i in blobs.iter_blobs()}
            report = collect_garbage(store, blobs, grace_seconds=0)
            refs = references(store)
            stored_after = {i.digest for i in blobs.iter_blobs()}
            files_after = _blob_files(data_dir)
        assert report.deleted > 0 and report.missing == 0 and report.young == 0
        assert report.stored == len(stored_before) == report.kept + report.deleted
        assert stored_after == stored_before & set(refs)  # exactly the unreferenced blobs went
        # the data dir shrank by exactly what the report says
        assert sum(files_after.values()) == sum(files_before.values()) - report.deleted_bytes
        # superseded per-unit checkpoints are gone; the artifacts (best checkpoints) stay
        superseded_units = trained.unit_ckpts - set(refs)
        assert superseded_units and not superseded_units & stored_after
        assert all(blobs.exists(store.get_job(j["id"]).artifact_blob) for j in trained.torch_jobs)
        # old selector states are gone; the newest stays
        assert len(states) > 1 and blobs.exists(newest_state)
        assert not (states - {newest_state}) & stored_after
        _check_tasks_answer_as_before(running, trained)
        selector = service.loop.selector.to_dict()
    finally:
        running.thread.stop()

    again = start(data_dir, torch_epochs=EPOCHS, mop_partitions=PARTITIONS, workers=2)
    try:
        restored = again.service.loop.selector.to_dict()
        assert [u and u["name"] for u in restored["users"]] == [u and u["name"] for u in selector["users"]]
        assert [u and len(u["obs"]) for u in restored["users"]] == [u and len(u["obs"]) for u in selector["users"]]
        assert json.loads(json.dumps(restored["users"])) == json.loads(json.dumps(selector["users"]))
        _check_tasks_answer_as_before(again, trained)
    finally:
        again.thread.stop()


def test_dry_run_deletes_nothing_and_reports_the_same_counts(trained, tmp_path):
    data_dir = _copy(trained, tmp_path)
    store, blobs = open_store(None, data_dir)
    try:
        files = _blob_files(data_dir)
        dry = collect_garbage(store, blobs, grace_seconds=0, dry_run=True)
        assert dry.dry_run and dry.deleted > 0
        assert _blob_files(data_dir) == files
        real = collect_garbage(store, blobs, grace_seconds=0)
        counts = lambda r: (r.stored, r.stored_bytes, r.referenced, r.kept, r.kept_bytes, r.young,  # noqa: E731
                            r.deleted, r.deleted_bytes, r.missing)
        assert counts(real) == counts(dry)
        assert len(_blob_files(data_dir)) == len(files) - real.deleted
        # nothing left to collect
        assert collect_garbage(store, blobs, grace_seconds=0).deleted == 0
    finally:
        store.close()


def test_easeml_gc_over_a_data_dir(trained, tmp_path):
    data_dir = _copy(trained, tmp_path)
    runner = CliRunner()
    files = _blob_files(data_dir)
    result = runner.invoke(main, ["gc", "--data-dir", str(data_dir), "--grace", "0", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    dry = json.loads(result.output)
    assert dry["dry_run"] and dry["deleted"] > 0 and dry["data_dir"] == str(data_dir)
    assert _blob_files(data_dir) == files
    # the default grace (an hour) keeps everything just written
    result = runner.invoke(main, ["gc", "--data-dir", str(data_dir), "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["deleted"] == 0
    assert _blob_files(data_dir) == files
    result = runner.invoke(main, ["gc", "--data-dir", str(data_dir), "--grace", "0"])
    assert result.exit_code == 0, result.output
    assert f"deleted {dry['deleted']} blob(s)" in result.output and "referenced (kept)" in result.output
    assert len(_blob_files(data_dir)) == len(files) - dry["deleted"]
    result = runner.invoke(main, ["gc", "--data-dir", str(tmp_path / "nowhere")])
    assert result.exit_code == 1 and "no data dir" in result.output
    assert not (tmp_path / "nowhere").exists()
    result = runner.invoke(main, ["gc", "--db", "memory://", "--data-dir", str(data_dir)])
    assert result.exit_code == 2


def test_gc_and_fsck_open_the_services_database_and_never_a_new_one(trained, tmp_path):
    """The service's database outside the data dir (as a PostgreSQL URL in
    $EASEML_DB would be): without its URL, gc and fsck refuse instead of
    creating an empty SQLite database whose rows reference no blob (gc would
    then delete them all); with $EASEML_DB they act on the service's rows."""
    data_dir = _copy(trained, tmp_path)
    elsewhere = tmp_path / "db"
    elsewhere.mkdir()
    for path in data_dir.glob("easeml.sqlite*"):  # the database with its -wal and -shm files
        path.rename(elsewhere / path.name)
    url = f"sqlite:///{elsewhere / 'easeml.sqlite'}"
    files = _blob_files(data_dir)
    runner = CliRunner(env={"EASEML_DB": None})
    for command in (["gc", "--grace", "0"], ["fsck"]):
        result = runner.invoke(main, [*command, "--data-dir", str(data_dir)])
        assert result.exit_code == 2, result.output
        assert "no SQLite database" in result.output and "EASEML_DB" in result.output
        assert not (data_dir / "easeml.sqlite").exists()
        assert _blob_files(data_dir) == files
    # a file that is not there: refused, and not created
    missing = f"sqlite:///{tmp_path / 'typo.sqlite'}"
    result = runner.invoke(main, ["gc", "--grace", "0", "--data-dir", str(data_dir), "--db", missing])
    assert result.exit_code == 2 and "no SQLite database" in result.output, result.output
    assert not (tmp_path / "typo.sqlite").exists() and _blob_files(data_dir) == files
    # a database of no service (no users) beside these blobs: refused unless forced
    empty = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    SQLStore(empty).close()  # the schema, no rows
    result = runner.invoke(main, ["gc", "--grace", "0", "--data-dir", str(data_dir), "--db", empty])
    assert result.exit_code == 2 and "holds no users" in result.output and "--force" in result.output
    assert _blob_files(data_dir) == files
    result = runner.invoke(main, ["gc", "--grace", "0", "--dry-run", "--json", "--force",
                                  "--data-dir", str(data_dir), "--db", empty])
    assert result.exit_code == 0 and json.loads(result.output)["referenced"] == 0
    # the service's database through $EASEML_DB: its rows keep what they reference
    result = runner.invoke(main, ["fsck", "--json", "--data-dir", str(data_dir)], env={"EASEML_DB": url})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["checked"] > 0
    result = runner.invoke(main, ["gc", "--grace", "0", "--json", "--data-dir", str(data_dir)],
                           env={"EASEML_DB": url})
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["referenced"] > 0 and len(_blob_files(data_dir)) == len(files) - report["deleted"] < len(files)
    assert not (data_dir / "easeml.sqlite").exists()


def test_help_of_gc_and_serve_blob_gc():
    result = CliRunner().invoke(main, ["gc", "--help"])
    assert result.exit_code == 0
    for option in ("--data-dir", "--db", "--grace", "--dry-run", "--json"):
        assert option in result.output
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0 and "--blob-gc" in result.output


# -- the reference rules, on a store built by hand --------------------------------------


@pytest.fixture
def image_task(tmp_path, digits_small):
    store, blobs = open_store(None, tmp_path / "data")
    user = store.create_user("ada", "h" * 64)
    task = store.create_task(user.id, "digits", format_program(program_from_shapes([8, 8, 1], [10])))
    version = datasets.feed(store, blobs, task, *digits_small)
    try:
        yield store, blobs, task, version
    finally:
        store.close()


def test_a_young_unreferenced_blob_survives_and_an_old_one_goes(image_task):
    store, blobs, task, version = image_task
    data = {version.members_blob, *(d for c in store.list_chunks(task.id) for d in (c.x_blob, c.y_blob))}
    for digest in data:
        _backdate(blobs, digest)  # old, but referenced
    in_flight = blobs.put_bytes(b"written, not referenced yet")
    orphan = blobs.put_bytes(b"nobody wants me")
    _backdate(blobs, orphan)
    report = collect_garbage(store, blobs)  # the default grace: an hour
    assert (report.kept, report.young, report.deleted) == (len(data), 1, 1)
    assert blobs.exists(in_flight) and not blobs.exists(orphan)
    assert all(blobs.exists(d) for d in data)
    # a put of content that is already stored makes it young again
    _backdate(blobs, in_flight)
    assert blobs.put_bytes(b"written, not referenced yet") == in_flight
    assert collect_garbage(store, blobs).young == 1 and blobs.exists(in_flight)


def test_an_unfinished_torch_jobs_checkpoints_survive_until_it_finishes(image_task):
    store, blobs, task, version = image_task
    job = store.create_job(task.id, version.id, "lenet", {"lrs": [0.1, 0.01], "epochs": 2})
    store.update_job(job.id, JobStatus.RUNNING)
    ckpt = {name: blobs.put_bytes(name.encode()) for name in ("epoch_t0", "epoch_t1", "best_t0", "unit_t1", "stale")}
    for digest in ckpt.values():
        _backdate(blobs, digest)
    store.set_tag("job", job.id, PROGRESS_TAG, json.dumps({
        "epoch": 1, "ckpts": {"t0": ckpt["epoch_t0"], "t1": ckpt["epoch_t1"]}, "scores": {"t0": [0.5], "t1": [0.4]},
        "best": {"t0": [0.5, ckpt["best_t0"], 1], "t1": [0.4, ckpt["epoch_t1"], 1]}, "seconds": 1.0,
        "partitions": 3, "units": {"t1": {"visited": [2], "loss_sum": 1.0, "examples": 40, "seconds": 0.1,
                                          "ckpt": ckpt["unit_t1"]}}, "trained_units": 7}))
    needed = {k: v for k, v in ckpt.items() if k != "stale"}

    report = collect_garbage(store, blobs, grace_seconds=0)  # running
    assert report.deleted == 1 and not blobs.exists(ckpt["stale"])
    assert all(blobs.exists(d) for d in needed.values())
    store.update_job(job.id, JobStatus.QUEUED)  # re-queued after a restart: it resumes from these
    assert collect_garbage(store, blobs, grace_seconds=0).deleted == 0
    store.update_job(job.id, JobStatus.RUNNING)
    store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, artifact_blob=ckpt["best_t0"]))
    report = collect_garbage(store, blobs, grace_seconds=0)  # finished: only its artifact is needed
    assert report.deleted == 3
    assert blobs.exists(ckpt["best_t0"])
    assert not any(blobs.exists(needed[k]) for k in ("epoch_t0", "epoch_t1", "unit_t1"))


def test_only_the_newest_selector_state_is_kept(image_task):
    store, blobs, task, version = image_task
    jobs = [store.create_job(task.id, version.id, "lenet", {"epochs": e}) for e in (1, 2, 3)]
    states = [blobs.put_bytes(json.dumps({"state": i}).encode()) for i in range(4)]
    for digest in states:
        _backdate(blobs, digest)
    store.set_tag("job", jobs[0].id, STATE_TAG, states[0])
    store.set_tag("job", jobs[2].id, STATE_TAG, states[1])  # the newest job holding the tag...
    store.set_tag("job", jobs[1].id, STATE_TAG, states[2])
    store.set_tag("job", jobs[2].id, STATE_TAG, states[3])  # ... saved again: its old state is garbage too
    collect_garbage(store, blobs, grace_seconds=0)
    assert [blobs.exists(s) for s in states] == [False, False, False, True]


def test_leftover_temporaries_older_than_an_hour_go(image_task):
    store, blobs, _, version = image_task
    leftover = blobs.path(version.members_blob).parent / ".tmp-crashed"
    leftover.write_bytes(b"half a blob")
    assert collect_garbage(store, blobs, grace_seconds=0).temporaries == 0  # could be a put in progress
    when = time.time() - 7200
    os.utime(leftover, (when, when))
    report = collect_garbage(store, blobs, grace_seconds=0)
    assert (report.temporaries, report.temporaries_bytes) == (1, len(b"half a blob"))
    assert not leftover.exists() and report.deleted == 0


def test_the_memory_store_is_collected_too(digits_small):
    from ease_jupyter.store import InMemoryStore, MemoryBlobStore

    store, blobs = InMemoryStore(), MemoryBlobStore()
    user = store.create_user("ada", "h" * 64)
    task = store.create_task(user.id, "digits", format_program(program_from_shapes([8, 8, 1], [10])))
    datasets.feed(store, blobs, task, *digits_small)
    orphan = blobs.put_bytes(b"orphan")
    assert collect_garbage(store, blobs).young == 1  # just written
    report = collect_garbage(store, blobs, grace_seconds=0)
    assert (report.kept, report.deleted) == (3, 1) and not blobs.exists(orphan)


# -- in the service's housekeeping --------------------------------------------------------


def test_housekeeping_collects_old_garbage(tmp_path):
    blobs = DirectoryBlobStore(tmp_path / "blobs")
    orphan, fresh = blobs.put_bytes(b"old garbage"), blobs.put_bytes(b"fresh garbage")
    _backdate(blobs, orphan)
    running = start(tmp_path, housekeeping_seconds=0.1, blob_gc_seconds=3600, torch=False)
    try:
        assert until(lambda: not blobs.exists(orphan), 30), "housekeeping did not collect the blob"
        assert blobs.exists(fresh)  # within the default grace of an hour
    finally:
        running.thread.stop()


def test_blob_gc_seconds_must_not_be_negative():
    assert ServiceConfig(blob_gc_seconds=None).blob_gc_seconds is None
    assert ServiceConfig(blob_gc_seconds=0).blob_gc_seconds == 0
    with pytest.raises(ValueError, match="blob_gc_seconds"):
        ServiceConfig(blob_gc_seconds=-1)


def test_housekeeping_removes_run_folders_that_killed_runs_left_under_the_blob_url(tmp_path):
    """A run removes its folder under --blob-url when it ends; one killed
    before leaves its staged data and checkpoints there. Housekeeping removes
    a run folder with nothing written for a day, and nothing else."""
    import os
    import time

    from ease_jupyter.service.app import RUN_FOLDER_TTL_SECONDS

    shared = tmp_path / "shared"
    folders = {name: shared / name for name in ("easeml-run-killed", "easeml-run-live", "someone-elses")}
    for folder in folders.values():
        folder.mkdir(parents=True)
        (folder / "part-0.npz").write_bytes(b"staged rows")
    old = time.time() - RUN_FOLDER_TTL_SECONDS - 60
    for name in ("easeml-run-killed", "someone-elses"):
        os.utime(folders[name] / "part-0.npz", (old, old))
    running = start(tmp_path / "data", housekeeping_seconds=0.1, blob_gc_seconds=3600, torch=False,
                    blob_url=shared.as_uri())
    try:
        assert until(lambda: not folders["easeml-run-killed"].exists(), 30), "the killed run's folder stayed"
        assert folders["easeml-run-live"].exists() and folders["someone-elses"].exists()
    finally:
        running.thread.stop()
