"""``EaseMLLab``: the jupyter_server extension app (config and routes).

.. code-block:: python

    # jupyter_server_config.py
    c.EaseMLLab.url = "http://easeml.internal:8585"   # default: $EASEML_URL, else the embedded service
    c.EaseMLLab.token = "..."                          # default: $EASEML_TOKEN
    c.EaseMLLab.start_service = True                   # start the embedded service with the server
"""

from __future__ import annotations

import threading

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join
from traitlets import Bool, Unicode

from .handlers import (NotebooksHandler, NotificationRelay, NotificationsHandler, ServiceConnection, TaskHandler,
                       TasksHandler, WhoamiHandler)


class EaseMLLab(ExtensionApp):
    name = "ease_jupyter.lab"
    extension_url = "/lab"  # only used when the extension is launched on its own
    load_other_extensions = True

    url = Unicode(None, allow_none=True, config=True,
                  help="URL of the ease.ml service (default: $EASEML_URL, else the embedded service of the data dir).")
    token = Unicode(None, allow_none=True, config=True, help="Token for the ease.ml service (default: $EASEML_TOKEN).")
    data_dir = Unicode(None, allow_none=True, config=True,
                       help="Data dir of the embedded service (default: $EASEML_DATA_DIR or ~/.easeml).")
    start_service = Bool(False, config=True,
                         help="Connect to (and, with no URL, start) the ease.ml service in the background when the "
                              "server starts, instead of on the first sidebar request.")

    def initialize_settings(self) -> None:
        self.service = ServiceConnection(self.url, self.token, self.data_dir)
        self.settings["easeml_service"] = self.service
        self.notifications = NotificationRelay(self.service)
        self.settings["easeml_notifications"] = self.notifications
        if self.start_service:
            threading.Thread(target=self._connect, name="easeml-connect", daemon=True).start()

    def _connect(self) -> None:
        try:
            url = self.service.call(lambda client: client.url)
        except Exception as error:  # noqa: BLE001 - the sidebar shows it again on its first request
            self.log.warning("ease.ml service not available: %s", error)
        else:
            self.log.info("ease.ml service at %s", url)

    async def stop_extension(self) -> None:
        self.notifications.stop()

    def initialize_handlers(self) -> None:
        base = "/easeml"  # ExtensionApp puts the server's base_url in front
        self.handlers.extend([
            (url_path_join(base, "tasks"), TasksHandler),
            (url_path_join(base, "tasks", "(.+)"), TaskHandler),
            (url_path_join(base, "whoami"), WhoamiHandler),
            (url_path_join(base, "notebooks"), NotebooksHandler),
            (url_path_join(base, "notifications"), NotificationsHandler),
        ])
