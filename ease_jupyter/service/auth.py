"""Tokens (ACAI §3.1) and names.

A token is shown once, when its user is created; the store keeps only its
sha256. Names of tasks and users follow one strict pattern so that nothing a
client sends can become a path outside the data dir.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from ..errors import DataError, NotFoundError
from ..store import Store, User

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
    """A new user and its token (returned here only)."""
    check_name("name", name)
    token = new_token()
    return store.create_user(name, hash_token(token), is_admin=admin), token


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
    meanwhile is found at once; nothing revokes a token today, and a user
    removed from the database directly stays valid for at most ``ttl`` s."""

    def __init__(self, store: Store, ttl: float = 30.0, max_entries: int = 10_000):
        import threading

        self.store, self.ttl, self.max_entries = store, ttl, max_entries
        self._users: dict[str, tuple[float, User]] = {}
        self._lock = threading.Lock()

    def user(self, token: str | None) -> User | None:
        import time

        if not token:
            return None
        digest = hash_token(token)
        now = time.monotonic()
        with self._lock:
            hit = self._users.get(digest)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        user = user_for_token(self.store, token)
        if user is not None:
            with self._lock:
                if len(self._users) >= self.max_entries:
                    self._users.clear()
                self._users[digest] = (now, user)
        return user


def parse_authorization(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() in ("token", "bearer") and value.strip():
        return value.strip()
    return None


__all__ = ["TokenCache", "check_name", "create_user", "hash_token", "new_token", "parse_authorization",
           "user_for_token", "NAME_RE"]
