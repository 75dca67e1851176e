"""``MOPRunner(blob_url=...)``: checkpoints and partitions travel through an
fsspec URL (here ``file://`` and ``memory://``) instead of a shared
directory. The workload's results are those of a run without it, the
workers receive small ``StagedPartition`` references (the same one again
after a lost worker), and the run's folder is gone at the end."""

from __future__ import annotations

import io
import os
import threading

import numpy as np
import pytest
import torch

from ease_jupyter.errors import EaseMLError
from ease_jupyter.execution.automl import GridSearch
from ease_jupyter.execution.blob_io import StagedPartition
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.mop.checkpoints import HopStore
from ease_jupyter.execution.mop.runner import MOPRunner
from ease_jupyter.execution.units import Hooks, default_input_fn
from ease_jupyter.zoo.templates import TorchBuilder

MODELS = {"lenet": TorchBuilder("lenet", "LeNet", ((8, 8), 10))}


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:300].astype(np.float32) / 16.0, d.target[:300]


def procedure():
    return GridSearch("lenet", {"lr": [0.1, 0.05]}, epochs=2)


def files_under(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def assert_same_run(a, b):
    assert set(a.checkpoints) == set(b.checkpoints)
    for t in a.checkpoints:
        wa = torch.load(io.BytesIO(a.checkpoints[t]), weights_only=True)["model"]
        wb = torch.load(io.BytesIO(b.checkpoints[t]), weights_only=True)["model"]
        assert all(torch.equal(wa[k], wb[k]) for k in wa), f"trial {t} differs"
    assert [(m.trial, m.epoch, m.score) for m in a.history] == [(m.trial, m.epoch, m.score) for m in b.history]


class RecordingInput:
    """The default input_fn, recording what each unit was given."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen: list[object] = []

    def __call__(self, partition):
        with self.lock:
            self.seen.append(partition)
        return default_input_fn(partition)


# -- the hop store on a URL ---------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_hop_store_keeps_checkpoints_under_a_url_and_removes_its_folder(scheme, tmp_path):
    import fsspec

    base = f"file://{tmp_path}/blobs" if scheme == "file" else "memory://easeml-test-hops"
    hops = HopStore("directory", under=base).open()
    assert hops.directory.startswith(base + "/easeml-run-")
    hops.put("t", b"first")
    first = hops.ref("t")
    assert isinstance(first, str) and first.startswith(hops.directory) and hops.read("t") == b"first"
    fs, _ = fsspec.core.url_to_fs(base)
    second = f"{hops.directory}/trial/next.pt"
    with fsspec.open(second, "wb") as f:  # what a training unit writes
        f.write(b"second")
    hops.advance("t", second)
    assert hops.read_all() == {"t": b"second"}
    assert not fs.exists(fsspec.core.url_to_fs(first)[1])  # the replaced checkpoint is gone
    folder = fsspec.core.url_to_fs(hops.directory)[1]
    hops.close()
    assert not fs.exists(folder)


def test_a_given_url_directory_is_kept(tmp_path):
    hops = HopStore("directory", f"file://{tmp_path}/kept").open()
    hops.put("t", b"x")
    hops.close()
    assert files_under(tmp_path / "kept") and (tmp_path / "kept").is_dir()
    with pytest.raises(EaseMLError, match="under"):
        HopStore("directory", str(tmp_path), under=f"file://{tmp_path}")


# -- the runner --------------------------------------------------------------------------------


def test_a_run_through_a_blob_url_equals_one_without(digits, tmp_path):
    X, y = digits
    blob = tmp_path / "blob"
    blob.mkdir()
    seen_during: list[list[str]] = []
    inputs = RecordingInput()
    with LocalEngine(2) as e:
        runner = MOPRunner(e, procedure(), MODELS, X, y, seed=4, blob_url=f"file://{blob}",
                           hooks=Hooks(input_fn=inputs), on_unit=lambda rec: seen_during.append(files_under(blob)))
        assert runner.hop == "directory"
        via_blob = runner.run()
    with LocalEngine(2) as e:
        plain = MOPRunner(e, procedure(), MODELS, X, y, seed=4, hop="bytes", visit_order=via_blob.visit_log).run()
    assert_same_run(via_blob, plain)
    staged = [p for p in seen_during[0] if "/partitions/" in p]
    assert sorted(os.path.basename(p) for p in staged) == ["train-0.npz", "train-1.npz", "val-0.npz", "val-1.npz"]
    assert any(p.endswith(".pt") for p in seen_during[-1])  # the checkpoints live there too
    assert files_under(blob) == [] and os.listdir(blob) == []  # the run's folder is gone
    units = [p for p in inputs.seen if not isinstance(p, tuple)]  # (the driver's initial weights read arrays)
    assert units and all(isinstance(p, StagedPartition) and p.url.startswith(f"file://{blob}/") for p in units)


def test_a_lost_worker_gets_the_same_staged_reference_placed_again(digits, tmp_path):
    X, y = digits
    inputs = RecordingInput()
    with LocalEngine(2) as e:
        killed = []

        def on_unit(rec):
            if not killed:
                killed.append(rec.worker)
                e.kill_worker(rec.worker)

        result = MOPRunner(e, procedure(), MODELS, X, y, seed=4, blob_url=f"file://{tmp_path}",
                           hooks=Hooks(input_fn=inputs), on_unit=on_unit).run()
    assert any("worker lost" in f for f in result.faults)
    urls = {p.url for p in inputs.seen if isinstance(p, StagedPartition)}
    assert len(urls) == 4  # train and val, two partitions each: staged once, never again
    assert os.listdir(tmp_path) == []
    with LocalEngine(2) as e:
        plain = MOPRunner(e, procedure(), MODELS, X, y, seed=4, visit_order=result.visit_log).run()
    assert_same_run(result, plain)


def test_a_blob_url_run_on_dask_workers_equals_a_local_one(digits, tmp_path):
    from ease_jupyter.execution.engine.dask import DaskEngine

    X, y = digits
    with DaskEngine(n_workers=2) as e:  # worker processes: they read and write the URL themselves
        via_blob = MOPRunner(e, procedure(), MODELS, X, y, seed=4, blob_url=f"file://{tmp_path}").run()
    assert os.listdir(tmp_path) == []
    with LocalEngine(2) as e:
        plain = MOPRunner(e, procedure(), MODELS, X, y, seed=4, visit_order=via_blob.visit_log).run()
    assert_same_run(via_blob, plain)


def test_blob_url_arguments_name_the_field(digits, tmp_path):
    X, y = digits
    with LocalEngine(1) as e:
        with pytest.raises(EaseMLError, match="blob_url"):
            MOPRunner(e, procedure(), MODELS, X, y, blob_url=str(tmp_path))
        with pytest.raises(EaseMLError, match="checkpoint_dir"):
            MOPRunner(e, procedure(), MODELS, X, y, blob_url=f"file://{tmp_path}", checkpoint_dir=str(tmp_path))
        with pytest.raises(EaseMLError, match="hop"):
            MOPRunner(e, procedure(), MODELS, X, y, blob_url=f"file://{tmp_path}", hop="bytes")


def test_sweep_runs_removes_only_run_folders_idle_past_the_bound_on_an_object_store():
    """On an object store (fsspec's memory one: its files carry a creation
    time, not an mtime), run folders idle past the bound go, a busy one and
    other folders stay."""
    import datetime
    import time

    import fsspec

    from ease_jupyter.execution.mop.checkpoints import RUN_PREFIX, sweep_runs

    fs = fsspec.filesystem("memory")
    for folder in (f"{RUN_PREFIX}idle", f"{RUN_PREFIX}busy", "theirs"):
        fs.pipe(f"/sweep-bucket/{folder}/part-0.npz", b"rows")
    later = time.time() + 7200
    fs.pipe(f"/sweep-bucket/{RUN_PREFIX}busy/ckpt-9.pt", b"weights")
    written = datetime.datetime.fromtimestamp(later, tz=datetime.timezone.utc)  # just now, as of `later`
    fs.store[f"/sweep-bucket/{RUN_PREFIX}busy/ckpt-9.pt"].created = written
    try:
        assert sweep_runs("memory://sweep-bucket", 3600, now=later) == [f"memory:///sweep-bucket/{RUN_PREFIX}idle"]
        assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls("/sweep-bucket", detail=False)) == \
            [f"{RUN_PREFIX}busy", "theirs"]
    finally:
        fs.rm("/sweep-bucket", recursive=True)
