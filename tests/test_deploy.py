"""The shared deployment of ``deploy/start.sh``, started as a whole on loopback.

One run of the script starts PostgreSQL (the store), a dask-gateway server
that checks tokens with JupyterHub (the cluster), and JupyterHub, which starts
configurable-http-proxy, ``easeml serve --jupyterhub --engine gateway`` as its
managed service and single-user servers. Then, as a group would use it: two
users log in through the hub's login form; their servers are started through
the hub's REST API (the deployment's admin token); a kernel in each server
declares and feeds a task through ``%easeml`` and waits for a model; each
user sees only her own tasks, sessions and notifications; an ease.ml admin
comes from the hub group ``easeml-admins`` (its custom scope), not from hub
admin; the hub restarts the service after it is killed, and nothing stored
is lost.

Skipped, with the reason, only when a component is not installed here
(jupyterhub and configurable-http-proxy: scripts/jupyterhub.sh; dask-gateway;
PostgreSQL: scripts/postgres.sh installs it as root).
"""

from __future__ import annotations

import asyncio
import glob
import importlib.util
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest
from service.conftest import http, until  # tests/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy" / "start.sh"

def _missing() -> str | None:
    for module, how in (("jupyterhub", "run scripts/jupyterhub.sh"),
                        ("dask_gateway_server", "pip install 'dask-gateway-server[local]' dask-gateway"),
                        ("dask_gateway", "pip install dask-gateway")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed: {how}"
    if shutil.which("configurable-http-proxy") is None:
        return "configurable-http-proxy is not on PATH: run scripts/jupyterhub.sh"
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb") and os.getuid() != 0:
        return "PostgreSQL is not installed and only root may apt-get it: sudo apt-get install -y postgresql"
    return None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Deployment:
    def __init__(self, directory: Path, env: dict[str, str], exports: dict[str, str]):
        self.dir, self.env = directory, env
        self.url, self.admin_token = exports["EASEML_DEPLOY_URL"], exports["EASEML_DEPLOY_ADMIN_TOKEN"]
        self.password = exports["EASEML_DEPLOY_PASSWORD"]
        self.service_url = self.url + "/services/easeml"

    def script(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), *args], check=False, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def log_tail(self) -> str:
        return "".join(f"\n--- {p} ---\n" + p.read_text(errors="replace")[-3000:]
                       for p in (self.dir / "hub" / "hub.log", self.dir / "gateway" / "gateway.log") if p.exists())

    def hub(self, method: str, path: str, body: Any = None, token: str | None = None):
        return http(self.url, method, "/hub/api" + path, token=token or self.admin_token, body=body)

    def call(self, method: str, path: str, token: str, **kw: Any):
        return http(self.service_url, method, "/api/v1" + path, token=token, **kw)

    def login(self, name: str) -> None:
        """The hub's login form, as a browser sends it (any name, the shared password)."""
        jar = CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        opener.open(self.url + "/hub/login", timeout=30).read()
        xsrf = next(c.value for c in jar if c.name == "_xsrf")
        form = urllib.parse.urlencode({"username": name, "password": self.password, "_xsrf": xsrf}).encode()
        opener.open(self.url + "/hub/login?next=/hub/home", data=form, timeout=60).read()
        assert any(c.name == "jupyterhub-session-id" for c in jar), f"{name} was not logged in"
        wrong = urllib.parse.urlencode({"username": name + "x", "password": "wrong", "_xsrf": xsrf}).encode()
        opener2 = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        with pytest.raises(urllib.error.HTTPError) as refused:  # the password is checked
            opener2.open(self.url + "/hub/login", data=wrong, timeout=30)
        assert refused.value.code in (403, 401)

    def token(self, name: str, scopes: list[str] | None = None) -> str:
        body: dict[str, Any] = {"note": "test_deploy"}
        if scopes is not None:
            body["scopes"] = scopes
        r = self.hub("POST", f"/users/{name}/tokens", body)
        assert r.status == 201, r.body
        return r.body["token"]


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    reason = _missing()
    if reason:
        pytest.skip(reason)
    # Under /tmp, not pytest's tmp_path: PostgreSQL runs as the user `postgres` when we are
    # root, and must be able to enter the directory (pytest's are closed to others).
    directory = Path(tempfile.mkdtemp(prefix="easeml-deploy-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EASEML_", "JUPYTERHUB_", "CONFIGPROXY_"))}
    env.update(EASEML_DEPLOY_DIR=str(directory), EASEML_DEPLOY_PORT=str(_free_port()),
               EASEML_DEPLOY_EASEML_ADMINS="carol", EASEML_PG_PORT=str(_free_port()), PYTHON=sys.executable,
               EASEML_DEPLOY_HEARTBEAT_SECONDS="5")  # kernels register again soon after the restart
    started = subprocess.run(["bash", str(SCRIPT), "start"], check=False, env=env, capture_output=True, text=True, timeout=300)
    exports = dict(line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines()
                   if line.startswith("export "))
    try:
        assert started.returncode == 0, started.stderr[-4000:]
        yield Deployment(directory, env, exports)
    finally:
        stopped = subprocess.run(["bash", str(SCRIPT), "stop"], check=False, env=env, capture_output=True, text=True, timeout=180)
        leftovers = _processes_under(directory)
        for pid in leftovers:  # only ours: their command lines name the test's directory
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        shutil.rmtree(directory, ignore_errors=True)
        assert stopped.returncode == 0, stopped.stderr[-3000:]
        assert not leftovers, f"processes left running after deploy/start.sh stop: {leftovers}"


