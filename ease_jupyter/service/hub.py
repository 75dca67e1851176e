"""JupyterHub mode (``easeml serve --jupyterhub``): the Hub decides who a user is.

JupyterHub starts the service as a *managed service* and puts it behind its
proxy at ``/services/<name>/``; the proxy does not strip that prefix, so the
API is served at ``<prefix>api/v1/...`` (``ServiceConfig.base_url``). The hub
hands the service its settings in the environment:

- ``JUPYTERHUB_API_TOKEN`` and ``JUPYTERHUB_API_URL``: to ask the hub who a
  token belongs to (``GET <api url>/user`` with that token);
- ``JUPYTERHUB_SERVICE_PREFIX`` (``/services/easeml/``) and
  ``JUPYTERHUB_SERVICE_URL`` (where to listen: the service's ``url``);
- ``JUPYTERHUB_OAUTH_ACCESS_SCOPES`` (``access:services!service=easeml``),
  ``JUPYTERHUB_CLIENT_ID`` and ``JUPYTERHUB_OAUTH_CALLBACK_URL`` for the
  browser's OAuth login.

How a request becomes an ease.ml user (``HubTokens.authenticate``):

1. A token in ``Authorization: token T`` (or ``Bearer T``) that the ease.ml
   store knows (``easeml users add``) is that local ease.ml account, as
   without the hub.
2. Otherwise the hub says whose token T is (``user_for_token``). A request
   that carries a token is judged by that token alone: an OAuth cookie sent
   beside a token the hub refuses does not stand in for it. With no token,
   the OAuth cookie that ``<prefix>oauth_callback`` set after a browser login
   counts. The hub's positive answers are reused for ``HUB_CACHE_SECONDS``,
   its refusals never (``positive_cache``): a revoked hub token, a demoted
   admin or a narrowed scope take effect here within that time.
3. The hub's answer must hold one of the service's access scopes (by default
   ``access:services!service=<name>``), else 403; it must be a hub *user*, not
   a service, else 403.
4. The hub user maps to its own ease.ml user (origin "hub"), created on first
   sight. Hub users and local accounts are separate namespaces: the hub's
   "carol" never logs in to a local account "carol" (made by ``easeml users
   add`` or an admin's ``POST /users``), nor does that account's token reach
   the hub user's tasks. Admin rights follow the hub's answer (``hub_admin``):
   a hub user is an ease.ml admin when the hub says it is a hub admin, or when
   the token holds the custom scope ``custom:easeml:admin`` (``ADMIN_SCOPE``;
   a hub role gives it, e.g. to the hub group ``easeml-admins`` as
   deploy/jupyterhub_config.py does); nobody else is (whatever the stored flag
   says). Being in a group gives nothing by itself: rights follow the token,
   so an admin's token made without that scope is an ordinary user's. A hub
   name that is not a valid ease.ml name (``auth.NAME_RE``, e.g. an e-mail
   address) gets 403 with the rule; map such names in the hub
   (``Authenticator.username_map`` or ``normalize_username``).
5. Only an admin binds a local account to a hub user: ``easeml users link
   NAME`` makes local account NAME the hub user NAME and revokes its token.
   A running service reads a hub user's row again every ``TokenCache.ttl``
   seconds (30 s), so it follows a link within that time; the linked
   account's old token stops within that time too (at once when the
   service reads the hub user again).

No token, a token neither side knows, or a hub session that expired: 401.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import threading
import time
from typing import Any
from urllib.parse import urlparse

from ..errors import AlreadyExistsError, NotFoundError
from ..store import Store, User
from ..store.base import HUB
from .auth import NAME_EXPECTED, NAME_RE, TokenCache, parse_authorization

log = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "easeml"


class HubConfigError(RuntimeError):
    """The JupyterHub environment is missing or inconsistent."""


def service_name() -> str:
    return os.environ.get("JUPYTERHUB_SERVICE_NAME") or DEFAULT_SERVICE_NAME


def service_prefix() -> str:
    """``$JUPYTERHUB_SERVICE_PREFIX`` (``/services/<name>/``), always with
    both slashes; the hub's proxy forwards requests with it unchanged."""
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or f"/services/{service_name()}/"
    return "/" + prefix.strip("/") + "/"


def service_bind() -> tuple[str, int] | None:
    """(host, port) of ``$JUPYTERHUB_SERVICE_URL`` (the service's ``url`` in
    ``c.JupyterHub.services``), or None when it is not set."""
    url = os.environ.get("JUPYTERHUB_SERVICE_URL")
    if not url:
        return None
    parsed = urlparse(url)
    if not parsed.hostname:
        raise HubConfigError(f"JUPYTERHUB_SERVICE_URL: found {url!r}, expected http://HOST:PORT")
    return parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)


