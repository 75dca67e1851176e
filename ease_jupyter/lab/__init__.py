"""The JupyterLab side of ease_jupyter: a jupyter_server extension and the
prebuilt labextension (``labextension/`` in the repository, built into
``ease_jupyter/labextension/``).

The server extension adds authenticated JSON routes under ``/easeml/`` that
the sidebar calls. Each route talks to the ease.ml service through
``ease_jupyter.Client``: ``EaseMLLab.url``/``EaseMLLab.token`` when
configured, else ``EASEML_URL``/``EASEML_TOKEN``, else the embedded service of
the data dir (started on first use). It is enabled by
``jupyter-config/jupyter_server_config.d/ease_jupyter.json``, which the wheel
installs into ``etc/jupyter``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EaseMLLab"]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .app import EaseMLLab

    return [{"module": "ease_jupyter.lab", "app": EaseMLLab}]


def __getattr__(name: str) -> Any:
    if name == "EaseMLLab":
        from .app import EaseMLLab

        return EaseMLLab
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
