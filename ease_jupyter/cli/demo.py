"""``easeml demo``: the headless main job, on the scheduler service."""

from __future__ import annotations

from pathlib import Path

import click

from ._data_dir import make_data_dir, writable_dir


@click.command(name="demo")
@click.option("--quick", is_flag=True,
              help="Two scikit-learn users and one small image user, under a minute.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the service's store lives. Default: a fresh temporary directory, so the demo never touches ~/.easeml.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("easeml-demo-report"),
    show_default=True,
    help="Directory for report.html and report.json.",
)
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True,
              help="Seed of the held-back test split and the selector (0 to 2**32-1, as scikit-learn takes).")
@click.option("--engine", default="local", show_default=True,
              help="Where the torch (MOP) jobs run: local, dask, or tcp://HOST:PORT.")
@click.option("--torch-epochs", type=click.IntRange(1, 100), default=None,
              help="Epochs per learning rate of a torch pick (default: 3).")
def command(quick: bool, data_dir: Path | None, out: Path, seed: int, engine: str, torch_epochs: int | None) -> None:
    """Several simulated users, each with a task on data scikit-learn ships
    (plus one small image task trained by MOP), share one in-process
    scheduler service. They feed and refine over HTTP while the service picks
    what to train for whom. Prints a leaderboard and writes an HTML report
    with the average accuracy loss over time."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    from tqdm import tqdm

    from ease_jupyter.execution.engine import EngineError
    from ease_jupyter.execution.engine.clusters import check_engine_spec

    from ..demo import run_demo, write_report
    from ..errors import AlreadyExistsError
    from ..service.embedded import DataDirInUse

    try:
        check_engine_spec(engine)
    except EngineError as error:
        raise _bad_engine(error) from None
    writable_dir(out, "--out")  # before the run: a report that cannot be written would lose it
    if data_dir is not None:
        data_dir = make_data_dir(data_dir)  # a usage error where it cannot be made, not the OS's traceback
    console = Console(stderr=True)
    try:
        run = run_demo(
            quick=quick, seed=seed, data_dir=data_dir, engine=engine, torch_epochs=torch_epochs,
            progress=lambda total: tqdm(total=total, desc="jobs (all users)", unit="job"),
            log=console.log,
        )
    except EngineError as error:  # the engine did not start: no gateway address, no scheduler there
        raise _bad_engine(error) from None
    except (DataDirInUse, AlreadyExistsError) as error:  # a service on it, or accounts the demo did not make
        raise click.BadParameter(str(error), param_hint="--data-dir") from None
    table = Table(title="Leaderboard (best model per user)")
    for column in ("user", "task", "kind", "best model", "validation", "held-back test", "data version", "jobs"):
        table.add_column(column)
    for row in run.leaderboard():
        # Text, not markup: "vgg_small[lr=0.01]" would read as a style tag
        table.add_row(Text(row["user"]), Text(row["task"]), row["kind"], Text(row["config"]), f"{row['validation']:.3f}",
                      f"{row['test']:.3f}", str(row["dataset_version"]), str(row["jobs"]))
    Console(width=max(Console().width, 140)).print(table)
    curve = run.loss_curve
    marks = [(t, loss) for t, loss in zip(curve["seconds"], curve["average_loss"])]
    for level in (0.05, 0.02, 0.01):
        hit = next((t for t, loss in marks if loss <= level), None)
        click.echo(f"average accuracy loss <= {level}: " + ("never" if hit is None else f"after {hit:.1f} s"))
    json_path, html_path = write_report(run, out)
    click.echo(f"report: {html_path} and {json_path} ({run.elapsed_seconds:.1f} s)")


def _bad_engine(error: Exception) -> click.BadParameter:
    text = str(error)
    return click.BadParameter(text.removeprefix("engine: "), param_hint="--engine")
