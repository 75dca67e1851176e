"""A user's own models (``service/user_models.py``): arms of her task beside
the zoo's, trained on the same executors, failing only their own jobs, taken
only from users allowed to, and refused with a named field on bad input."""

from __future__ import annotations

import os
import pickle
import time

import numpy as np
import psutil
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from ease_jupyter.client import AuthError
from ease_jupyter.errors import AlreadyExistsError, DataError
from ease_jupyter.selection.gp import ModelPrior
from ease_jupyter.selection.selector import Selector
from ease_jupyter.service import user_models
from ease_jupyter.service.gc import references
from ease_jupyter.service.models import UNUSABLE_TAG
from ease_jupyter.store import JobStatus

from .conftest import serving, start


def _my_net(input_shape, output_shape, hidden=8):
    from torch import nn

    return nn.Sequential(nn.Linear(input_shape[0], hidden), nn.ReLU(), nn.Linear(hidden, output_shape[0]))


def _wrong_shape(input_shape, output_shape):
    from torch import nn

    return nn.Linear(input_shape[0], output_shape[0] + 2)


def _hangs(input_shape, output_shape):
    from torch import nn

    class Hangs(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(input_shape[0], output_shape[0])

        def forward(self, x):
            time.sleep(60)
            return self.linear(x)

    return Hangs()


class SleepsInFit(LogisticRegression):
    """Writes the pid of the process its fit runs in, then never returns."""

    def __init__(self, pid_file="", C=1.0):
        super().__init__(C=C)
        self.pid_file = pid_file

    def fit(self, X, y):  # noqa: ARG002
        with open(self.pid_file, "a") as out:
            out.write(f"{os.getpid()}\n")
        while True:
            time.sleep(1)


class Recorded(LogisticRegression):
    """Notes the process (and its parent) of every call of hers into ``pid_file``; its
    ``fit`` returns None, as a hand-written one may."""

    def __init__(self, pid_file="", C=1.0, max_iter=200):
        super().__init__(C=C, max_iter=max_iter)
        self.pid_file = pid_file

    def _note(self, what):
        if self.pid_file:
            with open(self.pid_file, "a") as out:
                out.write(f"{what} {os.getpid()} {os.getppid()}\n")

    def get_params(self, deep=True):
        self._note("get_params")
        return super().get_params(deep=deep)

    def set_params(self, **params):
        self._note("set_params")
        return super().set_params(**params)

    def fit(self, X, y):
        self._note("fit")
        super().fit(X, y)  # and no `return self`


class Raises(LogisticRegression):
    def fit(self, X, y):  # noqa: ARG002
        raise ValueError("my fit broke on purpose")


def _jobs(task) -> dict[str, dict]:
    return {j["model"]: j for j in task.jobs()}


def _stored_models(running, task_name: str, owner: str) -> dict[str, str]:
    store = running.service.store
    task = store.task_by_name(store.user_by_name(owner).id, task_name)
    return {k: v for k, v in store.tags("task", task.id).items() if k.startswith(user_models.TAG_PREFIX)}


@pytest.fixture
def allowed(tmp_path):
    with serving(tmp_path, "ada", "bob", admins=("admin",), torch=True, torch_epochs=1,
                 allow_user_models=True) as running:
        yield running


def test_a_pipeline_with_a_grid_becomes_an_arm_and_trains_beside_the_zoo(allowed, iris):
    X, y = iris
    task = allowed.client("ada").task("iris", input=[4], output=[3])
    task.feed(X, y)
    assert task.wait(timeout=240)
    zoo_jobs = len(task.jobs())
    # Added once the task's tenant exists: it joins that tenant as a new arm.
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=200))
    record = task.add_model(pipe, grid={"logisticregression__C": [0.01, 10.0]}, name="mypipe")
    assert record["kind"] == "estimator" and record["described"] == "sklearn.pipeline.Pipeline"
    assert task.models()[0]["name"] == "mypipe"
    assert task.wait(timeout=240)
    job = _jobs(task)["mypipe"]
    assert len(task.jobs()) == zoo_jobs + 1
    assert job["status"] == "succeeded" and job["config"]["grid"] == {"logisticregression__C": [0.01, 10.0]}
    history = {h["model"]: h for h in task.history()}
    (metrics,) = history["mypipe"]["metrics"]  # a grid job's metrics are one row, epoch 0
    assert {"val_score[logisticregression__C=0.01]", "val_score[logisticregression__C=10]"} <= set(metrics)
    # The artifact is the fitted estimator itself, as given: no wrapper of ours.
    store, blobs = allowed.service.store, allowed.service.blobs
    stored = store.get_job(job["id"])
    fitted = pickle.loads(blobs.get_bytes(stored.artifact_blob))
    assert type(fitted) is Pipeline and hasattr(fitted[-1], "coef_")
    assert fitted.named_steps["logisticregression"].C in (0.01, 10.0)
    assert job["accuracy"] == pytest.approx(metrics["val_score"])
    # Its code blob is kept by the blob GC's mark.
    assert record["code"] in references(store)


