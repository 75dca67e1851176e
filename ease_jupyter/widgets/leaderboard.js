// Leaderboard view: renders the `rows` trait; the cancel button bumps `cancel_clicks`.
// esc() makes text safe inside elements and quoted attributes alike.
const esc = (s) => String(s ?? "").replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
  .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
const SHOWN_CLASSES = 10;

function fmt(v, digits) {
  return v === null || v === undefined ? "" : Number(v).toFixed(digits);
}

function classList(classes) {
  if (classes.length <= SHOWN_CLASSES) return classes.join(", ");
  return classes.slice(0, SHOWN_CLASSES).join(", ") +
    `, ... (${classes.length - SHOWN_CLASSES} more, ${classes.length} in all)`;
}

function render({ model, el }) {
  el.classList.add("easeml-board");
  const head = document.createElement("div");
  const title = document.createElement("b");
  const button = document.createElement("button");
  button.textContent = "Cancel task";
  button.addEventListener("click", () => {
    if (model.get("deleted")) return;
    model.set("cancel_clicks", model.get("cancel_clicks") + 1);
    model.save_changes();
  });
  head.append(title, " ", button);
  const table = document.createElement("table");
  el.append(head, table);

  function draw() {
    const best = model.get("best_job_id");
    const classes = model.get("class_names");
    const metric = model.get("metric") || "accuracy";
    const deleted = model.get("deleted");
    title.textContent = `${model.get("task")}` + (classes.length ? ` (classes: ${classList(classes)})` : "") +
      (metric === "accuracy" ? "" : ` (scored by ${metric === "r2" ? "r2 (clipped to [0, 1])" : metric})`) +
      `: ${model.get("status")}`;
    title.title = classes.length > SHOWN_CLASSES ? classes.join(", ") : "";
    button.textContent = deleted ? "Task deleted" : model.get("cancelled") ? "Cancelled" : "Cancel task";
    button.disabled = deleted || model.get("cancelled");
    const rowsIn = model.get("rows");
    const errors = rowsIn.some((r) => r.error);
    // measured seconds beside the profiler's prediction made before the job ran
    const cols = ["model", "config", "best config", metric, "validated on", "seconds", "predicted", "state",
                  "version", ...(errors ? ["error"] : [])];
    const rows = rowsIn.map((r) => {
      const cls = `easeml-${r.state}` + (r.job_id === best ? " easeml-best" : "");
      const cells = [r.model, r.config, r.best_config ?? "", fmt(r.accuracy, 4),
                     r.validation_size === null || r.validation_size === undefined ? "" : `${r.validation_size} ex.`,
                     r.cost === null ? "" : fmt(r.cost, 2) + " s" +
                       (r.profiling ? ` (${fmt(r.profiling, 2)} s profiling)` : ""),
                     r.predicted === null || r.predicted === undefined ? "" :
                       fmt(r.predicted, 2) + " s" + (r.source ? ` (${r.source})` : ""),
                     r.state, r.version ?? "", ...(errors ? [r.error || ""] : [])];
      return `<tr class="${esc(cls)}"${r.error ? ` title="${esc(r.error)}"` : ""}>` +
        cells.map((c) => `<td>${esc(c)}</td>`).join("") + "</tr>";
    });
    table.innerHTML = "<thead><tr>" + cols.map((c) => `<th>${esc(c)}</th>`).join("") + "</tr></thead><tbody>" +
      rows.join("") + "</tbody>";
  }
  for (const name of ["rows", "best_job_id", "status", "cancelled", "task", "class_names", "metric", "deleted"]) {
    model.on(`change:${name}`, draw);
  }
  draw();
}

export default { render };
