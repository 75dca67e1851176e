// Provenance DAG: the SVG is drawn in Python; clicks set `selected`, buttons set `trace`,
// and `highlighted` dims everything outside the traced set.
function render({ model, el }) {
  el.classList.add("easeml-prov");
  const bar = document.createElement("div");
  const pane = document.createElement("div");
  const meta = document.createElement("div");
  meta.className = "easeml-meta";
  pane.style.overflow = "auto";
  pane.style.maxHeight = "520px";
  el.append(bar, pane, meta);
  for (const [trace, text] of [["backward", "trace back"], ["forward", "trace forward"], ["", "clear"]]) {
    const b = document.createElement("button");
    b.textContent = text;
    b.addEventListener("click", () => { model.set("trace", trace); model.save_changes(); });
    bar.append(b, " ");
  }

  const gone = document.createElement("b");
  bar.append(gone);
  const drawGone = () => { gone.textContent = model.get("deleted") ? `task ${model.get("task")} was deleted` : ""; };
  model.on("change:deleted", drawGone);
  drawGone();

  function drawSvg() {
    pane.innerHTML = model.get("svg");
    for (const g of pane.querySelectorAll("[data-node]")) {
      g.addEventListener("click", () => { model.set("selected", g.dataset.node); model.save_changes(); });
    }
    mark();
  }
  function mark() {
    const lit = new Set(model.get("highlighted"));
    const selected = model.get("selected");
    for (const g of pane.querySelectorAll("[data-node]")) {
      g.classList.toggle("easeml-dim", lit.size > 0 && !lit.has(g.dataset.node));
      g.classList.toggle("easeml-selected", g.dataset.node === selected);
    }
    for (const p of pane.querySelectorAll("[data-src]")) {
      p.classList.toggle("easeml-dim", lit.size > 0 && !(lit.has(p.dataset.src) && lit.has(p.dataset.dst)));
    }
    meta.textContent = selected ? `${selected}\n${JSON.stringify(model.get("selected_meta"), null, 1)}` :
      "click a node for its metadata";
  }
  model.on("change:svg", drawSvg);
  model.on("change:highlighted", mark);
  model.on("change:selected", mark);
  model.on("change:selected_meta", mark);
  drawSvg();
}

export default { render };