def test_a_torch_factory_trains_its_grid_as_one_mop_workload(allowed, iris):
    X, y = iris
    task = allowed.client("ada").task("iris", input=[4], output=[3])
    task.add_model(_my_net, grid={"hidden": [4, 16], "lr": [0.1]}, name="my_net")
    task.feed(X, y)
    assert task.wait(timeout=240)
    job = _jobs(task)["my_net"]
    assert job["status"] == "succeeded", job.get("error")
    names = {m.name for m in allowed.service.store.list_metrics(job["id"])}
    assert {"val_accuracy[hidden=4,lr=0.1]", "val_accuracy[hidden=16,lr=0.1]"} <= names
    store, blobs = allowed.service.store, allowed.service.blobs
    stored = store.get_job(job["id"])
    module = user_models.torch_module(store, blobs, store.get_task(stored.task_id), stored)
    import torch

    assert type(module) is torch.nn.Sequential  # the user's own module, with the winning config's shape
    best = json_tag(store, stored.id)
    assert module[0].out_features == best["params"]["hidden"]
    with torch.no_grad():
        assert module(torch.as_tensor(X[:5])).shape == (5, 3)


def json_tag(store, job_id):
    import json

    from ease_jupyter.service.models import BEST_TRIAL_TAG

    return json.loads(store.tags("job", job_id)[BEST_TRIAL_TAG])


def test_models_that_raise_hang_or_give_wrong_shapes_fail_only_their_own_jobs(notes, allowed, iris):
    X, y = iris
    pid_file = notes / "sleeps.pids"
    ada = allowed.client("ada").task("iris", input=[4], output=[3])
    bob = allowed.client("bob").task("flowers", input=[4], output=[3])
    ada.add_model(Raises(), name="raises")
    ada.add_model(_wrong_shape, name="wrong_shape", grid={"lr": [0.1]})
    ada.add_model(_hangs, name="hangs", grid={"lr": [0.1]}, limit=8)
    ada.add_model(SleepsInFit(str(pid_file)), name="sleeps", limit=8)
    ada.feed(X, y)
    bob.feed(X, y)
    started = time.monotonic()
    assert ada.wait(timeout=240) and bob.wait(timeout=240)
    assert time.monotonic() - started < 120  # the hanging model held nothing for its 60 s
    jobs = _jobs(ada)
    raised, wrong, hung, sleeps = jobs["raises"], jobs["wrong_shape"], jobs["hangs"], jobs["sleeps"]
    assert raised["status"] == wrong["status"] == hung["status"] == sleeps["status"] == "failed"
    # Each error is the model's own: her traceback, the shape found, the limit.
    assert "Traceback" in raised["error"] and "my fit broke on purpose" in raised["error"]
    assert "in fit" in raised["error"]
    assert "wrong_shape.forward" in wrong["error"] and "(32, 5)" in wrong["error"]
    assert "UserModelTimeout" in hung["error"] and "hangs.forward" in hung["error"]
    assert "UserModelTimeout" in sleeps["error"] and "sleeps.fit" in sleeps["error"]
    # The hung fit ran in a process of its own, which is gone: nothing of it runs on.
    pids = [int(p) for p in pid_file.read_text().split()]
    assert pids and os.getpid() not in pids and all(not psutil.pid_exists(p) for p in pids)
    # Every zoo model of both users trained.
    zoo = [j for name, j in jobs.items() if name not in ("raises", "wrong_shape", "hangs", "sleeps")]
    assert zoo and all(j["status"] == "succeeded" for j in zoo)
    assert all(j["status"] == "succeeded" for j in bob.jobs())
    assert {h["model"]: h for h in ada.history()}["raises"]["error"] == raised["error"]
    assert allowed.service.loop.error is None  # the control loop never failed a turn


