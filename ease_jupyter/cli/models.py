"""``easeml models``: the workload a task's shapes match and its candidate models.

    easeml models --input 64,64,3 --output 10
    easeml models --program "{input: {[Tensor[3]], [next]}, output: {[Tensor[4]], []}}"
    easeml models --input 64 --output 10 --examples 5000 --json
    easeml models --input 28,28,1 --output 10 --examples 60000 --epochs 20
    easeml models --task digits --url http://host:8888 --token T   # a service's predicted costs

With ``--task`` it asks a running service instead (``cli/task_costs.py``):
the profiler's predicted seconds of each candidate's next pick of that task,
who predicted them, the configuration the provisioner chose and its cost.

The epochs shown for torch candidates are those the service trains a pick
with (docs/budget.md): the most epochs of its successive halving, by data
size (``zoo.default_max_epochs`` of ``--examples``) unless ``--epochs``
gives a task's ``max_epochs``; the schedule says how many of the pick's
configs reach each rung.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ease_jupyter.errors import EaseMLError

_SHAPE_HELP = "comma-separated positive integers such as 64,64,3"
# Bounds of the numbers a cost estimate takes: a float holds the costs (10**400 examples overflow it),
# and the FLOPs of a time-series model are counted on one example (10 s at 10**4 steps, minutes past it).
MAX_EXAMPLES = 10**12
MAX_SEQ_LEN = 10_000


def parse_shape(text: str, option: str = "shape") -> tuple[int, ...]:
    """``"64,64,3"`` (optionally in brackets, spaces allowed) -> ``(64, 64, 3)``.

    Raises:
        click.BadParameter: naming the bad entry.
    """
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    if not body.strip():
        raise click.BadParameter(f"found an empty shape, expected {_SHAPE_HELP}", param_hint=option)
    dims = []
    for i, part in enumerate(body.split(",")):
        p = part.strip()
        if not p.isdigit() or int(p) < 1:
            raise click.BadParameter(
                f"{text!r}: entry {i + 1} is {p!r}, expected {_SHAPE_HELP}", param_hint=option
            )
        dims.append(int(p))
    return tuple(dims)


def _shape_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    return parse_shape(value, f"--{param.name.replace('_shape', '')}" if param.name else "shape")


def _program_from_text(text: str) -> Any:
    try:
        from ease_jupyter.schema import parse  # written in parallel; imported only when needed
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise click.ClickException(f"--program needs ease_jupyter.schema.parse, which is not available ({e})") from e
    try:
        return parse(text)
    except EaseMLError as e:
        raise click.BadParameter(str(e), param_hint="--program") from e


def _describe(dt: Any) -> str:
    tensors = ", ".join(
        (f"{t.name} :: " if getattr(t, "name", None) else "") + "Tensor[" + ",".join(map(str, t.shape)) + "]"
        for t in dt.tensors
    )
    return "{[" + tensors + "], [" + ", ".join(dt.recursive) + "]}"


def _human_flops(x: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} FLOP"


def _candidate_record(c: Any, examples: int, epochs: int | None) -> dict[str, Any]:
    """One candidate as the service trains a pick of it: a torch candidate's
    configs by successive halving up to ``epochs`` (or the rule by data size)
    (``schedule``; ``pick_cost`` counts the epochs each config trains), a
    scikit-learn candidate's grid once (``schedule`` None)."""
    from ease_jupyter.execution.automl import pick_schedule
    from ease_jupyter.zoo import Engine
    from ease_jupyter.zoo.templates import default_max_epochs

    schedule = None
    if c.engine is Engine.TORCH:  # as service.task_epochs.pick_epochs with no --torch-epochs
        epochs = epochs or default_max_epochs(examples)
        plan = pick_schedule(len(c.configs), epochs)
        schedule = {"rungs": list(plan.rungs), "sizes": list(plan.sizes), "config_epochs": plan.config_epochs,
                    "describe": plan.describe()}
        pick_cost = c.cost(examples, 1) * plan.config_epochs
    else:
        epochs = int(epochs or c.epochs)
        pick_cost = c.cost(examples, epochs) * len(c.configs)
    return {
        "name": c.name,
        "family": c.family,
        "engine": c.engine.value,
        "epochs": int(epochs),
        "schedule": schedule,
        "flops_per_example": float(c.flops_per_example),
        "cost": c.cost(examples, epochs),
        "pick_cost": pick_cost,
        "descriptor": [float(v) for v in c.descriptor],
        "configs": [{"key": cfg.key, "options": cfg.options} for cfg in c.configs],
    }


@click.command("models")
@click.option("--input", "input_shape", callback=_shape_callback, metavar="SHAPE",
              help="Input tensor shape in the user's layout, e.g. 64,64,3 (an image) or 64 (features).")
@click.option("--output", "output_shape", callback=_shape_callback, metavar="SHAPE",
              help="Output tensor shape, e.g. 10 (classes) or 64,64,3.")
@click.option("--program", "program_text", metavar="TEXT",
              help='An ease.ml program instead of --input/--output, e.g. "{input: {[Tensor[3]], [next]}, output: {[Tensor[4]], []}}".')
@click.option("--examples", type=click.IntRange(min=1, max=MAX_EXAMPLES), default=1000, show_default=True,
              help="Number of training examples the cost estimate assumes (at most 10**12).")
@click.option("--epochs", type=click.IntRange(min=1, max=1000), default=None,
              help="A task's max_epochs: the most epochs a torch pick trains (default: the service's rule for "
                   "--examples).")
