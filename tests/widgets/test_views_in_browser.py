"""The ES modules in a real browser (Debian's chromium via Playwright), each
rendered with the state its Python widget syncs: what the user sees, and
what a click sends back (the trait the Python side then validates)."""

from __future__ import annotations

import base64
import itertools
import json
import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from ease_jupyter.service.testing import flat_models
from ease_jupyter.widgets import Leaderboard, ProvenanceGraph, RefinePanel, ServiceView

pytestmark = pytest.mark.browser

CHROMIUM = Path(os.environ.get("EASEML_CHROMIUM", "/usr/bin/chromium"))

FAKE_MODEL = """
window.mount = async (source, css, state) => {
  const handlers = {}, sent = [];
  const model = {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; sent.push([k, v]); (handlers["change:" + k] || []).forEach((f) => f()); },
    on: (name, f) => (handlers[name] = handlers[name] || []).push(f),
    save_changes: () => sent.push(["save_changes"]),
  };
  const style = document.createElement("style");
  style.textContent = css;
  document.head.append(style);
  const el = document.createElement("div");
  document.body.replaceChildren(el);
  const mod = await import("data:text/javascript;base64," + source);
  mod.default.render({ model, el });
  window.model = model; window.sent = sent;
};
"""


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"chromium not found at {CHROMIUM} (scripts/chromium.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM),
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        tab = browser.new_page()
        tab.set_content("<html><body></body></html>")
        tab.add_script_tag(content=FAKE_MODEL)
        yield tab
        browser.close()


def mount(page: Any, widget: Any) -> list:
    state = json.loads(json.dumps(widget.get_state(), default=str))
    source = base64.b64encode(state.pop("_esm").encode()).decode()
    page.evaluate("([s, c, st]) => window.mount(s, c, st)", [source, state.pop("_css", ""), state])
    return page.evaluate("window.sent")


def sent(page: Any) -> list:
    return page.evaluate("window.sent")


@pytest.fixture(scope="module")
def trained(service, iris) -> Any:
    X, y = iris
    task = service.client("alice").task("iris_browser", input=[4], output=[3])
    task.feed(X, y)
    assert task.wait(timeout=90)
    return task


def test_leaderboard_view(page, trained):
    task = trained
    board = Leaderboard(task, live=False)
    mount(page, board)
    rows = page.locator("table tbody tr")
    assert rows.count() == len(board.rows) == flat_models(4, 3)
    best = page.locator("tr.easeml-best")
    assert best.count() == 1
    best_row = next(r for r in board.rows if r["job_id"] == board.best_job_id)
    assert best.locator("td").first.inner_text() == best_row["model"]
    heads = page.locator("table thead th").all_inner_texts()
    cells = dict(zip(heads, best.locator("td").all_inner_texts()))
    assert cells["best config"] == best_row["best_config"] and best_row["best_config"]  # the grid point that won
    assert cells["validated on"] == f"{best_row['validation_size']} ex."
    assert page.locator("tr.easeml-done").count() == len(board.rows)
    page.get_by_role("button", name="Cancel task").click()
    assert sent(page) == [["cancel_clicks", 1], ["save_changes"]]
    board.cancel_clicks = 1  # what the kernel receives: the task is cancelled
    assert task.refresh()["cancelled"] is True
    task.resume()
    board.close()


def test_refine_view_toggles_and_pages(page, service, digit_images):
    X, y = digit_images
    task = service.client("bob").task("digits_browser", input=[8, 8, 1], output=[10])
    task.feed(X[:40], y[:40])
    panel = RefinePanel(task, page_size=12)
    mount(page, panel)
    cards = page.locator(".easeml-card")
    assert cards.count() == 12 and page.locator(".easeml-card img").count() == 12
    size = page.locator(".easeml-card img").first.evaluate("img => [img.complete, img.naturalWidth]")
    assert size == [True, 8]  # the PNG thumbnail decodes in the browser
    cards.nth(2).click()
    assert sent(page)[-2] == ["dropped", [panel.rows[2]["id"]]]
    assert "easeml-off" in (cards.nth(2).get_attribute("class") or "")
    page.get_by_role("button", name=">").click()
    assert sent(page)[-2] == ["page", 1]
    panel.dropped = [panel.rows[2]["id"]]  # the kernel applies what the browser sent
    panel.page = 1
    assert panel.rows[0]["id"] == task.data()[0][12]
    panel.close()
    task.cancel()


def test_provenance_view_click_and_trace(page, trained):
    graph = ProvenanceGraph(trained)
    mount(page, graph)
    nodes = page.locator("svg [data-node]")
    assert nodes.count() == len(graph.nodes)
    version = next(n["id"] for n in graph.nodes if n["kind"] == "dataset")
    page.locator(f'svg [data-node="{version}"]').click()
    assert sent(page)[-2] == ["selected", version]
    page.get_by_role("button", name="trace forward").click()
    assert sent(page)[-2] == ["trace", "forward"]
    graph.selected, graph.trace = version, "forward"  # the kernel computes the highlight ...
    page.evaluate("h => window.model.set('highlighted', h)", graph.highlighted)  # ... and syncs it back
    dimmed = page.locator("svg [data-node].easeml-dim")
    assert dimmed.count() == len(graph.nodes) - len(graph.highlighted) == 1  # only the outside source
    graph.close()