def test_user_models_need_the_setting_and_an_admin_can_grant_it(tmp_path, iris):
    running = start(tmp_path, torch=False)  # `easeml serve`'s default: no user models
    try:
        running.user("admin", admin=True)
        running.user("ada")
        task = running.client("ada").task("iris", input=[4], output=[3])
        with pytest.raises(AuthError, match="allow-user-models") as refused:
            task.add_model(LogisticRegression(), name="mine")
        assert "easeml users allow-models ada" in str(refused.value)
        assert _stored_models(running, "iris", "ada") == {}
        # Only an admin may change it.
        denied = running.call("PUT", "/users/ada", "ada", body={"allow_user_models": True})
        assert denied.status == 403
        bad = running.call("PUT", "/users/ada", "admin", body={"allow_user_models": "yes"})
        assert bad.status == 400 and bad.body["error"]["field"] == "allow_user_models"
        assert running.client("admin").allow_user_models("ada") == {"name": "ada", "allow_user_models": True}
        assert task.add_model(LogisticRegression(), name="mine")["name"] == "mine"
        assert list(_stored_models(running, "iris", "ada")) == [user_models.TAG_PREFIX + "mine"]
        running.client("admin").allow_user_models("ada", False)
        with pytest.raises(AuthError, match="turned it off"):
            task.add_model(LogisticRegression(), name="other")
    finally:
        running.thread.stop()


def test_the_cli_setting_is_the_one_the_service_reads(tmp_path):
    from click.testing import CliRunner

    from ease_jupyter.cli import main
    from ease_jupyter.service.auth import create_user
    from ease_jupyter.store import open_store

    store, _ = open_store(None, tmp_path)
    user, _ = create_user(store, "ada")
    store.close()
    result = CliRunner().invoke(main, ["users", "allow-models", "ada", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    store, _ = open_store(None, tmp_path)
    try:
        assert user_models.user_setting(store, user) is True
        user_models.check_allowed(store, user, default=False)  # no 403 now
    finally:
        store.close()
    result = CliRunner().invoke(main, ["users", "allow-models", "nobody", "--data-dir", str(tmp_path)])
    assert result.exit_code != 0 and "nobody" in result.output


class _NotAModel:
    pass


@pytest.mark.parametrize("model, grid, name, field", [
    (LogisticRegression(), [("C", [1])], "a", "grid"),
    (LogisticRegression(), {"C": 1.0}, "a", "grid['C']"),
    (LogisticRegression(), {"C": []}, "a", "grid['C']"),
    (LogisticRegression(), {"C": [LogisticRegression()]}, "a", "grid['C']"),
    (_my_net, {"lr": [-0.1]}, "a", "grid['lr']"),
    (_NotAModel(), None, "a", "model"),
    (42, None, "a", "model"),
    (LogisticRegression(), None, "my model", "name"),
])
def test_bad_input_is_refused_on_the_client_naming_the_field(allowed, model, grid, name, field):
    task = allowed.client("ada").task("iris", input=[4], output=[3])
    with pytest.raises(DataError) as error:
        task.add_model(model, grid=grid, name=name)
    assert error.value.field == field
    assert _stored_models(allowed, "iris", "ada") == {}


def test_a_torch_module_instance_is_not_a_factory(allowed):
    task = allowed.client("ada").task("iris", input=[4], output=[3])
    with pytest.raises(DataError) as error:
        task.add_model(_my_net((4,), (3,)))
    assert error.value.field == "model" and "factory" in error.value.expected


@pytest.mark.parametrize("body, field", [
    ({"name": "logreg", "kind": "estimator", "code": "AAAA"}, "name"),  # a zoo model's name
    ({"name": "a b", "kind": "estimator", "code": "AAAA"}, "name"),
    ({"name": "m", "kind": "script", "code": "AAAA"}, "kind"),
    ({"name": "m", "kind": "estimator", "code": "AAAA", "grid": {"C": 3}}, "grid['C']"),
    ({"name": "m", "kind": "estimator", "code": "AAAA", "grid": ["C"]}, "grid"),
    ({"name": "m", "kind": "estimator", "code": "not base64!"}, "code"),
    ({"name": "m", "kind": "estimator"}, "code"),
    ({"name": "m", "kind": "estimator", "code": "AAAA", "limit": -1}, "limit"),
    ({"name": "m", "kind": "estimator", "code": "AAAA", "limit": 10**6}, "limit"),  # over the service's
])
def test_bad_requests_are_refused_by_the_service_naming_the_field(allowed, body, field):
    allowed.client("ada").task("iris", input=[4], output=[3])
    blobs = allowed.service.blobs
    before = sum(1 for _ in blobs.iter_blobs())
    reply = allowed.call("POST", "/tasks/iris/models", "ada", body=body)
    assert reply.status == 400 and reply.body["error"]["field"] == field
    assert _stored_models(allowed, "iris", "ada") == {}
    assert sum(1 for _ in blobs.iter_blobs()) == before


def test_a_name_is_taken_once_per_task(allowed):
    task = allowed.client("ada").task("iris", input=[4], output=[3])
    task.add_model(LogisticRegression(), name="mine")
    with pytest.raises(AlreadyExistsError, match="another name"):
        task.add_model(LogisticRegression(C=3.0), name="mine")
    assert len(_stored_models(allowed, "iris", "ada")) == 1


def test_the_selector_takes_own_arms_for_new_and_registered_users():
    prior = ModelPrior(random_state=0).fit(descriptors=np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]))
    sel = Selector(["a", "b", "c"], prior=prior, arms="untried", random_state=0)
    sel.add_user("ada", models=["a", "b"], costs={"a": 1.0, "b": 2.0, "mine": 3.0}, own=["mine"])
    sel.add_user("bob")
    sel.observe("bob", "a", 0.9)
    sel.add_models("bob", ["bobs"], {"bobs": 5.0})  # while bob's tenant exists
    assert set(sel.posterior("ada")) == {"a", "b", "mine"} and set(sel.posterior("bob")) == {"a", "b", "c", "bobs"}
    with pytest.raises(ValueError, match="own"):
        sel.add_models("bob", ["a"])  # a catalogue name is no own model
    # bob's observation was replayed on his grown GP: it says how hard his task is, which his own arm
    # shares (the kernel's constant part), but nothing of that model itself: it stays the least certain.
    post = sel.posterior("bob")
    assert prior.mean_.mean() < post["bobs"][0] < 0.9 and post["bobs"][1] > max(post[k][1] for k in "abc")
    picked = set()
    for pick in sel.next_picks(10):
        picked.add((pick.user, pick.model))
        sel.observe(pick.user, pick.model, 0.5)
    assert ("ada", "mine") in picked and ("bob", "bobs") in picked
    restored = Selector.from_dict(sel.to_dict())
    assert restored.posterior("bob") == pytest.approx(sel.posterior("bob"))
    restored.set_prior(prior)  # a prior refit keeps every user's own arms
    assert set(restored.posterior("ada")) == {"a", "b", "mine"}