@click.option("--seq-len", type=click.IntRange(min=1, max=MAX_SEQ_LEN), default=None,
              help=f"Sequence length for the cost of time-series models (default 32, at most {MAX_SEQ_LEN}: the "
                   "FLOPs are counted on one example of that length).")
@click.option("--task", "task_name", metavar="NAME", default=None,
              help="Ask a running service for its predicted cost of each candidate of your task NAME: predicted "
                   "seconds of the next pick, their source (family, pooled, or flops: the FLOPs proxy before any "
                   "data), the configuration the provisioner chose (threads, workers, device, memory) and its cost "
                   "at the admin's prices. Instead of --input/--output/--program.")
@click.option("--url", default=None, metavar="URL",
              help="With --task: the service (default: $EASEML_URL, else the embedded service of --data-dir if "
                   "it runs).")
@click.option("--token", default=None, metavar="TOKEN",
              help="With --task: your ease.ml token (default: $EASEML_TOKEN; the embedded service's own).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="With --task and no URL: the embedded service's data dir (default: $EASEML_DATA_DIR or "
                   "~/.easeml).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of a table.")
def command(input_shape: tuple[int, ...] | None, output_shape: tuple[int, ...] | None, program_text: str | None,
            examples: int, epochs: int | None, seq_len: int | None, task_name: str | None, url: str | None,
            token: str | None, data_dir: Path | None, as_json: bool) -> None:
    """List the workload a task matches (ease.ml template matching, pvldb Fig. 6)
    and its candidate models, configs and estimated training cost; with --task,
    a service's predicted cost of each candidate of that task (profiler and
    provisioner, ACAI §4.2)."""
    from ease_jupyter.zoo import DEFAULT_SEQ_LEN, NoCandidatesError, candidates, match_workload
    from ease_jupyter.zoo.templates import template_for

    if task_name is not None:
        if input_shape is not None or output_shape is not None or program_text is not None:
            raise click.UsageError("give either --task or --input/--output/--program, not both")
        from . import task_costs

        task_costs.show(task_name, url, token, data_dir, as_json)
        return
    if url is not None or token is not None:
        raise click.UsageError("--url and --token go with --task NAME")
    if program_text is not None:
        if input_shape is not None or output_shape is not None:
            raise click.UsageError("give either --program or --input/--output, not both")
        program = _program_from_text(program_text)
    else:
        if input_shape is None or output_shape is None:
            missing = "--input" if input_shape is None else "--output"
            raise click.UsageError(f"missing {missing}: give --input and --output shapes, or --program")
        from ease_jupyter.schema import program_from_shapes

        try:
            program = program_from_shapes(input_shape, output_shape)
        except EaseMLError as e:  # over the size limits a task may declare
            raise click.BadParameter(str(e), param_hint="--input/--output") from e

    try:
        workload = match_workload(program)
    except EaseMLError as e:
        raise click.BadParameter(str(e), param_hint="--program" if program_text else "--input/--output") from e
    template = template_for(workload)
    header: dict[str, Any] = {
        "workload": workload.value,
        "template": {"input": template.input, "output": template.output},
        "program": {"input": _describe(program.input), "output": _describe(program.output)},
        "examples": examples,
    }
    try:
        cands = candidates(program, seq_len=seq_len or DEFAULT_SEQ_LEN)
    except NoCandidatesError as e:
        if as_json:
            click.echo(json.dumps({**header, "candidates": [], "error": str(e)}, indent=2))
        else:
            click.echo(f"workload: {workload.value}")
        raise click.ClickException(str(e)) from e

    epochs_given = epochs is not None
    records = [_candidate_record(c, examples, epochs) for c in cands]
    if as_json:
        click.echo(json.dumps({**header, "candidates": records}, indent=2))
        return

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
    # Plain (markup=False) output: program text and config keys contain [...]
    # that rich would otherwise read as markup tags.
    console.print(Text.assemble(("workload: ", "bold"), workload.value))
    console.print(f"program:  input {header['program']['input']} -> output {header['program']['output']}", markup=False)
    console.print(f"template: input {template.input} -> output {template.output}", markup=False)
    table = Table(title=f"candidate models (cost for {examples} examples)")
    for col, kw in (
        ("name", {"style": "bold"}), ("family", {}), ("engine", {}), ("epochs", {"justify": "right"}),
        ("est. cost of a pick", {"justify": "right"}), ("configs", {}),
    ):
        table.add_column(col, **kw)
    for r in records:
        epochs = str(r["epochs"]) if r["schedule"] is None else f"{r['epochs']}\n({r['schedule']['describe']})"
        cells = (r["name"], r["family"], r["engine"], epochs, _human_flops(r["pick_cost"]),
                 "\n".join(cfg["key"] for cfg in r["configs"]))
        table.add_row(*(Text(c) for c in cells))
    console.print(table)
    total = sum(r["pick_cost"] for r in records)
    n_cfg = sum(len(r["configs"]) for r in records)
    console.print(f"{len(records)} candidates, {n_cfg} configs, {_human_flops(total)} to train them all", markup=False)
    if any(r["schedule"] is not None for r in records):
        how = "--epochs (a task's max_epochs)" if epochs_given else f"the data size ({examples} examples)"
        console.print(f"torch picks: at most {next(r['epochs'] for r in records if r['schedule'])} epochs, by {how}; "
                      "configs that rank poorly stop early (successive halving, docs/budget.md)", markup=False)
