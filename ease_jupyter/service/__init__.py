"""The scheduler service: HTTP API, event stream, auth, control loop and
restart recovery (DESIGN.md). See docs/service.md.

.. code-block:: python

    from ease_jupyter.service import ServiceConfig, ServiceThread
    svc = ServiceThread(ServiceConfig(data_dir="/tmp/easeml")).start()
    print(svc.url)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import ServiceThread, make_app, serve
    from .config import ServiceConfig
    from .core import Service

__all__ = ["Service", "ServiceConfig", "ServiceThread", "make_app", "serve"]

_HOMES = {"Service": ".core", "ServiceConfig": ".config", "ServiceThread": ".app", "make_app": ".app", "serve": ".app"}


def __getattr__(name: str) -> Any:
    # Lazy: a worker or feed process that unpickles a function of one of this
    # package's modules then imports that module's needs, not the web app's.
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_HOMES[name], __name__), name)
