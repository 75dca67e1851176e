// Refine panel: shows one page of examples (rendered in Python); clicks toggle ids in `dropped`.
// esc() is safe in elements and quoted attributes; the label options are built as elements.
const esc = (s) => String(s ?? "").replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
  .replace(/"/g, "&quot;").replace(/'/g, "&#39;");

function render({ model, el }) {
  el.classList.add("easeml-refine");
  const bar = document.createElement("div");
  const body = document.createElement("div");
  const foot = document.createElement("div");
  el.append(bar, body, foot);

  const control = (tag, attrs, on) => {
    const node = document.createElement(tag);
    Object.assign(node, attrs);
    if (on) node.addEventListener(tag === "button" ? "click" : "change", on);
    return node;
  };
  const set = (name, value) => { model.set(name, value); model.save_changes(); };
  const prev = control("button", { textContent: "<" }, () => set("page", model.get("page") - 1));
  const next = control("button", { textContent: ">" }, () => set("page", model.get("page") + 1));
  const where = control("span", {});
  const label = control("select", {}, () => set("label_filter", label.value));
  const sort = control("select", {}, () => set("sort", sort.value));
  for (const [v, t] of [["id", "by id"], ["loss", "most suspicious: loss"], ["disagreement", "most suspicious: disagreement"]]) {
    sort.append(control("option", { value: v, textContent: t }));
  }
  const save = control("button", { textContent: "Save as new version" },
                       () => set("save_clicks", model.get("save_clicks") + 1));
  bar.append(prev, where, next, " label ", label, " sort ", sort, " ", save);

  function toggle(id) {
    const dropped = new Set(model.get("dropped"));
    dropped.has(id) ? dropped.delete(id) : dropped.add(id);
    set("dropped", [...dropped].sort((a, b) => a - b));
  }

  function draw() {
    const dropped = new Set(model.get("dropped"));
    const rows = model.get("rows");
    where.textContent = ` page ${model.get("page") + 1} / ${model.get("n_pages")} (${model.get("n_shown")} shown) `;
    label.replaceChildren(...[["", "all"], ...model.get("labels").map((l) => [l, l])].map(
      ([value, textContent]) => control("option", { value, textContent })));
    label.value = model.get("label_filter");
    sort.value = model.get("sort");
    body.innerHTML = "";
    if (model.get("kind") === "table") {
      const table = document.createElement("table");
      const cols = model.get("columns");
      table.innerHTML = "<thead><tr><th>on</th><th>id</th><th>label</th><th>score</th>" +
        cols.map((c) => `<th>${esc(c)}</th>`).join("") + "</tr></thead>";
      const tbody = document.createElement("tbody");
      for (const r of rows) {
        const tr = document.createElement("tr");
        tr.innerHTML = `<td><input type="checkbox" ${dropped.has(r.id) ? "" : "checked"}></td><td>${r.id}</td>` +
          `<td>${esc(r.label)}</td><td>${r.score === null ? "" : Number(r.score).toFixed(3)}</td>` +
          (r.values || []).map((v) => `<td>${esc(v)}</td>`).join("");
        tr.querySelector("input").addEventListener("change", () => toggle(r.id));
        tbody.append(tr);
      }
      table.append(tbody);
      body.append(table);
    } else {
      const grid = control("div", { className: "easeml-grid" });
      for (const r of rows) {
        const card = control("div", { className: "easeml-card" + (dropped.has(r.id) ? " easeml-off" : ""),
                                      title: `id ${r.id}, label ${r.label}` });
        card.innerHTML = (r.img ? `<img src="${esc(r.img)}">` : r.svg || "") +
          `<div>#${r.id} · ${esc(r.label)}${r.score === null ? "" : " · " + Number(r.score).toFixed(2)}</div>`;
        card.addEventListener("click", () => toggle(r.id));
        grid.append(card);
      }
      body.append(grid);
    }
    foot.textContent = `${dropped.size} turned off. ${model.get("message")}`;
  }
  for (const name of ["rows", "dropped", "labels", "label_filter", "sort", "message", "page", "n_pages"]) {
    model.on(`change:${name}`, draw);
  }
  draw();
}

export default { render };
