"""``easeml models --task NAME``: a service's predicted cost of each candidate
of one of your tasks (``GET /tasks/NAME/profile``, ACAI §4.2.2-4.2.3).

The service is ``--url`` (else ``$EASEML_URL``), reached with ``--token``
(else ``$EASEML_TOKEN``) as the Client does; with neither, the embedded
service of the data dir (``easeml stop`` stops that one), if it runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click


def _client(url: str | None, token: str | None, data_dir: Path | None) -> Any:
    from ease_jupyter.client import TOKEN_ENV, URL_ENV, Client, _hub_token_for, _setting
    from ease_jupyter.service import embedded

    url = url or _setting(URL_ENV)
    if url is None:  # the embedded service, only where one runs: a look at costs starts nothing
        info = embedded.running(data_dir)
        if info is None:
            raise click.ClickException(
                f"no ease.ml service runs for {embedded.data_dir_of(data_dir)}: give --url (and --token) of one, "
                f"or set {URL_ENV} and {TOKEN_ENV}")
        url, token = info["url"], token or _setting(TOKEN_ENV) or info["token"]
    token = token or _setting(TOKEN_ENV) or _hub_token_for(url)
    if token is None:  # the Client's own message speaks of its token= argument
        raise click.BadParameter(f"found no token for {url}, expected your ease.ml token: --token TOKEN, or "
                                 f"${TOKEN_ENV}", param_hint="--token")
    return Client(url, token, register=False)


def fetch(task: str, url: str | None, token: str | None, data_dir: Path | None) -> dict[str, Any]:
    """The task's profile from the service; a ClickException naming what failed."""
    from ease_jupyter.errors import EaseMLError, NotFoundError

    try:
        client = _client(url, token, data_dir)
        try:
            return client.task(task).profile()
        finally:
            client.close()
    except (EaseMLError, OSError) as error:  # no such task, a refused token, a service that does not answer
        raise click.ClickException(str(error) if isinstance(error, NotFoundError) else f"task {task!r}: {error}") from None


def show(task: str, url: str | None, token: str | None, data_dir: Path | None, as_json: bool) -> None:
    """Print the task's candidates with their predicted seconds, source, chosen configuration and cost."""
    from ease_jupyter.profile_rows import candidate_rows, prices_line

    profile = fetch(task, url, token, data_dir)
    if as_json:
        click.echo(json.dumps(profile, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
    rows = candidate_rows(profile)
    records = (profile.get("profiler") or {}).get("records", 0)
    console.print(f"task {profile.get('task', task)}: {profile.get('examples', 0)} examples; "
                  f"profiler fitted on {records} finished job(s); {prices_line(profile)}", markup=False)
    if not rows:
        console.print("no candidates to price yet: the task has no data", markup=False)
        return
    table = Table(title="predicted cost of each candidate's next pick (cheapest predicted first)")
    for col, kw in (("candidate", {"style": "bold"}), ("engine", {}), ("predicted", {"justify": "right"}),
                    ("source", {}), ("chosen configuration", {}), ("cost", {"justify": "right"}), ("goal", {})):
        table.add_column(col, **kw)
    for r in rows:
        seconds = "" if r["predicted_s"] is None else f"{r['predicted_s']:.3g} s"
        cost = "" if r["cost"] is None else f"{r['cost']:.4g}"
        goal = (r["goal"] or "") + ("" if r["feasible"] in (None, True) else " (infeasible)")
        table.add_row(*(Text(str(c or "")) for c in (r["candidate"], r["engine"], seconds, r["source"],
                                                        r["resources"], cost, goal)))
    console.print(table)
    console.print("source: family (this model's own runtime law), pooled (all families'), flops (the FLOPs "
                  "proxy, before any data)", markup=False)
