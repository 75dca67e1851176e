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

import contextlib
import io
import json
import os
import secrets
import zipfile
from pathlib import Path
from typing import Any

from ..errors import DataError

CARD_NAME = "model_card.json"
MEDIA_TYPE = "application/zip"
CARD_SUFFIX = ".card.json"
# Each format's file suffix (the zip's model.<suffix>); a suffix of one format
# alone names it (``format_of``): .onnx and .joblib. The torch formats share .pt.
SUFFIXES = {"joblib": ".joblib", "onnx": ".onnx", "torchscript": ".pt", "state_dict": ".pt"}
_NAMED_BY = {suffix: fmt for fmt, suffix in SUFFIXES.items() if list(SUFFIXES.values()).count(suffix) == 1}
TEMP_SUFFIX = ".easeml-export.tmp"  # a file being written beside the model, renamed once whole


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
    neither it nor its card's path (``card_path``) may be a directory or a
    name longer than the directory's file system takes (DataError naming
    ``path``), so that neither file is written when one cannot be. A path
    with no file name ("", ".", "/", "models/") is one too."""
    text = os.fspath(path)
    if isinstance(text, str) and os.path.basename(text) in ("", ".", ".."):  # (pathlib reads "a/." as "a")
        raise DataError("path", f"{text!r}, which names no file" if text else "an empty path",
                        "a file name, e.g. model.onnx (in a directory: models/model.onnx)")
    target = Path(path).expanduser()
    if not target.parent.is_dir():
        raise DataError("path", str(path), f"a file in an existing directory ({target.parent} does not exist)")
    card = card_path(target)
    limit = _name_max(target.parent)
    for name in (target.name, card.name):  # (first: a stat of a longer name fails)
        size = len(os.fsencode(name))
        if size > limit:
            shown = name if len(name) <= 40 else name[:40] + "..."
            raise DataError("path", f"{path}, whose file name {shown} is {size} bytes",
                            f"file names of at most {limit} bytes in {target.parent}, the model card's "
                            f"(the name and {CARD_SUFFIX}) included")
    if target.is_dir():
        raise DataError("path", f"{path} (a directory)", "a file name, e.g. model.onnx")
    if card.is_dir():
        raise DataError("path", f"{path}, whose model card path {card} is a directory",
                        f"a path where <path>{CARD_SUFFIX} can be written beside the model")
    return target


def _name_max(directory: Path) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (AttributeError, OSError, ValueError):  # no pathconf (Windows), or the file system does not say
        return 255


def card_path(path: str | os.PathLike[str]) -> Path:
    """Where ``Task.export`` writes the card of a model exported to ``path``."""
    target = Path(path).expanduser()
    return target.with_name(target.name + CARD_SUFFIX)


def write(data: bytes, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Unpack a bundle: the model to ``path``, the card to ``<path>.card.json``;
    returns the card. Each is written to a file of its own in the same
    directory first and then renamed over its path, the card before the
    model: a failure leaves no half-written file, and never a new model
    beside an old card."""
    target = check_target(path)
    _, model, card = unpack(data)
    temps = [target.with_name(f".{secrets.token_hex(8)}{TEMP_SUFFIX}") for _ in range(2)]
    try:
        for temp, content in zip(temps, (json.dumps(card, indent=2, sort_keys=True).encode(), model)):
            with open(temp, "xb") as out:
                out.write(content)
        os.replace(temps[0], card_path(target))
        os.replace(temps[1], target)
    finally:
        for temp in temps:  # (gone once renamed)
            with contextlib.suppress(OSError):
                temp.unlink()
    return card


def format_of(path: str | os.PathLike[str]) -> str | None:
    """The format a path's suffix names (``.onnx``, ``.joblib``); None for
    any other suffix (the service then picks the engine's default)."""
    return _NAMED_BY.get(Path(path).suffix.lower())


def chosen_format(path: str | os.PathLike[str], fmt: str | None) -> str | None:
    """The format to ask for: ``fmt``, else the one ``path``'s suffix names
    (None: the engine's default). A ``fmt`` that contradicts the suffix
    (``model.onnx`` with ``joblib``) is a DataError naming ``format``: the
    file would be named for one format and hold another. A suffix that
    names no format (``.pt``, ``.pth``, ``.bin``, ``.zip``, none) takes any
    format; a ``fmt`` that is no format is left to the service, which lists
    the valid ones."""
    named = format_of(path)
    if fmt is None or named is None or fmt == named or fmt not in SUFFIXES:
        return named if fmt is None else fmt
    suffix = Path(path).suffix
    raise DataError("format", f"{fmt!r} for {os.fspath(path)!r}, whose suffix {suffix} names the format {named!r}",
                    f"format={named!r} (or none) for a {suffix} path, or a path ending in {SUFFIXES[fmt]} for "
                    f"{fmt!r} (a suffix that names no format, such as .bin, takes any)")
