"""A scikit-learn pick is one candidate model whose hyperparameter grid is
evaluated inside the job with Seneca's grid evaluation (issue 5 item 2;
ease.ml pvldb §3, Seneca §II-III), on the service's engine."""

from __future__ import annotations

import json
import pickle
import time

import numpy as np
import pytest

from ease_jupyter.datasets import load
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.grid import cartesian
from ease_jupyter.service.loop import STATE_TAG, catalogue
from ease_jupyter.jobspec import SklearnGrid, point_label
from ease_jupyter.service.runner import GRID_BEST_TAG, GRID_COST_TAG, evaluate_grid
from ease_jupyter.store import JobStatus
from ease_jupyter.store._frozen import thaw
from ease_jupyter.service.candidates import task_candidates
from ease_jupyter.zoo import Engine

from .conftest import start


def _metrics(store, job_id: int) -> dict[str, float]:
    return {m.name: m.value for m in store.list_metrics(job_id)}


def test_a_pick_evaluates_its_candidates_whole_grid(tmp_path, iris):
    X, y = iris
    r = start(tmp_path, torch=False)
    try:
        r.user("alice")
        task = r.client("alice").task("iris", input=[4], output=[3])
        task.feed(X, y)
        assert task.wait(timeout=120)
        store, blobs = r.service.store, r.service.blobs
        stored = store.get_task(task.refresh()["id"])
        cands = {n: c for n, c in task_candidates(stored).items() if c.engine is Engine.SKLEARN}
        jobs = store.list_jobs(stored.id)
        assert sorted(j.model for j in jobs) == sorted(cands)  # one job per candidate model
        data = load(store, blobs, store.get_dataset_version(jobs[0].dataset_version_id))
        with LocalEngine(1, torch_threads=None) as engine:
            for job in jobs:
                assert job.status is JobStatus.SUCCEEDED
                grid = SklearnGrid.of(cands[job.model]).options
                assert thaw(job.config) == {"grid": grid}
                metrics = _metrics(store, job.id)
                points = {point_label(p): metrics[f"val_score[{point_label(p)}]"] for p in cartesian(grid)}
                assert len(points) == len(cands[job.model].configs) >= 2
                assert job.accuracy == max(points.values()) == metrics["val_score"]
                best = json.loads(store.tags("job", job.id)[GRID_BEST_TAG])["params"]
                assert points[point_label(best)] == job.accuracy
                assert GRID_COST_TAG not in store.tags("job", job.id)  # one local worker: no memory sizing
                # the same grid on the same split, evaluated again outside the service
                again = evaluate_grid(cands[job.model], grid, data, True, engine)
                assert again.best_params == best and again.best_score == job.accuracy
                model = pickle.loads(blobs.get_bytes(job.artifact_blob))
                assert repr(model) == repr(again.best_model)
                assert np.array_equal(model.predict(X), again.best_model.predict(X))
        top = max(jobs, key=lambda j: (j.accuracy, -j.id))
        assert task.best()["best_config"] == point_label(json.loads(store.tags("job", top.id)[GRID_BEST_TAG])["params"])
    finally:
        r.thread.stop()


def test_an_upgrade_from_config_level_picks(tmp_path, iris):
    """A data dir written by a version whose picks were single configs: its
    saved selector state (another catalogue) is rebuilt from the jobs, and
    its job left running (one config, no grid) runs as a one-point grid."""
    X, y = iris
    r = start(tmp_path, torch=False)
    r.user("alice")
    task = r.client("alice").task("iris", input=[4], output=[3])
    task.feed(X, y)
    assert task.wait(timeout=120)
    n_jobs = len(task.jobs())
    store, blobs = r.service.store, r.service.blobs
    r.thread.stop()
    # the state an older version saved: its catalogue held config keys
    from ease_jupyter.store import open_store

    store, blobs = open_store(None, tmp_path)
    holder = max(store.find_by_tag("job", STATE_TAG))
    state = json.loads(blobs.get_bytes(store.tags("job", holder)[STATE_TAG]))
    state["models"] = [*state["models"], "knn[n_neighbors=3]"]
    store.set_tag("job", holder, STATE_TAG, blobs.put_bytes(json.dumps(state).encode()))
    version = store.latest_dataset_version(store.get_job(holder).task_id)
    legacy = store.create_job(version.task_id, version.id, "knn", {"n_neighbors": 7})
    store.update_job(legacy.id, JobStatus.RUNNING)
    store.close()

    r2 = start(tmp_path, torch=False)
    try:
        r2.tokens = r.tokens
        loop = r2.service.loop
        assert loop.selector.model_names == catalogue()[0]
        task2 = r2.client("alice").task("iris")
        assert task2.wait(timeout=60)
        assert len(task2.jobs()) == n_jobs + 1  # every result replayed, nothing trained again
        (tenant,) = loop.selector.users
        assert loop.selector.stats(tenant)["n_obs"] == n_jobs  # the legacy job is no arm
        job = r2.service.store.get_job(legacy.id)
        assert job.status is JobStatus.SUCCEEDED and job.attempts == 2
        assert set(_metrics(r2.service.store, legacy.id)) >= {"val_score[n_neighbors=7]", "val_score"}
    finally:
        r2.thread.stop()


@pytest.mark.slow
def test_grid_tasks_run_on_the_services_dask_cluster(tmp_path, iris):
    """``engine="dask"``: the service starts one LocalCluster; every grid is
    sized (Seneca Alg. 1) and fanned out over its two workers."""
    X, y = iris
    r = start(tmp_path, torch=False, engine="dask", workers=2)
    try:
        cluster = r.service._cluster
        assert len(cluster.scheduler_info["workers"]) == 2
        r.user("alice")
        task = r.client("alice").task("iris", input=[4], output=[3])
        task.feed(X, y)
        assert task.wait(timeout=240)
        store = r.service.store
        jobs = store.list_jobs(task.refresh()["id"])
        assert jobs and all(j.status is JobStatus.SUCCEEDED for j in jobs), [
            (j.id, j.model, j.status, j.error) for j in jobs if j.status is not JobStatus.SUCCEEDED]
        for job in jobs:
            cost = json.loads(store.tags("job", job.id)[GRID_COST_TAG])
            assert 0 < cost["reserved_bytes"] < cost["fixed_bytes"]
            assert cost["gb_seconds"] < cost["fixed_gb_seconds"]
        pred = task.infer(X[:30])
        assert (np.asarray(pred) == y[:30]).mean() > 0.8
    finally:
        r.thread.stop()
    assert cluster.status.name == "closed"


@pytest.mark.parametrize("shapes", [([4], [3]), ([16], [1]), ([8, 8, 1], [4])])
def test_n_points_counts_the_points_of_every_candidates_pick(shapes):
    from ease_jupyter.jobspec import SingleConfig, TorchWorkload
    from ease_jupyter.schema import program_from_shapes
    from ease_jupyter.zoo import candidates

    specs = [SingleConfig("logreg", (("C", 1.0),)),
             TorchWorkload("own", (0.1, 0.01), options=(("width", (8, 16, 32)), ("depth", (1, 2))), code="blob")]
    for cand in candidates(program_from_shapes(*shapes)):
        specs.append(SklearnGrid.of(cand) if cand.engine is Engine.SKLEARN else TorchWorkload.of(cand))
    assert all(spec.n_points == len(spec.points()) for spec in specs)
    assert {spec.n_points for spec in specs} != {1}  # grids of several points among them
