"""The provenance widget: the DAG matches the store, traces are right, and
it renders as text and SVG without a widget manager."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import traitlets

from ease_jupyter.widgets import ProvenanceDAG, ProvenanceGraph
from ease_jupyter.widgets._hub import wait_until


@pytest.fixture(scope="module")
def refined(service, iris):
    """iris fed, a few models trained, refined (drop 0-9), a few more trained, then cancelled."""
    X, y = iris
    task = service.client("alice").task("iris_prov", input=[4], output=[3])
    done = lambda version: sum(j["status"] == "succeeded" and j["dataset_version"] == version  # noqa: E731
                               for j in task.jobs())
    task.feed(X, y)
    assert wait_until(lambda: done(1) >= 3, 90)
    task.refine(drop=list(range(10)))
    assert wait_until(lambda: done(2) >= 2, 90)
    task.cancel()
    assert task.wait(timeout=60)
    return task


def _node(n):
    return "outside" if n is None else f"{n['kind']}:{n['id']}"


def test_nodes_and_edges_match_the_store(refined):
    graph = ProvenanceGraph(refined)
    prov, jobs, versions = refined.provenance("all"), refined.jobs(), refined.versions()
    trained = [j for j in jobs if j["status"] == "succeeded"]
    expected_nodes = {"outside"} | {f"dataset:{v['id']}" for v in versions} | {f"model:{j['id']}" for j in trained}
    assert {n["id"] for n in graph.nodes} == expected_nodes
    assert sorted((e["kind"], e["src"], e["dst"]) for e in graph.edges) == sorted(
        (e["kind"], _node(e["src"]), _node(e["dst"])) for e in prov["edges"])
    kinds = {e["kind"] for e in graph.edges}
    assert kinds == {"feed", "refine", "train"}
    v1, v2 = (f"dataset:{v['id']}" for v in versions)
    layers = graph.dag.layers()
    assert (layers["outside"], layers[v1], layers[v2]) == (0, 1, 2)
    for j in trained:  # a model sits one layer right of the version it was trained on
        version = next(v for v in versions if v["number"] == j["dataset_version"])
        assert layers[f"model:{j['id']}"] == layers[f"dataset:{version['id']}"] + 1
    # every node and edge is drawn, each node at its own position
    svg = ET.fromstring(graph.svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert len(svg.findall(".//s:g[@data-node]", ns)) == len(graph.nodes)
    assert len(svg.findall(".//s:path[@data-src]", ns)) == len(graph.edges)
    assert len(set(graph.dag.positions.values())) == len(graph.nodes)
    graph.close()


def test_select_and_trace_back_and_forward(refined):
    graph = ProvenanceGraph(refined)
    versions, jobs = refined.versions(), refined.jobs()
    v1, v2 = (f"dataset:{v['id']}" for v in versions)
    job = next(j for j in jobs if j["status"] == "succeeded" and j["dataset_version"] == 2)
    model = f"model:{job['id']}"
    assert graph.select(model)["accuracy"] == job["accuracy"]  # what a click shows
    assert graph.selected_meta["config"] == job["config"]
    assert graph.trace_backward() == sorted([model, v2, v1, "outside"])
    # the service's own backward lineage of the latest version agrees
    served = {_node(e["src"]) for e in refined.provenance("backward")["edges"]} | {v2}
    assert set(graph.trace_backward(v2)) == served
    forward = set(graph.trace_forward(v1))
    trained = {f"model:{j['id']}" for j in jobs if j["status"] == "succeeded"}
    assert forward == {v1, v2} | trained  # everything but the outside source came from v1
    assert set(graph.trace_forward(v2)) == {v2} | {f"model:{j['id']}" for j in jobs
                                                   if j["status"] == "succeeded" and j["dataset_version"] == 2}
    graph.trace = ""
    assert graph.highlighted == []
    with pytest.raises(traitlets.TraitError, match="selected"):
        graph.selected = "model:999999"
    with pytest.raises(traitlets.TraitError, match="trace"):
        graph.trace = "sideways"
    graph.close()


def test_static_fallbacks(refined):
    graph = ProvenanceGraph(refined)
    graph.trace_backward(f"dataset:{refined.versions()[-1]['id']}")
    bundle = graph._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # the live view, when a manager is there
    text = bundle["text/plain"]
    assert text.startswith(f"Provenance of task 'iris_prov': {len(graph.nodes)} node(s), {len(graph.edges)} edge(s)")
    assert "refine->dataset:" in text and "trace backward" in text
    svg = ET.fromstring(bundle["image/svg+xml"])
    dimmed = [g for g in svg.iter() if "easeml-dim" in g.get("class", "") and g.get("data-node")]
    assert len(dimmed) == len(graph.nodes) - len(graph.highlighted)
    assert all(g.get("opacity") == "0.25" for g in dimmed)  # visible without the widget's stylesheet
    assert "<svg" in bundle["text/html"] and "<svg" in graph._repr_html_()
    # and with no widget at all: the plain DAG object
    dag = ProvenanceDAG("iris_prov", refined.provenance("all"), refined.jobs())
    assert repr(dag) == graph.dag.text() and dag.svg() == graph.svg
    graph.close()


def test_the_graph_follows_a_refine_live(service, iris):
    """No refresh() call: the version event of a real refine redraws the DAG,
    and the models trained on the new version appear as they finish."""
    X, y = iris
    task = service.client("bob").task("iris_prov_live", input=[4], output=[3])
    task.feed(X, y)
    graph = ProvenanceGraph(task)
    v1 = f"dataset:{task.versions()[0]['id']}"
    graph.select(v1)
    assert graph.live and v1 in graph.dag.nodes
    version = task.refine(drop=list(range(5)))
    v2 = f"dataset:{version['id']}"
    assert wait_until(lambda: v2 in {n["id"] for n in graph.nodes}, 30), graph.nodes
    assert ("refine", v1, v2) in {(e["kind"], e["src"], e["dst"]) for e in graph.edges}
    assert v2 in graph.svg and graph.selected == v1  # drawn, and the selection kept
    on_v2 = lambda: [j for j in task.jobs() if j["status"] == "succeeded" and j["dataset_version"] == 2]  # noqa: E731
    assert wait_until(lambda: len(on_v2()) >= 1, 90)
    assert wait_until(lambda: {f"model:{j['id']}" for j in on_v2()} <= set(graph.dag.nodes), 30)
    assert graph.dag.layers()[f"model:{on_v2()[0]['id']}"] == graph.dag.layers()[v2] + 1
    graph.close()
    assert not graph.live
    task.cancel()
    assert task.wait(timeout=60)
