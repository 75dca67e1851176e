"""The example notebooks, as files; and the local (in-process) path in a kernel.

The notebooks themselves run top to bottom under nbval (``--nbval-lax``),
which ``scripts/test.sh`` does with ``notebooks/`` (see notebooks/conftest.py
for how each gets its own embedded service); tests/browser runs the
quickstart in JupyterLab. Here: how they are saved, and that they use the
service.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = {"quickstart.ipynb", "multi_tenant.ipynb", "refine.ipynb", "provenance.ipynb"}


def test_the_example_notebooks_are_there():
    assert EXPECTED <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_saved_clean(path):
    """No outputs (plotly's random uids would churn every diff), no execution
    counts, no widget state; the plain python3 kernel."""
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code
    assert [i for i, cell in enumerate(code) if cell.outputs or cell.execution_count is not None] == []
    assert "widgets" not in notebook.metadata
    assert notebook.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_talks_to_the_service(path):
    """Through the magics and Client's default (the embedded service): no local
    workspace, no service address or token written into the notebook."""
    source = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")
    assert "%load_ext ease_jupyter" in source
    for banned in ("ease_jupyter.local", "LocalWorkspace", "EASEML_URL", "EASEML_TOKEN", "http://", "https://"):
        assert banned not in source, banned


LOCAL_CELLS = [
    "import tempfile\n"
    "import numpy as np\n"
    "from sklearn.datasets import load_digits\n"
    "from ease_jupyter.local import LocalWorkspace\n"
    "ws = LocalWorkspace.open(data_dir=tempfile.mkdtemp(prefix='easeml-'), user='alice')\n"
    "task = ws.task('digits', program='input: [64] output: [10]')",
    "X, y = load_digits(return_X_y=True)\n"
    "v1 = task.feed(X[:1600], y[:1600])\n"
    "v2 = task.refine(drop=[0, 1, 2])\n"
    "[(v.number, v.kind.value, v.n_examples) for v in task.versions()]",
    "jobs = task.train(only=['logreg', 'knn', 'svm_rbf'])\n"
    "task.best()",
    "accuracy = float(np.mean(task.infer(X[1600:]) == y[1600:]))\n"
    "assert accuracy > 0.9, accuracy",
]


def test_local_workspace_in_a_kernel(tmp_path, monkeypatch):
    """The in-process path (no service) in a real kernel: feed, refine, train, best, infer."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(NOTEBOOK_DIR.parent), os.environ.get("PYTHONPATH")])))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in LOCAL_CELLS])
    NotebookClient(notebook, timeout=300, kernel_name="python3", store_widget_state=False,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    shown = "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "[(1, 'feed', 1600), (2, 'refine', 1597)]" in shown
    assert "'accuracy'" in shown and "'dataset_version': 2" in shown
