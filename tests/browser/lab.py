"""Driving JupyterLab 4 from Playwright: open a notebook, run it, read it.

Only what a user sees or JupyterLab's stable DOM hooks are used: the labels
of the menu bar and its entries, the notebook's cell classes and prompts, and
the kernel item of the status bar.
"""

from __future__ import annotations

import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook in the front tab


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    data_dir: Path
    log: Path

    def open(self, page, path: str = "") -> None:
        """Load ``/lab/tree/<path>`` and wait until the shell (and the notebook) is up."""
        page.goto(f"{self.url}lab/tree/{path}?token={self.token}")
        page.wait_for_selector("#jp-main-dock-panel", timeout=60_000)
        if path.endswith(".ipynb"):
            page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=60_000)
            wait_kernel_idle(page, timeout=60)

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def screenshot(page, name: str) -> Path | None:
    """Save a full-page screenshot as test-artifacts/browser/<name>.png (None,
    with a warning, if chromium does not deliver one within 15 s: a picture
    is a record for people, not something a test asserts, and a renderer
    starved on a loaded machine has stalled it twice)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)}.png"
    try:
        page.screenshot(path=str(path), full_page=True, timeout=15_000)
    except PlaywrightTimeout as error:
        warnings.warn(f"screenshot {name!r} not taken: {error}", stacklevel=2)
        return None
    return path


def menu(page, top: str, entry: str) -> None:
    """Click ``top`` in the menu bar, then its entry labelled ``entry``."""
    exact = lambda text: re.compile(rf"^{re.escape(text)}$")  # noqa: E731
    page.locator(".lm-MenuBar-item", has_text=exact(top)).click()
    page.locator(".lm-Menu-item:not(.lm-mod-disabled)", has=page.locator(".lm-Menu-itemLabel", has_text=exact(entry))).click()


KERNEL_READY = re.compile(r"^(?!No Kernel).+ \| Idle$")  # the status bar's "Python 3 (ipykernel) | Idle"


def wait_kernel_idle(page, timeout: float) -> None:
    """Wait until the front notebook's kernel is started, connected and idle.
    (The toolbar's execution indicator says idle before there is a kernel,
    so the status bar's kernel item is read instead.)"""
    deadline = time.monotonic() + timeout
    while True:
        shown = [t.strip() for t in page.locator(".jp-StatusBar-Item").all_inner_texts()]
        if any(KERNEL_READY.match(t) for t in shown):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no idle kernel after {timeout:.0f} s; status bar: {shown}")
        time.sleep(0.25)


def prompts(page) -> list[str]:
    """The execution prompts of the code cells, e.g. ['[1]:', '[*]:', '[ ]:']."""
    return [p.strip() for p in page.locator(f"{NOTEBOOK} .jp-CodeCell .jp-InputArea-prompt").all_inner_texts()]


def run_all(page, timeout: float = 30) -> None:
    """Run → Run All Cells, as a user would; returns once the first cell runs."""
    menu(page, "Run", "Run All Cells")
    deadline = time.monotonic() + timeout
    while prompts(page)[0] == "[ ]:":
        if time.monotonic() > deadline:
            raise TimeoutError(f"Run All Cells started nothing within {timeout:.0f} s")
        time.sleep(0.1)


def all_ran(shown: list[str]) -> bool:
    """True when every code cell's prompt has its execution number."""
    return bool(shown) and all(re.fullmatch(r"\[\d+\]:", p) for p in shown)


def tracebacks(page) -> list[str]:
    """The text of every error output (an IPython traceback) in the front notebook."""
    texts = page.locator(f"{NOTEBOOK} .jp-OutputArea-output").all_inner_texts()
    return [t for t in texts if "Traceback (most recent call last)" in t]


def add_cell_and_run(page, source: str) -> None:
    """Select the last cell, insert a code cell below it (B), type ``source``
    into it and run it (Shift+Enter), with the keyboard as a user would."""
    page.locator(f"{NOTEBOOK} .jp-Cell").last.locator(".jp-InputPrompt").click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    editor = page.locator(f"{NOTEBOOK} .jp-Cell.jp-mod-selected .cm-content")
    editor.click()
    page.keyboard.insert_text(source)
    page.keyboard.press("Shift+Enter")
