"""Wheel build hook: refuse to build without the committed labextension
build, and pack the example notebooks (``notebooks/*.ipynb``) as
``ease_jupyter/examples/``, where ``easeml lab`` finds them when it runs from
an installed wheel. Only the notebooks: helpers next to them stay out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PREBUILT_LABEXTENSION = "ease_jupyter/labextension/static/style.js"


class ExampleNotebooksHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        if not Path(self.root, PREBUILT_LABEXTENSION).is_file():
            raise FileNotFoundError(f"{PREBUILT_LABEXTENSION} is missing: build the sidebar with "
                                    "`cd labextension && npm install && npm run build:prod`")
        if version == "editable":
            return  # an editable install opens the checkout's notebooks/
        for notebook in sorted(Path(self.root, "notebooks").glob("*.ipynb")):
            build_data["force_include"][str(notebook)] = f"ease_jupyter/examples/{notebook.name}"
