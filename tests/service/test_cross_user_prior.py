"""The cross-user GP prior in the live service (ease.ml arXiv App. A): the
loop's selector learns its prior from the quality vectors of the tasks that
finished in its store, starts from the shipped prior on a fresh store,
refits in the background as tasks finish, and never lets a task inform its
own prior."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.candidates import arm_specs
from ease_jupyter.service.loop import ControlLoop, catalogue
from ease_jupyter.service.loop.prior import (
    History,
    co_measured_blocks,
    fit_blocks,
    load_shipped,
    read_history,
    shipped_base,
)
from ease_jupyter.store import InMemoryStore, JobStatus, JobUpdate, MemoryBlobStore
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor

FLAT = format_program(program_from_shapes([4], [3]))
CLASSIFIERS = ["logreg", "svm_rbf", "random_forest", "hist_gboost", "knn", "mlp"]
# The other tasks' best models. Both are cheap (their cost does not decide the
# pick) and neither is what the shipped prior leads to first (svm_rbf, logreg).
TOP = ("knn", "random_forest")


def manual(store) -> ManualExecutor:
    """Jobs that finish when the test says so (``finish_all``)."""
    return ManualExecutor(store, workers=2)


def _feed(store, blobs, task, rng):
    datasets.feed(store, blobs, task, rng.normal(size=(60, 4)).astype("float32"), rng.integers(0, 3, 60))


def _finished_task(store, blobs, owner_id, name, rng, top=TOP):
    """A task whose every arm has a succeeded job on its latest version: the
    ``top`` models near 0.95, the rest near 0.55."""
    task = store.create_task(owner_id, name, FLAT)
    _feed(store, blobs, task, rng)
    version = store.latest_dataset_version(task.id)
    for key, spec in arm_specs(task, torch_epochs=None).items():
        quality = 0.97 - 0.04 * top.index(key) if key in top else 0.55
        job = store.create_job(task.id, version.id, spec.model, spec.config())
        store.update_job(job.id, JobStatus.RUNNING)
        store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=quality + 0.01 * rng.random(),
                                                                cost_seconds=0.1))
    return task


def _store_with_history(n_finished: int):
    store, blobs = InMemoryStore(), MemoryBlobStore()
    rng = np.random.default_rng(0)
    others = store.create_user("others", "o" * 64)
    finished = [_finished_task(store, blobs, others.id, f"old{i}", rng) for i in range(n_finished)]
    newcomer = store.create_user("new", "n" * 64)
    task = store.create_task(newcomer.id, "fresh", FLAT)
    _feed(store, blobs, task, rng)
    return store, blobs, task, finished


def _first_picks(store, blobs, task) -> tuple[list[str], ControlLoop]:
    decisions: list[dict] = []
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: manual(store)}, on_decision=decisions.append)
    loop.recover()
    loop.step()
    return [d["model"] for d in decisions if d["task_id"] == task.id], loop


def test_a_new_tasks_first_picks_follow_the_other_tasks_best_models():
    store, blobs, task, finished = _store_with_history(6)
    picks, loop = _first_picks(store, blobs, task)
    assert loop.priors.current.source == "store"
    assert loop.priors.current.task_ids == {t.id for t in finished}  # not the new task: it has not finished
    assert picks == list(TOP)  # the prior's ranking, best first
    loop.priors.join(30)
    assert loop.priors.refits == 0  # the first turn finds the fitted tasks idle: nothing new to refit on
    described = loop.progress()["prior"]
    assert described["source"] == "store" and described["tasks"] == 6
    assert set(described["models"]) == set(CLASSIFIERS)

    # The same task on an empty service follows the shipped prior instead.
    empty, empty_blobs = InMemoryStore(), MemoryBlobStore()
    user = empty.create_user("new", "n" * 64)
    alone = empty.create_task(user.id, "fresh", FLAT)
    _feed(empty, empty_blobs, alone, np.random.default_rng(0))
    picks_alone, loop_alone = _first_picks(empty, empty_blobs, alone)
    assert loop_alone.priors.current.source == "shipped"
    assert picks_alone and picks_alone[0] not in TOP


def test_without_the_cross_user_prior_each_task_learns_alone():
    store, blobs, task, _ = _store_with_history(6)
    decisions: list[dict] = []
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: manual(store)}, cross_user_prior=False,
                       on_decision=decisions.append)
    loop.recover()
    loop.step()
    picks = [d["model"] for d in decisions if d["task_id"] == task.id]
    assert len(picks) == len(TOP) and picks != list(TOP)  # the store's ranking is not followed
    assert loop.priors.current.source == "descriptors" and loop.selector.refit_every_doubling
    assert loop.progress()["prior"] == {"source": "descriptors", "tasks": 0, "models": [], "refits": 0}
    tenant = next(n for n, t in loop._tenants.items() if t.task_id == task.id)
    means = {m for m, _ in loop.selector.posterior(tenant).values()}
    assert means == {0.5}  # nothing learnt from the other tasks
    loop.priors.finished([t.id for t in store.list_tasks()])
    assert loop.priors._thread is None  # no refit thread started
    loop.priors.join(30)
    assert loop.priors.refits == 0
    loop.stop()


def test_the_setting_must_be_a_bool_named_in_the_error():
    from ease_jupyter.service import ServiceConfig

    assert ServiceConfig().cross_user_prior is True
    with pytest.raises(ValueError, match=r"^cross_user_prior: found 'no', expected True or False"):
        ServiceConfig(cross_user_prior="no")


@pytest.mark.parametrize("before, after", [(True, False), (False, True)])
def test_a_restart_under_the_other_setting_runs_the_restored_selector_on_its_prior(before, after):
    store, blobs, task, _ = _store_with_history(6)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: manual(store)}, cross_user_prior=before)
    loop.recover()
    loop.step()
    loop.executors[Engine.SKLEARN].finish_all()
    loop.step()
    tenant = next(n for n, t in loop._tenants.items() if t.task_id == task.id)
    n_obs = loop.selector.stats(tenant)["n_obs"]
    assert n_obs >= 2
    loop.stop()  # saves the selector state, fitted on the old setting's prior

    again = ControlLoop(store, blobs, executors={Engine.SKLEARN: manual(store)}, cross_user_prior=after)
    again.recover()
    assert again.selector.stats(tenant)["n_obs"] == n_obs  # restored, not rebuilt: the picks are facts
    assert again.selector.prior is again.priors.current.prior
    assert again.priors.current.source == ("store" if after else "descriptors")
    assert again.selector.refit_every_doubling is (not after)  # her own kernel refitted only without the prior
    assert again.selector.prior.source_ == ("history" if after else "descriptors")
    mean = dict(zip(again.selector.model_names, again.selector.prior.mean_))
    assert (sorted(CLASSIFIERS, key=mean.get, reverse=True)[:2] == list(TOP)) is after
    again.stop()


def test_too_few_finished_tasks_keep_the_shipped_prior():
    store, blobs, task, _ = _store_with_history(4)  # fewer than MIN_TASKS = 5
    picks, loop = _first_picks(store, blobs, task)
    assert loop.priors.current.source == "shipped"
    assert picks[0] not in TOP
    keys, descriptors = catalogue()
    mean, _ = shipped_base(keys, descriptors)
    np.testing.assert_allclose(loop.selector.prior.mean_, mean)


def test_a_task_back_at_work_is_left_out_of_the_prior_before_its_first_pick():
    store, blobs, task, finished = _store_with_history(6)
    _, loop = _first_picks(store, blobs, task)
    refed = finished[0]
    assert refed.id in loop.priors.current.task_ids
    swaps: list[frozenset] = []
    set_prior = loop.selector.set_prior
    loop.selector.set_prior = lambda prior: (swaps.append(loop.priors.current.task_ids), set_prior(prior))[1]
    next_picks = loop.selector.next_picks
    seen_at_pick: list[frozenset] = []
    loop.selector.next_picks = lambda n: (seen_at_pick.append(loop.priors.current.task_ids), next_picks(n))[1]

    _feed(store, blobs, refed, np.random.default_rng(1))  # a new version: the task has work again
    loop.notify(refed.id)
    loop.executors[Engine.SKLEARN].finish_all()
    loop.step()
    assert swaps and refed.id not in swaps[-1]
    assert seen_at_pick and all(refed.id not in ids for ids in seen_at_pick)
    assert loop.selector.prior is loop.priors.current.prior
    # the kernels were kept: the same blocks, one task fewer
    assert loop.priors.current.history.task_ids == tuple(t.id for t in finished[1:])


def test_the_prior_is_refitted_in_the_background_as_tasks_finish():
    store, blobs = InMemoryStore(), MemoryBlobStore()
    rng = np.random.default_rng(0)
    users = [store.create_user(f"u{i}", str(i) * 64) for i in range(3)]
    tasks = [store.create_task(u.id, f"t{i}", FLAT) for i, u in enumerate(users)]
    for task in tasks:
        _feed(store, blobs, task, rng)
    executor = manual(store)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=2)
    loop.priors.min_tasks, loop.priors.refit_every = 2, 2
    loop.recover()
    assert loop.priors.current.source == "shipped"
    fitted_on: list[str] = []
    set_prior = loop.selector.set_prior
    loop.selector.set_prior = lambda prior: (fitted_on.append(threading.current_thread().name), set_prior(prior))[1]

    best = {"knn": 0.96, "random_forest": 0.9}
    for _ in range(30):
        loop.step()
        executor.finish_all(lambda job: best.get(job.model, 0.5))
        if loop.priors.refits:
            break
    deadline = time.monotonic() + 60
    while not loop.priors.refits and time.monotonic() < deadline:
        time.sleep(0.05)
    assert loop.priors.refits >= 1
    loop.step()  # the loop's thread swaps the new prior in
    assert fitted_on and all(name != "easeml-prior-refit" for name in fitted_on)
    current = loop.priors.current
    assert current.source == "store" and loop.selector.prior is current.prior
    assert current.task_ids <= {t.id for t in tasks} and len(current.task_ids) >= 2
    keys = loop.selector.model_names
    mean = dict(zip(keys, current.prior.mean_))
    assert sorted(CLASSIFIERS, key=mean.get, reverse=True)[:2] == ["knn", "random_forest"]  # the store's block
    loop.stop()


def test_history_counts_finished_tasks_and_their_best_results_only():
    store, blobs = InMemoryStore(), MemoryBlobStore()
    rng = np.random.default_rng(0)
    owner = store.create_user("u", "u" * 64)
    keys, _ = catalogue()
    done = _finished_task(store, blobs, owner.id, "done", rng)
    # a second, better job of knn and a failed mlp on the same version
    version = store.latest_dataset_version(done.id)
    specs = arm_specs(done, torch_epochs=None)
    job = store.create_job(done.id, version.id, "knn", specs["knn"].config())
    store.update_job(job.id, JobStatus.RUNNING)
    store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.999))
    running = _finished_task(store, blobs, owner.id, "running", rng)
    store.create_job(running.id, store.latest_dataset_version(running.id).id, "knn", specs["knn"].config())  # queued
    partial = store.create_task(owner.id, "partial", FLAT)
    _feed(store, blobs, partial, rng)
    job = store.create_job(partial.id, store.latest_dataset_version(partial.id).id, "knn", specs["knn"].config())
    store.update_job(job.id, JobStatus.RUNNING)
    store.update_job(job.id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.9))
    refed = _finished_task(store, blobs, owner.id, "refed", rng)
    _feed(store, blobs, refed, rng)  # its latest version has no job yet

    history = read_history(store, keys, torch_epochs=None)
    assert history.task_ids == (done.id,)
    row = dict(zip(keys, history.quality[0]))
    assert row["knn"] == pytest.approx(0.999)  # the best of the version's jobs
    assert all(np.isnan(row[k]) for k in keys if k not in CLASSIFIERS)  # not its arms: missing


def test_models_measured_together_form_independent_blocks():
    keys, descriptors = catalogue()
    k = len(keys)
    rng = np.random.default_rng(0)
    flat = [keys.index(m) for m in CLASSIFIERS]
    images = [keys.index(m) for m in ("lenet", "resnet_small", "vgg_small", "mobilenet_small")]
    q = np.full((12, k), np.nan)
    q[:6, flat] = 0.6 + 0.3 * rng.random((6, len(flat)))
    q[6:, images] = 0.4 + 0.5 * rng.random((6, len(images)))
    blocks = co_measured_blocks(q)
    assert sorted(map(sorted, (b.tolist() for b in blocks))) == sorted([sorted(flat), sorted(images)])
    base_mean, base_cov = shipped_base(keys, descriptors)
    mean, cov, fitted = fit_blocks(q, base_mean, base_cov, min_tasks=5)
    assert len(fitted) == 2
    assert np.all(cov[np.ix_(flat, images)] == 0)  # a kernel learnt on one family says nothing of another
    np.testing.assert_allclose(mean[flat], q[:6, flat].mean(axis=0))
    others = [i for i in range(k) if i not in flat + images]
    np.testing.assert_array_equal(mean[others], base_mean[others])  # not measured: the shipped prior
    assert np.all(np.linalg.eigvalsh(0.5 * (cov + cov.T)) > -1e-10)
    # leaving a row out with the kernels kept gives the block fitted on the rest
    h = History(tuple(range(12)), q)
    mean2, _, fitted2 = fit_blocks(h.without([0]).quality, base_mean, base_cov, min_tasks=5, kernels=fitted)
    assert [b.kernel for b in fitted2] == [b.kernel for b in fitted]
    np.testing.assert_allclose(mean2[flat], q[1:6, flat].mean(axis=0))


def test_the_shipped_prior_records_its_provenance():
    shipped = load_shipped()
    sources = shipped["provenance"]["sources"]
    assert any(s["file"] == "benchmarks/data/sklearn_quality.csv" for s in sources)
    assert all(len(s["sha256"]) == 64 for s in sources) and shipped["provenance"]["fitted_at"]
    keys, _ = catalogue()
    for block in shipped["blocks"]:
        assert set(block["models"]) <= set(keys)
        cov = np.asarray(block["cov"])
        assert cov.shape == (len(block["models"]),) * 2 and np.all(np.linalg.eigvalsh(cov) > 0)


def test_a_restored_selector_runs_on_the_prior_fitted_at_start():
    store, blobs, task, _ = _store_with_history(6)
    _, loop = _first_picks(store, blobs, task)
    loop.executors[Engine.SKLEARN].finish_all()
    loop.step()
    tenant = next(n for n, t in loop._tenants.items() if t.task_id == task.id)
    n_obs = loop.selector.stats(tenant)["n_obs"]
    assert n_obs >= 2
    loop.stop()  # saves the selector state

    again = ControlLoop(store, blobs, executors={Engine.SKLEARN: manual(store)})
    again.recover()
    assert again.selector.stats(tenant)["n_obs"] == n_obs  # restored, not rebuilt
    assert again.selector.prior is again.priors.current.prior and again.priors.current.source == "store"
    np.testing.assert_allclose(again.selector.posterior(tenant)[TOP[0]][0], loop.selector.posterior(tenant)[TOP[0]][0])
