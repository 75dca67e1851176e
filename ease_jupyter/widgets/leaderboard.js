// Leaderboard view: renders the `rows` trait; the cancel button bumps `cancel_clicks`.
const esc = (s) => String(s ?? "").replace(/&/g, "&amp;").replace(/</g, "&lt;");

function fmt(v, digits) {
  return v === null || v === undefined ? "" : Number(v).toFixed(digits);
}

function render({ model, el }) {
  el.classList.add("easeml-board");
  const head = document.createElement("div");
  const title = document.createElement("b");
  const button = document.createElement("button");
  button.textContent = "Cancel task";
  button.addEventListener("click", () => {
    model.set("cancel_clicks", model.get("cancel_clicks") + 1);
    model.save_changes();
  });
  head.append(title, " ", button);
  const table = document.createElement("table");
  el.append(head, table);

  function draw() {
    const best = model.get("best_job_id");
    const classes = model.get("class_names");
    title.textContent = `${model.get("task")}` + (classes.length ? ` (classes: ${classes.join(", ")})` : "") +
      `: ${model.get("status")}`;
    button.textContent = model.get("cancelled") ? "Cancelled" : "Cancel task";
    button.disabled = model.get("cancelled");
    // measured seconds beside the profiler's prediction made before the job ran
    const cols = ["model", "config", "best config", "accuracy", "validated on", "seconds", "predicted", "state",
                  "version"];
    const rows = model.get("rows").map((r) => {
      const cls = `easeml-${r.state}` + (r.job_id === best ? " easeml-best" : "");
      const cells = [r.model, r.config, r.best_config ?? "", fmt(r.accuracy, 4),
                     r.validation_size === null || r.validation_size === undefined ? "" : `${r.validation_size} ex.`,
                     r.cost === null ? "" : fmt(r.cost, 2) + " s" +
                       (r.profiling ? ` (${fmt(r.profiling, 2)} s profiling)` : ""),
                     r.predicted === null || r.predicted === undefined ? "" :
                       fmt(r.predicted, 2) + " s" + (r.source ? ` (${r.source})` : ""),
                     r.state, r.version ?? ""];
      return `<tr class="${cls}">` + cells.map((c) => `<td>${esc(c)}</td>`).join("") + "</tr>";
    });
    table.innerHTML = "<thead><tr>" + cols.map((c) => `<th>${c}</th>`).join("") + "</tr></thead><tbody>" +
      rows.join("") + "</tbody>";
  }
  for (const name of ["rows", "best_job_id", "status", "cancelled", "task", "class_names"]) model.on(`change:${name}`, draw);
  draw();
}

export default { render };
