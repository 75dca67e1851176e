"""The body of ``GET /tasks/{name}/model``: one zip archive holding the
exported model file and its model card.

A zip (stored, not compressed: ONNX and TorchScript files are mostly
weights that do not compress) keeps the card with the model in one
response of one media type, whatever the format. ``Task.export`` unpacks
it: the model file at the path the user gave, the card beside it as
``<path>.card.json``. Standard library only, so that the client needs
nothing else to read it.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

from ..errors import DataError

CARD_NAME = "model_card.json"
MEDIA_TYPE = "application/zip"
CARD_SUFFIX = ".card.json"


def pack(model_name: str, model: bytes, card: dict[str, Any]) -> bytes:
    """A zip of ``model_name`` (the model's bytes) and ``model_card.json``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(model_name, model)
        archive.writestr(CARD_NAME, json.dumps(card, indent=2, sort_keys=True))
    return buffer.getvalue()


def unpack(data: bytes) -> tuple[str, bytes, dict[str, Any]]:
    """(model file name, model bytes, card) of a bundle made by ``pack``."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        card = json.loads(archive.read(CARD_NAME))
        model_name = card["file"]
        return model_name, archive.read(model_name), card


def check_target(path: str | os.PathLike[str]) -> Path:
    """The path a model is exported to: its parent directory must exist, and
    it must not be a directory itself (DataError naming ``path``)."""
    target = Path(path).expanduser()
    if not target.parent.is_dir():
        raise DataError("path", str(path), f"a file in an existing directory ({target.parent} does not exist)")
    if target.is_dir():
        raise DataError("path", f"{path} (a directory)", "a file name, e.g. model.onnx")
    return target


def card_path(path: str | os.PathLike[str]) -> Path:
    """Where ``Task.export`` writes the card of a model exported to ``path``."""
    target = Path(path).expanduser()
    return target.with_name(target.name + CARD_SUFFIX)


def write(data: bytes, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Unpack a bundle: the model to ``path``, the card to ``<path>.card.json``;
    returns the card."""
    target = check_target(path)
    _, model, card = unpack(data)
    target.write_bytes(model)
    card_path(target).write_text(json.dumps(card, indent=2, sort_keys=True))
    return card


def format_of(path: str | os.PathLike[str]) -> str | None:
    """The format a path's suffix names (``.onnx``, ``.joblib``); None for
    any other suffix (the service then picks the engine's default)."""
    return {".onnx": "onnx", ".joblib": "joblib"}.get(Path(path).suffix.lower())
