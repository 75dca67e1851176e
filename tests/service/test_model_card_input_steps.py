"""The model card's "image files" step is true of the task it is on: the
client reads an image folder with Pillow into floats in [0, 1], and the
card tells whoever feeds the exported file to do the same; a task of an
image's shape fed plain arrays (a sensor's [12, 2] windows of raw readings)
gets no such step, since rescaling its inputs to [0, 1] would answer wrongly
without an error. The client's feed of an image folder says so (the body's
``origin``), and the service records it once, as the task tag
``easeml.image_files`` that the card reads.

Both tasks are fed through the client (where the origin is known), then
cancelled and trained here on one lenet epoch (as in ``test_export.py``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ease_jupyter.errors import DataError

from .conftest import start, train_lenet_once


def _image_folder(root, rng) -> None:
    from PIL import Image

    for label, level in (("dark", 40), ("light", 210)):
        (root / label).mkdir(parents=True)
        for i in range(8):
            pixels = np.clip(rng.normal(level, 20, (8, 8)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i}.png")


def _train_lenet(running, name: str) -> None:
    """One lenet epoch of alice's task ``name``, here, as the loop would."""
    store = running.service.store
    train_lenet_once(store, running.service.blobs, store.task_by_name(store.user_by_name("alice").id, name).id)


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """alice's ``sensors`` ([12, 2] windows of raw temperature and pressure,
    11 to 1015, fed as arrays) and ``shapes`` ([8, 8, 1], fed an image
    folder of PNGs), each with a trained model."""
    rng = np.random.default_rng(0)
    running = start(tmp_path_factory.mktemp("svc"), torch_epochs=1)
    try:
        running.user("alice")
        client = running.client("alice")
        y = rng.integers(0, 2, 40)
        X = np.stack([20 + 15 * y[:, None] + rng.normal(0, 3, (40, 12)), 1000 + rng.normal(0, 5, (40, 12))],
                     axis=-1).astype(np.float32)
        X[0, 0, 0], X[0, 0, 1] = 11.0, 1015.0
        sensors = client.task("sensors", input=[12, 2], output=[2])
        sensors.feed(X, y)
        sensors.cancel()  # the loop trains nothing more of it: the model is trained here
        _train_lenet(running, "sensors")

        folder = tmp_path_factory.mktemp("images") / "shapes"
        _image_folder(folder, rng)
        shapes = client.task("shapes", input=[8, 8, 1], output=[2])
        assert shapes.feed(folder)["n_examples"] == 16
        shapes.cancel()
        _train_lenet(running, "shapes")
        yield running, {"sensors": (sensors, X), "shapes": (shapes, None)}
    finally:
        running.thread.stop()


def _steps(card):
    return {step["step"]: step for step in card["input_preprocessing"]}


def test_a_task_of_an_images_shape_fed_arrays_has_no_image_files_step(fed, tmp_path):
    _, tasks = fed
    task, X = tasks["sensors"]
    card = task.export(tmp_path / "sensors.pth", format="state_dict")
    steps = _steps(card)
    assert "image files" not in steps
    assert steps["values seen in training"] == {"step": "values seen in training", "min": float(X.min()),
                                                "max": float(X.max())}
    assert json.loads((tmp_path / "sensors.pth.card.json").read_text())["input_preprocessing"] == \
        card["input_preprocessing"]


def test_a_task_fed_an_image_folder_has_the_image_files_step(fed, tmp_path):
    _, tasks = fed
    task, _ = tasks["shapes"]
    steps = _steps(task.export(tmp_path / "shapes.pth", format="state_dict"))
    assert "[0, 1]" in steps["image files"]["does"] and "not raw 0-255" in steps["image files"]["feed_the_file"]
    assert 0.0 <= steps["values seen in training"]["min"] <= steps["values seen in training"]["max"] <= 1.0


def test_the_service_records_the_origin_once_and_takes_no_other(fed):
    running, tasks = fed
    store = running.service.store
    alice = store.user_by_name("alice").id
    tags = {name: dict(store.tags("task", store.task_by_name(alice, name).id)) for name in tasks}
    assert tags["shapes"].get("easeml.image_files") == "true"
    assert "easeml.image_files" not in tags["sensors"]
    # a user cannot set the reserved tag herself
    answer = running.call("PUT", "/tasks/sensors/tags", "alice", body={"easeml.image_files": "true"})
    assert answer.status == 400
    # an origin the client never sends is refused, naming the field
    answer = running.call("POST", "/tasks/sensors/feed", "alice",
                          body={"X": np.zeros((1, 12, 2)).tolist(), "y": [0], "origin": "camera"})
    error = answer.body["error"]
    assert answer.status == 400 and error["field"] == "origin" and "'camera'" in error["found"]
    assert "easeml.image_files" not in store.tags("task", store.task_by_name(alice, "sensors").id)


def test_a_feed_refused_stores_no_origin(fed, tmp_path):
    """The tag is written with the version, once the rows passed every check."""
    running, _ = fed
    store = running.service.store
    client = running.client("alice")
    task = client.task("refused", input=[8, 8, 1], output=[2])
    folder = tmp_path / "three"  # three classes for a task of two
    for i, label in enumerate(("a", "b", "c")):
        (folder / label).mkdir(parents=True)
        from PIL import Image

        Image.fromarray(np.full((8, 8), 60 * i, dtype=np.uint8)).save(folder / label / "0.png")
    with pytest.raises(DataError):
        task.feed(folder)
    stored = store.task_by_name(store.user_by_name("alice").id, "refused")
    assert "easeml.image_files" not in store.tags("task", stored.id)
