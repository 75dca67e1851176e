"""The prebuilt JupyterLab extension: installed, enabled, built from the
current source, and packed into the wheel with the rest of the package."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import ANSI

ROOT = Path(__file__).resolve().parents[2]
PREBUILT = ROOT / "ease_jupyter" / "labextension"
SOURCE = ROOT / "labextension"


def test_labextension_is_listed_enabled_and_ok():
    out = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"],
                         capture_output=True, text=True, timeout=120)
    text = ANSI.sub("", out.stdout + out.stderr)
    version = json.loads((SOURCE / "package.json").read_text())["version"]
    line = next((l for l in text.splitlines() if l.strip().startswith("ease-jupyter ")), None)
    assert line is not None, text
    assert re.match(rf"\s*ease-jupyter v{re.escape(version)}\s+enabled\s+OK\b", line), line
    assert "(python, ease_jupyter)" in line  # install.json: pip owns it


def test_prebuilt_output_matches_the_source_package():
    source = json.loads((SOURCE / "package.json").read_text())
    built = json.loads((PREBUILT / "package.json").read_text())
    assert built["name"] == source["name"] == "ease-jupyter"
    assert built["version"] == source["version"]
    load = built["jupyterlab"]["_build"]["load"]
    assert (PREBUILT / load).is_file()
    bundle = "".join(p.read_text() for p in (PREBUILT / "static").glob("*.js"))
    # The DOM contract and the commands of src/ are in the committed build.
    for marker in ("easeml-sidebar", "easeml-task", "ease.ml: new task", "ease.ml: open service view",
                   "%easeml status --all", "%%easeml task", "easeml-notebook", "notifications?after=", "ease.ml: "):
        assert marker in bundle, f"{marker!r} missing: rebuild with `cd labextension && npm run build:prod`"


def source_digest() -> str:
    """The digest labextension/stamp.js writes at the end of `npm run build:prod`."""
    digest = hashlib.sha256()
    inputs = ["package.json", "package-lock.json", "tsconfig.json", "src", "style"]
    paths = []
    for name in inputs:
        path = SOURCE / name
        paths += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for path in sorted(paths, key=lambda p: p.relative_to(SOURCE).as_posix()):
        digest.update(path.relative_to(SOURCE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def test_committed_build_was_made_from_the_current_sources():
    stamp = (PREBUILT / "source.sha256").read_text().strip()
    assert stamp == source_digest(), "labextension/ changed since the last build: `cd labextension && npm run build:prod`"


def test_installing_runs_no_node_build():
    """An install must never rewrite tracked files: no build hook calls npm."""
    config = (ROOT / "pyproject.toml").read_text()
    assert "jupyter-builder" not in config and "npm_builder" not in config


def test_server_config_enables_the_extension():
    config = json.loads((ROOT / "jupyter-config" / "jupyter_server_config.d" / "ease_jupyter.json").read_text())
    assert config["ServerApp"]["jpserver_extensions"]["ease_jupyter.lab"] is True
    from ease_jupyter.lab import _jupyter_server_extension_points

    assert _jupyter_server_extension_points()[0]["module"] == "ease_jupyter.lab"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    pytest.importorskip("hatchling", reason="building the wheel needs hatchling in this environment")
    out = tmp_path_factory.mktemp("wheel")
    # No npm: the committed build is packed as is.
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out)], check=True, timeout=600)
    (path,) = out.glob("ease_jupyter-*.whl")
    return zipfile.ZipFile(path)


def test_wheel_holds_every_package_file_and_the_jupyter_data(wheel):
    names = set(wheel.namelist())
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "ease_jupyter"],
                             cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    package_files = {n for n in tracked.stdout.split() if (ROOT / n).is_file()}
    assert package_files, "git listed no package files"
    missing = sorted(package_files - names)
    assert not missing, f"package files not in the wheel: {missing}"
    for needed in ("ease_jupyter/store/alembic.ini", "ease_jupyter/store/migrations/env.py",
                   "ease_jupyter/lab/handlers.py", "ease_jupyter/labextension/package.json",
                   "ease_jupyter/examples/quickstart.ipynb"):
        assert needed in names, needed
    examples = {n for n in names if n.startswith("ease_jupyter/examples/")}
    assert examples and all(n.endswith(".ipynb") for n in examples), examples
    data = "ease_jupyter-0.1.0.data/data/"
    assert data + "etc/jupyter/jupyter_server_config.d/ease_jupyter.json" in names
    assert data + "share/jupyter/lab/settings/overrides.d/ease_jupyter.json" in names
    assert data + "share/jupyter/labextensions/ease-jupyter/install.json" in names
    built = {p.relative_to(PREBUILT).as_posix() for p in PREBUILT.rglob("*") if p.is_file()}
    shared = {n.removeprefix(data + "share/jupyter/labextensions/ease-jupyter/") for n in names
              if n.startswith(data + "share/jupyter/labextensions/ease-jupyter/")}
    assert built <= shared
    assert not [n for n in names if "node_modules" in n or n.endswith(".tsbuildinfo")]
