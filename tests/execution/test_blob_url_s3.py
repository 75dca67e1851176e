"""Partitions and checkpoints through a real S3 protocol: an S3-compatible
server (moto's, on loopback) reached by ``s3fs``, configured the way a user
configures S3 or MinIO: the ``AWS_*`` environment (credentials, region and
``AWS_ENDPOINT_URL``, which botocore honours) or fsspec's own configuration
(``FSSPEC_S3_ENDPOINT_URL``).

* ``blob_io`` and the hop store under ``s3://``, as the ``file://`` and
  ``memory://`` cases of ``test_blob_url_runner``.
* A MOP run through an ``s3://`` blob URL equals one without; its staged
  partitions and checkpoints are objects in the bucket during the run, and
  none is left after it (seen by listing the bucket with boto3).
* ``easeml serve --blob-url s3://bucket/prefix`` trains an image task to a
  finished torch job, its objects seen under the prefix while it runs.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ease_jupyter.execution import blob_io
from ease_jupyter.execution.blob_io import StagedPartition
from ease_jupyter.execution.engine import LocalEngine
from ease_jupyter.execution.mop.checkpoints import HopStore
from ease_jupyter.execution.mop.runner import MOPRunner
from ease_jupyter.execution.units import Hooks

from .test_blob_url_runner import MODELS, RecordingInput, assert_same_run, procedure

pytest.importorskip("moto.server", reason="moto[server] is not installed (it is in the test extra)")
pytest.importorskip("s3fs", reason="s3fs is not installed (it is in the test extra)")

BUCKET = "easeml-blobs"


class S3:
    """The loopback server: its endpoint and a boto3 client to look into the bucket."""

    def __init__(self, endpoint: str, env: dict[str, str]):
        import boto3

        self.endpoint, self.env = endpoint, env
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_DEFAULT_REGION"],
                                   aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                                   aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


class KeyWatcher:
    """Lists the bucket over and over on a thread, keeping every key seen."""

    def __init__(self, s3: S3, prefix: str = ""):
        self.s3, self.prefix = s3, prefix
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.seen.update(self.s3.keys(self.prefix))
            self._stop.wait(0.05)

    def __enter__(self) -> KeyWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)


def _forget_s3fs_instances():
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # an instance keeps the endpoint it was made with


@pytest.fixture(scope="module")
def s3():
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the server's line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        env = {"AWS_ACCESS_KEY_ID": "easeml-test", "AWS_SECRET_ACCESS_KEY": "easeml-test-secret",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            mp.delenv("AWS_PROFILE", raising=False)
            mp.delenv("AWS_SESSION_TOKEN", raising=False)
            _forget_s3fs_instances()
            store = S3(endpoint, env)
            store.client.create_bucket(Bucket=BUCKET)
            yield store
            _forget_s3fs_instances()
    finally:
        server.stop()


# -- blob_io and the hop store --------------------------------------------------------------------


def test_blob_io_writes_reads_and_removes_objects_in_the_bucket(s3):
    base = f"s3://{BUCKET}/io"
    ref = blob_io.write_atomic(base, "a/b/ckpt.pt", b"weights")
    assert ref == f"{base}/a/b/ckpt.pt"
    assert s3.keys("io/") == ["io/a/b/ckpt.pt"]
    assert s3.client.get_object(Bucket=BUCKET, Key="io/a/b/ckpt.pt")["Body"].read() == b"weights"
    blob_io.write_atomic(base, "a/b/ckpt.pt", b"newer")  # one PUT replaces the object whole
    assert blob_io.read_bytes(ref) == b"newer" and s3.keys("io/") == ["io/a/b/ckpt.pt"]  # and leaves no temporary
    blob_io.remove(ref)
    assert s3.keys("io/") == []
    with pytest.raises(FileNotFoundError):
        blob_io.remove(ref)
    blob_io.remove(ref, missing_ok=True)


def test_a_mistyped_bucket_is_an_error_not_a_new_bucket(s3):
    missing = "easeml-no-such-bucket"
    with pytest.raises(FileNotFoundError, match=f"bucket '{missing}' not found, expected an existing bucket"):
        blob_io.write_atomic(f"s3://{missing}/easeml", "t/ckpt.pt", b"weights")
    assert missing not in [b["Name"] for b in s3.client.list_buckets()["Buckets"]]


def test_a_staged_partition_is_one_object_read_back_as_written(s3):
    X, y = np.arange(12, dtype=np.float32).reshape(4, 3), np.array([0, 1, 0, 1])
    staged = blob_io.stage_partition((X, y), f"s3://{BUCKET}/staged", "train-0")
    assert staged.url == f"s3://{BUCKET}/staged/train-0.npz" and staged.examples == 4
    assert s3.keys("staged/") == ["staged/train-0.npz"]
    blob_io._STAGED.clear()
    Xs, ys = staged.load()
    assert np.array_equal(Xs, X) and np.array_equal(ys, y)
    blob_io.remove(staged.url)


def test_hop_store_keeps_checkpoints_in_the_bucket_and_removes_its_folder(s3):
    import fsspec

    base = f"s3://{BUCKET}/hops"
    hops = HopStore("directory", under=base).open()
    assert hops.directory.startswith(base + "/easeml-run-")
    folder = hops.directory[len(f"s3://{BUCKET}/"):] + "/"
    hops.put("t", b"first")
    first = hops.ref("t")
    assert first.startswith(hops.directory) and hops.read("t") == b"first"
    assert s3.keys(folder) == [first[len(f"s3://{BUCKET}/"):]]
    second = f"{hops.directory}/trial/next.pt"
    with fsspec.open(second, "wb") as f:  # what a training unit writes
        f.write(b"second")
    hops.advance("t", second)
    assert hops.read_all() == {"t": b"second"}
    assert s3.keys(folder) == [folder + "trial/next.pt"]  # the replaced checkpoint is gone
    hops.close()
    assert s3.keys(folder) == []


def test_fsspecs_own_configuration_reaches_the_endpoint(s3, tmp_path):
    """``FSSPEC_S3_ENDPOINT_URL`` (read when fsspec is imported) instead of
    ``AWS_ENDPOINT_URL``, in a fresh process as a worker would be."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    env["FSSPEC_S3_ENDPOINT_URL"] = s3.endpoint
    code = ("from ease_jupyter.execution import blob_io\n"
            f"blob_io.write_atomic('s3://{BUCKET}/conf', 'x.bin', b'from fsspec config')\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert s3.client.get_object(Bucket=BUCKET, Key="conf/x.bin")["Body"].read() == b"from fsspec config"
    s3.client.delete_object(Bucket=BUCKET, Key="conf/x.bin")


# -- the runner ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images[:200].astype(np.float32) / 16.0, d.target[:200]


def test_a_run_through_an_s3_blob_url_equals_one_without(digits, s3):
    X, y = digits
    url = f"s3://{BUCKET}/runs"
    inputs = RecordingInput()
    seen_during: list[list[str]] = []
    with LocalEngine(2) as e:
        runner = MOPRunner(e, procedure(), MODELS, X, y, seed=4, blob_url=url,
                           hooks=Hooks(input_fn=inputs), on_unit=lambda rec: seen_during.append(s3.keys("runs/")))
        assert runner.hop == "directory"
        via_s3 = runner.run()
    with LocalEngine(2) as e:
        plain = MOPRunner(e, procedure(), MODELS, X, y, seed=4, hop="bytes", visit_order=via_s3.visit_log).run()
    assert_same_run(via_s3, plain)
    first = seen_during[0]
    staged = sorted(k.rsplit("/", 1)[1] for k in first if "/partitions/" in k)
    assert staged == ["train-0.npz", "train-1.npz", "val-0.npz", "val-1.npz"]
    assert all(k.startswith("runs/easeml-run-") for k in first)
    assert any(k.endswith(".pt") for k in seen_during[-1])  # the checkpoints are objects there too
    assert s3.keys("runs/") == []  # the run's folder is gone
    units = [p for p in inputs.seen if not isinstance(p, tuple)]  # (the driver's initial weights read arrays)
    assert units and all(isinstance(p, StagedPartition) and p.url.startswith(url + "/") for p in units)


# -- easeml serve --blob-url s3://... ---------------------------------------------------------------------


def test_serve_trains_an_image_task_through_an_s3_blob_url(tmp_path, s3):
    from click.testing import CliRunner

    from ease_jupyter.cli import main
    from ease_jupyter.client import Client
    from ease_jupyter.service.testing import ServeProcess

    token = CliRunner().invoke(main, ["users", "add", "ada", "--admin", "--data-dir", str(tmp_path)]).output.strip()
    images, labels = digits_images()
    serve = ServeProcess(tmp_path, "--blob-url", f"s3://{BUCKET}/serve", "--executor", "thread", "--workers", "1",
                         "--torch-epochs", "1")  # the AWS_* environment: inherited
    try:
        with KeyWatcher(s3, "serve/") as watcher:
            task = Client(serve.url, token).task("digits", input=[8, 8, 1], output=[10])
            task.feed(images, labels)
            job = wait_for_torch_job(serve, task, timeout=90)
    finally:
        stopped = serve.stop()
    assert stopped == 0, serve.log.read_text()[-3000:]
    assert job["status"] == "succeeded", job
    assert any("/partitions/" in k and k.endswith(".npz") for k in watcher.seen), sorted(watcher.seen)
    assert any(k.endswith(".pt") for k in watcher.seen), sorted(watcher.seen)
    assert all(k.startswith("serve/easeml-run-") for k in watcher.seen)
    assert s3.keys("serve/") == []  # each run's folder is removed after it


def digits_images():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images[:200] / 16.0).astype("float32")[..., None], d.target[:200].astype("int64")


def wait_for_torch_job(serve, task, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    jobs: list[dict] = []
    while time.monotonic() < deadline and serve.proc.poll() is None:
        jobs = task.jobs()
        done = [j for j in jobs if j["status"] in ("succeeded", "failed") and is_torch(j)]
        if done:
            return done[0]
        time.sleep(0.5)
    raise AssertionError(f"no torch job finished in {timeout} s: {jobs}\n{serve.log.read_text()[-3000:]}")


def is_torch(job: dict) -> bool:
    from ease_jupyter.jobspec import parse_job
    from ease_jupyter.zoo import Engine

    return parse_job(job["model"], job["config"]).engine is Engine.TORCH
