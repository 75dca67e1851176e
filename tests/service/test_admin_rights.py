"""Giving and taking a local account's admin rights: ``PUT /users/{name}
{"admin": ...}`` (at once: the token cache forgets her), the Client's
``set_admin`` and ``easeml users admin NAME [--off]``. A hub user's rights
follow the hub (400 naming ``admin``); an admin cannot take her own (409),
so the API never leaves a service without one."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.errors import DataError, InvalidStateError
from ease_jupyter.service.user_models import user_setting
from ease_jupyter.store import open_store
from ease_jupyter.store.base import HUB

from .conftest import serving


@pytest.fixture
def two_admins(tmp_path):
    with serving(tmp_path, "bob", admins=("root", "ada")) as running:
        yield running


def test_an_admin_takes_another_local_admins_rights_at_once_and_gives_them_back(two_admins):
    run = two_admins
    assert run.call("GET", "/users", "ada").status == 200  # her token is cached as an admin's
    ada = run.service.store.user_by_name("ada")
    closed: list[int] = []
    run.service.events.subscribe(None, lambda event: None, owner=ada.id, close=lambda: closed.append(ada.id))
    taken = run.call("PUT", "/users/ada", "root", body={"admin": False})
    assert taken.status == 200 and taken.body == {"name": "ada", "admin": False}
    assert closed == [ada.id]  # her stream, opened as an admin's, ended at once
    assert run.call("GET", "/users", "ada").status == 403  # her very next request
    assert run.call("GET", "/whoami", "ada").body["admin"] is False
    listed = {u["name"]: u["admin"] for u in run.call("GET", "/users", "root").body}
    assert listed == {"root": True, "ada": False, "bob": False}
    assert run.client("root").set_admin("bob") == {"name": "bob", "admin": True}
    assert run.call("GET", "/users", "bob").status == 200
    both = run.call("PUT", "/users/ada?origin=local", "root", body={"admin": True, "allow_user_models": True})
    assert both.status == 200 and both.body == {"name": "ada", "admin": True, "allow_user_models": True}
    assert run.call("GET", "/users", "ada").status == 200
    assert user_setting(run.service.store, run.service.store.user_by_name("ada")) is True


def test_an_admin_cannot_take_her_own_rights(two_admins):
    run = two_admins
    refused = run.call("PUT", "/users/root", "root", body={"admin": False})
    assert refused.status == 409 and "own admin rights" in refused.body["error"]["message"]
    assert run.service.store.user_by_name("root").is_admin
    assert run.call("PUT", "/users/root", "root", body={"admin": True}).status == 200  # no change, no harm
    with pytest.raises(InvalidStateError):
        run.client("ada").set_admin("ada", False)
    assert run.call("PUT", "/users/root", "ada", body={"admin": False}).status == 200  # another admin can
    assert run.call("GET", "/users", "root").status == 403


@pytest.mark.parametrize("body,field", [
    ({"admin": "false"}, "admin"),
    ({"admin": None}, "admin"),
    ({"admin": 0}, "admin"),
    ({"admin": False, "allow_user_models": "yes"}, "allow_user_models"),  # nothing of it is stored
    ({"admin": False, "is_admin": False}, "body"),
    ({}, "body"),
    ([], "body"),
])
def test_bad_bodies_name_the_field_and_change_nothing(two_admins, body, field):
    run = two_admins
    bad = run.call("PUT", "/users/ada", "root", body=body)
    assert bad.status == 400 and bad.body["error"]["field"] == field, bad.body
    ada = run.service.store.user_by_name("ada")
    assert ada.is_admin and user_setting(run.service.store, ada) is None


def test_a_hub_users_admin_rights_follow_the_hub(two_admins):
    run = two_admins
    store = run.service.store
    carol = store.create_user("carol", None, origin=HUB)
    refused = run.call("PUT", "/users/carol?origin=hub", "root", body={"admin": True})
    assert refused.status == 400 and refused.body["error"]["field"] == "admin" and "follow the hub" in refused.body["error"]["message"]
    assert store.get_user(carol.id) == carol
    with pytest.raises(DataError) as info:
        run.client("root").set_admin("carol", origin="hub")
    assert info.value.field == "admin"
    assert run.call("PUT", "/users/carol", "bob", body={"admin": True}).status == 403  # not an admin


def _cli(*args: str):
    return CliRunner().invoke(main, ["users", *args])


def test_cli_admin_gives_and_takes_a_local_accounts_rights(tmp_path):
    dirs = ["--data-dir", str(tmp_path)]
    assert _cli("add", "root", "--admin", *dirs).exit_code == 0
    assert _cli("add", "ada", *dirs).exit_code == 0
    given = _cli("admin", "ada", *dirs)
    assert given.exit_code == 0 and "'ada' is an admin" in given.output
    assert "ada\tadmin\tlocal\t" in _cli("list", *dirs).output
    taken = _cli("admin", "root", "--off", *dirs)
    assert taken.exit_code == 0 and "no longer an admin" in taken.output and "no local account" not in taken.output
    assert "root\tuser\tlocal\t" in _cli("list", *dirs).output
    last = _cli("admin", "ada", "--off", *dirs)  # allowed here (this command gives the rights back), with a warning
    assert last.exit_code == 0 and "no local account is an admin now" in last.output
    store = open_store(None, tmp_path)[0]
    try:
        assert [u.is_admin for u in store.list_users()] == [False, False]
        store.create_user("carol", None, origin=HUB)
    finally:
        store.close()
    hub_only = _cli("admin", "carol", *dirs)
    assert hub_only.exit_code != 0 and "follow the hub" in hub_only.output
    unknown = _cli("admin", "nobody", *dirs)
    assert unknown.exit_code != 0 and "nobody" in unknown.output
    bad = _cli("admin", "../x", *dirs)
    assert bad.exit_code != 0 and "expected" in bad.output
    helped = _cli("admin", "--help")
    assert helped.exit_code == 0 and "--off" in helped.output and "follow the hub" in " ".join(helped.output.split())
    assert "admin" in _cli("--help").output

