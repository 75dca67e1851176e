"""The zoo is an inner layer: it imports only schema types, errors and itself,
and importing it loads neither torch nor scikit-learn."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import ease_jupyter.zoo

ZOO = pathlib.Path(ease_jupyter.zoo.__file__).parent
# the schema layer's types: programs, and the table schema a table task's preprocessing follows
ALLOWED = ("ease_jupyter.zoo", "ease_jupyter.schema.types", "ease_jupyter.schema.table", "ease_jupyter.errors")


def test_zoo_imports_only_inner_layers():
    for path in ZOO.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                continue
            for m in mods:
                if m.startswith("ease_jupyter"):
                    assert m.startswith(ALLOWED), f"{path.name} imports {m}"


def test_import_is_light():
    code = (
        "import sys, ease_jupyter.zoo as z;"
        "from ease_jupyter.schema.types import Program, DataType, TensorField as T;"
        "p = Program(DataType((T((64,)),)), DataType((T((10,)),)));"
        "z.candidates(p);"
        "print('torch' in sys.modules, 'sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ZOO.parent.parent).stdout.split()
    assert out == ["False", "False"]
