"""The refine panel against a real service: paging, label filter, toggles,
save (drop and keep), the suspicious sort, and small page messages at 50,000
examples."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest
import traitlets

from ease_jupyter.widgets import RefinePanel

from .conftest import message_bytes, updates_to
from service.conftest import Running, serving


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Running]:
    """scikit-learn only: an image task then has no arms, so 50,000 images train nothing."""
    with serving(tmp_path_factory.mktemp("refine"), "alice", torch=False, workers=1) as running:
        yield running


def test_pages_filter_toggle_and_save(service, iris, recorder):
    X, y = iris
    task = service.client("alice").task("iris_refine", input=[4], output=[3])
    task.feed(X, y)
    panel = RefinePanel(task, page_size=20)
    ids = task.data()[0]
    assert (panel.kind, panel.version, panel.n_total, panel.n_pages) == ("table", 1, 150, 8)
    assert panel.columns == ["x0", "x1", "x2", "x3"]
    assert [r["id"] for r in panel.rows] == ids[:20].tolist()
    assert panel.rows[0]["values"] == [f"{v:.4g}" for v in X[0]]
    panel.page = 7
    assert [r["id"] for r in panel.rows] == ids[140:].tolist()
    panel.page = 99  # clamped, as a stale browser click would be
    assert panel.page == 7

    panel.label_filter = "2"
    assert (panel.page, panel.n_shown, panel.n_pages) == (0, 50, 3)
    assert {r["label"] for r in panel.rows} == {"2"} and [r["id"] for r in panel.rows] == ids[y == 2][:20].tolist()
    with pytest.raises(traitlets.TraitError, match="label_filter"):
        panel.label_filter = "7"
    with pytest.raises(traitlets.TraitError, match="page_size"):
        panel.page_size = 0
    with pytest.raises(traitlets.TraitError, match="dropped"):
        panel.dropped = [10_000]

    off = [int(i) for i in ids[[3, 60, 149]]]
    panel.dropped = off[:2]  # as the browser sets it
    assert panel.toggle(off[2]) is False and panel.toggle(off[2]) is True and panel.toggle(off[2]) is False
    assert panel.dropped == sorted(off)
    updates = updates_to(recorder, panel)
    assert updates[-1] == {"dropped": sorted(off)}  # a toggle sends the ids, not the page again

    version = panel.save()
    assert version["number"] == 2 and version["n_examples"] == 147
    after = task.data()[0]
    assert set(after.tolist()) == set(ids.tolist()) - set(off)
    assert (panel.version, panel.n_total, panel.dropped, panel.saved["id"]) == (2, 147, [], version["id"])
    assert "version 2" in panel.message and "3 dropped" in panel.message
    assert panel.save() is None and "nothing to save" in panel.message

    # the panel on the older version turns the dropped examples back on (refine keep=)
    old = RefinePanel(task, version=1)
    old.save_clicks += 1  # the save button
    assert old.saved["number"] == 3 and old.saved["n_examples"] == 150
    assert sorted(task.data()[0].tolist()) == sorted(ids.tolist())
    assert "3 turned back on" in old.message and "version 3" in repr(old)
    panel.close()
    old.close()


def test_suspicious_sort_puts_flipped_labels_first(service, iris):
    X, y = iris
    rng = np.random.default_rng(0)
    flipped_rows = rng.choice(len(y), 10, replace=False)
    noisy = y.copy()
    noisy[flipped_rows] = (noisy[flipped_rows] + 1) % 3
    task = service.client("alice").task("iris_noisy", input=[4], output=[3])
    task.feed(X, noisy)
    panel = RefinePanel(task, page_size=15)
    flipped = set(task.data()[0][flipped_rows].tolist())
    assert task.wait(timeout=120)
    for sort in ("loss", "disagreement"):
        panel.sort = sort
        assert panel.sort == sort, panel.message
        top = [r["id"] for r in panel.rows]
        assert len(flipped & set(top)) >= 8, (sort, top, sorted(flipped))
        scores = [r["score"] for r in panel.rows]
        assert scores == sorted(scores, reverse=True)
    panel.label_filter = "1"
    assert {r["label"] for r in panel.rows} == {"1"}
    shown = [r["score"] for r in panel.rows]
    assert shown == sorted(shown, reverse=True)
    panel.close()


def test_sort_without_a_model_keeps_the_id_order(service, digit_images):
    X, y = digit_images
    task = service.client("alice").task("digits_nomodel", input=[8, 8, 1], output=[10])  # no torch: no arms
    task.feed(X[:30], y[:30])
    panel = RefinePanel(task, page_size=10)
    panel.sort = "loss"
    assert panel.sort == "id" and "cannot sort by loss" in panel.message
    assert panel.kind == "image" and all(r["img"].startswith("data:image/png;base64,") for r in panel.rows)
    panel.close()


def test_time_series_show_as_sparklines(service):
    rng = np.random.default_rng(2)
    t = np.linspace(0, 6, 100, dtype=np.float32)
    X = np.stack([np.sin(t * (1 + k % 3)) + 0.05 * rng.standard_normal(100).astype(np.float32) for k in range(30)])
    task = service.client("alice").task("waves", input=[100], output=[3])
    task.feed(X, np.arange(30) % 3)
    task.cancel()  # no training needed to look at the data
    panel = RefinePanel(task, page_size=5)
    assert panel.kind == "series" and len(panel.rows) == 5
    for row, x in zip(panel.rows, X):
        points = row["svg"].split('points="', 1)[1].split('"', 1)[0].split()
        ys = np.array([float(p.split(",")[1]) for p in points])
        assert len(points) == 100 and np.corrcoef(-ys, x)[0, 1] > 0.999  # the line is the series (y grows down)
    panel.close()


def test_a_page_message_stays_small_with_50000_examples(service, recorder):
    rng = np.random.default_rng(1)
    X = rng.random((50_000, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, 10, 50_000)
    task = service.client("alice").task("big", input=[8, 8, 1], output=[10])
    task.feed(X, y)
    panel = RefinePanel(task, page_size=48)
    opened = [m for kind, m in recorder if kind == "comm_open" and m["comm_id"] == panel.model_id]
    assert panel.n_pages == 1042 and len(panel.rows) == 48
    panel.page = 1000
    ids = task.data()[0]
    assert [r["id"] for r in panel.rows] == ids[48_000:48_048].tolist()
    page_msgs = [m for m in updates_to(recorder, panel) if "rows" in m]
    assert page_msgs and len(page_msgs[-1]["rows"]) == 48
    sizes = [message_bytes(m) for m in opened] + [
        message_bytes({"data": m, "n_buffer_bytes": 0}) for m in page_msgs]
    assert max(sizes) < 48 * 1024, sizes  # one page, never the 50,000 examples (~3 MB as PNGs)
    panel.label_filter = "3"
    assert panel.n_shown == int((y == 3).sum()) and {r["label"] for r in panel.rows} == {"3"}
    panel.close()


def test_string_labels_show_and_filter_by_their_class_names(service, iris):
    X, y = iris
    names = np.array(["setosa", "versicolor", "virginica"])
    task = service.client("alice").task("iris_named", input=[4], output=[3])
    task.feed(X, names[y])
    panel = RefinePanel(task, page_size=20)
    assert panel.labels == ["setosa", "virginica", "versicolor"]  # shortest first, as for indices
    panel.label_filter = "virginica"
    assert panel.n_shown == 50 and {r["label"] for r in panel.rows} == {"virginica"}


def test_a_table_task_shows_its_columns_and_data_gives_back_the_frame(service):
    import pandas as pd

    frame = pd.DataFrame({"mass": [3.5, np.nan, 4.1, 3.9], "island": ["Biscoe", None, "Dream", "Dream"],
                          "species": ["Adelie", "Gentoo", "Adelie", "Gentoo"]})
    task = service.client("alice").task("penguins_refine", like=frame, target="species")
    task.feed(frame)
    ids, X, y = task.data()
    assert list(X.columns) == ["mass", "island"]
    assert X["island"].isna().tolist() == [False, True, False, False]
    assert X["island"][[0, 2, 3]].tolist() == ["Biscoe", "Dream", "Dream"]
    assert np.isnan(X["mass"][1]) and X["mass"][[0, 2, 3]].tolist() == [3.5, 4.1, 3.9]
    panel = RefinePanel(task, page_size=10)
    assert (panel.kind, panel.columns) == ("table", ["mass", "island"])
    assert [r["values"] for r in panel.rows][0] == ["3.5", "Biscoe"]
    assert {r["label"] for r in panel.rows} == {"Adelie", "Gentoo"}
