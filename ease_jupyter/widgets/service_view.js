// Service view: every user's loss estimate and compute share, and who is served now and why.
const esc = (s) => String(s ?? "").replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
  .replace(/"/g, "&quot;").replace(/'/g, "&#39;");  // safe in quoted attributes too
const num = (v, d) => (v === null || v === undefined ? "" : Number(v).toFixed(d));

function render({ model, el }) {
  el.classList.add("easeml-service");
  const head = document.createElement("div");
  const store = document.createElement("div");
  store.className = "easeml-store";
  const why = document.createElement("div");
  const table = document.createElement("table");
  const cands = document.createElement("table");
  const notebooks = document.createElement("table");
  notebooks.className = "easeml-notebooks";
  el.append(head, store, why, table, cands, notebooks);

  function draw() {
    head.innerHTML = `<b>scheduler</b>: policy ${esc(model.get("policy"))}, mode ${esc(model.get("mode"))}` +
      `, ${model.get("decisions")} decision(s) seen`;
    const st = model.get("store");  // admins only; null for everyone else
    store.textContent = st && st.blocked ? `training paused (${st.blocked}): ${st.message ?? ""}` : "";
    store.classList.toggle("easeml-blocked", Boolean(st && st.blocked));
    why.textContent = model.get("reason");
    const serving = model.get("serving");
    table.innerHTML = "<thead><tr><th>user</th><th>tasks</th><th>running</th><th>best accuracy</th>" +
      "<th>loss estimate</th><th>compute share</th></tr></thead><tbody>" +
      model.get("users").map((u) =>
        `<tr class="${u.name === serving ? "easeml-serving" : ""}"><td>${esc(u.name)}${u.you ? " (you)" : ""}</td>` +
        `<td>${u.tasks ?? ""}</td>` +
        `<td>${u.running ?? ""}</td><td>${num(u.best_accuracy, 3)}</td><td>${num(u.loss_estimate, 3)}</td>` +
        `<td><span class="easeml-bar" style="width:${Math.round(100 * (u.compute_share || 0))}px"></span> ` +
        `${num(100 * (u.compute_share || 0), 1)}%</td></tr>`).join("") + "</tbody>";
    const c = model.get("candidates");
    cands.innerHTML = c.length === 0 ? "" : "<thead><tr><th>GREEDY candidate</th><th>task</th><th>gap</th></tr></thead><tbody>" +
      c.map((r) => `<tr class="${r.user === serving ? "easeml-serving" : ""}"><td>${esc(r.user)}</td>` +
        `<td>${esc(r.task)}</td>` +
        `<td>${num(r.gap, 4)}</td></tr>`).join("") + "</tbody>";
    const nb = model.get("notebooks");  // GET /api/v1/notebooks: yours (admins: everyone's)
    notebooks.innerHTML = nb.length === 0 ? "" : "<thead><tr><th>notebook</th><th>user</th><th>server</th>" +
      "<th>kernel</th><th>last seen</th><th>state</th><th>tasks</th></tr></thead><tbody>" +
      nb.map((n) => `<tr class="${n.alive ? "" : "easeml-gone"}"><td>${esc(n.notebook_path)}</td>` +
        `<td>${esc(n.user)}</td><td>${esc(n.server_name)}</td><td><code>${esc(n.kernel)}</code></td>` +
        `<td title="${esc(n.last_seen)}">${num(n.seconds_since_seen, 0)} s ago</td>` +
        `<td>${n.alive ? "alive" : "gone"}</td><td>${esc(n.tasks.join(", "))}</td></tr>`).join("") + "</tbody>";
  }
  for (const name of ["users", "serving", "reason", "candidates", "policy", "mode", "decisions", "store", "notebooks"]) {
    model.on(`change:${name}`, draw);
  }
  draw();
}

export default { render };
