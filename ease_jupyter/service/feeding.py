"""A feed's work: decode the arrays, check the quota and the table, store
the new dataset version (docs/service.md, "Feeds in their own processes").

``Feeder`` holds what that work needs and nothing of the control loop or
the event bus, so it runs the same in the service's process and in a feed
process (``feed_processes.py``); ``Service.feed`` tells the loop and the
event stream afterwards.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import datasets
from ..errors import DataError, InvalidStateError
from ..store import BlobStore, DatasetVersion, Store, Task, User
from ..tabular import IMAGE_FILES_ORIGIN
from . import arrays, task_schema
from .quota import Quota, added_version

_JSON_KINDS = {list: "a JSON array", str: "a JSON string", int: "a JSON number", float: "a JSON number",
               bool: "a JSON boolean", type(None): "null"}


def json_object(raw: bytes | bytearray) -> dict[str, Any]:
    """A request body as a JSON object ({} when empty); any other body is a
    ``DataError`` naming ``body``."""
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise DataError("body", f"invalid JSON ({error})", "a JSON object") from None
    except RecursionError:  # the parser's own bound: about a thousand levels of nesting
        raise DataError("body", "JSON nested too deeply to parse", "a JSON object nested a few levels deep") from None
    if not isinstance(body, dict):
        raise DataError("body", _JSON_KINDS.get(type(body), "a JSON value"), "a JSON object")
    return body


@dataclass(frozen=True)
class Fed:
    """What a feed stored: ``datasets.FeedResult`` without its arrays, so
    that it crosses a process boundary cheaply."""

    version: DatasetVersion
    created: bool
    new: int
    duplicates: int
    mode: str


class Feeder:
    """Stores feeds of any task, one feed of a task at a time in this process."""

    def __init__(self, store: Store, blobs: BlobStore, uploads: arrays.Uploads, quota: Quota):
        self.store, self.blobs, self.uploads, self.quota = store, blobs, uploads, quota
        self._locks: dict[int, threading.Lock] = {}  # per task id

    @classmethod
    def at(cls, store: Store, blobs: BlobStore, data_dir: Path, quota_bytes: int | None) -> "Feeder":
        """The feeder of the service whose data directory is ``data_dir``."""
        uploads = arrays.Uploads.in_data_dir(data_dir)
        return cls(store, blobs, uploads, Quota(quota_bytes, uploads.directory))

    def feed(self, caller: User, task: Task, body: dict[str, Any]) -> Fed:
        # The uploads X and y name (each once): the quota counts them as freed, and they go at the end.
        named = list(dict.fromkeys(arrays.upload_ids(body.get("X")) + arrays.upload_ids(body.get("y"))))
        try:
            return self._feed(caller, task, body, named)
        finally:  # a feed's uploads serve it alone, whatever its answer: a refused one is sent again whole
            self.uploads.consume_ids(caller.id, named)

    def _feed(self, caller: User, task: Task, body: dict[str, Any], named: list[str]) -> Fed:
        origin = body.get("origin")  # IMAGE_FILES_ORIGIN: the client read the rows from image files
        if origin is not None and origin != IMAGE_FILES_ORIGIN:
            raise DataError("origin", repr(origin)[:80] if isinstance(origin, str) else _JSON_KINDS.get(
                type(origin), "a JSON value"), f"{IMAGE_FILES_ORIGIN!r} (rows the client read from image files), "
                "or none")
        if task.cancelled:
            raise InvalidStateError(f"task {task.name!r} is cancelled; resume it before feeding")
        X = arrays.decode("X", body.get("X"), self.uploads, caller.id)
        y = arrays.decode("y", body.get("y"), self.uploads, caller.id)
        releasing = sum(self.uploads.size(caller.id, u) for u in named)
        mode = body.get("mode")  # datasets.FEED_MODES; rows already there are skipped by default
        # One feed of a task at a time maps its labels to class indices and stores
        # the names it added: two feeds adding "cat" and "dog" must not both take index k.
        with self._locks.setdefault(task.id, threading.Lock()):
            # One read transaction for the tags, the parent and its chunks, and the quota's stamp.
            tags, parent, chunks, stamp = self.store.feed_reads(task.id, caller.id)
            reserve = self.quota.reserve(self.store, self.blobs, caller.id, what=f"feed of task {task.name!r}",
                                         releasing=releasing, stamp=stamp)
            # table columns checked, names mapped (named labels on a task fed class indices refused)
            prepared = task_schema.prepare_feed(self.store, task, X, y, tags, has_data=parent is not None)

            def accept(n_bytes: int) -> None:
                # feed_rows calls this once the rows passed every check and the quota, just before it
                # writes: the names the feed adds are stored then, so a refused feed fixes no class
                # list, and before the version that uses them (a version whose names were lost would
                # read its labels as other classes). Stored again on a retry: the same names.
                reserve(n_bytes)
                prepared.commit()
                if origin is not None and not task_schema.fed_image_files(tags):
                    # once, for the model card's "image files" step (model_card.input_preprocessing)
                    self.store.set_tag("task", task.id, task_schema.IMAGE_FILES_TAG, "true")

            result = datasets.feed_rows(self.store, self.blobs, task, prepared.X, prepared.y, reserve=accept,
                                        mode=datasets.DEDUPE if mode is None else mode, state=(parent, chunks))
            if result.created:
                added_version(self.store, caller.id, result.version, result.blob_sizes)
        return Fed(result.version, result.created, result.new, result.duplicates, result.mode)
