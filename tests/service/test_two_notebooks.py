"""Two notebooks in two separate kernels (nbclient), as two users, against one
``easeml serve`` subprocess (issue 5, item 8). Both get trained models and can
infer; neither can see, feed, infer with or cancel the other's task.

The notebooks are built here with nbformat and run concurrently. Each asserts
in its own cells; the test then checks the outputs and, from outside, that the
other user's attempts changed nothing.
"""

from __future__ import annotations

import asyncio
import json

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

from ease_jupyter.client import Client  # noqa: E402

from ease_jupyter.service.testing import ServeProcess, add_user  # noqa: E402


def notebook(url: str, token: str, mine: str, other: str, dataset: str, n_inputs: int, flags: str):
    """A notebook for one user: its task ``mine``, and attempts on ``other``."""
    code = nbformat.v4.new_code_cell
    cells = [
        code("%load_ext ease_jupyter"),
        code("import os, pathlib, time\n"
             "import numpy as np\n"
             f"from sklearn.datasets import {dataset}\n"
             "from ease_jupyter import Client\n"
             "from ease_jupyter.errors import NotFoundError\n"
             f"X, y = {dataset}(return_X_y=True)\n"
             "X, y = X.astype('float32'), y.astype('int64')"),
        code(f"me = %easeml connect {url} --token={token}\nprint('USER', me.data['name'])"),
        code(f"%%easeml task {mine}\ninput: [{n_inputs}]\noutput: [3]\n"),
        code(f"v = %easeml feed {mine} X y\n"
             "assert v.data['number'] == 1 and v.data['n_examples'] == len(y), v.data\n"
             f"pathlib.Path({flags!r}, {mine!r}).touch()  # tell the other notebook this task exists"),
        code(f"st = %easeml status {mine} --timeout 120\n"
             "assert st.data['idle'], st.data\n"
             "assert st.data['jobs'].get('succeeded', 0) >= 1, st.data\n"
             f"best = Client({url!r}, {token!r}).task({mine!r}).best()\n"
             "print('BEST', best['model'], best['accuracy'])\n"
             "assert best['accuracy'] > 0.8, best"),
        code(f"pred = %easeml infer {mine} X\n"
             "acc = float((np.asarray(pred.data) == y).mean())\n"
             "print('ACC', acc)\n"
             "assert len(pred.data) == len(y) and acc > 0.85, acc"),
        code("deadline = time.monotonic() + 120  # wait until the other user's task surely exists\n"
             f"while not pathlib.Path({flags!r}, {other!r}).exists():\n"
             "    assert time.monotonic() < deadline, 'the other notebook never created its task'\n"
             "    time.sleep(0.2)\n"
             "refused = []\n"
             "attempts = {\n"
             f"    'open': lambda: Client({url!r}, {token!r}).task({other!r}),\n"
             f"    'status': lambda: get_ipython().run_line_magic('easeml', 'status {other}'),\n"
             f"    'feed': lambda: get_ipython().run_line_magic('easeml', 'feed {other} X y'),\n"
             f"    'infer': lambda: get_ipython().run_line_magic('easeml', 'infer {other} X'),\n"
             f"    'models': lambda: get_ipython().run_line_magic('easeml', 'models {other}'),\n"
             f"    'cancel': lambda: get_ipython().run_line_magic('easeml', 'cancel {other}'),\n"
             "}\n"
             "for what, attempt in attempts.items():\n"
             "    try:\n"
             "        attempt()\n"
             "    except NotFoundError:\n"
             "        refused.append(what)\n"
             "    else:\n"
             "        raise AssertionError(f'{what} on the other user\\'s task did not raise NotFoundError')\n"
             "board = %easeml status\n"
             f"assert [row['task'] for row in board.rows] == [{mine!r}], board.rows\n"
             "print('ISOLATED', ','.join(refused))"),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _text(nb) -> str:
    return "".join(out.get("text", "") for cell in nb.cells for out in cell.get("outputs", []) if out.get("name") == "stdout")


@pytest.mark.slow
def test_two_notebooks_two_users_one_service(tmp_path, monkeypatch):
    data = tmp_path / "service"
    flags = tmp_path / "flags"
    flags.mkdir()
    tokens = {name: add_user(data, name) for name in ("ada", "bob")}
    # The kernels must never fall back to an embedded service of their own.
    for var in ("EASEML_URL", "EASEML_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EASEML_DATA_DIR", str(tmp_path / "kernel-home"))
    server = ServeProcess(data, "--workers", "2", "--max-running", "2")
    try:
        books = {
            "ada": notebook(server.url, tokens["ada"], "ada-iris", "bob-wine", "load_iris", 4, str(flags)),
            "bob": notebook(server.url, tokens["bob"], "bob-wine", "ada-iris", "load_wine", 13, str(flags)),
        }
        clients = {name: nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                                 resources={"metadata": {"path": str(tmp_path)}})
                   for name, nb in books.items()}

        async def run_both() -> None:
            await asyncio.gather(*(c.async_execute() for c in clients.values()))

        try:
            asyncio.run(run_both())
        except nbclient.exceptions.CellExecutionError as error:
            pytest.fail(f"a notebook cell failed:\n{error}")

        outputs = {name: _text(nb) for name, nb in books.items()}
        for name, text in outputs.items():
            assert f"USER {name}" in text, text
            assert "ISOLATED open,status,feed,infer,models,cancel" in text, text
            acc = float(text.split("ACC ")[1].split()[0])
            assert acc > 0.85
            assert not any(out.get("output_type") == "error" for cell in books[name].cells for out in cell.outputs)

        # From outside: each task still has exactly its owner's one feed, is not
        # cancelled, and its owner sees only it.
        for name, mine in (("ada", "ada-iris"), ("bob", "bob-wine")):
            client = Client(server.url, tokens[name])
            assert [t.name for t in client.tasks()] == [mine]
            task = client.task(mine)
            assert [v["number"] for v in task.versions()] == [1]
            assert task.refresh()["cancelled"] is False
            assert task.best()["accuracy"] > 0.8
        assert not server.errors(), server.errors()[:5]
        assert json.dumps(outputs)  # outputs are plain text
    finally:
        assert server.stop() == 0
