"""A real IPython shell with ``%easeml`` connected to a service, and running
a notebook cell in it, for the tests of the magics (imported as ``shells``:
tests/ is on sys.path)."""

from __future__ import annotations

import contextlib
from typing import Iterator

from IPython.core.interactiveshell import InteractiveShell


@contextlib.contextmanager
def connected_shell(url: str, token: str) -> Iterator[InteractiveShell]:
    """The IPython shell instance with ``ease_jupyter`` loaded and
    ``%easeml connect url --token token`` run; cleared on exit."""
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "ease_jupyter")
    ip.run_line_magic("easeml", f"connect {url} --token {token}")
    try:
        yield ip
    finally:
        InteractiveShell.clear_instance()


def run_cell(shell: InteractiveShell, capsys, code: str) -> tuple[BaseException | None, str]:
    """Run ``code`` as a notebook cell: (the cell's error, what the cell printed)."""
    capsys.readouterr()
    result = shell.run_cell(code)
    out = capsys.readouterr()
    return result.error_in_exec, out.out + out.err
