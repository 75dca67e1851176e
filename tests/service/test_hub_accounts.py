"""JupyterHub mode without a hub: a real service in this process whose hub
is a fake identity (``FakeHub``: the hub token ``hub-<name>`` is hub user
<name>), so that these run where jupyterhub is installed but no hub runs.

* One name, two accounts (docs/service.md): an admin's ``/users/{name}``
  routes each address exactly one of a local account and a hub user of the
  same name, before and after ``easeml users link``; ``?origin=`` picks it.
* The event stream refuses like the JSON routes: 401 for nobody, 403 for a
  hub caller who may not use the service.

tests/service/test_jupyterhub.py checks the same stream refusal against a
real hub."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ease_jupyter.errors import DataError, NotFoundError
from ease_jupyter.service import budget
from ease_jupyter.service.user_models import user_setting
from ease_jupyter.store.base import HUB, LOCAL

from .conftest import Running, serving

ACCESS = "access:services!service=easeml"


class FakeHub:
    """The parts of jupyterhub's ``HubOAuth`` that ``hub.HubTokens`` uses,
    answering from ``models`` (token -> the hub's ``GET /hub/api/user``)."""

    access_scopes = frozenset({ACCESS})

    def __init__(self) -> None:
        self.models: dict[str, dict[str, Any]] = {}

    def add(self, name: str, *, scopes: tuple[str, ...] = (ACCESS,), kind: str = "user", admin: bool = False,
            token: str | None = None) -> str:
        token = token or f"hub-{name}"
        self.models[token] = {"kind": kind, "name": name, "admin": admin, "scopes": list(scopes)}
        return token

    def user_for_token(self, token: str, sync: bool = True) -> Any:
        model = self.models.get(token)
        if sync:
            return model

        async def answer() -> Any:
            return model

        return answer()

    def get_token(self, handler: Any, in_cookie: bool = True) -> None:
        return None  # no ?token= for the JSON routes in these tests

    def get_user(self, handler: Any, sync: bool = True) -> Any:
        async def nobody() -> None:  # no OAuth cookie
            return None

        return nobody()

    def check_scopes(self, required: Any, model: dict[str, Any]) -> set[str]:
        return set(required) & set(model.get("scopes", ()))


@pytest.fixture
def hub_mode(tmp_path, monkeypatch):
    """(service in JupyterHub mode, its fake hub); local admin ``admin``."""
    pytest.importorskip("jupyterhub")  # make_app asks jupyterhub which login routes a hub auth needs
    from ease_jupyter.service import hub

    fake = FakeHub()
    monkeypatch.setattr(hub, "make_hub_auth", lambda *args, **kwargs: fake)
    with serving(tmp_path, admins=("admin",), jupyterhub=True) as running:
        yield running, fake


def _cap(running: Running, user_id: int) -> float | None:
    return budget.read_limits(running.service.store, user_id, budget.CAP_PREFIX).seconds


def _two_carols(running: Running, fake: FakeHub, token_name: str = "carol"):
    """A local account carol (``POST /users``) and hub user carol (her first login)."""
    made = running.call("POST", "/users", "admin", body={"name": token_name})
    assert made.status == 201, made.body
    me = running.call("GET", "/whoami", token=fake.add(token_name))
    assert me.status == 200 and me.body["origin"] == HUB and me.body["id"] != made.body["id"]
    store = running.service.store
    return store.user_by_name(token_name, LOCAL), store.user_by_name(token_name, HUB)


# ---------------------------------------------------------- one name, two accounts
def test_origin_addresses_the_local_account_beside_a_hub_user_of_its_name(hub_mode):
    running, fake = hub_mode
    local, hub_carol = _two_carols(running, fake)
    store = running.service.store

    capped = running.call("PUT", "/users/carol/budget?origin=local", "admin", body={"seconds": 100})
    assert capped.status == 200, capped.body
    assert (capped.body["user"], capped.body["origin"], capped.body["cap"]["seconds"]) == ("carol", LOCAL, 100)
    assert (_cap(running, local.id), _cap(running, hub_carol.id)) == (100, None)  # the hub user is untouched
    read = running.call("GET", "/users/carol/budget?origin=local", "admin").body
    assert (read["origin"], read["cap"]["seconds"]) == (LOCAL, 100)

    allowed = running.call("PUT", "/users/carol?origin=local", "admin", body={"allow_user_models": True})
    assert allowed.status == 200 and allowed.body == {"name": "carol", "allow_user_models": True}
    assert (user_setting(store, local), user_setting(store, hub_carol)) == (True, None)

    # Without ?origin= the name means hub user carol in hub mode, and the answer says so.
    bare = running.call("PUT", "/users/carol/budget", "admin", body={"seconds": 7})
    assert bare.status == 200 and bare.body["origin"] == HUB
    assert (_cap(running, local.id), _cap(running, hub_carol.id)) == (100, 7)
    hub_read = running.call("GET", "/users/carol/budget?origin=hub", "admin").body
    assert (hub_read["origin"], hub_read["cap"]["seconds"]) == (HUB, 7)
    assert running.call("PUT", "/users/carol", "admin", body={"allow_user_models": False}).status == 200
    assert (user_setting(store, local), user_setting(store, hub_carol)) == (True, False)


def test_after_a_link_each_of_the_two_rows_is_addressed_by_its_origin(hub_mode):
    """``easeml users link carol`` keeps both rows: the local account becomes
    hub user carol and the empty hub account a local one. Each stays reachable,
    and a bare name follows the link."""
    running, fake = hub_mode
    local, empty_hub = _two_carols(running, fake)
    store = running.service.store
    store.link_user_to_hub(local.id)  # what the command does on the database

    linked = running.call("PUT", "/users/carol/budget", "admin", body={"seconds": 50})
    assert linked.status == 200 and linked.body["origin"] == HUB
    set_aside = running.call("PUT", "/users/carol/budget?origin=local", "admin", body={"seconds": 5})
    assert set_aside.status == 200 and set_aside.body["origin"] == LOCAL
    assert (_cap(running, local.id), _cap(running, empty_hub.id)) == (50, 5)
    for origin, user in ((HUB, local), (LOCAL, empty_hub)):
        assert user_setting(store, user) is None
        answer = running.call("PUT", f"/users/carol?origin={origin}", "admin", body={"allow_user_models": True})
        assert answer.status == 200 and user_setting(store, user) is True


def test_a_bad_or_unknown_origin_is_refused_and_changes_nothing(hub_mode):
    running, fake = hub_mode
    local, hub_carol = _two_carols(running, fake)
    running.call("POST", "/users", "admin", body={"name": "robot"})
    for path in ("/users/carol/budget?origin=both", "/users/carol/budget?origin="):
        bad = running.call("PUT", path, "admin", body={"seconds": 1})
        assert bad.status == 400 and bad.body["error"]["field"] == "origin", bad.body
    bad = running.call("PUT", "/users/carol?origin=HUB", "admin", body={"allow_user_models": True})
    assert bad.status == 400 and bad.body["error"]["field"] == "origin"
    missing = running.call("PUT", "/users/robot/budget?origin=hub", "admin", body={"seconds": 1})
    assert missing.status == 404 and "origin=hub" in missing.body["error"]["message"]
    assert running.call("GET", "/users/robot?origin=hub", "admin").status == 405  # PUT only, as before
    # The only account of a name needs no origin, whichever namespace holds it.
    only = running.call("PUT", "/users/robot/budget", "admin", body={"seconds": 3})
    assert only.status == 200 and only.body["origin"] == LOCAL
    store = running.service.store
    assert (_cap(running, local.id), _cap(running, hub_carol.id)) == (None, None)
    assert (user_setting(store, local), user_setting(store, hub_carol)) == (None, None)
    assert running.call("PUT", "/users/carol/budget?origin=local", token=fake.add("mallory"),
                        body={"seconds": 1}).status == 403  # admins only, hub user or not


def test_the_clients_user_methods_take_the_origin(hub_mode):
    """``Client.set_budget``, ``budget`` and ``allow_user_models`` pass
    ``origin=`` as ``?origin=``: each reaches the one account it names."""
    running, fake = hub_mode
    local, hub_carol = _two_carols(running, fake)
    running.call("POST", "/users", "admin", body={"name": "robot"})
    store = running.service.store
    admin = running.client("admin")

    capped = admin.set_budget(seconds=100, user="carol", origin="local")
    assert (capped["user"], capped["origin"], capped["cap"]["seconds"]) == ("carol", LOCAL, 100)
    assert (_cap(running, local.id), _cap(running, hub_carol.id)) == (100, None)
    assert admin.set_budget(seconds=7, user="carol", origin="hub")["origin"] == HUB
    assert (_cap(running, local.id), _cap(running, hub_carol.id)) == (100, 7)
    read = admin.budget("carol", origin="local")
    assert (read["origin"], read["cap"]["seconds"]) == (LOCAL, 100)
    assert admin.budget("carol")["origin"] == HUB  # no origin: the service's default, as before

    assert admin.allow_user_models("carol", origin="local") == {"name": "carol", "allow_user_models": True}
    assert (user_setting(store, local), user_setting(store, hub_carol)) == (True, None)
    admin.allow_user_models("carol", False, origin="hub")
    assert (user_setting(store, local), user_setting(store, hub_carol)) == (True, False)

    with pytest.raises(NotFoundError):  # no hub user robot
        admin.budget("robot", origin="hub")
    for call in (lambda: admin.set_budget(seconds=1, user="carol", origin="both"),
                 lambda: admin.allow_user_models("carol", origin="HUB"),
                 lambda: admin.budget(origin="local")):  # an origin names an account of user=
        with pytest.raises(DataError) as caught:
            call()
        assert caught.value.field == "origin"
    assert (_cap(running, local.id), _cap(running, hub_carol.id)) == (100, 7)
    assert (user_setting(store, local), user_setting(store, hub_carol)) == (True, False)


def test_without_the_hub_a_bare_name_means_the_local_account(svc):
    """A standalone service on a data dir that once ran under a hub: its hub
    rows log in nowhere, so a bare name is the local account; ?origin=hub
    still reaches the hub row."""
    store = svc.service.store
    hub_alice = store.create_user("alice", None, origin=HUB)
    local = store.user_by_name("alice", LOCAL)
    bare = svc.call("PUT", "/users/alice/budget", "admin", body={"seconds": 9})
    assert bare.status == 200 and bare.body["origin"] == LOCAL
    hub = svc.call("PUT", "/users/alice/budget?origin=hub", "admin", body={"seconds": 4})
    assert hub.status == 200 and hub.body["origin"] == HUB
    assert (_cap(svc, local.id), _cap(svc, hub_alice.id)) == (9, 4)


# ---------------------------------------------------------- the event stream's refusals
async def _open(running: Running, token: str | None) -> tuple[int, Any]:
    """(status, JSON body) of a refused WebSocket upgrade, or (101, hello)."""
    import tornado.httpclient
    import tornado.websocket

    url = running.url.replace("http://", "ws://") + "/api/v1/events"
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        ws = await tornado.websocket.websocket_connect(tornado.httpclient.HTTPRequest(url, headers=headers))
    except tornado.httpclient.HTTPClientError as error:
        return error.code, json.loads(error.response.body)
    try:
        return 101, json.loads(await asyncio.wait_for(ws.read_message(), 30))
    finally:
        ws.close()


def test_the_event_stream_answers_a_refused_hub_caller_403_like_the_json_routes(hub_mode):
    running, fake = hub_mode
    callers = {
        "no access scope": fake.add("alice", scopes=("read:users:activity!user=alice",), token="narrow"),
        "a hub service": fake.add("robot-svc", kind="service", token="service"),
        "no ease.ml name": fake.add("alice@example.org", token="email"),
    }
    for why, token in callers.items():
        http = running.call("GET", "/whoami", token=token)
        status, body = asyncio.run(_open(running, token))
        assert (http.status, status) == (403, 403), why
        assert body["error"]["code"] == http.body["error"]["code"] == "forbidden", why
        assert body["error"]["message"] == http.body["error"]["message"], why
    for token in (None, "hub-nobody"):  # nobody identified: 401 on both
        assert running.call("GET", "/whoami", token=token).status == 401
        status, body = asyncio.run(_open(running, token))
        assert status == 401 and body["error"]["code"] == "unauthorized"
    status, hello = asyncio.run(_open(running, fake.add("alice")))
    assert status == 101 and (hello["type"], hello["user"]) == ("hello", "alice")
    assert asyncio.run(_open(running, running.tokens["admin"]))[0] == 101  # an ease.ml token, as without the hub
