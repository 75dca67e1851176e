"""Running the example notebooks under nbval (``pytest --nbval-lax notebooks/``,
which ``scripts/test.sh`` does): every cell must run without an error.

The notebooks talk to the embedded ease.ml service, as a user's would. Here
they share one, in a temporary data dir made for the test session (as one
user running the examples one after another would): ``EASEML_DATA_DIR`` is
set, and ``EASEML_URL``/``EASEML_TOKEN`` removed, in the environment each
notebook's kernel starts with, so that neither ``~/.easeml`` nor an outside
service is used. The kernels import ease_jupyter from this checkout
(``PYTHONPATH``). When the session ends, the service is stopped and the data
dir removed.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from ease_jupyter.service import embedded

ROOT = Path(__file__).resolve().parents[1]
_data_dir: list[Path] = []  # the session's data dir, once a notebook ran


def _is_notebook_start(item: pytest.Item) -> bool:
    """The first cell of a notebook (whose setup starts the notebook's kernel)."""
    parent = item.parent
    return type(parent).__name__ == "IPyNbFile" and getattr(parent, "kernel", None) is None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    if not _is_notebook_start(item):
        yield
        return
    if not _data_dir:
        _data_dir.append(Path(tempfile.mkdtemp(prefix="easeml-nbval-")))
    saved = {var: os.environ.get(var) for var in ("EASEML_DATA_DIR", "EASEML_URL", "EASEML_TOKEN", "PYTHONPATH")}
    os.environ["EASEML_DATA_DIR"] = str(_data_dir[0])
    os.environ.pop("EASEML_URL", None)
    os.environ.pop("EASEML_TOKEN", None)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), saved["PYTHONPATH"]]))
    try:
        yield  # the kernel starts here and keeps this environment; the session gets its own back
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def pytest_sessionfinish(session: pytest.Session) -> None:
    for data_dir in _data_dir:
        embedded.stop(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
    _data_dir.clear()
