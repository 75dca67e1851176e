"""``%easeml`` in a kernel served by a Jupyter Kernel Gateway.

All real and on loopback: an ease.ml service (``easeml serve``), a Jupyter
Kernel Gateway (``python -m kernel_gateway``, with a token), and Jupyter
servers started with ``--gateway-url`` pointing at it, so that their kernels
run in the gateway. Kernels are started through a Jupyter server's REST API
and driven over its kernel WebSocket, which it relays to the gateway.

The service's URL and token reach the kernel the two ways docs/gateway.md
describes: as ``KERNEL_EASEML_URL``/``KERNEL_EASEML_TOKEN`` in the Jupyter
server's environment (both sides pass ``KERNEL_*`` on without configuration),
or as ``EASEML_URL``/``EASEML_TOKEN`` allowed on both sides
(``GatewayClient.allowed_envs`` and the gateway's
``JupyterWebsocketPersonality.env_whitelist``). Either way a kernel that did not
get them would start an embedded service of its own (in a throwaway data dir
here) and the checks against the real service would fail.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import nbformat
import pytest

from ease_jupyter import Client
from ease_jupyter.kernel_info import gateway_of
from ease_jupyter.service import embedded
from ease_jupyter.service.testing import ServeProcess, add_user

from .conftest import JUPYTER_TOKEN, ROOT_FLAGS, JupyterServer, free_port, isolated_env

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"
GATEWAY_TOKEN = "kernel-gateway-test-token"
CELL_SECONDS = 300

# The processes take a while to start on a busy machine, and the quickstart trains its networks for real.
slow = pytest.mark.slow


def test_gateway_of_a_kernels_environment():
    """What registration records: the URL the deployment passes, a bare mark
    for a kernel that jupyter_server's GatewayClient started without one,
    nothing for a kernel started by a Jupyter server itself."""
    assert gateway_of({"KERNEL_EASEML_GATEWAY": "http://gw:8889", "KERNEL_USERNAME": "ada"}) == {
        "url": "http://gw:8889", "kernel_username": "ada"}
    assert gateway_of({"KERNEL_LAUNCH_TIMEOUT": "40"}) == {"url": None, "kernel_username": None}
    assert gateway_of({"JPY_SESSION_NAME": "/home/ada/a.ipynb", "EASEML_URL": "http://s"}) is None


@dataclass
class Deployment:
    service: ServeProcess
    tokens: dict[str, str]
    gateway: JupyterServer       # the Jupyter Kernel Gateway
    gateway_url: str
    by_prefix: JupyterServer     # KERNEL_EASEML_URL/KERNEL_EASEML_TOKEN: alice
    by_allow_list: JupyterServer  # EASEML_URL/EASEML_TOKEN, allowed on both sides: bob
    kernel_home: Path            # where a kernel that missed the settings would put its embedded service


def gateway_command(port: int) -> list[str]:
    return [
        sys.executable, "-m", "kernel_gateway", "--KernelGatewayApp.ip=127.0.0.1", f"--KernelGatewayApp.port={port}",
        "--KernelGatewayApp.port_retries=0", f"--KernelGatewayApp.auth_token={GATEWAY_TOKEN}",
        # jupyter_server's GatewayClient lists the gateway's kernels (its /api/status does too).
        "--JupyterWebsocketPersonality.list_kernels=True",
    ]


def gateway_env(tmp: Path, kernel_home: Path) -> dict[str, str]:
    """The lists go as KG_* variables: the gateway splits those at commas (its
    list options on the command line would take ``a,b`` as one name)."""
    return isolated_env(
        tmp, PYTHONPATH=str(ROOT), EASEML_DATA_DIR=str(kernel_home),
        # Names a client may set for a kernel besides KERNEL_*: the second recipe's,
        # and the notebook path jupyter_server gives a session's kernel.
        KG_ENV_WHITELIST="EASEML_URL,EASEML_TOKEN,JPY_SESSION_NAME",
        # Inherited from the gateway: the kernels import this checkout, and a kernel
        # that missed the service's settings starts its embedded service under a
        # throwaway data dir (never ~/.easeml).
        KG_ENV_PROCESS_WHITELIST="PYTHONPATH,EASEML_DATA_DIR")


def server_command(port: int, root: Path, gateway_url: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "jupyter_server", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={JUPYTER_TOKEN}", "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={root}", f"--gateway-url={gateway_url}", f"--GatewayClient.auth_token={GATEWAY_TOKEN}",
        *extra, *ROOT_FLAGS,
    ]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Iterator[Deployment]:
    pytest.importorskip("kernel_gateway", reason="jupyter_kernel_gateway is not installed (pip install jupyter_kernel_gateway)")
    tmp = tmp_path_factory.mktemp("kernel-gateway")
    kernel_home = tmp / "kernel-home"
    (tmp / "service").mkdir()
    service = ServeProcess(tmp / "service", cwd=ROOT)  # `python -m` in the checkout imports it
    processes: list[JupyterServer] = []
    try:
        tokens = {name: add_user(tmp / "service", name, cwd=ROOT) for name in ("alice", "bob")}
        gateway_port = free_port()
        gateway_url = f"http://127.0.0.1:{gateway_port}"
        gateway = JupyterServer(tmp / "gateway", gateway_env(tmp / "gateway", kernel_home),
                                command=gateway_command(gateway_port), port=gateway_port)
        processes.append(gateway)
        port = free_port()
        by_prefix = JupyterServer(
            tmp / "prefix",
            isolated_env(tmp / "prefix", KERNEL_EASEML_URL=service.url, KERNEL_EASEML_TOKEN=tokens["alice"],
                         KERNEL_EASEML_GATEWAY=gateway_url),
            command=server_command(port, tmp / "prefix" / "root", gateway_url,
                                   "--GatewayClient.allowed_envs=JPY_SESSION_NAME"), port=port)
        processes.append(by_prefix)
        port = free_port()
        by_allow_list = JupyterServer(
            tmp / "allow",
            isolated_env(tmp / "allow", EASEML_URL=service.url, EASEML_TOKEN=tokens["bob"]),
            command=server_command(port, tmp / "allow" / "root", gateway_url,
                                   "--GatewayClient.allowed_envs=EASEML_URL,EASEML_TOKEN"), port=port)
        processes.append(by_allow_list)
        wait_for_gateway(gateway)
        by_prefix.wait()
        by_allow_list.wait()
        yield Deployment(service, tokens, gateway, gateway_url, by_prefix, by_allow_list, kernel_home)
    finally:
        for process in processes:  # all at once, then waited for
            if process.process.poll() is None:
                process.process.terminate()
        for process in reversed(processes):
            process.stop()
        embedded.stop(kernel_home)  # only there when a kernel missed the service's settings
        service.stop()


def wait_for_gateway(gateway: JupyterServer, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gateway.process.poll() is not None:
            raise RuntimeError(f"the kernel gateway exited with {gateway.process.returncode}:\n{gateway.log()}")
        try:
            if gateway.get("/api/kernelspecs", GATEWAY_TOKEN, timeout=5).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"the kernel gateway did not answer within {timeout} s:\n{gateway.log()}")


class RemoteKernel:
    """A kernel started through a Jupyter server's REST API, driven over the
    server's kernel WebSocket (the Jupyter messaging protocol as JSON)."""

    def __init__(self, server: JupyterServer, notebook: str | None = None):
        """A bare kernel, or with ``notebook`` a session's (as JupyterLab opens a notebook)."""
        self.server = server
        if notebook is None:
            self.session_id, self.id = None, _post(server.url + "/api/kernels", {"name": "python3"})["id"]
        else:
            answer = _post(server.url + "/api/sessions", {"path": notebook, "type": "notebook", "name": notebook,
                                                          "kernel": {"name": "python3"}})
            self.session_id, self.id = answer["id"], answer["kernel"]["id"]
        self.session = uuid.uuid4().hex
        ws_url = server.url.replace("http://", "ws://") + f"/api/kernels/{self.id}/channels"
        import websocket  # websocket-client, a dependency of jupyter_server

        self.ws = websocket.create_connection(ws_url, header=[f"Authorization: token {JUPYTER_TOKEN}"],
                                              timeout=CELL_SECONDS)

    def execute(self, code: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Run ``code``; its execute_reply content and its iopub outputs."""
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "session": self.session, "username": "test", "msg_type": "execute_request",
                       "version": "5.3", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }))
        reply, outputs, idle = None, [], False
        while reply is None or not idle:
            message = json.loads(self.ws.recv())
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = message["msg_type"]
            if message["channel"] == "shell" and kind == "execute_reply":
                reply = message["content"]
            elif kind == "status":
                idle = message["content"]["execution_state"] == "idle"
            elif kind in ("stream", "error", "execute_result", "display_data"):
                outputs.append(message["content"])
        return reply, outputs

    def run(self, code: str) -> str:
        """Run ``code``, which must succeed; the text it printed or returned."""
        reply, outputs = self.execute(code)
        assert reply["status"] == "ok", f"{code!r} failed in the gateway's kernel:\n{_text(outputs)}"
        return _text(outputs)

    def close(self) -> None:
        self.ws.close()
        if self.session_id is None:
            _request(self.server.url + f"/api/kernels/{self.id}", method="DELETE")
        else:
            _request(self.server.url + f"/api/sessions/{self.session_id}", method="DELETE")


def _text(outputs: list[dict[str, Any]]) -> str:
    parts = []
    for out in outputs:
        if "text" in out:
            parts.append(out["text"])
        elif "traceback" in out:
            parts.append("\n".join(out["traceback"]))
        elif "text/plain" in out.get("data", {}):
            parts.append(out["data"]["text/plain"])
    return "\n".join(parts)


def _request(url: str, body: Any = None, method: str = "GET") -> Any:
    import urllib.request

    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method,
                                     headers={"Authorization": f"token {JUPYTER_TOKEN}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        text = response.read()
    return json.loads(text) if text else None


def _post(url: str, body: Any) -> Any:
    return _request(url, body, method="POST")


@slow
def test_the_kernel_runs_in_the_gateway(deployment):
    """The Jupyter server holds no kernel process of its own: the gateway lists the kernel it started."""
    kernel = RemoteKernel(deployment.by_prefix)
    try:
        listed = deployment.gateway.get("/api/kernels", GATEWAY_TOKEN)
        assert listed.status == 200 and kernel.id in [k["id"] for k in listed.body]
        # Only what the gateway lets through: KERNEL_* (and the names it allows), not the server's own settings.
        env = json.loads(kernel.run("import json, os\nprint(json.dumps(dict(os.environ)))"))
        assert env["KERNEL_EASEML_URL"] == deployment.service.url
        assert "JUPYTER_CONFIG_DIR" not in env
        assert env["EASEML_DATA_DIR"] == str(deployment.kernel_home) and env["PYTHONPATH"] == str(ROOT)
    finally:
        kernel.close()


@pytest.fixture(scope="module")
def quickstart(deployment) -> Iterator[RemoteKernel]:
    """The quickstart notebook's code cells, run in one gateway kernel of
    alice's server (a notebook session, as JupyterLab starts it), which knows
    the service only from KERNEL_EASEML_URL/KERNEL_EASEML_TOKEN; the kernel
    stays up for the module."""
    cells = [cell.source for cell in nbformat.read(QUICKSTART, as_version=4).cells if cell.cell_type == "code"]
    kernel = RemoteKernel(deployment.by_prefix, notebook=QUICKSTART.name)
    try:
        for source in cells:
            kernel.run(source)
        yield kernel
    finally:
        kernel.close()


@slow
def test_quickstart_through_the_gateway(deployment, quickstart):
    """Every cell succeeded, against the real service as alice: the task is
    declared, fed once and has a trained model; bob sees nothing."""
    assert quickstart.run("print(Client().url)").strip() == deployment.service.url
    alice = Client(deployment.service.url, deployment.tokens["alice"])
    assert [t.name for t in alice.tasks()] == ["digits"]
    task = alice.task("digits")
    assert [(v["number"], v["n_examples"]) for v in task.versions()] == [(1, 1000)]
    best = task.best()
    assert best is not None and best["accuracy"] > 0.8, best
    assert Client(deployment.service.url, deployment.tokens["bob"]).tasks() == []
    assert not deployment.kernel_home.exists()  # no embedded service was started instead


@slow
def test_the_session_records_the_gateway(deployment, quickstart):
    """The kernel registered itself: alice's session names the gateway kernel
    (its id, the gateway's URL, the notebook, the task it touched)."""
    alice = Client(deployment.service.url, deployment.tokens["alice"])
    deadline, mine = time.monotonic() + 60, []
    while time.monotonic() < deadline:
        mine = [s for s in alice.notebooks() if s["kernel_id"] == quickstart.id]
        if mine and "digits" in mine[0]["tasks"]:
            break
        time.sleep(0.5)
    assert len(mine) == 1, alice.notebooks()
    session = mine[0]
    assert session["alive"] and session["user"] == "alice"
    assert session["gateway"]["url"] == deployment.gateway_url, session
    assert session["notebook_path"].endswith(QUICKSTART.name), session
    assert "digits" in session["tasks"], session
    assert Client(deployment.service.url, deployment.tokens["bob"]).notebooks() == []


@slow
def test_allowed_names_reach_the_kernel(deployment):
    """The other recipe: EASEML_URL/EASEML_TOKEN, allowed by the Jupyter
    server's GatewayClient and by the gateway, make ``%easeml`` bob's."""
    kernel = RemoteKernel(deployment.by_allow_list)
    try:
        kernel.run("%load_ext ease_jupyter\n%easeml connect")
        me = json.loads(kernel.run("import json\nfrom ease_jupyter import Client\n"
                                   "client = Client()\nprint(json.dumps([client.url, client.whoami()]))"))
    finally:
        kernel.close()
    assert me[0] == deployment.service.url
    assert me[1]["name"] == "bob", me