def test_the_magic_adds_a_notebook_variable_with_its_grid(allowed):
    from types import SimpleNamespace

    from ease_jupyter.magics.commands import ROUTER, Session

    session = Session()
    session.client = allowed.client("ada")
    session.client.task("iris", input=[4], output=[3])
    user_ns = {"est": LogisticRegression(), "grid": {"C": [0.5, 2.0]}}
    args = SimpleNamespace(command="model", name="iris", values=["est"], grid="grid", model_name="mine")
    result = ROUTER["model"](session, args, user_ns)
    assert result.data["name"] == "mine" and result.data["grid"] == {"C": [0.5, 2.0]}
    args = SimpleNamespace(command="model", name="iris", values=["est"], grid='{"C": 3}', model_name="other")
    with pytest.raises(DataError) as error:
        ROUTER["model"](session, args, user_ns)
    assert error.value.field == "grid['C']"
    assert list(_stored_models(allowed, "iris", "ada")) == [user_models.TAG_PREFIX + "mine"]


def test_a_quoted_json_grid_reads_as_typed_in_a_cell():
    """IPython's argument split keeps the quotes of ``--grid '{"C": [1]}'``."""
    from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

    from ease_jupyter.magics.model_args import grid_of

    @magic_arguments()
    @argument("--grid")
    def line(_: str) -> None: ...

    typed = parse_argstring(line, """--grid '{"max_depth": [3, null]}'""").grid
    assert grid_of(typed, {}) == {"max_depth": [3, None]}
    assert grid_of('{"C": [1]}', {}) == {"C": [1]}


