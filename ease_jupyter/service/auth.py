"""Tokens (ACAI §3.1) and names.

A token is shown once, when its user is created; the store keeps only its
sha256. Revoking clears that hash (``revoke_token``: ``DELETE
/users/{name}/tokens``, ``easeml users revoke``). Tokens belong to local
accounts only; a JupyterHub user has none (``hub.py``).

Names of tasks and users follow one strict pattern so that nothing a client
sends can become a path outside the data dir.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time

from ..errors import DataError, NotFoundError
from ..store import Store, User
from ..store.base import LOCAL

NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
NAME_EXPECTED = "1-64 characters from A-Z a-z 0-9 _ . - (and no '..')"


def check_name(field: str, name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or ".." in name or name == ".":
        raise DataError(field, repr(name), NAME_EXPECTED)
    return name


def new_token() -> str:
    """256 random bits, URL-safe. Never starting with '-', so that a token
    passed on a command line (``%easeml connect URL --token T``) is not
    taken for an option."""
    while True:
        token = secrets.token_urlsafe(32)
        if not token.startswith("-"):
            return token


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_user(store: Store, name: str, *, admin: bool = False) -> tuple[User, str]:
    """A new local account (an ease.ml token logs it in) and its token,
    returned here only. Local accounts never take a hub user's name space:
    the hub's user of the same name is another user (``hub.HubTokens``)."""
    check_name("name", name)
    token = new_token()
    return store.create_user(name, hash_token(token), is_admin=admin, origin=LOCAL), token


def local_user(store: Store, name: str) -> User:
    """The local account ``name`` (NotFoundError names it when there is none)."""
    check_name("name", name)
    try:
        return store.user_by_name(name, LOCAL)
    except NotFoundError:
        raise NotFoundError(f"user {name!r}: no such local account (hub users have no ease.ml token)") from None


def revoke_token(store: Store, name: str, *, replace: bool = False) -> tuple[User, str | None]:
    """Make the ease.ml token of local account ``name`` stop working; with
    ``replace``, give it a new one (returned here only)."""
    user = local_user(store, name)
    token = new_token() if replace else None
    return store.set_user_token_hash(user.id, hash_token(token) if token else None), token


def user_for_token(store: Store, token: str | None) -> User | None:
    if not token:
        return None
    digest = hash_token(token)
    try:
        user = store.user_by_token_hash(digest)
    except NotFoundError:
        return None
    return user


class TokenCache:
    """token hash -> User for ``ttl`` seconds, so that a request costs no
    database query for auth (the IOLoop thread does it, before the route's
    work moves to a thread). Unknown tokens are not cached. A user created
    meanwhile is found at once. ``forget_user`` drops a user's entries at once
    (``Service.revoke_tokens`` calls it), and a look-up that read the store
    before it does not cache what it read; a token revoked in the database
    by another process (``easeml users revoke``) stops working here within
    ``ttl`` seconds."""

    def __init__(self, store: Store, ttl: float = 30.0, max_entries: int = 10_000):
        self.store, self.ttl, self.max_entries = store, ttl, max_entries
        self._users: dict[str, tuple[float, User]] = {}
        self._lock = threading.Lock()
        # A look-up learns whose token it is only from the store, so each
        # user's generation is the value of one counter of every
        # ``forget_user`` when hers last ran.
        self._forgets = 0
        self._generation: dict[int, int] = {}

    def user(self, token: str | None) -> User | None:
        if not token:
            return None
        digest = hash_token(token)
        now = time.monotonic()
        with self._lock:
            hit = self._users.get(digest)
            before = self._forgets
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        user = user_for_token(self.store, token)
        if user is not None:
            with self._lock:
                # A forget_user since the read may have revoked what it found: answer it, but do not keep it.
                if self._generation.get(user.id, 0) <= before:
                    if len(self._users) >= self.max_entries:
                        self._users.clear()
                    self._users[digest] = (now, user)
        return user

    def forget_user(self, user_id: int) -> None:
        """Drop every cached token of the user, so its next request asks the
        store; a look-up of hers already reading the store caches nothing."""
        with self._lock:
            self._forgets += 1
            self._generation[user_id] = self._forgets
            for digest in [d for d, (_, user) in self._users.items() if user.id == user_id]:
                del self._users[digest]


def same_user(a: User | None, b: User | None) -> bool:
    """Whether two look-ups name the same account with the same rights: its
    id alone is not enough, since SQLite gives a later account the id of a
    deleted one, so the creation time, origin and name must match too."""
    return (a is not None and b is not None and a.id == b.id and a.created_at == b.created_at
            and a.origin == b.origin and a.name == b.name and a.is_admin == b.is_admin)


def parse_authorization(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() in ("token", "bearer") and value.strip():
        return value.strip()
    return None


__all__ = ["TokenCache", "check_name", "create_user", "hash_token", "local_user", "new_token", "parse_authorization",
           "revoke_token", "same_user", "user_for_token", "NAME_RE"]
