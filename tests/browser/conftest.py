"""Browser tests: a real JupyterLab on loopback, driven by Debian's chromium
through Python Playwright.

Fixtures:

- ``lab``: ``jupyter lab`` on 127.0.0.1 with a random token, its root
  a temporary copy of ``notebooks/``, every Jupyter and ease.ml directory
  (config, runtime, settings, workspaces, ``EASEML_DATA_DIR``) private to the
  run. Teardown stops JupyterLab, its kernels and the embedded ease.ml
  service that the notebooks started.
- ``context``: chromium (``/usr/bin/chromium``, or ``$EASEML_CHROMIUM``) with a
  fresh profile directory.

Both live as long as this package's tests run, and no longer: Playwright's
sync API cannot be started twice at once in one thread, so other browser
tests (tests/widgets) start theirs after ours has stopped, and JupyterLab,
its kernels and the service are not left running for the rest of the suite.

A failing test gets a screenshot of the page it was using (``FAILED-*.png``).

Screenshots go to ``test-artifacts/browser/`` (gitignored). The tests skip,
saying why, only when chromium itself is missing; scripts/test.sh installs it
first (scripts/chromium.sh).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from ease_jupyter.service import embedded

from .lab import ROOT, Lab, screenshot

NOTEBOOKS = ROOT / "notebooks"
CHROMIUM = Path(os.environ.get("EASEML_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
START_TIMEOUT = 120.0

# JupyterLab settings for a quiet, deterministic page: no news or update
# checks, and every notebook cell attached to the DOM (no windowing), so the
# outputs of cells below the fold can be inspected too.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A screenshot of the page a failing browser test was looking at."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for value in getattr(item, "funcargs", {}).values():
            page = getattr(value, "page", value)
            if hasattr(page, "screenshot") and not page.is_closed():
                try:
                    screenshot(page, f"FAILED-{item.name}")
                except Exception:  # noqa: BLE001 - the test's own failure is what matters
                    pass
                break


def _runtime_info(runtime_dir: Path, pid: int) -> dict | None:
    try:
        return json.loads((runtime_dir / f"jpserver-{pid}.json").read_text())
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="package")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("lab")
    root, data_dir, runtime, settings = (base / d for d in ("root", "easeml-data", "runtime", "settings"))
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "conftest.py",
                                                                    "__pycache__"))
    for plugin, values in LAB_SETTINGS.items():
        target = settings / f"{plugin}.jupyterlab-settings"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    # This checkout's JupyterLab extension (prebuilt in ease_jupyter/labextension)
    # and its server extension, whether or not the package is installed.
    extensions = base / "jupyter-data" / "labextensions"
    extensions.mkdir(parents=True)
    (extensions / "ease-jupyter").symlink_to(ROOT / "ease_jupyter" / "labextension", target_is_directory=True)
    (base / "config").mkdir()
    (base / "config" / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"ease_jupyter.lab": True}}}))
    token = secrets.token_hex(24)
    env = {k: v for k, v in os.environ.items() if k not in ("EASEML_URL", "EASEML_TOKEN")}
    env.update(
        EASEML_DATA_DIR=str(data_dir),
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_PATH=os.pathsep.join(filter(None, [str(base / "jupyter-data"), env.get("JUPYTER_PATH")])),
        JUPYTER_RUNTIME_DIR=str(runtime),
        # The kernels and the embedded service import ease_jupyter from this checkout.
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser",
           "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
           f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={base / 'workspaces'}"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = base / "jupyter-lab.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=root, start_new_session=True)
    server = None
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while server is None and time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
            server = _runtime_info(runtime, proc.pid)
            time.sleep(0.2)
        if server is None:
            pytest.fail(f"jupyter lab did not start within {START_TIMEOUT:.0f} s:\n{log.read_text()[-4000:]}")
        yield Lab(url=f"http://127.0.0.1:{server['port']}/", token=token, root=root, data_dir=data_dir, log=log)
    finally:
        # SIGTERM makes jupyter_server shut its kernels down before exiting.
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        embedded.stop(data_dir)


@pytest.fixture(scope="package")
def context(tmp_path_factory: pytest.TempPathFactory):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"Debian chromium is not installed at {CHROMIUM}: run scripts/chromium.sh (scripts/test.sh does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
            headless=True, viewport={"width": 1400, "height": 1000})
        try:
            yield context
        finally:
            context.close()
