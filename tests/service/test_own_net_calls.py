"""A user's own trained torch net, called after training (``infer``,
suspicion, ``export``; ``service/own_model_calls.py``): her factory, its
checkpoint and ``forward`` run in a child process killed at her model's time
limit, failing only her request with her traceback, and never holding the
torch worker that serves other users' nets."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch
from torch import nn


from .conftest import serving, writable_notes
from .test_own_model_calls import (
    CALL_WAIT,
    _serve_only,
    a_hang_at_infer_ends_at_her_limit_and_frees_the_worker,
    a_raise_or_a_wrong_shape_at_infer_fails_with_her_error,
    her_model_behaves_after_each_test,  # noqa: F401  (a fixture: used by name)
    suspicion_and_export_of_a_hang_end_at_the_services_wait,
)

LIMIT = 60.0  # her model's limit: her training job (child starts and imports torch, profiling runs, 1 epoch on iris) fits in it on a loaded machine (15, 20 and 30 s did not, once each); the service's wait (CALL_WAIT) ends a hang sooner
HIS_LIMIT = 4 * LIMIT  # his request queues behind her hanging one, and his deadline counts that wait
NET_CALL_WAIT = 2 * CALL_WAIT  # a call after a kill starts a new child, which imports torch before her code runs: 7.5 s was not enough once on a loaded 2-core machine


class SwitchNet(nn.Module):
    """A linear layer; ``mode_file`` says how its ``forward`` misbehaves on
    real rows (not on a batch of zeros, which training's first call in the
    child passes): ``hang``, ``raise`` or ``shape`` (answers twice the output
    columns); ``hang_always`` hangs on zeros too (export traces on zeros)."""

    def __init__(self, n_in: int, n_out: int, mode_file: str):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        self.mode_file = mode_file

    def forward(self, x):
        with open(self.mode_file) as f:
            mode = f.read().strip()
        real = bool(x.abs().sum() > 0)
        if mode == "hang_always" or (mode == "hang" and real):
            with open(self.mode_file + ".pids", "a") as out:
                out.write(f"{os.getpid()}\n")
            time.sleep(60)
        if mode == "raise" and real:
            raise ValueError("my forward broke on purpose")
        out = self.linear(x.flatten(1))  # not len(x): a trace would fix the batch size (export refuses it)
        return torch.cat([out, out], dim=1) if mode == "shape" and real else out


class SwitchFactory:
    """Her factory: an instance of a class of this module, so the client sends it by value (a
    child then loads it without importing the tests)."""

    def __init__(self, mode_file: str):
        self.mode_file = mode_file

    def __call__(self, input_shape, output_shape):
        return SwitchNet(int(np.prod(input_shape)), int(output_shape[0]), self.mode_file)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, iris):
    """Ada's task served by her ``SwitchNet`` (``LIMIT``), Bob's by his own
    net, which behaves (a flat task has no zoo nets); trained once for the module's tests, each of which leaves her net
    behaving again."""
    X, y = iris
    tmp_path = tmp_path_factory.mktemp("own_net_calls")
    with writable_notes(tmp_path) as notes, serving(tmp_path / "svc", "ada", "bob", torch=True, torch_epochs=1,
                                                    workers=1, allow_user_models=True) as running:
        mode_file = notes / "mode"  # her net reads it and notes its pids beside it
        mode_file.write_text("")
        ada = running.client("ada").task("iris", input=[4], output=[3])
        bob = running.client("bob").task("flowers", input=[4], output=[3])
        ada.add_model(SwitchFactory(str(mode_file)), grid={"lr": [0.1]}, name="mine",
                      limit=LIMIT)
        (notes / "his_mode").write_text("")  # his net always behaves
        bob.add_model(SwitchFactory(str(notes / "his_mode")), grid={"lr": [0.1]}, name="his", limit=HIS_LIMIT)
        ada.feed(X, y)
        bob.feed(X, y)
        assert ada.wait(timeout=300) and bob.wait(timeout=300)
        jobs = {j["model"]: j for j in ada.jobs()}
        assert jobs["mine"]["status"] == "succeeded", jobs["mine"]["error"]
        his = {j["model"]: j for j in bob.jobs()}["his"]
        assert his["status"] == "succeeded", his["error"]
        _serve_only(running, "ada", "iris", "mine")
        _serve_only(running, "bob", "flowers", "his")
        yield running, ada, bob, mode_file
        mode_file.write_text("")


def test_a_forward_that_hangs_at_infer_is_killed_at_her_limit_and_frees_the_torch_worker(trained, iris):
    # the estimator's test waits out her LIMIT itself; here the service's wait bounds her request
    a_hang_at_infer_ends_at_her_limit_and_frees_the_worker(trained, iris[0], "mine.forward", LIMIT, NET_CALL_WAIT)


def test_a_forward_that_raises_or_answers_the_wrong_shape_fails_with_her_error(trained, iris):
    a_raise_or_a_wrong_shape_at_infer_fails_with_her_error(
        trained, iris[0], "forward", "shape (4, 6)", lambda expected: expected.startswith("(4, 3)"))


def test_suspicion_and_export_of_a_hanging_net_end_at_the_services_wait(trained, tmp_path, iris):
    # "hang_always": tracing for export runs her forward, which hangs too
    suspicion_and_export_of_a_hang_end_at_the_services_wait(
        trained, tmp_path, LIMIT, ("mine.forward",), "hang_always", "mine.pt", wait=NET_CALL_WAIT,
        format="torchscript")
    ada = trained[1]
    X = iris[0][:7]  # not the traced batch's size: the batch dimension is free
    traced = torch.jit.load(str(tmp_path / "mine.pt"))
    with torch.no_grad():
        assert traced(torch.as_tensor(X)).argmax(dim=1).tolist() == list(ada.infer(X))


def test_every_reply_from_her_net_is_data(trained, iris, monkeypatch):
    from ease_jupyter.service import own_model_calls
    from ease_jupyter.service.export import torch_example
    from ease_jupyter.datasets import program_of

    running, ada, _, _ = trained
    X, _ = iris
    store = running.service.store
    task = store.task_by_name(store.user_by_name("ada").id, "iris")
    job = next(j for j in store.list_jobs(task.id) if j.model == "mine")
    kinds = []
    real = own_model_calls.run_user_code

    def recorded(*args, returns="object", **kwargs):
        kinds.append(returns)
        return real(*args, returns=returns, **kwargs)

    monkeypatch.setattr(own_model_calls, "run_user_code", recorded)
    logits = own_model_calls.own_net_outputs(store, running.service.blobs, task, job, X[:4])
    assert logits.shape == (4, 3) and list(logits.argmax(axis=1)) == list(ada.infer(X[:4]))
    artifact = own_model_calls.own_net_artifact_of(store, running.service.blobs, task.id, job.id, "torchscript",
                                                   torch_example(program_of(task)))
    assert artifact.format == "torchscript" and artifact.data and artifact.inputs
    assert kinds and set(kinds) == {"array"}, kinds
