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
   store knows (``easeml users add``) is that ease.ml user, as without the hub.
2. Otherwise jupyterhub's ``HubOAuth`` resolves it with the hub (``user_for_token``,
   cached by ``HubAuth`` for ``cache_max_age`` seconds), or, with no token, the
   OAuth cookie that ``<prefix>oauth_callback`` set after a browser login.
3. The hub's answer must hold one of the service's access scopes (by default
   ``access:services!service=<name>``), else 403; it must be a hub *user*, not
   a service, else 403.
4. The hub user maps to the ease.ml user of the same name, created on first
   sight. Admin rights follow the hub on every request: a hub admin is an
   ease.ml admin, and nobody else is (whatever the stored flag says). A hub
   name that is not a valid ease.ml name (``auth.NAME_RE``, e.g. an e-mail
   address) gets 403 with the rule; map such names in the hub
   (``Authenticator.username_map`` or ``normalize_username``).

No token, a token neither side knows, or a hub session that expired: 401.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import secrets
import threading
import time
from typing import Any
from urllib.parse import urlparse

from ..errors import AlreadyExistsError, NotFoundError
from ..store import Store, User
from .auth import NAME_EXPECTED, NAME_RE, TokenCache, create_user, parse_authorization

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


def make_hub_auth(cache_seconds: int = 60) -> Any:
    """jupyterhub's ``HubOAuth`` (``HubAuth`` when the hub gave no OAuth
    client id), configured from the environment. Tokens the hub confirms or
    denies are cached for ``cache_seconds`` (so a token revoked in the hub
    stops working here within that time)."""
    check_environment()
    from jupyterhub.services.auth import HubAuth, HubOAuth

    cls = HubOAuth if os.environ.get("JUPYTERHUB_CLIENT_ID") else HubAuth
    auth = cls(api_token=os.environ["JUPYTERHUB_API_TOKEN"], cache_max_age=cache_seconds)
    if not auth.access_scopes:
        auth.access_scopes = {f"access:services!service={service_name()}"}
    return auth


def ease_name(hub_name: str) -> str:
    """The ease.ml user name of a hub user: the same name (PermissionError,
    i.e. 403, when it does not fit ``auth.NAME_RE``)."""
    if not (isinstance(hub_name, str) and NAME_RE.fullmatch(hub_name) and ".." not in hub_name and hub_name != "."):
        raise PermissionError(f"hub user {hub_name!r} has no ease.ml name: ease.ml names are {NAME_EXPECTED}; "
                              "map hub names with the hub's Authenticator.username_map")
    return hub_name


class HubTokens:
    """Who a request is, in JupyterHub mode; replaces ``Service.tokens``.

    ``user(token)`` is the blocking form ``websocket.py`` calls (a hub
    look-up that is not cached blocks the IOLoop for one local HTTP round
    trip); ``authenticate(handler)`` is the non-blocking form of the JSON
    routes, which also accepts the OAuth cookie. See the module docstring.
    """

    def __init__(self, store: Store, local: TokenCache, hub_auth: Any, *, ttl: float = 30.0,
                 max_entries: int = 10_000):
        self.store, self.local, self.hub_auth = store, local, hub_auth
        self.ttl, self.max_entries = ttl, max_entries
        self._tokens: dict[str, tuple[float, User]] = {}  # sha256(token) -> hub-resolved user
        self._names: dict[str, User] = {}  # hub name -> stored ease.ml user
        self._lock = threading.Lock()

    # -- the two entry points ---------------------------------------------
    def user(self, token: str | None) -> User | None:
        if not token:
            return None
        known = self._known(token)
        if known is not None:
            return known
        model = self.hub_auth.user_for_token(token, sync=True)
        try:
            return self._remember(token, self._from_model(model)) if model else None
        except PermissionError:
            return None

    async def authenticate(self, handler: Any) -> User | None:
        """The user of a tornado request; None (401) when nobody is
        identified; PermissionError (403) when the hub knows the caller but
        does not let it use this service."""
        from tornado.ioloop import IOLoop

        token = parse_authorization(handler.request.headers.get("Authorization"))
        if token:
            known = self._known(token)
            if known is not None:
                return known
        model = await self.hub_auth.get_user(handler, sync=False)  # header token, else the OAuth cookie
        if not model:
            return None
        user = await IOLoop.current().run_in_executor(None, self._from_model, model)
        return self._remember(token, user) if token else user

    # -- helpers ------------------------------------------------------------
    def _known(self, token: str) -> User | None:
        """The user of a token seen lately (from the hub) or of an ease.ml token."""
        return self._cached(token) or self.local.user(token)

    @staticmethod
    def _digest(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def _cached(self, token: str) -> User | None:
        with self._lock:
            hit = self._tokens.get(self._digest(token))
        if hit is not None and time.monotonic() - hit[0] < self.ttl:
            return hit[1]
        return None

    def _remember(self, token: str, user: User) -> User:
        with self._lock:
            if len(self._tokens) >= self.max_entries:
                self._tokens.clear()
            self._tokens[self._digest(token)] = (time.monotonic(), user)
        return user

    def _from_model(self, model: dict[str, Any]) -> User:
        kind, hub_name = model.get("kind", "user"), model.get("name")
        if kind != "user":
            raise PermissionError(f"hub {kind} {hub_name!r} is not a user: only hub users may use this service")
        if not self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
            raise PermissionError(f"hub user {hub_name!r} may not use this service: the token needs one of the "
                                  f"scopes {sorted(self.hub_auth.access_scopes)}")
        stored = self._stored(ease_name(hub_name), bool(model.get("admin")))
        return dataclasses.replace(stored, is_admin=bool(model.get("admin")))

    def _stored(self, name: str, admin: bool) -> User:
        with self._lock:
            user = self._names.get(name)
        if user is not None:
            return user
        try:
            user = self.store.user_by_name(name)
        except NotFoundError:
            try:
                # The ease.ml token of a hub user is random and never shown: the hub is how it logs in.
                user, _ = create_user(self.store, name, admin=admin)
                log.info("hub user %s seen for the first time: ease.ml user %d created%s", name, user.id,
                         " (admin)" if admin else "")
            except AlreadyExistsError:  # created by a concurrent request
                user = self.store.user_by_name(name)
        with self._lock:
            self._names[name] = user
        return user


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


__all__ = ["HubConfigError", "HubTokens", "check_environment", "ease_name", "hub_routes", "make_hub_auth",
           "service_bind", "service_prefix"]
