"""Installing changes no tracked file, even where node is installed.

A copy of the checkout's tracked files is built the ways pip builds it
(PEP 517: ``build_editable`` for ``pip install -e .``, ``build_wheel`` for
``pip install .``, ``build_sdist``), in a fresh process, without build
isolation (no download), with ``node``, ``npm``, ``npx``, ``jlpm`` and
``yarn`` on PATH as stand-ins that record each call. The committed
labextension build must be packed as it is: no stand-in is called, and every
tracked file is byte for byte what it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NODE_TOOLS = ("node", "npm", "npx", "jlpm", "yarn")


def tracked_files(repo: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and (repo / p).is_file()]


def digests(root: Path, paths: list[str]) -> dict[str, str]:
    return {p: hashlib.sha256((root / p).read_bytes()).hexdigest() for p in paths}


def fake_node_tools(bin_dir: Path, calls: Path) -> None:
    bin_dir.mkdir()
    for tool in NODE_TOOLS:
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\necho \"{tool} $*\" >> '{calls}'\nexit 0\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_building_for_install_changes_no_tracked_file_with_node_on_path(tmp_path):
    src, out = tmp_path / "src", tmp_path / "dist"
    paths = tracked_files(REPO)
    for path in paths:
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, src / path)
    before = digests(src, paths)
    calls = tmp_path / "node-calls.log"
    fake_node_tools(tmp_path / "bin", calls)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "PYTHONDONTWRITEBYTECODE": "1"}
    assert shutil.which("node", path=env["PATH"]) == str(tmp_path / "bin" / "node")
    build = textwrap.dedent(f"""
        import hatchling.build as backend
        for hook in (backend.build_editable, backend.build_wheel, backend.build_sdist):
            print(hook({str(out)!r}))
    """)
    done = subprocess.run([sys.executable, "-c", build], cwd=src, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    editable, wheel, sdist = done.stdout.split()

    assert not calls.exists(), f"the build ran node tools: {calls.read_text()}"
    after = digests(src, paths)
    assert [p for p in paths if before[p] != after[p]] == []
    added = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    assert added == sorted(paths)  # nothing written into the checkout either
    # and the packages hold the committed build and the notebooks as they are
    with zipfile.ZipFile(out / wheel) as packed:
        names = set(packed.namelist())
        assert "ease_jupyter/examples/quickstart.ipynb" in names
        style = next(n for n in names if n.endswith("labextensions/ease-jupyter/static/style.js"))
        assert packed.read(style) == (src / "ease_jupyter/labextension/static/style.js").read_bytes()
    assert editable.endswith(".whl") and sdist.endswith(".tar.gz")
