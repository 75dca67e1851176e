"""The schema layer is pure: it imports only ``ease_jupyter.errors`` from the
project, and neither torch nor pandas until data of those types is passed."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import ease_jupyter.schema as schema

SCHEMA_DIR = pathlib.Path(schema.__file__).parent


def _project_imports(path: pathlib.Path) -> set[str]:
    """Absolute names of the ease_jupyter modules a file imports."""
    found = set()
    package = "ease_jupyter.schema"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against ease_jupyter.schema
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.add(f"{base}.{node.module}" if node.module else base)
            elif node.module and node.module.startswith("ease_jupyter"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ease_jupyter"))
    return found


def test_schema_imports_only_itself_and_errors():
    files = sorted(SCHEMA_DIR.glob("*.py"))
    assert files
    for path in files:
        for module in _project_imports(path):
            assert module == "ease_jupyter.errors" or module.startswith("ease_jupyter.schema"), (path.name, module)


def test_importing_schema_loads_no_heavy_dependencies():
    code = (
        "import sys, ease_jupyter.schema as s;"
        "s.check_data(s.parse('input: [2] output: [3]'), [[1, 2]], [0]);"
        "print(sorted(m for m in ('torch', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SCHEMA_DIR.parents[1])
    assert out.stdout.strip() == "[]"


def test_public_api():
    assert sorted(schema.__all__) == sorted(
        ["TensorField", "DataType", "Program", "parse", "format_program", "check_data", "check_inputs", "CheckedData",
         "program_from_shapes", "to_jsonable"]
    )
    for name in schema.__all__:
        assert getattr(schema, name) is not None
