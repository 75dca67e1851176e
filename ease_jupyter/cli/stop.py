"""``easeml stop``: stop the service of a data dir.

    easeml stop                       # the one of $EASEML_DATA_DIR or ~/.easeml
    easeml stop --data-dir ./data

The embedded service is the one ``Client()`` with no URL, the ``%easeml``
magics and ``easeml lab`` start on demand (``service/embedded.py``); it
records its URL and pid in ``<data dir>/service.json``. Where none runs,
the service that holds the data dir (``easeml serve``; its pid is in
``<data dir>/service.lock``) is stopped the same way: SIGTERM, as Ctrl-C.
A data dir that does not exist is a usage error, not "no service runs": no
service can run there, and the path is most likely mistyped (the one that
does run would be left running unnoticed).
"""

from __future__ import annotations

from pathlib import Path

import click

from ._data_dir import FiniteFloat


@click.command("stop")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Data dir of the service (default: $EASEML_DATA_DIR or ~/.easeml).")
@click.option("--timeout", default=30.0, show_default=True, type=FiniteFloat(min=0),
              help="Seconds to wait for it to finish (then it is killed).")
def command(data_dir: Path | None, timeout: float) -> None:
    """Stop the ease.ml service of a data dir: the embedded one (started by Client(), %easeml or
    easeml lab), else the one `easeml serve` runs there.

    Jobs still running go back to the queue and run when the service next starts (torch
    jobs resume from their last finished unit).
    """
    from ease_jupyter.service import embedded

    directory = embedded.data_dir_of(data_dir)
    if not directory.is_dir():
        from ._data_dir import option_hint

        raise click.BadParameter(f"no data dir at {directory}, expected the data dir of a service (one that exists)",
                                 param_hint=option_hint("--data-dir", "EASEML_DATA_DIR"))
    info = embedded.running(directory)
    if info is None:  # none of Client()'s; perhaps an `easeml serve` (it holds the data dir's lock)
        served = embedded.stop_holder(directory, timeout)
        if served is None:
            click.echo(f"no ease.ml service runs for {directory}", err=True)
        else:
            click.echo(f"stopped the ease.ml service of {directory} ({served.get('url') or 'starting'}, "
                       f"pid {served.get('pid')})")
        return
    if embedded.stop(directory, timeout, pid=info.get("pid")):
        click.echo(f"stopped the ease.ml service of {directory} ({info['url']}, pid {info.get('pid')})")
    else:  # it ended between the two looks
        click.echo(f"no ease.ml service runs for {directory}", err=True)
