"""What a kernel knows about itself (ease_jupyter.kernel_info), and a real
kernel's ``Client()`` registering with its kernel id and notebook path."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import nbformat
from jupyter_client import KernelManager
from nbclient import NotebookClient

from ease_jupyter import kernel_info
from ease_jupyter.kernel_info import KernelInfo, kernel_id_of

from service.conftest import start, until  # tests/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]


def test_the_kernel_id_comes_from_the_connection_file_name():
    kid = str(uuid.uuid4())
    assert kernel_id_of(f"/run/user/1/jupyter/runtime/kernel-{kid}.json") == kid
    assert kernel_id_of(f"kernel-{kid}.json") == kid
    for other in (None, "", "/tmp/tmpabc.json", "/x/kernel-.json", "/x/kernel-a/b.json", "/x/kernel-a.txt"):
        assert kernel_id_of(other) is None, other


def test_the_facts_come_from_the_environment():
    env = {"JUPYTERHUB_USER": "alice", "JUPYTERHUB_SERVER_NAME": "gpu", "JPY_SESSION_NAME": "/home/alice/a.ipynb"}
    assert kernel_info.kernel_info(env, "/r/kernel-k1.json") == KernelInfo(
        hub_user="alice", server_name="gpu", kernel_id="k1", notebook_path="/home/alice/a.ipynb", gateway=None)
    # A hub user's default server has the empty name; outside a hub there is no server name at all.
    assert kernel_info.kernel_info({"JUPYTERHUB_USER": "alice", "JUPYTERHUB_SERVER_NAME": ""}, None).server_name == ""
    assert kernel_info.kernel_info({"JUPYTERHUB_SERVER_NAME": "x"}, None) == KernelInfo()
    assert kernel_info.kernel_info({}, None).to_dict() == {
        "hub_user": None, "server_name": None, "kernel_id": None, "notebook_path": None, "gateway": None}


def test_outside_a_kernel_there_is_no_kernel_id():
    assert kernel_info.connection_file() is None
    assert kernel_info.current().kernel_id is None


def test_client_in_a_kernel_registers_its_kernel_id_and_notebook_path(tmp_path, monkeypatch):
    """A real kernel, started the way jupyter_server starts one (its
    connection file named ``kernel-<id>.json``): ``Client()`` there registers
    with the service of ``$EASEML_URL`` and records the task it opens."""
    running = start(tmp_path / "svc")
    token = running.user("alice")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("EASEML_URL", running.url)
    monkeypatch.setenv("EASEML_TOKEN", token)
    monkeypatch.setenv("EASEML_HEARTBEAT_SECONDS", "0.2")
    monkeypatch.setenv("JPY_SESSION_NAME", "work/analysis.ipynb")
    monkeypatch.delenv("EASEML_REGISTER", raising=False)
    kernel_id = str(uuid.uuid4())
    manager = KernelManager(kernel_name="python3", connection_file=str(tmp_path / f"kernel-{kernel_id}.json"))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from ease_jupyter import Client\n"
        "client = Client()\n"
        "client.task('iris', input=[4], output=[3])\n"
        "print(client.notebook.info.kernel_id)")])
    executor = NotebookClient(notebook, km=manager, timeout=120, store_widget_state=False,
                              resources={"metadata": {"path": str(tmp_path)}})
    try:
        with executor.setup_kernel():
            executor.execute_cell(notebook.cells[0], 0)
            assert "".join(o.get("text", "") for o in notebook.cells[0].outputs).strip() == kernel_id
            alice = running.client("alice")
            assert until(lambda: [s["tasks"] for s in alice.notebooks()] == [["iris"]], 30)
            (session,) = alice.notebooks()
            assert (session["kernel_id"], session["notebook_path"], session["alive"]) == (
                kernel_id, "work/analysis.ipynb", True)
    finally:
        running.thread.stop()
