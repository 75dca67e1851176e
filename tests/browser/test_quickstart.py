"""The quickstart in a real JupyterLab, in chromium: Run All Cells, the live
curves, the ease.ml sidebar and the refine panel.

One notebook session serves the whole module (``quickstart``): it opens
quickstart.ipynb, runs all cells from the Run menu and, while they run,
samples how many traces and points the curves widget has drawn. Then, with
the curves on screen, it feeds the task more digits from outside the
notebook and samples again while the service trains the new version: the
first run's training may end before a busy browser has loaded plotly.js at
all, the second's cannot. The tests check what the session saw and go on
working in the same notebook. Screenshots land in test-artifacts/browser/.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import numpy as np
import pytest

from .lab import NOTEBOOK, add_cell_and_run, all_ran, prompts, run_all, screenshot, tracebacks

pytestmark = pytest.mark.browser

TASK = "digits"  # the quickstart's task
RUN_TIMEOUT = 300.0
DRAW_TIMEOUT = 120.0  # for the first traces once every cell ran
TRAIN_TIMEOUT = 300.0  # for the second feed's training
TRACES = f"{NOTEBOOK} .js-plotly-plot .scatterlayer .trace"
POINTS = f"{TRACES} .points .point"


@dataclass
class Sample:
    seconds: float
    traces: int
    points: int
    busy: bool  # Run All: some cell still queued or running; the second feed: the task still training


@dataclass
class Session:
    page: object
    samples: list[Sample] = field(default_factory=list)  # from Run All until the curves are drawn
    prompts: list[str] = field(default_factory=list)
    refed: list[Sample] = field(default_factory=list)  # from the second feed until the task is idle again


def _sample(page, start: float, busy: bool) -> Sample:
    return Sample(time.monotonic() - start, page.locator(TRACES).count(), page.locator(POINTS).count(), busy)


def _more_digits() -> tuple[np.ndarray, np.ndarray]:
    """400 digits the notebook did not feed (it fed the first 1000 of the same order)."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).reshape(-1, 8, 8, 1).astype("float32")
    order = np.random.default_rng(0).permutation(len(y))
    return X[order[1000:1400]], y[order[1000:1400]]


def _feed_and_watch(page, lab, session: Session) -> None:
    from ease_jupyter import Client

    task = Client(data_dir=lab.data_dir).task(TASK)  # the notebook's user: the embedded service's admin
    task.feed(*_more_digits())
    start, trained = time.monotonic(), False
    while time.monotonic() - start < TRAIN_TIMEOUT:
        training = not task.refresh()["idle"]
        session.refed.append(_sample(page, start, training))
        trained = trained or training
        if trained and not training:
            return
        time.sleep(0.5)


@pytest.fixture(scope="module")
def quickstart(context, lab):
    page = context.new_page()
    page.set_default_timeout(30_000)
    session = Session(page)
    try:
        lab.open(page, "quickstart.ipynb")
        screenshot(page, "quickstart-opened")
        run_all(page)
        start, shot = time.monotonic(), False
        while True:
            shown = prompts(page)
            sample = _sample(page, start, busy=not all_ran(shown))
            session.samples.append(sample)
            if sample.traces and sample.busy and not shot:
                page.locator(f"{NOTEBOOK} .js-plotly-plot").first.scroll_into_view_if_needed()
                screenshot(page, "quickstart-training")
                shot = True
            if not sample.busy or sample.seconds > RUN_TIMEOUT:
                break
            time.sleep(1.0)
        session.prompts = shown
        ran = time.monotonic()
        while not session.samples[-1].traces and time.monotonic() - ran < DRAW_TIMEOUT:
            time.sleep(1.0)
            session.samples.append(_sample(page, start, busy=False))
        page.locator(f"{NOTEBOOK} .js-plotly-plot").first.scroll_into_view_if_needed()
        screenshot(page, "quickstart-ran")
        if session.samples[-1].traces:
            _feed_and_watch(page, lab, session)
        yield session
    finally:
        page.close()


def test_run_all_cells_runs_the_quickstart(quickstart, lab):
    assert all_ran(quickstart.prompts), f"cells still pending after {RUN_TIMEOUT:.0f} s: {quickstart.prompts}"
    assert tracebacks(quickstart.page) == [], lab.log_tail()
    printed = quickstart.page.locator(f"{NOTEBOOK} .jp-OutputArea-output").all_inner_texts()
    assert any(re.search(r"held-out accuracy 0\.\d+", text) for text in printed), printed


