"""The example notebooks, as files; and ``Client()`` in a kernel.

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

from ease_jupyter.service import embedded

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = {"quickstart.ipynb", "multi_tenant.ipynb", "refine.ipynb", "provenance.ipynb", "own_data.ipynb"}


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


def client_cells(data_dir: Path) -> list[str]:
    """Python's own path, no magics: ``Client()`` on the embedded service of ``data_dir``."""
    return [
        ("import numpy as np\n"
         "from sklearn.datasets import load_digits\n"
         "from ease_jupyter import Client\n"
         f"client = Client(data_dir={str(data_dir)!r})\n"
         "task = client.task('digits', input=[64], output=[10])"),
        ("X, y = load_digits(return_X_y=True)\n"
         "order = np.random.default_rng(0).permutation(len(y))  # held-out examples from every writer\n"
         "X, y = X[order], y[order]\n"
         "v1 = task.feed(X[:1600], y[:1600])\n"
         "v2 = task.refine(drop=[0, 1, 2])\n"
         "[(v['number'], v['kind'], v['n_examples']) for v in task.versions()]"),
        ("assert task.wait(timeout=600)\n"
         "best = task.best()\n"
         "{k: best[k] for k in ('model', 'dataset_version')}"),
        ("accuracy = float(np.mean(task.infer(X[1600:]) == y[1600:]))\n"
         "assert accuracy > 0.9, accuracy"),
    ]


def test_client_in_a_kernel(tmp_path, monkeypatch):
    """``Client(data_dir=...)`` in a real kernel starts the embedded service
    there: feed, refine, wait, best, infer."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(NOTEBOOK_DIR.parent), os.environ.get("PYTHONPATH")])))
    for var in ("EASEML_URL", "EASEML_TOKEN"):  # never an outside service
        monkeypatch.delenv(var, raising=False)
    data_dir = tmp_path / "easeml"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in client_cells(data_dir)])
    try:
        NotebookClient(notebook, timeout=600, kernel_name="python3", store_widget_state=False,
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        embedded.stop(data_dir)
    outputs = [o for cell in notebook.cells for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    shown = "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "[(1, 'feed', 1600), (2, 'refine', 1597)]" in shown
    assert "'dataset_version': 2" in shown
    assert embedded.read_service_file(data_dir) is not None  # the service the kernel used was this data dir's
