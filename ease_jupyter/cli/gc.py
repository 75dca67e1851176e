"""``easeml gc``: delete blobs that nothing references any more.

    easeml gc --data-dir /srv/easeml --dry-run     # what would go
    easeml gc --data-dir /srv/easeml               # blobs unreferenced for over an hour
    easeml gc --data-dir /srv/easeml --grace 0     # everything unreferenced (service stopped!)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ._data_dir import FiniteFloat, db_option


@click.command("gc")
@db_option()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The data dir whose blobs to collect (default: $EASEML_DATA_DIR or ~/.easeml).")
@click.option("--grace", "grace_seconds", default=3600.0, show_default=True, type=FiniteFloat(min=0),
              metavar="SECONDS", help="Keep unreferenced blobs written less than this long ago: a running "
                                      "service writes a blob before it references it.")
@click.option("--dry-run", is_flag=True, help="Delete nothing; report what would be deleted.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--force", is_flag=True, help="Go on with a database that has no users although the data dir holds "
                                            "blobs (checked because such a database is rarely the service's).")
def command(db_url, data_dir, grace_seconds, dry_run, as_json, force) -> None:
    """Delete blobs (in DATA_DIR/blobs) that nothing in the store references.

    Referenced are: every dataset version's and chunk's arrays, every job's
    model, the newest selector state, and the checkpoints of queued and
    running torch jobs. Superseded per-unit checkpoints and old selector
    states go. Safe while `easeml serve` runs on the same data dir, as long
    as --grace is longer than a writer takes from writing a blob to
    referencing it (the default hour is); use --grace 0 only when nothing
    else writes to the data dir. The service also does this itself
    (`easeml serve --blob-gc`).
    """
    from ease_jupyter.service.gc import collect_garbage

    from ._data_dir import existing_store

    with existing_store(db_url, data_dir, "collect", force=force) as (store, blobs, directory):
        report = collect_garbage(store, blobs, grace_seconds=grace_seconds, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps({"data_dir": str(directory), **report.as_dict()}, indent=2))
        return
    _print(report, directory)


def _print(report, directory: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from ease_jupyter.service.gc import human_size

    console = Console(width=None if sys.stdout.isatty() else 100, highlight=False)
    title = f"blobs in {directory / 'blobs'}" + (" (dry run: nothing deleted)" if report.dry_run else "")
    table = Table(title=title, title_justify="left")
    table.add_column("blobs")
    table.add_column("count", justify="right")
    table.add_column("size", justify="right")
    gone = "would delete" if report.dry_run else "deleted"
    rows = [
        ("stored", report.stored, report.stored_bytes),
        ("referenced (kept)", report.kept, report.kept_bytes),
        (f"unreferenced, younger than {report.grace_seconds:g} s (kept)", report.young, report.young_bytes),
        (f"unreferenced ({gone})", report.deleted, report.deleted_bytes),
    ]
    if report.temporaries:
        rows.append((f"leftover temporary files ({gone})", report.temporaries, report.temporaries_bytes))
    for label, count, size in rows:
        table.add_row(label, str(count), human_size(size))
    console.print(table, markup=False)
    if report.missing:
        console.print(f"warning: {report.missing} referenced blob(s) are missing from the blob store", markup=False)
    console.print(f"{gone} {report.deleted} blob(s), {human_size(report.deleted_bytes)}, in {report.seconds:.2f} s",
                  markup=False)