def test_an_own_estimator_on_a_table_task_gets_its_grid_behind_the_preprocessing(allowed):
    """On a table task the pipeline's "model" step is hers: her grid's
    options reach it, and her model infers class names like the zoo's."""
    import pandas as pd
    from sklearn.tree import DecisionTreeClassifier

    rng = np.random.default_rng(0)
    n = 120
    size = rng.normal(size=n)
    frame = pd.DataFrame({"size": np.where(rng.random(n) < 0.1, np.nan, size),
                          "colour": rng.choice(["red", "blue", None], size=n),
                          "kind": np.where(size > 0, "big", "small")})
    task = allowed.client("ada").task("shapes", like=frame, target="kind")
    task.add_model(DecisionTreeClassifier(random_state=0), grid={"max_depth": [1, 3]}, name="tree")
    task.feed(frame)
    assert task.wait(timeout=240)
    store, blobs = allowed.service.store, allowed.service.blobs
    job = _jobs(task)["tree"]
    assert job["status"] == "succeeded", job["error"]
    fitted = pickle.loads(blobs.get_bytes(store.get_job(job["id"]).artifact_blob))
    assert fitted.named_steps["model"].max_depth in (1, 3)
    assert set(task.infer(frame.drop(columns="kind"))) <= {"big", "small"}


class RecordsWhereItLoads(LogisticRegression):
    """Writes the pid of each process that unpickles it into ``pid_file``."""

    def __init__(self, pid_file="", C=1.0, max_iter=200):
        super().__init__(C=C, max_iter=max_iter)
        self.pid_file = pid_file

    def __setstate__(self, state):
        super().__setstate__(state)
        if state.get("pid_file"):
            with open(state["pid_file"], "a") as out:
                out.write(f"{os.getpid()}\n")


def test_her_estimator_trains_without_any_of_her_code_loading_in_a_worker_or_the_service(tmp_path, notes, iris):
    """The worker holds her estimator as bytes (``Sealed``): loading it, and
    the fitted copies her child sends back, happen in her children only, so
    her classes' code (a ``__setstate__``, a crafted reply) never runs with
    the worker's rights."""
    from ease_jupyter.service.testing import worker_processes

    X, y = iris
    running = start(tmp_path / "svc", executor="process", torch=False, workers=1, allow_user_models=True)
    try:
        running.user("ada")
        task = running.client("ada").task("iris", input=[4], output=[3])
        pid_file = notes / "pids"
        task.add_model(RecordsWhereItLoads(str(pid_file)), grid={"C": [0.1, 10.0]}, name="mine")
        workers = set(worker_processes(os.getpid()))
        task.feed(X, y)
        assert task.wait(timeout=240)
        assert _jobs(task)["mine"]["status"] == "succeeded", _jobs(task)["mine"]["error"]
        loaded_in = {int(p) for p in pid_file.read_text().split()}
        assert workers and loaded_in and not loaded_in & (workers | {os.getpid()})
    finally:
        running.thread.stop()


def test_workers_forked_from_an_older_fork_server_take_the_services_settings_for_her_code(tmp_path, iris,
                                                                                            monkeypatch):
    """Workers come from multiprocessing's fork server, whose environment is
    the one it started with: a scratch folder opened to her code (or a data
    directory protected) after it started still reaches her children."""
    from ease_jupyter.user_confine import WRITABLE_ENV

    X, y = iris
    monkeypatch.delenv(WRITABLE_ENV, raising=False)
    start(tmp_path / "first", executor="process", torch=False, workers=1).thread.stop()  # the server runs on
    notes = tmp_path / "notes"
    notes.mkdir()
    monkeypatch.setenv(WRITABLE_ENV, str(notes))
    running = start(tmp_path / "svc", executor="process", torch=False, workers=1, allow_user_models=True)
    try:
        running.user("ada")
        task = running.client("ada").task("iris", input=[4], output=[3])
        task.add_model(RecordsWhereItLoads(str(notes / "pids")), name="mine")
        task.feed(X, y)
        assert task.wait(timeout=240)
        assert _jobs(task)["mine"]["status"] == "succeeded", _jobs(task)["mine"]["error"]
        assert (notes / "pids").read_text().split()  # written by her children, in the folder opened since
    finally:
        running.thread.stop()


