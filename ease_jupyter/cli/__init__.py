"""The ``easeml`` command line. Each subcommand lives in its own module and is
imported only when it runs, so ``easeml --help`` stays fast."""

from __future__ import annotations

import importlib

import click

# name -> (module, one-line help shown by `easeml --help`)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("ease_jupyter.cli.demo", "Run the headless end-to-end demo and write a report."),
    "fsck": ("ease_jupyter.cli.fsck", "Report (and --repair) rows whose blobs cannot be read."),
    "gc": ("ease_jupyter.cli.gc", "Delete blobs nothing references (old checkpoints and states)."),
    "lab": ("ease_jupyter.cli.lab", "JupyterLab with the ease.ml service attached."),
    "models": ("ease_jupyter.cli.models", "List the candidate models and configs for a task's shapes."),
    "serve": ("ease_jupyter.cli.serve", "Run the scheduler service (HTTP API, events, control loop)."),
    "simulate": ("ease_jupyter.cli.simulate", "Replay selection policies on a quality/cost matrix."),
    "stop": ("ease_jupyter.cli.stop", "Stop the service of a data dir (embedded, or easeml serve's)."),
    "users": ("ease_jupyter.cli.users", "Add, list, revoke, link, delete users; allow their models."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module = importlib.import_module(SUBCOMMANDS[name][0])
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ease_jupyter")
def main() -> None:
    """ease_jupyter: declarative, multi-tenant model selection (ease.ml) for Jupyter."""