def test_service_view_marks_the_served_user(page, service, trained):
    view = ServiceView(service.client("root"), live=False)
    assert view.serving is not None and view.users
    mount(page, view)
    assert page.locator("table").first.locator("tbody tr").count() == len(view.users)
    serving = page.locator("tr.easeml-serving td").first.inner_text()
    assert serving.startswith(view.serving)
    assert view.store["writable"] and page.locator(".easeml-store").inner_text() == ""
    page.evaluate("""window.model.set("store", {writable: false, blocked: "store_unavailable",
                                                 message: "the database is read-only"})""")
    assert page.locator(".easeml-store.easeml-blocked").inner_text() == (
        "training paused (store_unavailable): the database is read-only")
    view.close()


def test_curves_titles_toolbar_and_legend_do_not_overlap(page):
    """Both curves figures drawn by plotly.js at two widths with the toolbar
    always on: the toolbar, the figure title, the subplot titles and the
    legend each have their own box, and the legend is beside the plots."""
    from plotly.offline import get_plotlyjs

    from ease_jupyter.widgets import Curves

    from .test_curves import StubTask, many_jobs

    curves = Curves(StubTask(many_jobs()), live=False)
    figures = [json.loads(f.to_json()) for f in (curves.figure, curves.grid_figure)]
    curves.close()
    page.add_script_tag(content=get_plotlyjs())
    boxes_of = """async ([figures, width]) => {
      const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
      const out = [];
      for (const f of figures) {
        const div = document.createElement('div');
        div.style.width = width + 'px';
        document.body.replaceChildren(div);
        await Plotly.newPlot(div, f.data, f.layout, {displayModeBar: true});
        out.push({toolbar: box(div.querySelector('.modebar')), title: box(div.querySelector('.gtitle')),
                  notes: [...div.querySelectorAll('.annotation')].map(box),
                  legend: box(div.querySelector('.legend')), plots: [...div.querySelectorAll('.nsewdrag')].map(box)});
      }
      return out;
    }"""

    def overlap(a, b) -> bool:
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    for width in (900, 520):
        drawn = page.evaluate(boxes_of, [figures, width])
        assert len(drawn) == 2 and len(drawn[0]["notes"]) == 2 and len(drawn[0]["plots"]) == 2
        for boxes in drawn:
            labels = [boxes["toolbar"], boxes["title"], *boxes["notes"]]
            for a, b in itertools.combinations(labels, 2):
                assert not overlap(a, b), (width, a, b)
            for plot in boxes["plots"]:
                assert not overlap(boxes["legend"], plot) and boxes["legend"][0] >= plot[2], (width, boxes)
                assert all(not overlap(label, plot) for label in labels), (width, boxes)


QUOTED = ['12" pipe', "3/4' valve", '<b>elbow</b>" onmouseover="x']


def test_refine_label_filter_with_quotes_in_class_names(page, service):
    """Class names with quotes (and what looks like markup) come back from the
    browser's label filter exactly as the kernel has them."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 30
    df = pd.DataFrame({"len": rng.normal(size=n), "kind": np.array(QUOTED)[np.arange(n) % 3]})
    task = service.client("bob").task("parts_browser", like=df, target="kind")
    task.feed(df)
    panel = RefinePanel(task, page_size=6)
    mount(page, panel)
    options = page.evaluate("[...document.querySelectorAll('select')[0].options].map(o => [o.value, o.textContent])")
    assert options == [["", "all"]] + [[label, label] for label in panel.labels]
    assert sorted(panel.labels) == sorted(QUOTED)
    assert page.evaluate("document.querySelectorAll('[onmouseover], select b').length") == 0  # no markup injected
    for index, label in enumerate(panel.labels, start=1):
        page.select_option("select >> nth=0", index=index)
        assert sent(page)[-2] == ["label_filter", label]
        panel.label_filter = sent(page)[-2][1]  # the kernel accepts what the browser sent
        assert panel.n_shown == 10 and {r["label"] for r in panel.rows} == {label}
    panel.close()
    task.cancel()


def test_leaderboard_view_of_a_deleted_task_and_errors_with_quotes(page, trained):
    board = Leaderboard(trained, live=False)
    board.rows = [dict(board.rows[0], state="failed", status="failed", accuracy=None,
                       error='ValueError: bad "C" <b>x</b>')] + list(board.rows[1:])
    board.deleted = True
    mount(page, board)
    button = page.locator("button")
    assert button.inner_text() == "Task deleted" and button.is_disabled()
    failed = page.locator("tr.easeml-failed")
    assert failed.get_attribute("title") == 'ValueError: bad "C" <b>x</b>'
    heads = page.locator("table thead th").all_inner_texts()
    assert heads[-1] == "error" and failed.locator("td").last.inner_text() == 'ValueError: bad "C" <b>x</b>'
    assert page.locator("tr b").count() == 0
    board.close()


def test_leaderboard_view_names_the_metric_and_shortens_many_classes(page, trained):
    board = Leaderboard(trained, live=False)
    board.metric, board.class_names = "r2", [f"species_{i:03d}" for i in range(120)]
    mount(page, board)
    title = page.locator("b").first.inner_text()
    assert "species_009, ... (110 more, 120 in all)" in title and "species_010" not in title
    assert "r2 (clipped to [0, 1])" in title
    heads = page.locator("table thead th").all_inner_texts()
    assert "r2" in heads and "accuracy" not in heads
    board.close()
