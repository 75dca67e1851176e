"""Revoking ease.ml tokens (``DELETE /users/{name}/tokens``, ``easeml users
revoke``) and the local namespace of accounts made by ``POST /users``."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from ease_jupyter.cli import main
from ease_jupyter.store.base import HUB, LOCAL

from .conftest import until


def test_delete_tokens_revokes_at_once_and_keeps_the_tasks(svc):
    token = svc.tokens["alice"]
    assert svc.call("POST", "/tasks", "alice", body={"name": "iris", "input": [4], "output": [3]}).status == 201
    assert svc.call("GET", "/whoami", "alice").status == 200  # the token is now in the service's token cache
    assert svc.call("DELETE", "/users/alice/tokens", "bob").status == 403  # admins only
    r = svc.call("DELETE", "/users/alice/tokens", "admin")
    assert r.status == 200 and r.body == {**r.body, "name": "alice", "origin": LOCAL, "revoked": True}
    gone = svc.call("GET", "/whoami", token=token)  # at once, not after the cache's lifetime
    assert gone.status == 401 and gone.body["error"]["code"] == "unauthorized"
    assert svc.call("POST", "/tasks/iris/feed", token=token, body={"X": [[1, 2, 3, 4]], "y": [0]}).status == 401
    assert svc.call("GET", "/whoami", "bob").body["name"] == "bob"  # nobody else is touched
    alice = svc.service.store.user_by_name("alice")
    assert [t.name for t in svc.service.store.list_tasks(alice.id)] == ["iris"]


def test_delete_tokens_of_an_unknown_or_malformed_name(svc):
    r = svc.call("DELETE", "/users/nobody/tokens", "admin")
    assert r.status == 404 and "nobody" in r.body["error"]["message"]
    bad = svc.call("DELETE", "/users/a..b/tokens", "admin")
    assert bad.status == 400 and bad.body["error"]["field"] == "name"


def test_delete_tokens_reaches_only_local_accounts(svc):
    hub_carol = svc.service.store.create_user("carol", None, origin=HUB)
    assert svc.call("DELETE", "/users/carol/tokens", "admin").status == 404  # hub users have no ease.ml token
    assert svc.service.store.get_user(hub_carol.id) == hub_carol


def test_post_users_makes_a_local_account(svc):
    made = svc.call("POST", "/users", "admin", body={"name": "carol"})
    assert made.status == 201 and made.body["origin"] == LOCAL
    me = svc.call("GET", "/whoami", token=made.body["token"])
    assert me.body == {**me.body, "name": "carol", "origin": LOCAL, "admin": False}
    listed = {(u["name"], u["origin"]) for u in svc.call("GET", "/users", "admin").body}
    assert ("carol", LOCAL) in listed


def test_cli_revoke_and_new_token(tmp_path):
    runner = CliRunner()
    dirs = ["--data-dir", str(tmp_path)]
    first = runner.invoke(main, ["users", "add", "ada", *dirs]).output.strip()
    revoked = runner.invoke(main, ["users", "revoke", "ada", *dirs])
    assert revoked.exit_code == 0 and first not in revoked.output
    renewed = runner.invoke(main, ["users", "revoke", "ada", "--new-token", *dirs])
    assert renewed.exit_code == 0
    second = renewed.output.strip()
    assert len(second) >= 32 and second != first
    unknown = runner.invoke(main, ["users", "revoke", "nobody", *dirs])
    assert unknown.exit_code != 0 and "nobody" in unknown.output
    bad = runner.invoke(main, ["users", "revoke", "../x", *dirs])
    assert bad.exit_code != 0 and "expected" in bad.output
    listed = runner.invoke(main, ["users", "list", *dirs]).output
    assert f"ada\tuser\t{LOCAL}\t" in listed

    from ease_jupyter.service.auth import user_for_token
    from ease_jupyter.store import open_store

    store = open_store(None, tmp_path)[0]
    try:
        assert user_for_token(store, first) is None
        assert user_for_token(store, second).name == "ada"
    finally:
        store.close()


def test_cli_revoke_reaches_a_running_service_within_the_token_cache_lifetime(svc):
    """The CLI writes the database; the running service's token cache keeps a
    token it saw for at most its ttl (30 s by default; shortened here)."""
    svc.service.tokens.ttl = 1.0
    token = svc.tokens["alice"]
    assert svc.call("GET", "/whoami", token=token).status == 200
    started = time.monotonic()
    out = CliRunner().invoke(main, ["users", "revoke", "alice", "--data-dir", str(svc.service.data_dir)])
    assert out.exit_code == 0, out.output
    assert until(lambda: svc.call("GET", "/whoami", token=token).status == 401, timeout=10, every=0.2)
    assert time.monotonic() - started < 1.0 + 5  # the ttl, plus slack for a loaded machine


def _cli(*args: str):
    return CliRunner().invoke(main, ["users", *args])


def test_cli_link_makes_a_local_account_the_hub_user_of_its_name(tmp_path):
    from ease_jupyter.service.auth import user_for_token
    from ease_jupyter.store import open_store

    dirs = ["--data-dir", str(tmp_path)]
    assert "link" in _cli("--help").output
    assert "account of JupyterHub user NAME" in " ".join(_cli("link", "--help").output.split())
    token = _cli("add", "carol", *dirs).output.strip()
    store = open_store(None, tmp_path)[0]
    try:
        carol = store.user_by_name("carol")
        store.create_task(carol.id, "diary", "input: [4] output: [3]")
        fresh = store.create_user("carol", None, origin=HUB)  # carol's hub login after the upgrade
    finally:
        store.close()

    linked = _cli("link", "carol", *dirs)
    assert linked.exit_code == 0, linked.output
    assert "token is revoked" in linked.output and "no token" in linked.output
    listed = _cli("list", *dirs).output
    assert f"carol\tuser\t{HUB}\t" in listed and f"carol\tuser\t{LOCAL}\t" in listed
    store = open_store(None, tmp_path)[0]
    try:
        hub_carol = store.user_by_name("carol", HUB)
        assert hub_carol.id == carol.id and [t.name for t in store.list_tasks(hub_carol.id)] == ["diary"]
        assert store.user_by_name("carol", LOCAL).id == fresh.id  # kept aside, with no token
        assert user_for_token(store, token) is None
    finally:
        store.close()

    # linking the set-aside account back would hide the hub user's tasks: refused
    assert _cli("link", "carol", *dirs).exit_code != 0


def test_cli_link_refuses_to_replace_a_hub_account_that_owns_tasks(tmp_path):
    from ease_jupyter.service.auth import user_for_token
    from ease_jupyter.store import open_store

    dirs = ["--data-dir", str(tmp_path)]
    token = _cli("add", "dave", *dirs).output.strip()
    store = open_store(None, tmp_path)[0]
    try:
        hub_dave = store.create_user("dave", None, origin=HUB)
        store.create_task(hub_dave.id, "hub-side", "input: [4] output: [3]")
    finally:
        store.close()
    refused = _cli("link", "dave", *dirs)
    assert refused.exit_code != 0
    message = " ".join(refused.output.split())
    assert "already owns 1 task(s)" in message and "nothing was changed" in message
    assert "easeml users revoke dave --new-token" in message  # what to do instead
    store = open_store(None, tmp_path)[0]
    try:
        assert user_for_token(store, token).origin == LOCAL  # the local account still works
        assert store.user_by_name("dave", HUB) == hub_dave
    finally:
        store.close()


def test_cli_link_names_what_is_wrong(tmp_path):
    from ease_jupyter.store import open_store

    open_store(None, tmp_path)[0].close()  # a data dir with its database (a missing one is refused before)
    dirs = ["--data-dir", str(tmp_path)]
    unknown = _cli("link", "nobody", *dirs)
    assert unknown.exit_code != 0 and "nobody" in unknown.output and "no such local account" in unknown.output
    bad = _cli("link", "../x", *dirs)
    assert bad.exit_code != 0 and "expected" in bad.output


class _FakeHub:
    """The parts of jupyterhub's HubAuth that ``HubTokens.user`` uses: the hub
    token ``hub-<name>`` belongs to hub user <name>."""

    access_scopes = frozenset({"access:services!service=easeml"})

    def user_for_token(self, token, sync=True):
        return {"kind": "user", "name": token[4:], "admin": False} if token.startswith("hub-") else None

    def check_scopes(self, required, model):
        return True


def test_a_running_hub_service_follows_a_link_within_the_token_cache_lifetime(tmp_path):
    """The CLI links in the database; a running service reads a hub user's row
    again after ``TokenCache.ttl`` (30 s by default; shortened here), and the
    linked account's old token stops working once it does."""
    from ease_jupyter.service.auth import TokenCache, create_user
    from ease_jupyter.service.hub import HubTokens
    from ease_jupyter.store import open_store

    store = open_store(None, tmp_path)[0]
    try:
        carol, token = create_user(store, "carol")
        tokens = HubTokens(store, TokenCache(store, ttl=1.0), _FakeHub())
        empty = tokens.user("hub-carol")  # carol's hub login after the upgrade: a new, empty account
        assert empty.origin == HUB and empty.id != carol.id
        assert tokens.user(token).id == carol.id  # the local token is now in the token cache
        linked = _cli("link", "carol", "--data-dir", str(tmp_path))
        assert linked.exit_code == 0, linked.output
        started = time.monotonic()
        assert until(lambda: tokens.user("hub-carol").id == carol.id, timeout=10, every=0.1)
        assert time.monotonic() - started < 1.0 + 5  # the ttl, plus slack for a loaded machine
        assert tokens.user(token) is None  # and the old token stops with it
    finally:
        store.close()


