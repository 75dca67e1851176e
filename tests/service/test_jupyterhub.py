"""`easeml serve --jupyterhub` as a managed service of a real JupyterHub.

One JupyterHub (DummyAuthenticator, no single-user servers) and its
configurable-http-proxy run on loopback ports for the whole module; the hub
starts the ease.ml service itself, from ``c.JupyterHub.services``. Users and
their hub API tokens are made through the hub's REST API with the token of a
second (unmanaged) service that has the ``admin:users`` and ``tokens`` scopes.
Every ease.ml request goes through the hub's proxy, at
``/services/easeml/api/v1/...``.

The hub tests skip, saying why, only when jupyterhub or configurable-http-proxy
is missing (``scripts/jupyterhub.sh`` installs both; ``scripts/test.sh`` calls
it). The first few tests need neither.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from ease_jupyter.client import AuthError, Client
from ease_jupyter.service.hub import ease_name

from .conftest import http, until

SERVICE = "easeml"


# -------------------------------------------------------------- no hub needed
def test_client_uses_the_hub_token_only_for_hub_services(monkeypatch):
    monkeypatch.delenv("EASEML_TOKEN", raising=False)
    monkeypatch.delenv("EASEML_URL", raising=False)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "hub-secret")
    monkeypatch.delenv("JUPYTERHUB_BASE_URL", raising=False)
    for name in ("JUPYTERHUB_HOST", "JUPYTERHUB_PUBLIC_URL", "JUPYTERHUB_PUBLIC_HUB_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub.example:8081/hub/api")
    assert Client("http://hub.example:8000/services/easeml/").token == "hub-secret"  # the hub's own host
    with pytest.raises(AuthError, match="JUPYTERHUB_API_TOKEN"):  # a service path on another host: no hub token
        Client("https://someone-else.example/services/easeml")
    monkeypatch.setenv("EASEML_URL", "http://127.0.0.1:8000/services/easeml")
    assert Client().token == "hub-secret"
    assert Client(token="mine").token == "mine"
    monkeypatch.setenv("EASEML_TOKEN", "from-env")
    assert Client().token == "from-env"
    monkeypatch.delenv("EASEML_TOKEN")
    with pytest.raises(AuthError, match="JUPYTERHUB_API_TOKEN"):  # not a hub service: the hub token stays home
        Client("http://elsewhere.example:8585")
    monkeypatch.setenv("JUPYTERHUB_BASE_URL", "/jhub/")
    assert Client("http://localhost/jhub/services/easeml").token == "hub-secret"
    with pytest.raises(AuthError):
        Client("http://localhost/services/easeml")


def test_hub_names_map_to_the_same_ease_ml_name():
    assert ease_name("alice") == "alice" and ease_name("a.b-c_d") == "a.b-c_d"
    for bad in ("alice@example.org", "a..b", "x" * 65, "é"):
        with pytest.raises(PermissionError, match="username_map"):
            ease_name(bad)


def test_the_hub_cache_keeps_only_positive_answers():
    pytest.importorskip("jupyterhub")
    from ease_jupyter.service.hub import positive_cache

    cache = positive_cache(60)
    cache["token:a"] = {"name": "alice"}
    assert cache["token:a"] == {"name": "alice"}
    cache["token:a"] = None  # the hub refused the token (403): forget it, remember nothing
    cache["token:b"] = None
    for key in ("token:a", "token:b"):
        with pytest.raises(KeyError):
            cache[key]


def test_serve_jupyterhub_needs_the_hub_environment(monkeypatch, tmp_path):
    from ease_jupyter.cli import main

    for name in ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(main, ["serve", "--jupyterhub", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "JUPYTERHUB_API_TOKEN" in result.output


# -------------------------------------------------------------- the real hub

def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


CONFIG = """\
c = get_config()  # noqa: F821
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {proxy_port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.JupyterHub.db_url = "sqlite:///{tmp}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{tmp}/jupyterhub_cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{"root"}}
c.JupyterHub.log_level = "INFO"
c.JupyterHub.services = [
    {{
        "name": "{service}",
        "url": "http://127.0.0.1:{service_port}",
        "command": {command!r},
        "oauth_no_confirm": True,
        "display": False,
    }},
    {{"name": "test-admin", "api_token": "{admin_token}"}},
]
c.JupyterHub.load_roles = [
    {{"name": "user", "scopes": ["self", "access:services!service={service}"]}},
    {{"name": "server", "scopes": ["users:activity!user", "access:servers!server", "access:services!service={service}"]}},
    {{"name": "test-admin", "scopes": ["admin:users", "tokens"], "services": ["test-admin"]}},
]
"""


def _kill_leftovers(tmp: Path) -> None:
    """The hub stops its service and proxy on SIGTERM; should it not have
    (it was killed), end them here: the service by its data dir (in its
    command line), the proxy by the pid file the hub wrote in its cwd."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if int(proc.name) != os.getpid() and f"{tmp}/".encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                pass
    pid_file = tmp / "jupyterhub-proxy.pid"
    if pid_file.exists():
        try:
            pid = int(pid_file.read_text().strip())
            if b"configurable-http-proxy" in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(pid)
        except (OSError, ValueError):
            pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Hub:
    def __init__(self, tmp: Path, proxy_port: int, admin_token: str, proc: subprocess.Popen, log: Path):
        self.tmp, self.url, self.admin_token, self.proc, self.log = tmp, f"http://127.0.0.1:{proxy_port}", admin_token, proc, log
        self.service_url = f"{self.url}/services/{SERVICE}"
        self.tokens: dict[str, str] = {}

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def api(self, method: str, path: str, body: Any = None) -> Any:
        r = http(self.url, method, "/hub/api" + path, token=self.admin_token, body=body)
        assert r.status < 300, (method, path, r.status, r.body)
        return r.body

    def user(self, name: str, *, scopes: list[str] | None = None) -> str:
        """A hub user (made once) and a new hub API token of theirs."""
        return self.token_model(name, scopes=scopes)["token"]

    def token_model(self, name: str, *, scopes: list[str] | None = None) -> dict[str, Any]:
        """A hub user (made once) and the hub's model of a new API token of theirs (``token``, ``id``)."""
        if http(self.url, "GET", f"/hub/api/users/{name}", token=self.admin_token).status == 404:
            self.api("POST", f"/users/{name}")
        body: dict[str, Any] = {"note": "easeml test"}
        if scopes is not None:
            body["scopes"] = scopes
        return self.api("POST", f"/users/{name}/tokens", body)

    def call(self, method: str, path: str, token: str | None = None, **kw: Any):
        return http(self.service_url, method, "/api/v1" + path, token=token, **kw)


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Iterator[Hub]:
    if importlib.util.find_spec("jupyterhub") is None:
        pytest.skip("jupyterhub is not installed: run scripts/jupyterhub.sh (scripts/test.sh does)")
    if shutil.which("configurable-http-proxy") is None:
        pytest.skip("configurable-http-proxy is not on PATH: run scripts/jupyterhub.sh (scripts/test.sh does)")
    tmp = tmp_path_factory.mktemp("hub")
    proxy_port, proxy_api_port, hub_port, service_port = _free_ports(4)
    admin_token = secrets.token_hex(32)
    command = [sys.executable, "-m", "ease_jupyter", "serve", "--jupyterhub", "--data-dir", str(tmp / "easeml"),
               "--executor", "thread", "--workers", "1"]
    (tmp / "jupyterhub_config.py").write_text(CONFIG.format(
        proxy_port=proxy_port, proxy_api_port=proxy_api_port, hub_port=hub_port, service_port=service_port,
        tmp=tmp, service=SERVICE, command=command, admin_token=admin_token))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EASEML_", "JUPYTERHUB_", "CONFIGPROXY_"))}
    log = tmp / "hub.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(tmp / "jupyterhub_config.py")],
                                cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    running = Hub(tmp, proxy_port, admin_token, proc, log)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, f"jupyterhub exited with {proc.returncode}:\n{running.log_tail()}"
            try:  # before the proxy has the route, the hub answers (404, 503: not our JSON)
                if running.call("GET", "/health").status == 200:
                    break
            except (OSError, ValueError):
                pass
            assert time.monotonic() < deadline, f"the service never answered through the hub:\n{running.log_tail()}"
            time.sleep(0.5)
        yield running
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        except ProcessLookupError:
            pass
        _kill_leftovers(tmp)


@pytest.fixture(scope="module")
def tokens(hub: Hub) -> dict[str, str]:
    return {"alice": hub.user("alice"), "bob": hub.user("bob"), "root": hub.user("root")}  # root: admin_users


@pytest.mark.jupyterhub
def test_a_hub_token_is_served_as_that_hub_user(hub, tokens):
    me = hub.call("GET", "/whoami", tokens["alice"])
    assert me.status == 200 and me.body["name"] == "alice" and me.body["admin"] is False
    bearer = http(hub.service_url, "GET", "/api/v1/whoami", headers={"Authorization": f"Bearer {tokens['bob']}"})
    assert bearer.status == 200 and bearer.body["name"] == "bob"
    assert hub.call("GET", "/users", tokens["alice"]).status == 403  # admin only


@pytest.mark.jupyterhub
def test_a_hub_admin_is_an_ease_ml_admin(hub, tokens):
    me = hub.call("GET", "/whoami", tokens["root"])
    assert me.status == 200 and me.body == {**me.body, "name": "root", "admin": True}
    users = hub.call("GET", "/users", tokens["root"])
    assert users.status == 200 and {"alice", "root"} <= {u["name"] for u in users.body}
    assert hub.call("GET", "/admin/progress", tokens["root"]).status == 200


@pytest.mark.jupyterhub
def test_no_token_or_a_bad_one_is_401(hub, tokens):
    assert hub.call("GET", "/health").status == 200  # public
    for token in (None, "not-a-token", tokens["alice"][:-2] + "xx"):
        r = hub.call("GET", "/whoami", token)
        assert r.status == 401, token
        assert r.body["error"]["code"] == "unauthorized" and r.body["error"]["field"] == "Authorization"


@pytest.mark.jupyterhub
def test_a_hub_token_without_access_to_the_service_is_403(hub, tokens):
    narrow = hub.user("alice", scopes=["read:users:activity!user=alice"])
    r = hub.call("GET", "/whoami", narrow)
    assert r.status == 403 and f"access:services!service={SERVICE}" in r.body["error"]["message"]
    # what a single-user server's $JUPYTERHUB_API_TOKEN holds with the server role of the config above
    server_like = hub.user("alice", scopes=["users:activity!user=alice", f"access:services!service={SERVICE}"])
    assert hub.call("GET", "/whoami", server_like).body["name"] == "alice"


@pytest.mark.jupyterhub
def test_hub_users_are_isolated(hub, tokens):
    made = hub.call("POST", "/tasks", tokens["alice"], body={"name": "secret", "input": [4], "output": [3]})
    assert made.status in (200, 201)
    for who in ("bob", "root"):  # not even an admin opens another user's task by name
        r = hub.call("GET", "/tasks/secret", tokens[who])
        assert r.status == 404 and r.body["error"]["code"] == "not_found"
    assert hub.call("POST", "/tasks/secret/feed", tokens["bob"], body={"X": [[1, 2, 3, 4]], "y": [0]}).status == 404
    assert "secret" not in {t["name"] for t in hub.call("GET", "/tasks", tokens["bob"]).body}


@pytest.mark.jupyterhub
def test_client_with_a_hub_token_end_to_end(hub, tokens, monkeypatch):
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    client = Client(hub.service_url, token=tokens["alice"])
    assert client.whoami()["name"] == "alice"
    task = client.task("iris", input=[4], output=[3])
    version = task.feed(X[::3], y[::3])
    assert version["number"] == 1 and version["n_examples"] == 50
    assert "iris" in {t.name for t in client.tasks()}
    # inside a single-user server: EASEML_URL names the hub service, JUPYTERHUB_API_TOKEN is the token
    monkeypatch.delenv("EASEML_TOKEN", raising=False)
    monkeypatch.setenv("EASEML_URL", hub.service_url + "/")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", tokens["bob"])
    bobs = Client()
    assert bobs.whoami()["name"] == "bob" and "iris" not in {t.name for t in bobs.tasks()}


@pytest.mark.jupyterhub
def test_events_websocket_with_a_hub_token(hub, tokens):
    import asyncio

    import tornado.httpclient
    import tornado.websocket

    async def hello() -> dict[str, Any]:
        url = hub.service_url.replace("http://", "ws://") + "/api/v1/events"
        request = tornado.httpclient.HTTPRequest(url, headers={"Authorization": f"token {tokens['alice']}"})
        ws = await tornado.websocket.websocket_connect(request)
        try:
            return json.loads(await asyncio.wait_for(ws.read_message(), 30))
        finally:
            ws.close()

    first = asyncio.run(hello())
    assert first["type"] == "hello" and first["user"] == "alice" and first["admin"] is False


@pytest.mark.jupyterhub
def test_the_events_websocket_refuses_like_the_json_routes(hub, tokens):
    """A hub token without the service's access scope: 403 on the stream as on
    GET /whoami (the hub knows her; she may not use the service); a token
    nobody knows: 401 on both."""
    import asyncio

    import tornado.httpclient
    import tornado.websocket

    async def refusal(token: str) -> tuple[int, dict[str, Any]]:
        url = hub.service_url.replace("http://", "ws://") + "/api/v1/events"
        request = tornado.httpclient.HTTPRequest(url, headers={"Authorization": f"token {token}"})
        with pytest.raises(tornado.httpclient.HTTPClientError) as refused:
            await tornado.websocket.websocket_connect(request)
        return refused.value.code, json.loads(refused.value.response.body)

    narrow = hub.user("alice", scopes=["read:users:activity!user=alice"])
    for token, status, code in ((narrow, 403, "forbidden"), ("not-a-token", 401, "unauthorized")):
        http_answer = hub.call("GET", "/whoami", token)
        stream_status, body = asyncio.run(refusal(token))
        assert (http_answer.status, stream_status) == (status, status), body
        assert body["error"]["code"] == http_answer.body["error"]["code"] == code
    assert f"access:services!service={SERVICE}" in asyncio.run(refusal(narrow))[1]["error"]["message"]


@pytest.mark.jupyterhub
def test_ease_ml_tokens_still_work_in_hub_mode(hub):
    out = subprocess.run([sys.executable, "-m", "ease_jupyter", "users", "add", "robot", "--data-dir",
                          str(hub.tmp / "easeml")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip().split()[-1]
    me = hub.call("GET", "/whoami", token)
    assert me.status == 200 and me.body["name"] == "robot"


def _browser_login(hub: Hub, name: str) -> urllib.request.OpenerDirector:
    """A browser session of hub user ``name``: the hub's login form
    (DummyAuthenticator: any password), then the service's OAuth redirect;
    the returned opener holds the service's cookie."""
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(hub.url + "/hub/login", timeout=30).read()
    xsrf = next(c.value for c in jar if c.name == "_xsrf")
    form = urllib.parse.urlencode({"username": name, "password": "x", "_xsrf": xsrf}).encode()
    opener.open(hub.url + "/hub/login?next=" + urllib.parse.quote(f"/services/{SERVICE}/"), data=form, timeout=30)
    with opener.open(hub.service_url + "/", timeout=30) as r:  # -> authorize -> callback -> whoami
        assert r.status == 200 and json.loads(r.read())["name"] == name
    return opener


def _open(opener: urllib.request.OpenerDirector, method: str, url: str, *, token: str | None = None,
          body: Any = None) -> tuple[int, Any]:
    """(status, JSON body) of a request with the opener's cookies (and a token, if given)."""
    request = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {token}"} if token else {})
    try:
        with opener.open(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


@pytest.mark.jupyterhub
def test_browser_login_through_hub_oauth(hub, tokens):
    """A browser: the hub's login form, then the service's OAuth redirect,
    then the service's cookie authenticates GETs."""
    # not logged in: the service sends the browser to the hub's OAuth page
    no_redirect = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPCookieProcessor(CookieJar()))
    with pytest.raises(urllib.error.HTTPError) as first:
        no_redirect.open(hub.service_url + "/", timeout=30)
    assert first.value.code == 302 and "/hub/api/oauth2/authorize" in first.value.headers["Location"]
    opener = _browser_login(hub, "alice")
    with opener.open(hub.service_url + "/api/v1/whoami", timeout=30) as r:  # the cookie alone
        assert json.loads(r.read())["name"] == "alice"
    # a cookie-authenticated POST without the _xsrf token is not authenticated (cross-site request forgery)
    with pytest.raises(urllib.error.HTTPError) as post:
        opener.open(urllib.request.Request(hub.service_url + "/api/v1/tasks", method="POST",
                                           data=json.dumps({"name": "csrf", "input": [4], "output": [3]}).encode()),
                    timeout=30)
    assert post.value.code == 401


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@pytest.mark.jupyterhub
def test_the_proxy_keeps_the_service_prefix(hub, tokens):
    """The hub's proxy forwards /services/easeml/... unchanged, which is why
    the service serves its API under $JUPYTERHUB_SERVICE_PREFIX."""
    assert hub.call("GET", "/openapi.json").status == 200
    r = http(hub.url, "GET", "/services/" + SERVICE + "/nothing-here")
    assert r.status == 404 and r.body["error"]["code"] == "not_found"  # our JSON error, not the hub's page


# ------------------------------------------------------- tokens and accounts

@pytest.mark.jupyterhub
def test_a_made_up_token_beside_a_cookie_is_refused_and_never_remembered(hub, tokens):
    """A token alone decides who a request is: a token the hub refuses is a
    401 even beside alice's valid OAuth cookie, and it never becomes alice's."""
    opener = _browser_login(hub, "alice")
    whoami = hub.service_url + "/api/v1/whoami"
    made_up = "made-up-" + secrets.token_hex(8)
    status, body = _open(opener, "GET", whoami, token=made_up)
    assert status == 401 and body["error"]["code"] == "unauthorized"
    # from anywhere, with no cookie: still nobody's
    assert hub.call("GET", "/whoami", made_up).status == 401
    feed = hub.call("POST", "/tasks/secret/feed", made_up, body={"X": [[1, 2, 3, 4]], "y": [0]})
    assert feed.status == 401
    # a valid token beside the cookie is its own user; the cookie alone is alice
    status, body = _open(opener, "GET", whoami, token=tokens["bob"])
    assert status == 200 and body["name"] == "bob"
    assert _open(opener, "GET", whoami)[1]["name"] == "alice"


@pytest.mark.jupyterhub
def test_an_account_an_admin_made_is_not_the_hub_user_of_that_name(hub, tokens):
    """A hub admin's POST /users {"name": "carol"} before carol first logs in
    makes a local account: carol's hub login is another user, and the token
    the admin kept reaches none of her data (nor she the planted data)."""
    minted = hub.call("POST", "/users", tokens["root"], body={"name": "carol"})
    assert minted.status == 201 and minted.body["origin"] == "local"
    kept = minted.body["token"]
    assert hub.call("POST", "/tasks", kept, body={"name": "planted", "input": [4], "output": [3]}).status == 201
    carol = hub.user("carol")  # carol's first time through the hub
    assert "planted" not in {t["name"] for t in hub.call("GET", "/tasks", carol).body}
    me = hub.call("GET", "/whoami", carol).body
    assert me["id"] != minted.body["id"] and (me["name"], me["origin"]) == ("carol", "hub")
    assert hub.call("POST", "/tasks", carol, body={"name": "diary", "input": [4], "output": [3]}).status == 201
    assert hub.call("POST", "/tasks/diary/feed", carol, body={"X": [[1, 2, 3, 4]], "y": [0]}).status == 201
    for path in ("/tasks/diary", "/tasks/diary/examples", "/tasks/diary/versions"):
        assert hub.call("GET", path, kept).status == 404, path
    assert hub.call("POST", "/tasks/diary/feed", kept, body={"X": [[1, 2, 3, 4]], "y": [0]}).status == 404
    assert "diary" not in {t["name"] for t in hub.call("GET", "/tasks", kept).body}
    # a CLI account is not taken over by a hub user of its name either
    out = subprocess.run([sys.executable, "-m", "ease_jupyter", "users", "add", "erin", "--data-dir",
                          str(hub.tmp / "easeml")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    cli_erin = hub.call("GET", "/whoami", out.stdout.strip().split()[-1]).body
    hub_erin = hub.call("GET", "/whoami", hub.user("erin")).body
    assert (cli_erin["origin"], hub_erin["origin"]) == ("local", "hub") and cli_erin["id"] != hub_erin["id"]


@pytest.mark.jupyterhub
def test_a_demoted_hub_admin_loses_admin_within_the_documented_delay(hub, tokens):
    from ease_jupyter.service.hub import HUB_CACHE_SECONDS

    token = hub.user("dana")
    grant = lambda admin: http(hub.url, "PATCH", "/hub/api/users/dana", token=tokens["root"],  # noqa: E731
                               body={"admin": admin})  # only a hub admin may grant admin
    assert grant(True).status == 200
    assert until(lambda: hub.call("GET", "/whoami", token).body["admin"] is True, timeout=HUB_CACHE_SECONDS + 5)
    assert hub.call("GET", "/users", token).status == 200
    assert grant(False).status == 200
    demoted = time.monotonic()
    assert until(lambda: hub.call("GET", "/users", token).status == 403, timeout=HUB_CACHE_SECONDS + 10, every=0.2)
    assert time.monotonic() - demoted <= HUB_CACHE_SECONDS + 3  # the cache's lifetime, plus a loaded machine's slack
    assert hub.call("GET", "/whoami", token).body["admin"] is False


@pytest.mark.jupyterhub
def test_a_hub_token_revoked_in_the_hub_stops_working_within_the_documented_delay(hub):
    from ease_jupyter.service.hub import HUB_CACHE_SECONDS

    model = hub.token_model("frank")
    assert hub.call("GET", "/whoami", model["token"]).body["name"] == "frank"
    hub.api("DELETE", f"/users/frank/tokens/{model['id']}")
    revoked = time.monotonic()
    assert until(lambda: hub.call("GET", "/whoami", model["token"]).status == 401, timeout=HUB_CACHE_SECONDS + 10,
                 every=0.2)
    assert time.monotonic() - revoked <= HUB_CACHE_SECONDS + 3


@pytest.mark.jupyterhub
def test_ease_ml_tokens_are_revoked_through_the_api_and_the_cli_in_hub_mode(hub, tokens):
    made = hub.call("POST", "/users", tokens["root"], body={"name": "gina"}).body
    assert hub.call("GET", "/whoami", made["token"]).status == 200
    assert hub.call("DELETE", "/users/gina/tokens", tokens["alice"]).status == 403  # hub admins only
    assert hub.call("DELETE", "/users/gina/tokens", tokens["root"]).status == 200
    assert hub.call("GET", "/whoami", made["token"]).status == 401  # at once
    # the CLI writes the database; a token the service has not cached stops at once there too
    # (one it has cached, within the token cache's lifetime: tests/service/test_tokens.py)
    data_dir = ["--data-dir", str(hub.tmp / "easeml")]
    out = subprocess.run([sys.executable, "-m", "ease_jupyter", "users", "add", "hank", *data_dir],
                         capture_output=True, text=True, timeout=120)
    hank = out.stdout.strip().split()[-1]
    out = subprocess.run([sys.executable, "-m", "ease_jupyter", "users", "revoke", "hank", *data_dir],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert hub.call("GET", "/whoami", hank).status == 401


@pytest.mark.jupyterhub
def test_an_admin_link_gives_a_local_account_to_the_hub_user_and_revokes_its_token(hub, tokens):
    """``easeml users link ivy`` (an upgraded deployment whose accounts all
    became local): hub user ivy's login then sees the local account's data,
    and the token that account had stops working."""
    data_dir = ["--data-dir", str(hub.tmp / "easeml")]
    out = subprocess.run([sys.executable, "-m", "ease_jupyter", "users", "add", "ivy", *data_dir],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    old = out.stdout.strip().split()[-1]
    assert hub.call("POST", "/tasks", old, body={"name": "notes", "input": [4], "output": [3]}).status == 201
    local = hub.call("GET", "/whoami", old).body  # the service now holds the token in its cache
    out = subprocess.run([sys.executable, "-m", "ease_jupyter", "users", "link", "ivy", *data_dir],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    ivy = hub.user("ivy")  # ivy's first time through the hub
    me = hub.call("GET", "/whoami", ivy).body
    assert (me["id"], me["name"], me["origin"]) == (local["id"], "ivy", "hub")
    assert "notes" in {t["name"] for t in hub.call("GET", "/tasks", ivy).body}
    assert hub.call("GET", "/tasks/notes", ivy).status == 200
    gone = hub.call("GET", "/whoami", old)  # at once: reading hub user ivy dropped the cached token
    assert gone.status == 401, gone.body
    assert hub.call("GET", "/tasks/notes", old).status == 401