def test_her_model_predicts_where_the_jobs_run_not_in_the_service_process(tmp_path, notes, iris):
    X, y = iris
    running = start(tmp_path / "svc", executor="process", torch=False, workers=1, allow_user_models=True)
    try:
        running.user("ada")
        task = running.client("ada").task("iris", input=[4], output=[3])
        pid_file = notes / "pids"
        task.add_model(RecordsWhereItLoads(str(pid_file)), name="mine")
        task.feed(X, y)
        assert task.wait(timeout=240)
        store, service = running.service.store, running.service
        stored_task = store.task_by_name(store.user_by_name("ada").id, "iris")
        (job,) = [j for j in store.list_jobs(stored_task.id) if j.model == "mine"]
        for other in store.list_jobs(stored_task.id):  # only her model serves from here on
            if other.model != "mine":
                store.set_tag("job", other.id, UNUSABLE_TAG, "the test serves her model alone")
        pid_file.write_text("")
        predicted = task.infer(X[:20])  # each route that runs a model: infer, suspicion, export
        task.suspicion(k=1)
        card = task.export(tmp_path / "mine.joblib")  # a class of hers (by value) travels inside the file
        assert "cloudpickle" in card["outputs"][0]["loads_with"]
        loaded_in = {int(p) for p in pid_file.read_text().split()}
        assert loaded_in and os.getpid() not in loaded_in  # unpickled in a worker process only
        assert set(np.asarray(predicted).tolist()) <= {0, 1, 2} and len(predicted) == 20
        # infer sends a user's model to that call, and the zoo's to none
        calls = []

        def spy(task_, job_, X_):
            calls.append(job_.model)
            return np.zeros(len(X_), dtype=np.int64)

        from ease_jupyter.service import models

        models.predict(store, service.blobs, stored_task, job, X[:5], own_predictions=spy)
        zoo = next(j for j in store.list_jobs(stored_task.id) if j.model != "mine" and j.artifact_blob)
        models.predict(store, service.blobs, stored_task, zoo, X[:5], own_predictions=spy)
        assert calls == ["mine"]
    finally:
        running.thread.stop()


def test_in_hub_mode_the_admin_setting_reaches_the_hub_user_not_a_local_namesake():
    from types import SimpleNamespace

    from ease_jupyter.store import open_store

    store, blobs = open_store("memory://")
    try:
        admin = store.create_user("root", "a" * 64, is_admin=True)
        local = store.create_user("ada", "b" * 64)
        hub = store.create_user("ada", None, origin="hub")
        service = SimpleNamespace(store=store, blobs=blobs, config=SimpleNamespace(jupyterhub=True))
        assert user_models.api_set_user(service, admin, "ada", {"allow_user_models": True})["allow_user_models"]
        assert user_models.user_setting(store, hub) is True and user_models.user_setting(store, local) is None
        with pytest.raises(PermissionError, match="allow-models ada --hub"):
            user_models.api_set_user(service, admin, "ada", {"allow_user_models": False})
            user_models.check_allowed(store, hub, default=False)
    finally:
        store.close()


def test_deleting_a_task_deletes_her_models_code(allowed, iris, monkeypatch):
    from ease_jupyter.service import gc

    monkeypatch.setattr(gc, "DELETE_GRACE_SECONDS", 0.0)  # the test's blobs are seconds old
    task = allowed.client("ada").task("gone", input=[4], output=[3])
    record = task.add_model(LogisticRegression(max_iter=50), name="mine")
    blobs = allowed.service.blobs
    assert blobs.exists(record["code"])
    task.delete()
    assert not blobs.exists(record["code"])


def test_her_calls_run_in_child_processes_that_end_with_their_jobs(notes, allowed, iris):
    X, y = iris
    pid_file = notes / "calls"
    task = allowed.client("ada").task("iris", input=[4], output=[3])
    task.add_model(Recorded(str(pid_file)), grid={"C": [0.1, 10.0]}, name="no_return")
    task.add_model(Recorded(str(pid_file)), name="as_given")
    in_the_client = len(pid_file.read_text().splitlines())  # the client's own calls, pickling them
    task.feed(X, y)
    assert task.wait(timeout=240)
    jobs = _jobs(task)
    for name in ("no_return", "as_given"):  # a fit that returns None still gives a fitted model
        assert jobs[name]["status"] == "succeeded", jobs[name].get("error")
    store, blobs = allowed.service.store, allowed.service.blobs
    fitted = pickle.loads(blobs.get_bytes(store.get_job(jobs["no_return"]["id"]).artifact_blob))
    assert type(fitted).__name__ == "Recorded" and hasattr(fitted, "coef_") and fitted.C in (0.1, 10.0)
    calls = [line.split() for line in pid_file.read_text().splitlines()[in_the_client:]]
    assert {c[0] for c in calls} >= {"fit", "set_params", "get_params"}
    children, workers = {int(c[1]) for c in calls}, {int(c[2]) for c in calls}
    # clone, set_params and fit ran in children of the job's worker, never in the worker itself
    assert not children & workers and os.getpid() not in children
    deadline = time.monotonic() + 10  # each child is closed and reaped as its job ends
    while not all(not psutil.pid_exists(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(not psutil.pid_exists(p) for p in children), [p for p in children if psutil.pid_exists(p)]
