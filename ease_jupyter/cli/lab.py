"""``easeml lab``: JupyterLab with the ease.ml service attached.

    easeml lab                          # service + JupyterLab on 127.0.0.1:8888, opens the quickstart
    easeml lab --no-browser --port 9000 -- --IdentityProvider.token=secret

It connects to the service first (``EASEML_URL``/``EASEML_TOKEN``, else the
embedded service of the data dir, started if needed), then runs
``python -m jupyterlab`` opening ``notebooks/quickstart.ipynb`` until it
exits, and then stops the embedded service if it started it:

- in a repository checkout (editable install) that is the repository's own
  notebook, with the repository as JupyterLab's root;
- otherwise the example notebooks packaged in the wheel
  (``ease_jupyter/examples/``) are copied into ``./easeml-notebooks/`` (files
  already there are kept, so your edits survive) and the current directory is
  the root.

Arguments after the options (or after ``--``) go to JupyterLab unchanged.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

NOTEBOOK = "quickstart.ipynb"
COPY_DIR = "easeml-notebooks"


def repo_notebooks() -> Path | None:
    """``notebooks/`` of the checkout this package runs from, if any."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "notebooks" / NOTEBOOK).is_file():
        return root / "notebooks"
    return None


def packaged_notebooks() -> list[Path]:
    """The example notebooks shipped inside the wheel (none in a checkout)."""
    examples = Path(__file__).resolve().parents[1] / "examples"
    return sorted(examples.glob("*.ipynb"))


def copy_examples(target: Path) -> Path:
    """Copy the packaged notebooks into ``target`` (keeping files already there); the quickstart's path."""
    sources = packaged_notebooks()
    if not sources:
        raise click.ClickException("no example notebooks are packaged with ease_jupyter; pass --notebook PATH")
    target.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if not (target / source.name).exists():
            shutil.copyfile(source, target / source.name)
    return target / NOTEBOOK


def locate(notebook: Path | None, cwd: Path) -> tuple[Path, Path]:
    """(root dir, notebook to open) for JupyterLab."""
    if notebook is not None:
        notebook = notebook.resolve()
        root = cwd if notebook.is_relative_to(cwd) else notebook.parent
        return root, notebook
    found = repo_notebooks()
    if found is not None:
        return found.parent, found / NOTEBOOK
    return cwd, copy_examples(cwd / COPY_DIR)


def _listen_address(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--ip`` once it names an address of this machine (or a name that
    resolves to one): else a usage error now, before the service starts,
    not JupyterLab's traceback after it. ``*`` and the empty string are
    JupyterLab's for every interface."""
    import socket

    if value in ("", "*"):
        return value
    try:
        family, kind, proto, _, address = socket.getaddrinfo(value, 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(address[:2] if family == socket.AF_INET else address)  # port 0: any free one
    except socket.gaierror as error:
        reason = f"it does not resolve to an address ({error.strerror or error})"
    except OSError as error:
        reason = f"no network interface of this machine has it ({error.strerror or error})"
    else:
        return value
    raise click.BadParameter(f"found {value!r}, {reason}; expected an address of this machine (127.0.0.1, "
                             "0.0.0.0 for every interface) or a name that resolves to one", ctx, param)


@click.command("lab", context_settings={"ignore_unknown_options": True, "allow_extra_args": False})
@click.option("--ip", default="127.0.0.1", show_default=True, callback=_listen_address,
              help="Interface JupyterLab listens on.")
@click.option("--port", default=8888, show_default=True, type=click.IntRange(1, 65535),
              help="Port of JupyterLab (it tries the next ones when taken).")
@click.option("--no-browser", is_flag=True, help="Do not open a browser.")
@click.option("--notebook", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Notebook to open instead of the quickstart.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Data dir of the embedded service (default: $EASEML_DATA_DIR or ~/.easeml); "
                   "ignored when EASEML_URL is set.")
@click.argument("jupyter_args", nargs=-1, type=click.UNPROCESSED)
def command(ip: str, port: int, no_browser: bool, notebook: Path | None, data_dir: Path | None,
            jupyter_args: tuple[str, ...]) -> None:
    """Start (or attach to) the ease.ml service, then JupyterLab on the quickstart notebook.

    An embedded service that this command started is stopped when JupyterLab
    exits; one that was already running is left running (`easeml stop` ends it).
    Extra arguments are passed to JupyterLab, e.g. ``-- --IdentityProvider.token=T``.
    """
    from ..client import Client, URL_ENV
    from ..service import embedded

    env = os.environ.copy()
    if data_dir is not None:
        env["EASEML_DATA_DIR"] = str(data_dir.expanduser().resolve())
        os.environ["EASEML_DATA_DIR"] = env["EASEML_DATA_DIR"]
    started: embedded.Embedded | None = None
    try:
        if not os.environ.get(URL_ENV):
            service = embedded.start_embedded()
            started = service if service.started else None
        client = Client()
        user = client.whoami().get("name")
    except Exception as error:  # noqa: BLE001 - any failure to reach the service ends here, with its reason
        stop_started(started)
        raise click.ClickException(f"the ease.ml service is not available: {error}") from None
    how = " (started here: it stops when JupyterLab exits)" if started else ""
    click.echo(f"ease.ml service: {client.url} (as {user}){how}", err=True)

    try:
        root, path = locate(notebook, Path.cwd().resolve())
        relative = path.relative_to(root).as_posix()
        click.echo(f"opening {path}", err=True)
        argv = [
            sys.executable, "-m", "jupyterlab",
            f"--ServerApp.ip={ip}", f"--ServerApp.port={port}", f"--ServerApp.root_dir={root}",
            f"--LabApp.default_url=/lab/tree/{quote(relative)}",
        ]
        if no_browser:
            argv.append("--ServerApp.open_browser=False")
        argv.extend(a for a in jupyter_args if a != "--")
        if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in argv:
            # containers and CI machines run as root; JupyterLab refuses that without the flag
            click.echo("running as root: passing --allow-root to JupyterLab", err=True)
            argv.append("--allow-root")
        code = run_jupyterlab(argv, env)
    finally:
        stop_started(started)
    sys.exit(code)


def run_jupyterlab(argv: list[str], env: dict[str, str]) -> int:
    """Run JupyterLab as a child until it exits; its exit status.

    A child, not ``exec``: this process must outlive JupyterLab to stop the
    service it started. Ctrl-C in the terminal reaches the child directly
    (same process group; JupyterLab asks to confirm), so this process
    ignores SIGINT; SIGTERM and SIGHUP are passed on to the child.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    child = subprocess.Popen(argv, env=env)
    forward = lambda signum, frame: child.send_signal(signum)  # noqa: E731
    previous = {sig: signal.signal(sig, handler) for sig, handler in
                ((signal.SIGINT, signal.SIG_IGN), (signal.SIGTERM, forward), (signal.SIGHUP, forward))}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:  # this process is leaving first (an error here): take JupyterLab along
            child.terminate()
            child.wait()


def stop_started(service: Any) -> None:
    """Stop the embedded service ``service`` if this command started it (and it still is that process)."""
    if service is None:
        return
    from ..service import embedded

    if embedded.stop(pid=service.pid):
        click.echo(f"stopped the ease.ml service at {service.url}", err=True)
