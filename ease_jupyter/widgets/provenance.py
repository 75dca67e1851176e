"""ACAI's provenance DAG of a task: dataset versions and models as nodes;
feeds, refines and training jobs as edges (``Task.provenance("all")``).

The layout is computed in Python (longest-path layering, then each layer
ordered by the mean position of its parents), and drawn as one SVG string,
so the same picture is the widget's and the static fallback's (nbconvert,
no widget manager). The widget follows the service's events: a new dataset
version (a feed or a refine) or a finished job redraws it.
"""

from __future__ import annotations

import html
import json
import pathlib
from collections import deque
from typing import Any, Iterable

import anywidget
import traitlets as t

from ..schema.scores import ACCURACY
from ._hub import Event
from ._jobs import metric_name
from ._live import Live

HERE = pathlib.Path(__file__).parent
OUTSIDE = "outside"
TRACES = ("", "backward", "forward")
COLORS = {"dataset": "#dbe8fb", "model": "#e6f4dc", OUTSIDE: "#eeeeee"}
EDGE_COLORS = {"feed": "#777", "refine": "#2a62c9", "train": "#4f9a2f"}
X_STEP, Y_STEP, W, H = 210, 34, 170, 24


def _node_id(node: dict[str, Any] | None) -> str:
    return OUTSIDE if node is None else f"{node['kind']}:{node['id']}"


