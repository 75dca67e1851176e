"""Live notebook widgets over the scheduler service (anywidget, ipywidgets, plotly).

Each widget is one Python class, and (for anywidget ones) one small ES module
beside it; synced traits are the whole Python-JS contract and are validated
in Python. Live widgets share one event stream per ``Client`` (see
``_hub.EventHub`` for the threading choice).

.. code-block:: python

    from ease_jupyter.widgets import TaskStatus, RefinePanel, ProvenanceGraph, ServiceView
    TaskStatus(client.task("iris"))         # leaderboard + curves, live
    RefinePanel(client.task("iris"))        # page, toggle, filter, sort, save
"""

from __future__ import annotations

from ._hub import EventHub
from .curves import Curves
from .leaderboard import Leaderboard
from .provenance import ProvenanceDAG, ProvenanceGraph
from .refine import RefinePanel
from .service_view import ServiceView
from .status import TaskStatus

__all__ = ["Curves", "EventHub", "Leaderboard", "ProvenanceDAG", "ProvenanceGraph", "RefinePanel", "ServiceView",
           "TaskStatus"]