def check_environment() -> None:
    """Raise HubConfigError unless the hub's API token and URL are set."""
    missing = [name for name in ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL") if not os.environ.get(name)]
    if missing:
        raise HubConfigError(
            f"--jupyterhub: {' and '.join(missing)} not set; run 'easeml serve --jupyterhub' as a JupyterHub "
            "service (c.JupyterHub.services), which sets them, or set them for an externally managed service")


# How long a positive answer of the hub is reused. A token the hub stops
# accepting (revoked, expired, its user removed) and a change of a user's admin
# flag or scopes take effect here at most this long after the hub made them.
HUB_CACHE_SECONDS = 5


def make_hub_auth(cache_seconds: int = HUB_CACHE_SECONDS) -> Any:
    """jupyterhub's ``HubOAuth`` (``HubAuth`` when the hub gave no OAuth
    client id), configured from the environment. The hub's positive answers
    are reused for ``cache_seconds``; its refusals are never cached."""
    check_environment()
    from jupyterhub.services.auth import HubAuth, HubOAuth

    cls = HubOAuth if os.environ.get("JUPYTERHUB_CLIENT_ID") else HubAuth
    auth = cls(api_token=os.environ["JUPYTERHUB_API_TOKEN"], cache_max_age=cache_seconds)
    auth.cache = positive_cache(cache_seconds)
    if not auth.access_scopes:
        auth.access_scopes = {f"access:services!service={service_name()}"}
    return auth


def positive_cache(max_age: float) -> Any:
    """A cache for ``HubAuth.cache`` that keeps the hub's positive answers for
    ``max_age`` seconds and forgets a token as soon as the hub refuses it.

    ``HubAuth`` caches refusals (None, the hub's 403) as well, and its trait
    only takes its own ``_ExpiringDict``, hence the subclass."""
    from jupyterhub.services.auth import _ExpiringDict

    class PositiveCache(_ExpiringDict):
        def __setitem__(self, key: str, value: Any) -> None:
            if value is None:  # the hub refused this token: drop what we knew of it
                self.pop(key, None)
            else:
                super().__setitem__(key, value)

    return PositiveCache(max_age)


def ease_name(hub_name: str) -> str:
    """The ease.ml user name of a hub user: the same name (PermissionError,
    i.e. 403, when it does not fit ``auth.NAME_RE``)."""
    if not (isinstance(hub_name, str) and NAME_RE.fullmatch(hub_name) and ".." not in hub_name and hub_name != "."):
        raise PermissionError(f"hub user {hub_name!r} has no ease.ml name: ease.ml names are {NAME_EXPECTED}; "
                              "map hub names with the hub's Authenticator.username_map")
    return hub_name


# An ease.ml admin who need not be a hub admin: a hub role grants this custom scope
# (``c.JupyterHub.custom_scopes`` defines it), e.g. to the hub group easeml-admins.
ADMIN_SCOPE = "custom:easeml:admin"


def hub_admin(model: dict[str, Any], hub_auth: Any) -> bool:
    """Whether the hub's answer for a token (``GET /hub/api/user``) makes its
    user an ease.ml admin: a hub admin, or a token holding the unfiltered
    scope ``ADMIN_SCOPE``. Group membership alone does not count: the hub
    shows a user's groups to every token of hers, and a token made without
    the scope (least privilege) must not act as an admin."""
    if model.get("admin"):
        return True
    return bool(hub_auth.check_scopes({ADMIN_SCOPE}, model))  # a filtered grant (``!user=...``) does not count


class HubTokens:
    """Who a request is, in JupyterHub mode; replaces ``Service.tokens``.

    ``identify(token)`` is the blocking form ``websocket.py`` calls when a
    stream opens (a hub look-up that is not cached blocks the IOLoop for one
    local HTTP round trip); like ``authenticate(handler)``, the non-blocking
    form of the JSON routes (which also accepts the OAuth cookie), it tells
    nobody (None: 401) from a caller the hub knows but does not let in
    (PermissionError: 403). ``user(token)`` answers None for both: the
    stream's periodic recheck only asks whether the rights still hold. See
    the module docstring.
    Hub answers are cached by ``hub_auth`` only (``positive_cache``), per
    token the hub itself judged.
    """

    def __init__(self, store: Store, local: TokenCache, hub_auth: Any):
        self.store, self.local, self.hub_auth = store, local, hub_auth
        # hub name -> (when it was read, its stored ease.ml user, origin "hub"). Kept for
        # ``local.ttl`` seconds, like ease.ml tokens: ``easeml users link`` (another
        # process) can make another row the hub user of a name.
        self._names: dict[str, tuple[float, User]] = {}
        self._lock = threading.Lock()

    # -- the entry points -------------------------------------------------
    def user(self, token: str | None) -> User | None:
        try:
            return self.identify(token)
        except PermissionError:
            return None

    def identify(self, token: str | None) -> User | None:
        """The user of ``token``: None when neither side knows it (401);
        PermissionError (403) when the hub knows its user but does not let
        it use this service (no access scope, a hub service, a name that is
        no ease.ml name), as ``authenticate`` says to the JSON routes."""
        if not token:
            return None
        known = self.local.user(token)
        if known is not None:
            return known
        model = self.hub_auth.user_for_token(token, sync=True)
        return self._from_model(model) if model else None

    async def authenticate(self, handler: Any) -> User | None:
        """The user of a tornado request; None (401) when nobody is
        identified; PermissionError (403) when the hub knows the caller but
        does not let it use this service.

        A token, when the request carries one, alone decides: a token that
        neither side knows is a 401 even beside a valid OAuth cookie."""
        from tornado.ioloop import IOLoop

        token = (parse_authorization(handler.request.headers.get("Authorization"))
                 or self.hub_auth.get_token(handler, in_cookie=False))  # ?token= where the hub allows it
        if token:
            known = self.local.user(token)
            if known is not None:
                return known
            model = await self.hub_auth.user_for_token(token, sync=False)
        else:
            model = await self.hub_auth.get_user(handler, sync=False)  # the browser's OAuth cookie
        if not model:
            return None
        name, admin = self._check(model)
        stored = self._cached(name)
        if stored is None:  # first sight, or read over local.ttl ago: a store query, off the IOLoop
            stored = await IOLoop.current().run_in_executor(None, self._stored, name, admin)
        return dataclasses.replace(stored, is_admin=admin)

    def forget_user(self, user_id: int) -> None:
        """Drop the cached ease.ml tokens of a user (hub tokens are the hub's
        to revoke), and the hub name that meant her: after her account is
        deleted (``Service.delete_user``), her next login reads the store
        again and gets a new, empty account."""
        self.local.forget_user(user_id)
        with self._lock:
            for name in [n for n, (_, user) in self._names.items() if user.id == user_id]:
                del self._names[name]

    # -- helpers ------------------------------------------------------------
    def _check(self, model: dict[str, Any]) -> tuple[str, bool]:
        """(ease.ml name, admin) of a hub answer; PermissionError when it may not use the service."""
        kind, hub_name = model.get("kind", "user"), model.get("name")
        if kind != "user":
            raise PermissionError(f"hub {kind} {hub_name!r} is not a user: only hub users may use this service")
        if not self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
            raise PermissionError(f"hub user {hub_name!r} may not use this service: the token needs one of the "
                                  f"scopes {sorted(self.hub_auth.access_scopes)}")
        return ease_name(hub_name), hub_admin(model, self.hub_auth)

    def _from_model(self, model: dict[str, Any]) -> User:
        name, admin = self._check(model)
        return dataclasses.replace(self._stored(name, admin), is_admin=admin)

    def _stored(self, name: str, admin: bool) -> User:
        """The hub user's own ease.ml user (origin "hub"), created on first
        sight; a local account of the same name is another user."""
        user = self._cached(name)
        if user is not None:
            return user
        try:
            user = self.store.user_by_name(name, HUB)
        except NotFoundError:
            try:
                # No ease.ml token reaches a hub user: the hub is how it logs in.
                user = self.store.create_user(name, None, is_admin=admin, origin=HUB)
                log.info("hub user %s seen for the first time: ease.ml user %d created%s", name, user.id,
                         " (admin)" if admin else "")
            except AlreadyExistsError:  # created by a concurrent request
                user = self.store.user_by_name(name, HUB)
        # A hub user holds no ease.ml token: one still cached for this id was
        # revoked by a link (``easeml users link``) and must stop at once.
        self.local.forget_user(user.id)
        with self._lock:
            self._names[name] = (time.monotonic(), user)
        return user

    def _cached(self, name: str) -> User | None:
        """The hub user ``name`` as read from the store less than ``local.ttl`` seconds ago."""
        with self._lock:
            hit = self._names.get(name)
        if hit is None or time.monotonic() - hit[0] >= self.local.ttl:
            return None
        return hit[1]


def cookie_secret() -> bytes:
    """Signs the OAuth cookie; new per process (a restart means a new login)."""
    return secrets.token_bytes(32)


def hub_routes(prefix: str, hub_auth: Any) -> list[tuple[str, type, dict[str, Any]]]:
    """The browser login: ``<prefix>`` (and ``<prefix>login``) redirect to the
    hub's OAuth page when there is no session, and to ``<prefix>api/v1/whoami``
    once there is; ``<prefix>oauth_callback`` finishes the OAuth flow and sets
    the cookie. Empty when ``hub_auth`` is not a ``HubOAuth``."""
    import re

    import tornado.web
    from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated

    if not isinstance(hub_auth, HubOAuth):
        return []

    class LoginHandler(HubOAuthenticated, tornado.web.RequestHandler):
        def initialize(self, hub_auth: Any) -> None:
            self.hub_auth = hub_auth

        @tornado.web.authenticated
        def get(self) -> None:
            self.redirect(prefix + "api/v1/whoami")

    class CallbackHandler(HubOAuthCallbackHandler):
        def initialize(self, hub_auth: Any) -> None:
            self.hub_auth = hub_auth

    args, pattern = {"hub_auth": hub_auth}, re.escape(prefix)
    return [(pattern, LoginHandler, args), (pattern + "login", LoginHandler, args),
            (pattern + "oauth_callback", CallbackHandler, args)]


__all__ = ["ADMIN_SCOPE", "HUB_CACHE_SECONDS", "HubConfigError", "HubTokens", "check_environment",
           "ease_name", "hub_admin", "hub_routes", "make_hub_auth", "positive_cache", "service_bind", "service_prefix"]
