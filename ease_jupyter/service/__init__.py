"""The scheduler service: HTTP API, event stream, auth, control loop and
restart recovery (DESIGN.md). See docs/service.md.

.. code-block:: python

    from ease_jupyter.service import ServiceConfig, ServiceThread
    svc = ServiceThread(ServiceConfig(data_dir="/tmp/easeml")).start()
    print(svc.url)
"""

from __future__ import annotations

from .app import ServiceThread, make_app, serve
from .config import ServiceConfig
from .core import Service

__all__ = ["Service", "ServiceConfig", "ServiceThread", "make_app", "serve"]
