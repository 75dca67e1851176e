"""ease_jupyter: ease.ml's declarative, multi-tenant model selection for Jupyter."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Client", "__version__", "load_ipython_extension"]


def __getattr__(name: str) -> Any:
    # Client on first use only: importing ease_jupyter stays cheap.
    if name == "Client":
        from .client import Client

        return Client
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext ease_jupyter``: register the ``%easeml`` magics."""
    from .magics import load_ipython_extension as load

    load(ipython)
