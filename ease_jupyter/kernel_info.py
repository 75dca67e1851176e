"""What a notebook kernel knows about itself, read from its environment.

The facts a kernel sends when it registers with the scheduler service
(``POST /api/v1/notebooks``, docs/service.md "Notebook sessions"): the hub
user and server name JupyterHub sets in a single-user server's environment
(``JUPYTERHUB_USER``, ``JUPYTERHUB_SERVER_NAME``; an unnamed server's name is
empty), the kernel id (the ``kernel-<id>.json`` connection file jupyter_server
starts each kernel with), the notebook path jupyter_server passes as
``JPY_SESSION_NAME``, and the gateway serving the kernel, if any.

Every function takes the environment (and the connection file) as arguments,
so it is pure and testable; ``current()`` reads this process's.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any, Mapping

# jupyter_client names a kernel's connection file kernel-<kernel id>.json
# (a UUID for kernels that jupyter_server starts; any id for others).
_CONNECTION_FILE = re.compile(r"^kernel-([A-Za-z0-9][A-Za-z0-9_-]{0,63})\.json$")
GATEWAY_ENV = "KERNEL_EASEML_GATEWAY"  # the gateway's URL, passed to its kernels (docs/gateway.md)


@dataclass(frozen=True)
class KernelInfo:
    """A kernel's facts; None where the environment does not say."""

    hub_user: str | None = None
    server_name: str | None = None
    kernel_id: str | None = None
    notebook_path: str | None = None
    gateway: Any = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def kernel_id_of(connection_file: str | None) -> str | None:
    """The kernel id in a connection file's name (``.../kernel-<id>.json``), else None."""
    if not connection_file:
        return None
    match = _CONNECTION_FILE.match(PurePath(connection_file).name)
    return match.group(1) if match else None


def gateway_of(environ: Mapping[str, str]) -> Any:
    """The Jupyter Kernel Gateway serving this kernel, as the service should
    record it; None for a kernel that a Jupyter server started itself.

    A gateway's kernel gets only the ``KERNEL_*`` variables of the Jupyter
    server that asked for it (and those both sides allow; docs/gateway.md).
    ``KERNEL_EASEML_GATEWAY``, set by the deployment in that server's
    environment, names the gateway; jupyter_server's GatewayClient sends
    ``KERNEL_LAUNCH_TIMEOUT`` with every kernel it starts, so its presence
    alone means "behind a gateway, URL not given"."""
    url = environ.get(GATEWAY_ENV) or None
    if url is None and "KERNEL_LAUNCH_TIMEOUT" not in environ:
        return None
    return {"url": url, "kernel_username": environ.get("KERNEL_USERNAME") or None}


def kernel_info(environ: Mapping[str, str], connection_file: str | None) -> KernelInfo:
    """The facts of a kernel with this environment and connection file."""
    return KernelInfo(hub_user=environ.get("JUPYTERHUB_USER") or None,
                      server_name=environ.get("JUPYTERHUB_SERVER_NAME") if "JUPYTERHUB_USER" in environ else None,
                      kernel_id=kernel_id_of(connection_file),
                      notebook_path=environ.get("JPY_SESSION_NAME") or None,
                      gateway=gateway_of(environ))


def connection_file() -> str | None:
    """This process's kernel connection file; None outside a running kernel
    (ipykernel not imported, or imported by a process that is not a kernel)."""
    import sys

    # A running kernel has imported its app already. Importing it here would
    # cost a plain script, and would swap in ipykernel's comm factory.
    kernelapp = sys.modules.get("ipykernel.kernelapp")
    if kernelapp is None:
        return None
    try:
        if not kernelapp.IPKernelApp.initialized():
            return None
        from ipykernel import get_connection_file

        return get_connection_file()
    except Exception:  # noqa: BLE001 - any failure means: not a kernel we can name
        return None


def current() -> KernelInfo:
    """This process's facts; ``kernel_id`` None outside a kernel."""
    return kernel_info(os.environ, connection_file())
