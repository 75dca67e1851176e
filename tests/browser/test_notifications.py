"""Notifications in JupyterLab, in chromium: a task fed from the Client
finishes, and a toast saying so appears through JupyterLab's notification
centre; the sidebar lists the user's notebook sessions, alive or gone."""

from __future__ import annotations

import json
import re
import time
import urllib.request

import numpy as np
import pytest

from ease_jupyter.client import Client

from .lab import screenshot

pytestmark = pytest.mark.browser

DONE_SECONDS = 240.0  # a small task tried in full, on a busy CI machine


def relay_connected(lab) -> bool:
    """The server extension reads the service's event stream now (its relay
    follows the service once one runs; it starts none itself)."""
    with urllib.request.urlopen(f"{lab.url}easeml/notifications?token={lab.token}", timeout=30) as answer:
        return json.loads(answer.read())["connected"]


@pytest.fixture(scope="module")
def page(context, lab):
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        page.goto(f"{lab.url}lab?token={lab.token}")  # the shell, no document
        page.wait_for_selector("#jp-main-dock-panel", timeout=60_000)
        Client(data_dir=lab.data_dir).whoami()  # her first request starts the embedded service
        deadline = time.monotonic() + 120
        while not relay_connected(lab):
            assert time.monotonic() < deadline, lab.log_tail()
            time.sleep(0.5)
        yield page
    finally:
        page.close()


def test_a_toast_appears_when_a_task_finishes(page, lab):
    client = Client(data_dir=lab.data_dir)  # the embedded service the lab's server extension uses
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 20)
    X = (rng.normal(size=(60, 4)) + 3 * y[:, None]).astype("float32")
    task = client.task("toasted", input=[4], output=[3])
    task.feed(X, y)
    toast = page.get_by_text(re.compile(r"^ease\.ml: toasted: done, every candidate tried; best \w+"))
    toast.first.wait_for(timeout=DONE_SECONDS * 1000)
    screenshot(page, "notification-toast")
    best = task.best()
    shown = toast.first.inner_text()
    assert best["model"] in shown and f"{best['accuracy']:.4g}" in shown, shown


def test_the_sidebar_lists_the_notebook_sessions(page, lab):
    client = Client(data_dir=lab.data_dir)
    mine = client.request("POST", "/notebooks", {"kernel_id": "k-sidebar-1", "notebook_path": "work/toasts.ipynb",
                                                 "server_name": "gpu", "tasks": ["toasted"]})
    page.locator(".jp-SideBar [title='ease.ml tasks']").first.click()
    row = page.locator(f"li.easeml-notebook[data-session='{mine['id']}']")
    row.wait_for(timeout=30_000)
    screenshot(page, "notification-sidebar-sessions")
    assert row.get_attribute("data-alive") == "true"
    text = row.inner_text()
    assert "work/toasts.ipynb" in text and "gpu" in text and "alive" in text
    client.request("DELETE", f"/notebooks/{mine['id']}")  # ended: listed as gone
    page.locator(".easeml-refresh").click()
    page.locator(f"li.easeml-notebook[data-session='{mine['id']}'][data-alive='false']").wait_for(timeout=30_000)
    assert "gone" in row.inner_text()
