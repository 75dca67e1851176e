"""``easeml fsck``: find the rows whose blobs cannot be read, and repair them.

    easeml fsck --data-dir /srv/easeml             # report; exit code 1 if anything needs repair
    easeml fsck --data-dir /srv/easeml --repair    # with the service stopped
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click

from ._data_dir import db_option


@click.command("fsck")
@db_option()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The data dir to check (default: $EASEML_DATA_DIR or ~/.easeml).")
@click.option("--repair", is_flag=True, help="Rebuild, retrain or drop what cannot be read (service stopped).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--force", is_flag=True, help="Go on with a database that has no users although the data dir holds "
                                            "blobs (checked because such a database is rarely the service's).")
def command(db_url, data_dir, repair, as_json, force) -> None:
    """Read every blob that the store's rows reference and report the rows
    whose blob is missing or damaged. Exit code 1 while such a row needs
    attention (always without --repair, when there is one).

    With --repair: a dataset version's list of examples is rebuilt from the
    rows; lost examples that the task's latest version uses are dropped from
    it by a refine (a new version, trained afresh); a lost model is marked
    unusable (best and infer skip it) and retrained when it was trained on
    the latest data. Refused while `easeml serve` runs on the data dir:
    stop it first; the service takes the repairs in when it starts. A
    report alone may run beside the service.
    """
    from ease_jupyter.service.fsck import check

    from ._data_dir import existing_store, no_service_in

    with existing_store(db_url, data_dir, "check", force=force) as (store, blobs, directory):
        # a running service would not see the repairs, and would act on what it holds
        with (no_service_in(directory, f"stop it first (easeml stop --data-dir {directory}), then repair; "
                            "easeml fsck without --repair may run beside it") if repair else contextlib.nullcontext()):
            report = check(store, blobs, repair=repair, progress=None if as_json else _progress_bar)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        _print(report)
    sys.exit(1 if report.open else 0)


def _progress_bar(items, total):
    """A rich progress bar over the scan (shown on a terminal only)."""
    from rich.progress import track

    return track(items, total=total, description="reading blobs", transient=True,
                 disable=not sys.stderr.isatty())


def _print(report) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 120, highlight=False)
    if report.problems:
        table = Table(title="rows whose blob cannot be read", title_justify="left")
        for column in ("what", "blob", "repair" if report.repaired else "status"):
            table.add_column(column)
        for p in report.problems:
            status = p.repair or ("needs --repair" if p.open else "")
            table.add_row(p.what, p.digest[:12], status)
        console.print(table, markup=False)
    console.print(f"{report.checked} blob(s) read, {len(report.problems)} unreadable, "
                  f"{len(report.open)} needing attention", markup=False)
