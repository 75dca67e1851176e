"""The contract suites (``ease_jupyter.testing``) stay test code: they need
pytest, so nothing else in the package imports them, and importing the
package, its service or its CLI does not import pytest."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ease_jupyter"
TESTING = PACKAGE / "testing"


def _imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules a file imports, relative imports resolved
    (``from .. import testing`` counts as ``ease_jupyter.testing``)."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, node.module] if node.module else base)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_nothing_outside_the_testing_package_imports_it():
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if TESTING not in path.parents
        for name in _imported_modules(path)
        if name == "ease_jupyter.testing" or name.startswith("ease_jupyter.testing.")
    ]
    assert offenders == []


def test_importing_the_package_and_the_service_does_not_import_pytest():
    code = (
        "import sys\n"
        "import ease_jupyter, ease_jupyter.service, ease_jupyter.cli, ease_jupyter.client\n"
        "import ease_jupyter.store.sql, ease_jupyter.execution.engine, ease_jupyter.magics\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest')\n"
        "             or m.startswith('ease_jupyter.testing')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