def _processes_under(directory: Path) -> list[int]:
    """Processes of the deployment: the directory is in their command line
    (hub, service, gateway) or is their working directory (single-user
    servers in their homes, the gateway's schedulers and workers)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if (str(directory).encode() in (proc / "cmdline").read_bytes()
                        or Path(os.readlink(proc / "cwd")).is_relative_to(directory)):
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


# -------------------------------------------------------- a kernel in a single-user server

def _start_server(d: Deployment, name: str) -> None:
    r = d.hub("POST", f"/users/{name}/server")
    assert r.status in (201, 202), (r.status, r.body)


def _server_ready(d: Deployment, name: str) -> bool:
    model = d.hub("GET", f"/users/{name}").body
    server = (model.get("servers") or {}).get("")
    return bool(server and server.get("ready"))


class Kernel:
    """A kernel in a user's single-user server, reached through the hub's proxy
    with the user's own token (the Jupyter server's REST API and its kernel
    WebSocket, messaging protocol 5)."""

    def __init__(self, d: Deployment, name: str, token: str):
        self.base, self.token, self.name = f"{d.url}/user/{name}", token, name
        r = http(self.base, "POST", "/api/kernels", token=token, body={"name": "python3"})
        assert r.status == 201, (r.status, r.body)
        self.id = r.body["id"]
        self.session = uuid.uuid4().hex

    def run(self, code: str, timeout: float = 240) -> str:
        """Execute ``code``; its printed output, or AssertionError with the traceback."""
        return asyncio.run(self._run(code, timeout))

    async def _run(self, code: str, timeout: float) -> str:
        import tornado.httpclient
        import tornado.websocket

        url = self.base.replace("http://", "ws://") + f"/api/kernels/{self.id}/channels?session_id={self.session}"
        request = tornado.httpclient.HTTPRequest(url, headers={"Authorization": f"token {self.token}"})
        ws = await tornado.websocket.websocket_connect(request)
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": self.name,
                       "session": self.session, "date": "", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        out: list[str] = []
        errors: list[str] = []
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                assert left > 0, f"{self.name}'s cell did not finish in {timeout} s; output so far: {''.join(out)}"
                raw = await asyncio.wait_for(ws.read_message(), left)
                assert raw is not None, "the kernel's WebSocket closed"
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = msg["header"]["msg_type"], msg["content"]
                if kind == "stream":
                    out.append(content["text"])
                elif kind == "error":
                    errors.append("\n".join(content["traceback"]))
                elif kind == "status" and content["execution_state"] == "idle":
                    break
        finally:
            ws.close()
        assert not errors, f"{self.name}'s cell failed:\n{errors[0]}\noutput: {''.join(out)}"
        return "".join(out)


NOTEBOOK = [
    "%load_ext ease_jupyter\n%easeml connect",
    "%%easeml task flowers\ninput: [4] output: [3]",
    ("from sklearn.datasets import load_iris\nX, y = load_iris(return_X_y=True)\nX, y = X[::{step}], y[::{step}]\n"
     "%easeml feed flowers X y"),
    # wait for a model (the first of the task's grid), then say what it is
    ("import time\nfrom ease_jupyter import Client\ntask = Client().task('flowers')\nbest = None\n"
     "deadline = time.monotonic() + 180\n"
     "while best is None and time.monotonic() < deadline:\n"
     "    try:\n        best = task.best()\n    except Exception:\n        time.sleep(1)\n"
     "print('BEST', best['model'], best['accuracy'], task.refresh()['latest_version']['n_examples'])"),
]
STEPS = {"alice": 1, "bob": 2}  # alice feeds all 150 irises, bob every other one (75)


def _events(d: Deployment, token: str) -> Any:
    from ease_jupyter.client import Client

    return Client(d.service_url, token=token).events()


def _drain(stream: Any) -> list[dict]:
    got = []
    while True:
        event = stream.get(0.5)
        if event is None:
            return got
        got.append(event)


def _snapshot(d: Deployment, token: str) -> dict[str, Any]:
    """What the store holds for a user: her tasks, their versions, their finished jobs."""
    tasks = d.call("GET", "/tasks", token).body
    out: dict[str, Any] = {}
    for t in tasks:
        versions = d.call("GET", f"/tasks/{t['name']}/versions", token).body
        jobs = d.call("GET", f"/tasks/{t['name']}/jobs", token).body
        out[t["name"]] = {
            "id": t["id"],
            "versions": [(v["number"], v["n_examples"]) for v in versions],
            "jobs": {j["id"]: j for j in jobs},
        }
    return out


@pytest.mark.slow
@pytest.mark.jupyterhub
def test_the_deployment_serves_a_group(deployment):
    d = deployment
    # -- two users log in (the form), and the hub starts their servers (its REST API)
    for name in ("alice", "bob"):
        d.login(name)
    tokens = {name: d.token(name) for name in ("alice", "bob", "carol")}
    for name in ("alice", "bob"):
        _start_server(d, name)
    streams = {name: _events(d, tokens[name]) for name in ("alice", "bob")}
    assert until(lambda: all(_server_ready(d, n) for n in ("alice", "bob")), timeout=240, every=1), d.log_tail()

    # -- a notebook in each declares and feeds a task through %easeml, and waits for a model
    kernels = {name: Kernel(d, name, tokens[name]) for name in ("alice", "bob")}
    for cell in NOTEBOOK[:3]:
        for name, kernel in kernels.items():
            kernel.run(cell.replace("{step}", str(STEPS[name])))
    for name, kernel in kernels.items():
        out = kernel.run(NOTEBOOK[3])  # notifications may print their own lines under it
        line = next((x for x in out.splitlines() if x.startswith("BEST ")), out)
        assert line.endswith(f" {150 // STEPS[name]}"), out

    # -- each sees only her own task, though both named it "flowers"
    ids = {}
    for name in ("alice", "bob"):
        tasks = d.call("GET", "/tasks", tokens[name]).body
        assert [t["name"] for t in tasks] == ["flowers"], tasks
        ids[name] = tasks[0]["id"]
        versions = d.call("GET", "/tasks/flowers/versions", tokens[name]).body
        assert [v["n_examples"] for v in versions] == [150 // STEPS[name]]
        assert d.call("GET", "/tasks/flowers/best", tokens[name]).status == 200
    assert ids["alice"] != ids["bob"]
    assert d.call("POST", "/tasks", tokens["alice"], body={"name": "diary", "input": [4], "output": [3]}).status == 201
    assert d.call("GET", "/tasks/diary", tokens["bob"]).status == 404
    assert d.call("GET", "/tasks/diary", tokens["carol"]).status == 404  # not even an admin opens it by name

    # -- her notebook sessions: registered by %easeml connect, each user sees her own
    for name in ("alice", "bob"):
        sessions = d.call("GET", "/notebooks", tokens[name])
        assert sessions.status == 200, sessions.body
        kernel_ids = {s["kernel_id"] for s in sessions.body}
        assert kernels[name].id in kernel_ids and {s["user"] for s in sessions.body} == {name}, sessions.body
        other = next(k for k in kernels if k != name)
        assert kernels[other].id not in kernel_ids

    # -- her notifications: her stream tells her about her task only
    for name, stream in streams.items():
        notes = [e for e in _drain(stream) if e.get("type") == "notification"]
        assert notes, f"{name} got no notification"
        assert {n["task_id"] for n in notes} == {ids[name]}, notes
        stream.close()

    # -- ease.ml admins: the group easeml-admins (its custom scope), not hub admin
    assert d.hub("GET", "/users/carol").body["admin"] is False
    assert d.call("GET", "/whoami", tokens["carol"]).body["admin"] is True
    assert d.call("GET", "/users", tokens["carol"]).status == 200
    assert d.call("GET", "/users", tokens["alice"]).status == 403
    assert d.call("GET", "/whoami", tokens["alice"]).body["admin"] is False
    narrow = d.token("carol", scopes=["access:services!service=easeml"])  # a token without the admin scope
    me = d.call("GET", "/whoami", narrow).body
    assert (me["name"], me["admin"]) == ("carol", False)

    # -- the hub restarts the service after it is killed; nothing stored is lost
    before = {name: _snapshot(d, tokens[name]) for name in ("alice", "bob")}
    restarted = d.script("restart-service")
    assert restarted.returncode == 0, restarted.stderr[-3000:] + d.log_tail()
    for name in ("alice", "bob"):
        after = _snapshot(d, tokens[name])
        assert after.keys() == before[name].keys()
        for task, was in before[name].items():
            now = after[task]
            assert (now["id"], now["versions"]) == (was["id"], was["versions"])
            assert was["jobs"].keys() <= now["jobs"].keys()  # no job forgotten
            for job_id, job in was["jobs"].items():
                if job["finished_at"] is not None:  # a finished job keeps its result
                    kept = now["jobs"][job_id]
                    assert (kept["status"], kept.get("accuracy")) == (job["status"], job.get("accuracy"))
        assert d.call("GET", "/tasks/flowers/best", tokens[name]).status == 200
    # the kernels carry on with the restarted service, and register again
    out = kernels["alice"].run("print('TASKS', sorted(t.name for t in Client().tasks()))")
    assert "TASKS ['diary', 'flowers']" in out.splitlines(), out
    assert until(lambda: kernels["alice"].id in {s["kernel_id"] for s in
                                                 d.call("GET", "/notebooks", tokens["alice"]).body},
                 timeout=60, every=1)


def test_help_names_every_command():
    out = subprocess.run(["bash", str(SCRIPT), "--help"], check=False, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    for word in ("start", "stop", "status", "restart-service", "EASEML_DEPLOY_DIR", "PostgreSQL", "dask-gateway"):
        assert word in out.stdout
    bad = subprocess.run(["bash", str(SCRIPT), "launch"], check=False, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "restart-service" in bad.stderr and not bad.stdout


def test_ease_ml_admins_come_from_the_hub_admin_flag_or_the_custom_scope():
    pytest.importorskip("jupyterhub")
    from jupyterhub.services.auth import HubAuth

    from ease_jupyter.service.hub import ADMIN_SCOPE, hub_admin

    auth = HubAuth(api_token="unused", api_url="http://127.0.0.1:9/hub/api")
    user = {"name": "carol", "admin": False, "groups": ["easeml-admins"], "scopes": ["access:services!service=easeml"]}
    assert hub_admin(user, auth) is False  # the group alone: rights follow the token's scopes
    assert hub_admin({**user, "scopes": [*user["scopes"], ADMIN_SCOPE]}, auth) is True
    assert hub_admin({**user, "scopes": [f"{ADMIN_SCOPE}!user=carol"]}, auth) is False  # a filtered grant
    assert hub_admin({**user, "admin": True}, auth) is True  # hub admins stay ease.ml admins


def _settings_dir(tmp_path: Path, dir_mode: int, settings_mode: int) -> Path:
    directory = tmp_path / "deploy"
    directory.mkdir()
    (directory / "settings.env").write_text("EASEML_DEPLOY_PORT=8123\nEASEML_DEPLOY_ADMIN_TOKEN=tok\nEASEML_DEPLOY_PASSWORD=pw\n")
    (directory / "settings.env").chmod(settings_mode)
    directory.chmod(dir_mode)
    return directory


def _script_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EASEML_", "XDG_RUNTIME_DIR"))}
    return {**env, "PYTHON": sys.executable, **extra}


@pytest.mark.parametrize(("dir_mode", "settings_mode", "bad"), [(0o700, 0o640, "settings.env"), (0o700, 0o604, "settings.env"),
                                                                 (0o750, 0o600, "deploy")])
def test_start_sh_refuses_a_settings_file_others_can_read(tmp_path, dir_mode, settings_mode, bad):
    directory = _settings_dir(tmp_path, dir_mode, settings_mode)
    out = subprocess.run(["bash", str(SCRIPT), "env"], check=False, capture_output=True, text=True, timeout=30,
                         env=_script_env(EASEML_DEPLOY_DIR=str(directory)))
    assert out.returncode != 0
    assert not out.stdout  # no secret was printed: settings.env was not read
    assert f"{bad} has mode {dir_mode if bad == 'deploy' else settings_mode:o}" in out.stderr
    assert "group or others" in out.stderr


def test_start_sh_reads_a_private_settings_file(tmp_path):
    directory = _settings_dir(tmp_path, 0o700, 0o600)
    out = subprocess.run(["bash", str(SCRIPT), "env"], check=False, capture_output=True, text=True, timeout=30,
                         env=_script_env(EASEML_DEPLOY_DIR=str(directory)))
    assert out.returncode == 0, out.stderr
    assert "export EASEML_DEPLOY_URL=http://127.0.0.1:8123" in out.stdout.splitlines()
    assert "export EASEML_DEPLOY_ADMIN_TOKEN=tok" in out.stdout.splitlines()


def test_start_sh_default_directory_is_private_to_the_user(tmp_path):
    out = subprocess.run(["bash", str(SCRIPT), "env"], check=False, capture_output=True, text=True, timeout=30,
                         env=_script_env(XDG_RUNTIME_DIR=str(tmp_path)))
    assert out.returncode != 0
    assert f"no deployment in {tmp_path}/.easeml-deploy" in out.stderr


def test_the_service_gets_its_database_url_in_its_environment_not_its_command_line(tmp_path):
    traitlets = pytest.importorskip("traitlets.config")
    url = "postgresql+psycopg2://easeml:s3cret@127.0.0.1:5432/easeml"
    settings = {"DIR": str(tmp_path), "PORT": "8000", "HUB_PORT": "8001", "PROXY_API_PORT": "8002",
                "SERVICE_PORT": "8003", "GATEWAY_PROXY": "127.0.0.1:8004", "PASSWORD": "pw", "DB_URL": url,
                "GATEWAY_TOKEN": "gt", "ADMIN_TOKEN": "at"}
    config = traitlets.Config()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in settings.items():
            mp.setenv("EASEML_DEPLOY_" + name, value)
        runpy.run_path(str(ROOT / "deploy" / "jupyterhub_config.py"), init_globals={"get_config": lambda: config})
    service = next(s for s in config.JupyterHub.services if s["name"] == "easeml")
    assert not any("s3cret" in part for part in service["command"])
    assert service["environment"]["EASEML_DB"] == url


def test_serve_reads_its_database_url_from_easeml_db(monkeypatch):
    from click.testing import CliRunner

    from ease_jupyter.cli.serve import command

    assert "EASEML_DB" in CliRunner().invoke(command, ["--help"]).output
    monkeypatch.setenv("EASEML_DB", "memory://")
    assert command.make_context("serve", []).params["db_url"] == "memory://"  # parsed, not run
    assert command.make_context("serve", ["--db", "sqlite://"]).params["db_url"] == "sqlite://"  # the flag wins