def test_the_linked_token_stops_as_soon_as_the_service_reads_the_hub_user(tmp_path):
    """The token cache would keep the old token for 30 s; reading hub user
    carol's row (here: her first login after the link) drops it at once."""
    from ease_jupyter.service.auth import TokenCache, create_user
    from ease_jupyter.service.hub import HubTokens
    from ease_jupyter.store import open_store

    store = open_store(None, tmp_path)[0]
    try:
        carol, token = create_user(store, "carol")
        tokens = HubTokens(store, TokenCache(store), _FakeHub())
        assert tokens.user(token).id == carol.id  # cached for the default 30 s
        assert _cli("link", "carol", "--data-dir", str(tmp_path)).exit_code == 0
        assert tokens.user("hub-carol").id == carol.id
        assert tokens.user(token) is None
    finally:
        store.close()


def test_a_lookup_racing_a_revoke_does_not_cache_the_revoked_token():
    """A look-up that read the token's row before a revoke committed, and
    finishes after ``forget_user``, answers what it read but keeps nothing:
    the next request asks the store (the token stops at once, not after the
    cache's lifetime). A look-up racing another user's revoke still caches."""
    import threading

    from ease_jupyter.service.auth import TokenCache, create_user, revoke_token
    from ease_jupyter.store import InMemoryStore

    store = InMemoryStore()
    _, mallory_token = create_user(store, "mallory")
    _, bob_token = create_user(store, "bob")
    cache = TokenCache(store)
    real = store.user_by_token_hash
    reads: list[str] = []

    def race(token: str, revoke: str):
        """``cache.user(token)`` reads the store, then ``revoke`` is revoked as
        ``Service.revoke_tokens`` does (the store, then the cache), then the read returns."""
        read, resume, answered = threading.Event(), threading.Event(), []

        def paused(digest):
            user = real(digest)  # the row as it was before the revoke
            reads.append(user.name)
            read.set()
            assert resume.wait(30)
            return user

        store.user_by_token_hash = paused
        racing = threading.Thread(target=lambda: answered.append(cache.user(token)))
        racing.start()
        try:
            assert read.wait(30)
            user, _ = revoke_token(store, revoke)
            cache.forget_user(user.id)
        finally:
            resume.set()
            racing.join(30)
            store.user_by_token_hash = real
        return answered[0]

    assert race(mallory_token, "mallory").name == "mallory"  # begun before the revoke: answered as read
    assert cache.user(mallory_token) is None  # but not put back into the cache
    _, carol_token = create_user(store, "carol")
    assert race(bob_token, "carol").name == "bob"
    store.user_by_token_hash = lambda digest: pytest.fail("bob's token was not cached")
    try:
        assert cache.user(bob_token).name == "bob"  # another user's revoke left bob's look-up cached
    finally:
        store.user_by_token_hash = real
    assert reads == ["mallory", "bob"]