def test_curves_draw_the_quickstarts_training(quickstart):
    samples = quickstart.samples
    drawn = [s for s in samples if s.traces > 0]
    assert drawn, f"the curves widget drew no plotly traces: {samples[-5:]}"
    assert drawn[-1].points >= drawn[-1].traces, drawn[-1]  # each trace has its epochs' markers


def test_curves_grow_while_the_task_trains(quickstart):
    refed = quickstart.refed
    assert refed, "no curves were drawn, so the task was not fed again"
    assert any(s.busy for s in refed), f"the second feed never made the task train: {refed[-5:]}"
    before = refed[0]
    grown = [s for s in refed if s.busy and s.points > before.points and s.traces > before.traces]
    assert grown, f"no new curve was drawn while the task trained: {refed}"
    assert refed[-1].points >= grown[0].points and refed[-1].traces >= grown[0].traces


def test_sidebar_lists_the_task(quickstart):
    page = quickstart.page
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='easeml-sidebar']").click()
    row = page.locator(f"#easeml-sidebar .easeml-task[data-task='{TASK}']")
    row.wait_for(state="visible", timeout=60_000)
    screenshot(page, "sidebar")
    assert TASK in row.inner_text()


def test_refine_panel_toggle_and_save_makes_a_new_version(quickstart, lab):
    from ease_jupyter import Client

    task = Client(data_dir=lab.data_dir).task(TASK)  # the notebook's user: the embedded service's admin
    before = {v["id"] for v in task.versions()}
    page = quickstart.page
    add_cell_and_run(page, f"%easeml refine {TASK}")
    panel = page.locator(f"{NOTEBOOK} .easeml-refine").last
    panel.wait_for(state="visible", timeout=60_000)
    example = panel.locator(".easeml-card, tbody tr input[type=checkbox]").first
    example.click()
    foot = panel.locator(":scope > div").last
    foot.filter(has_text="1 turned off").wait_for(timeout=30_000)
    panel.get_by_role("button", name="Save as new version").click()
    foot.filter(has_text="saved dataset version").wait_for(timeout=60_000)
    panel.scroll_into_view_if_needed()
    screenshot(page, "refine-saved")
    saved = re.search(r"saved dataset version (\d+) \(id (\d+)\)", foot.inner_text())
    assert saved, foot.inner_text()
    new = {v["id"]: v for v in task.versions() if v["id"] not in before}
    assert list(new) == [int(saved.group(2))], (before, new)
    version = new[int(saved.group(2))]
    assert version["kind"] == "refine" and version["number"] == int(saved.group(1))


def _cell_sources(page) -> list[str]:
    return page.locator(f"{NOTEBOOK} .jp-Cell .cm-content").all_inner_texts()


def test_sidebar_click_and_palette_insert_the_status_magics(quickstart, lab):
    page = quickstart.page
    if not page.locator("#easeml-sidebar").is_visible():  # the tab toggles: an earlier test may have opened it
        page.locator(".jp-SideBar .lm-TabBar-tab[data-id='easeml-sidebar']").click()
    row = page.locator(f"#easeml-sidebar .easeml-task[data-task='{TASK}']")
    row.wait_for(state="visible", timeout=60_000)
    before = _cell_sources(page).count(f"%easeml status {TASK}")
    row.click()
    page.wait_for_function(
        "([sel, text, n]) => [...document.querySelectorAll(sel)].filter(e => e.innerText.trim() === text).length > n",
        arg=[f"{NOTEBOOK} .jp-Cell .cm-content", f"%easeml status {TASK}", before], timeout=30_000)

    page.locator(f"{NOTEBOOK}").first.click()
    page.keyboard.press("Control+Shift+c")  # the command palette
    palette = page.locator(".lm-CommandPalette input")
    palette.wait_for(state="visible", timeout=30_000)
    palette.fill("ease.ml: open service view")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "([sel, text]) => [...document.querySelectorAll(sel)].some(e => e.innerText.trim() === text)",
        arg=[f"{NOTEBOOK} .jp-Cell .cm-content", "%easeml status --all"], timeout=30_000)
    screenshot(page, "sidebar-and-palette")
    assert tracebacks(page) == [], lab.log_tail()
