"""`import ease_jupyter` stays cheap: Client, tornado and IPython load on use."""

from __future__ import annotations

import subprocess
import sys


def test_lazy_client_and_magics():
    code = (
        "import sys, ease_jupyter\n"
        "assert ease_jupyter.__version__\n"
        "assert 'tornado' not in sys.modules and 'IPython' not in sys.modules, 'eager import'\n"
        "from ease_jupyter import Client\n"
        "assert 'tornado' not in sys.modules, 'the Client needs no tornado'\n"
        "assert callable(ease_jupyter.load_ipython_extension)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