class ProvenanceDAG:
    """Nodes, edges and a layered layout; plain Python, no widget.

    ``nodes`` maps a node id (``dataset:<version id>``, ``model:<job id>`` or
    ``outside`` for data fed from the notebook) to ``{id, kind, label,
    meta}``. ``edges`` is a list of ``{id, kind, src, dst, job_id}``. A model's
    label carries its score, prefixed by the metric's name (``r2``) where that
    is not accuracy.
    """

    def __init__(self, task_name: str, provenance: dict[str, Any], jobs: Iterable[dict[str, Any]] = (),
                 metric: str = ACCURACY):
        self.task = task_name
        self.nodes: dict[str, dict[str, Any]] = {}
        jobs_by_id = {j["id"]: j for j in jobs}
        for v in provenance.get("versions", []):
            self._add(f"dataset:{v['id']}", "dataset", f"v{v['number']} {v['kind']} ({v['n_examples']} ex.)", v)
        self.edges: list[dict[str, Any]] = []
        for e in provenance.get("edges", []):
            src, dst = _node_id(e["src"]), _node_id(e["dst"])
            for node_id, node in ((src, e["src"]), (dst, e["dst"])):
                if node_id in self.nodes:
                    continue
                if node is None:
                    self._add(OUTSIDE, OUTSIDE, "notebook data", {"what": "examples fed from outside the store"})
                elif node["kind"] == "model":
                    job = jobs_by_id.get(node["id"], {"id": node["id"]})
                    acc = job.get("accuracy")
                    score = "" if acc is None else f" {acc:.3f}" if metric == ACCURACY else f" {metric} {acc:.3f}"
                    label = f"{job.get('model', 'model')} #{node['id']}{score}"
                    self._add(node_id, "model", label, job)
                else:
                    self._add(node_id, node["kind"], node_id, dict(node))
            self.edges.append({"id": e["id"], "kind": e["kind"], "src": src, "dst": dst, "job_id": e.get("job_id")})
        self.positions = self._layout()

    def _add(self, node_id: str, kind: str, label: str, meta: dict[str, Any]) -> None:
        self.nodes[node_id] = {"id": node_id, "kind": kind, "label": label, "meta": meta}

    # ------------------------------------------------------------ graph
    def parents(self, node_id: str) -> list[str]:
        return [e["src"] for e in self.edges if e["dst"] == node_id]

    def children(self, node_id: str) -> list[str]:
        return [e["dst"] for e in self.edges if e["src"] == node_id]

    def _reach(self, start: str, step: Any) -> list[str]:
        if start not in self.nodes:
            raise KeyError(f"node: found {start!r}, expected one of {sorted(self.nodes)[:10]}")
        seen, todo = {start}, deque([start])
        while todo:
            for nxt in step(todo.popleft()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return sorted(seen - {start})

    def ancestors(self, node_id: str) -> list[str]:
        """Every node with a path to ``node_id`` (what it was made from)."""
        return self._reach(node_id, self.parents)

    def descendants(self, node_id: str) -> list[str]:
        """Every node reachable from ``node_id`` (what was made from it)."""
        return self._reach(node_id, self.children)

    def layers(self) -> dict[str, int]:
        """Longest-path layering: sources at 0, each node one past its deepest parent."""
        indeg = {n: 0 for n in self.nodes}
        for e in self.edges:
            indeg[e["dst"]] += 1
        layer = {n: 0 for n in self.nodes}
        todo = deque(sorted(n for n, d in indeg.items() if d == 0))
        while todo:
            node = todo.popleft()
            for child in self.children(node):
                layer[child] = max(layer[child], layer[node] + 1)
                indeg[child] -= 1
                if indeg[child] == 0:
                    todo.append(child)
        return layer

    def _layout(self) -> dict[str, tuple[float, float]]:
        layer = self.layers()
        by_layer: dict[int, list[str]] = {}
        for node, k in layer.items():
            by_layer.setdefault(k, []).append(node)
        rank: dict[str, float] = {}
        out: dict[str, tuple[float, float]] = {}

        def key(node: str) -> tuple:
            ps = [rank[p] for p in self.parents(node) if p in rank]
            kind, _, num = node.partition(":")
            return (sum(ps) / len(ps) if ps else 0.0, kind, int(num) if num.isdigit() else 0)

        for k in sorted(by_layer):
            for i, node in enumerate(sorted(by_layer[k], key=key)):
                rank[node] = i
                out[node] = (10 + k * X_STEP, 10 + i * Y_STEP)
        return out

    # ------------------------------------------------------------ drawing
    def svg(self, selected: str = "", highlighted: Iterable[str] = ()) -> str:
        lit = set(highlighted)
        width = max((x for x, _ in self.positions.values()), default=0) + W + 20
        height = max((y for _, y in self.positions.values()), default=0) + H + 20
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="easeml-dag" width="{width}" height="{height}" '
                 f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">']
        for e in self.edges:
            (x1, y1), (x2, y2) = self.positions[e["src"]], self.positions[e["dst"]]
            dim = " easeml-dim" if lit and not (e["src"] in lit and e["dst"] in lit) else ""
            fade = ' opacity="0.25"' if dim else ""  # static SVG has no stylesheet
            x1, y1, y2 = x1 + W, y1 + H / 2, y2 + H / 2
            parts.append(f'<path class="easeml-edge easeml-{e["kind"]}{dim}" '
                         f'data-src="{e["src"]}" data-dst="{e["dst"]}" '
                         f'd="M{x1},{y1} C{x1 + 20},{y1} {x2 - 20},{y2} {x2},{y2}" fill="none"{fade} '
                         f'stroke="{EDGE_COLORS.get(e["kind"], "#999")}" stroke-width="1.3"><title>{e["kind"]}'
                         f'{"" if e["job_id"] is None else " (job " + str(e["job_id"]) + ")"}</title></path>')
        for node_id, node in self.nodes.items():
            x, y = self.positions[node_id]
            faded = bool(lit) and node_id not in lit
            cls = "easeml-node" + (" easeml-selected" if node_id == selected else "") + (" easeml-dim" if faded else "")
            fade = ' opacity="0.25"' if faded else ""
            shape = (f'<ellipse cx="{x + W / 2}" cy="{y + H / 2}" rx="{W / 2}" ry="{H / 2}"' if node["kind"] == "model"
                     else f'<rect x="{x}" y="{y}" width="{W}" height="{H}" rx="3"')
            stroke = ' stroke="#d33" stroke-width="3"' if node_id == selected else ' stroke="#555"'
            fill = COLORS.get(node["kind"], "#fff")
            parts.append(f'<g class="{cls}" data-node="{html.escape(node_id)}"{fade}>{shape} fill="{fill}"{stroke}/>'
                         f'<text x="{x + W / 2}" y="{y + H / 2 + 4}" text-anchor="middle">'
                         f'{html.escape(node["label"])}</text><title>{html.escape(node_id)}</title></g>')
        parts.append("</svg>")
        return "".join(parts)

    def text(self) -> str:
        layer = self.layers()
        lines = [f"Provenance of task {self.task!r}: {len(self.nodes)} node(s), {len(self.edges)} edge(s)"]
        for node_id in sorted(self.nodes, key=lambda n: (layer[n], self.positions[n][1])):
            node = self.nodes[node_id]
            outs = ", ".join(f"{e['kind']}->{e['dst']}" for e in self.edges if e["src"] == node_id)
            lines.append(f"  [{layer[node_id]}] {node_id:<14} {node['label']}" + (f"  ({outs})" if outs else ""))
        return "\n".join(lines)

    def html(self, selected: str = "", highlighted: Iterable[str] = ()) -> str:
        return (f"<div class='easeml-prov'><b>{html.escape(self.text().splitlines()[0])}</b><br>"
                f"{self.svg(selected, highlighted)}</div>")

    def _repr_html_(self) -> str:
        return self.html()

    def __repr__(self) -> str:
        return self.text()


def _jsonable_meta(meta: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(meta, default=str))


class ProvenanceGraph(Live, anywidget.AnyWidget):
    """The DAG in the notebook: click a node for its metadata; *trace back* /
    *trace forward* highlight what the selected node came from or led to.

    Live (unless ``live=False``): a ``version`` event of the task (a feed or
    a refine, from this notebook or another) or a finished job re-reads the
    provenance and redraws; the selection and trace stay while their node
    exists.

    Without a widget manager (nbconvert, a plain terminal) it shows as the
    same SVG (``text/html``, ``image/svg+xml``) or as plain text.
    """

    _esm = HERE / "provenance.js"
    _css = HERE / "easeml.css"

    task = t.Unicode(help="the task's name").tag(sync=True)
    svg = t.Unicode(help="the drawn DAG; nodes are <g data-node=ID>").tag(sync=True)
    nodes = t.List(t.Dict(), help="{id, kind, label}").tag(sync=True)
    edges = t.List(t.Dict(), help="{id, kind, src, dst, job_id}").tag(sync=True)
    selected = t.Unicode("", help="the selected node id ('' for none)").tag(sync=True)
    selected_meta = t.Dict(help="the selected node's metadata").tag(sync=True)
    trace = t.Unicode("", help="'' (none), backward or forward from the selected node").tag(sync=True)
    highlighted = t.List(t.Unicode(), help="the traced node ids, the selected one included").tag(sync=True)
    deleted = t.Bool(False, help="the task was deleted while shown (the graph no longer follows it)").tag(sync=True)

    def __init__(self, task: Any, *, live: bool = True, **kwargs: Any):
        self._task = task
        self.task_id = task.info["id"]
        self.dag: ProvenanceDAG
        self._metric = metric_name(task.info.get("program"))
        super().__init__(task=task.name, **kwargs)
        self._live_init(task.client, live)  # subscribe first, then read: no version falls in between
        self._first_read(self.refresh)  # a failed first read closes the widget (no subscription left) and raises

    def refresh(self) -> None:
        """Re-read the task's provenance and jobs (nothing once the task was
        deleted: its name may have come to mean another task)."""
        with self._lock:
            if self.deleted:
                return
            self.dag = ProvenanceDAG(self._task.name, self._task.provenance(direction="all"), self._task.jobs(),
                                     self._metric)
            with self.hold_sync():
                self.nodes = [{k: n[k] for k in ("id", "kind", "label")} for n in self.dag.nodes.values()]
                self.edges = list(self.dag.edges)
                self.svg = self.dag.svg()
                if self.selected not in self.dag.nodes:
                    self.selected = ""
                self._update_highlight()

    def _resync(self) -> None:
        # events may have been missed while disconnected, a deletion too: reads are by name
        if self._task_is_gone(self._task):
            self._mark_deleted()
        else:
            self.refresh()

    def _on_event(self, event: Event) -> None:
        if event.get("task_id") != self.task_id:
            return
        if event.get("type") == "task" and event.get("status") == "deleted":
            self._mark_deleted()  # the graph stays as it was, saying the task is gone
            return
        # a new version (feed, refine) adds a dataset node and its edge; a finished job a model node
        if event.get("type") == "version" or (event.get("type") == "job" and event.get("status") == "succeeded"):
            self.refresh()

    @t.validate("selected")
    def _check_selected(self, proposal: t.Bunch) -> str:
        value = proposal["value"]
        if value and value not in self.dag.nodes:
            example = next(iter(self.dag.nodes), "")
            raise t.TraitError(f"selected: found {value!r}, expected a node id such as {example!r}")
        return value

    @t.validate("trace")
    def _check_trace(self, proposal: t.Bunch) -> str:
        if proposal["value"] not in TRACES:
            raise t.TraitError(f"trace: found {proposal['value']!r}, expected one of {TRACES}")
        return proposal["value"]

    @t.observe("selected", "trace")
    def _on_selection(self, change: t.Bunch) -> None:
        self._update_highlight()

    def _update_highlight(self) -> None:
        node = self.selected
        self.selected_meta = _jsonable_meta(self.dag.nodes[node]["meta"]) if node else {}
        if not node or not self.trace:
            self.highlighted = []
        else:
            reach = self.dag.ancestors(node) if self.trace == "backward" else self.dag.descendants(node)
            self.highlighted = sorted({node, *reach})

    # ------------------------------------------------------------ actions
    def select(self, node_id: str) -> dict[str, Any]:
        """Select a node (what a click does); returns its metadata."""
        with self._lock:
            self.selected = node_id
            return self.selected_meta

    def trace_backward(self, node_id: str | None = None) -> list[str]:
        """Highlight what ``node_id`` (default: the selected node) came from."""
        with self._lock:
            if node_id is not None:
                self.selected = node_id
            self.trace = "backward"
            return list(self.highlighted)

    def trace_forward(self, node_id: str | None = None) -> list[str]:
        """Highlight what came from ``node_id`` (default: the selected node)."""
        with self._lock:
            if node_id is not None:
                self.selected = node_id
            self.trace = "forward"
            return list(self.highlighted)

    def close(self) -> None:
        self.stop()
        super().close()

    # ------------------------------------------------------------ static forms
    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        data = dict(data)
        data["text/plain"] = repr(self)
        data["text/html"] = self._repr_html_()
        data["image/svg+xml"] = self.dag.svg(self.selected, self.highlighted)
        return data

    def _repr_html_(self) -> str:
        gone = f"<b>task {html.escape(self.task)} was deleted</b><br>" if self.deleted else ""
        return gone + self.dag.html(self.selected, self.highlighted)

    def __repr__(self) -> str:
        text = self.dag.text()
        if self.deleted:
            text = text.replace(":", " (task deleted):", 1)
        if self.selected:
            text += f"\n  selected {self.selected}" + (f", trace {self.trace}: {', '.join(self.highlighted)}"
                                                       if self.trace else "")
        return text
