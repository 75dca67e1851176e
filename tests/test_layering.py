"""The pure core imports nothing from the outer layers (DESIGN.md, Layers)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ease_jupyter"
OUTER = {"store", "service", "widgets", "magics", "client", "cli", "local", "training", "datasets", "demo"}
FORBIDDEN_THIRD_PARTY = {"sqlalchemy", "alembic", "distributed", "dask", "ipywidgets", "IPython", "tornado"}
# layer (a folder or a module under ease_jupyter/) -> sibling layers it may use
PURE = {
    "schema": set(),
    "zoo": {"schema"},
    "selection": set(),
    "execution/automl": set(),
    "execution/mop/scheduler.py": set(),
    "execution/mop/simulation.py": set(),
    "execution/mop/shared_pool.py": set(),
    "execution/mop/pool_simulation.py": set(),
    "jobspec.py": {"zoo", "schema"},
}


def _imports(path: Path) -> set[str]:
    """Absolute module names imported by a file (relative imports resolved)."""
    module_parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module_parts[: len(module_parts) - node.level]
                names.add(".".join([*base, node.module] if node.module else base))
            elif node.module:
                names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(PURE))
def test_pure_layers_import_no_outer_layer(layer):
    root = PACKAGE / layer
    files = [root] if root.suffix == ".py" else sorted(root.rglob("*.py"))
    assert files and files[0].exists(), f"{layer} has no modules"
    own = layer.removesuffix(".py").split("/")
    allowed = {"errors", *PURE[layer]}
    for path in files:
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "ease_jupyter" and len(parts) > 1:
                inside = parts[1 : 1 + len(own)] == own or (
                    root.suffix == ".py" and len(own) > 1 and parts[1:len(own)] == own[:-1])
                assert inside or parts[1] in allowed, f"{path.relative_to(PACKAGE)} imports {name}"
                assert parts[1] not in OUTER
            assert parts[0] not in FORBIDDEN_THIRD_PARTY, f"{path.relative_to(PACKAGE)} imports {name}"


def test_the_service_has_one_training_path():
    """Jobs train only through the executors: no in-process second path
    (a local workspace, a per-config training module) is imported by the service."""
    for path in sorted((PACKAGE / "service").rglob("*.py")):
        for name in _imports(path):
            assert name.split(".")[:2] not in (["ease_jupyter", "local"], ["ease_jupyter", "training"]), (
                f"{path.relative_to(PACKAGE)} imports {name}")
