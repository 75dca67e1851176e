"""``easeml demo``: the headless main job."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click


@click.command(name="demo")
@click.option("--quick", is_flag=True, help="Two users and three model families: about half a minute.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the store lives. Default: a fresh temporary directory, so the demo never touches ~/.easeml.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("easeml-demo-report"),
    show_default=True,
    help="Directory for report.html and report.json.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the held-back test split.")
def command(quick: bool, data_dir: Path | None, out: Path, seed: int) -> None:
    """Several users each declare a task on a data set scikit-learn ships,
    feed and refine it, train every candidate config, and infer with the best
    model. Prints a leaderboard and writes an HTML report."""
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from ..demo import run_demo, timed, write_report
    from ..local import LocalWorkspace
    from ..zoo import ModelConfig

    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="easeml-demo-") as scratch:
        workspace = LocalWorkspace.open(data_dir=data_dir or scratch)
        results, elapsed = timed(
            lambda: run_demo(
                workspace,
                quick=quick,
                seed=seed,
                progress=lambda total: tqdm(total=total, desc="training configs", unit="config"),
                log=console.log,
            )
        )
        workspace.store.close()
    table = Table(title="Leaderboard (best model per user)")
    for column in ("user", "task", "best config", "validation", "held-back test", "data version"):
        table.add_column(column)
    for r in results:
        config = ModelConfig.of(r.best["model"], r.best["config"]).key
        table.add_row(
            r.user, r.task, config, f"{r.best['accuracy']:.3f}", f"{r.test_accuracy:.3f}",
            str(r.best["dataset_version"]),
        )
    Console(width=max(Console().width, 120)).print(table)
    json_path, html_path = write_report(results, out, elapsed_seconds=elapsed)
    click.echo(f"report: {html_path} and {json_path} ({elapsed:.1f} s)")
