"""A torch export is checked before it ships (``export._check_export``):
traced on the task's own rows, then run on batches of other sizes against
the eager net. A net that reads the batch size as a Python int (``len(x)``)
or branches on its input's values would give a file that answers another
batch wrongly; such a file is refused with a ``DataError`` on ``format``
naming what differed and what to do. The card says what is done to inputs
before the model sees them (image files, the range trained on).

Her nets are trained here, behind the control loop, on cancelled tasks (as
in ``test_export.py``), and exported through ``task.export``: her net is
built, traced and checked in her child, as the service does."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from ease_jupyter.errors import DataError
from ease_jupyter.service import export

from .conftest import serving
from .test_export import _behind_the_loop

ROWS = 50  # a batch that is neither the traced one nor the checked ones


class LenFlat(nn.Module):
    """Flattens with ``x.reshape(len(x), -1)``: a trace bakes the batch size in."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)

    def forward(self, x):
        return self.linear(x.reshape(len(x), -1))


class Rescales(nn.Module):
    """Scales raw 0-255 pixels itself: a branch on the input's values, which
    a trace on zeros would record the other way."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)

    def forward(self, x):
        if x.max() > 1.5:
            x = x / 255
        return self.linear(x.flatten(1))


def lenflat(input_shape, output_shape):
    return LenFlat(int(np.prod(input_shape)), int(output_shape[0]))


def rescales(input_shape, output_shape):
    return Rescales(int(np.prod(input_shape)), int(output_shape[0]))


def flat(input_shape, output_shape):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), int(output_shape[0])))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Three image tasks of alice's ([8, 8, 1] digits), each served by one
    net of hers trained one epoch: ``lenflat`` and ``flat`` on pixels in
    [0, 1], ``rescales`` on raw 0-255 pixels."""
    from sklearn.datasets import load_digits

    from ease_jupyter.execution.engine import LocalEngine
    from ease_jupyter.service.candidates import arm_specs
    from ease_jupyter.service.mop import run_torch_job

    digits = load_digits()
    X = (digits.images[:150, :, :, None] / 16.0).astype("float32")
    y = digits.target[:150].astype("int64")
    with serving(tmp_path_factory.mktemp("svc"), "alice", torch_epochs=1, allow_user_models=True) as running:
        client = running.client("alice")
        store, blobs = running.service.store, running.service.blobs
        tasks = {}
        for name, factory, rows in (("lenflat", lenflat, X), ("flat", flat, X), ("rescales", rescales, X * 255)):
            task, stored = _behind_the_loop(running, client, name, rows, y, input=[8, 8, 1], output=[10])
            task.add_model(factory, grid={"lr": [0.1]}, name=name)
            spec = arm_specs(stored, torch_epochs=1, store=store)[name]
            job = store.create_job(stored.id, store.latest_dataset_version(stored.id).id, spec.model, spec.config())
            engine = LocalEngine(1)
            try:
                assert run_torch_job(store, blobs, engine, job.id, partitions=1).status.value == "succeeded"
            finally:
                engine.close()
            tasks[name] = (task, rows)
        yield tasks


def _onnx_outputs(path, X):
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: X})[0]


def test_a_net_that_bakes_in_the_batch_size_is_refused_in_both_formats(trained, tmp_path):
    task, _ = trained["lenflat"]
    for fmt, name in (("torchscript", "m.pt"), ("onnx", "m.onnx")):
        with pytest.raises(DataError) as error:
            task.export(tmp_path / name, format=fmt)
        assert error.value.field == "format"
        assert f"'{fmt}'" in error.value.found and "batch size is fixed" in error.value.found
        assert "x.flatten(1)" in error.value.expected and "state_dict" in error.value.expected
        assert not (tmp_path / name).exists()
    # the trace's warning says why, in the error
    with pytest.raises(DataError, match="TracerWarning: Using len"):
        task.export(tmp_path / "m.pt", format="torchscript")
    task.export(tmp_path / "m.pth", format="state_dict")  # the weights still go


def test_exports_answer_any_batch_as_infer_does_and_the_card_reads_the_graph(trained, tmp_path):
    task, X = trained["flat"]
    wanted = np.asarray(task.infer(X[:ROWS]))
    card = task.export(tmp_path / "m.pt", format="torchscript")
    with torch.no_grad():
        script = torch.jit.load(str(tmp_path / "m.pt"))(torch.as_tensor(X[:ROWS])).numpy()
    assert np.array_equal(script.argmax(axis=1), wanted)
    assert card["inputs"][0]["shape"] == [None, 8, 8, 1] and "tracer_warnings" not in card["outputs"][0]
    card = task.export(tmp_path / "m.onnx", format="onnx")
    assert card["inputs"] == [{"name": "X", "dtype": "float32", "shape": [None, 8, 8, 1]}]
    assert np.array_equal(_onnx_outputs(tmp_path / "m.onnx", X[:ROWS]).argmax(axis=1), wanted)


def test_a_branch_on_the_inputs_values_is_traced_on_the_tasks_rows(trained, tmp_path):
    task, X = trained["rescales"]
    wanted = np.asarray(task.infer(X))
    card = task.export(tmp_path / "m.pt", format="torchscript")
    with torch.no_grad():
        script = torch.jit.load(str(tmp_path / "m.pt"))(torch.as_tensor(X)).numpy()
    assert np.array_equal(script.argmax(axis=1), wanted)
    assert any("Python boolean" in said for said in card["outputs"][0]["tracer_warnings"])


def test_a_trace_that_holds_for_no_other_batch_is_refused():
    # the traced rows are all in [0, 1], the rest raw pixels: the batch of all rows takes the other branch
    rows = np.concatenate([np.full((export.TRACE_ROWS, 4), 0.5), np.full((4, 4), 200.0)]).astype(np.float32)
    with pytest.raises(DataError) as error:
        export.torch_artifact(Rescales(4, 3), rows, "torchscript")
    assert error.value.field == "format" and "outputs differ" in error.value.found
    assert "TracerWarning: Converting a tensor to a Python boolean" in error.value.found
    assert "torch.where" in error.value.expected
    assert export.torch_artifact(Rescales(4, 3), rows[::-1].copy(), "torchscript").data  # every batch raw: one branch


def test_the_card_says_what_is_done_to_inputs_before_the_model(trained, tmp_path):
    task, X = trained["flat"]
    card = task.export(tmp_path / "m.pth", format="state_dict")
    steps = {step["step"]: step for step in card["input_preprocessing"]}
    assert "image files" not in steps  # fed arrays: the file takes what they held (test_model_card_input_steps.py)
    assert steps["values seen in training"] == {"step": "values seen in training", "min": float(X.min()),
                                                "max": float(X.max())}
    assert json.loads((tmp_path / "m.pth.card.json").read_text())["input_preprocessing"] == card["input_preprocessing"]


def test_the_card_reads_no_large_dataset_for_its_value_range(trained, tmp_path, monkeypatch):
    """The card is made in the service's process: past a bound on the input
    values it says the range was not read, and loads nothing for it."""
    from ease_jupyter.service import model_card

    task, _ = trained["flat"]
    monkeypatch.setattr(model_card, "RANGE_MAX_VALUES", 10)
    monkeypatch.setattr(model_card, "load", lambda *a: pytest.fail("loaded the dataset version"))
    card = task.export(tmp_path / "m.pth", format="state_dict")
    steps = {step["step"]: step for step in card["input_preprocessing"]}
    assert steps["values seen in training"]["min"] is None and "not read" in steps["values seen in training"]["note"]
