"""Arrays on the wire, the one codec both the service and the ``Client`` use:

* ``.npy`` bytes (no pickles), base64 in JSON for small ones
  (``{"npy_b64": ...}``), or in a chunked upload for large ones (POST
  /uploads, PUT chunks): ``{"upload": id}`` is the whole upload, and
  ``{"upload": id, "offset": o, "size": n}`` its bytes ``[o, o + n)``, so one
  upload carries many arrays (a wide table's columns) and a request never
  needs more uploads than a user may hold open;
* a 1-d array of strings as ``{"strings": {"utf8": array, "offsets": array}}``:
  its values' UTF-8 bytes and n + 1 offsets (``datasets.string_parts``), each
  an ``.npy`` array as above. numpy's unicode arrays are fixed-width (4 bytes
  a character times the longest value), so one long value in a column of
  short ones would make every row cost as much; this form costs each value
  its own length. A unicode ``.npy`` is still taken.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import os
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ..datasets import string_parts, strings_from_parts
from ..errors import DataError, InvalidStateError, NotFoundError, QuotaExceededError
from ..npy_bytes import load_npy
from ..schema.table import TableColumn, TableData
from ..store.space import storage_full

MAX_OPEN_UPLOADS = 64  # uploads one user may have started and not fed yet
ARRAY_EXPECTED = ('a list, {"npy_b64": base64 .npy bytes}, {"upload": upload id} (with "offset" and "size": '
                  'a part of it) or {"strings": {"utf8": array, "offsets": array}}')


def to_npy_bytes(array: Any) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(np.asarray(array)), allow_pickle=False)
    return buffer.getvalue()


def from_npy_bytes(field: str, data: bytes) -> np.ndarray:
    try:
        return load_npy(data)
    except Exception:  # noqa: BLE001 - any unreadable payload is the caller's data
        raise DataError(field, "bytes that are not a .npy array", ".npy bytes (numpy.save, no pickles)") from None


def is_strings(array: Any) -> bool:
    """A 1-d unicode array: one that goes as ``{"strings": ...}``."""
    return isinstance(array, np.ndarray) and array.dtype.kind == "U" and array.ndim == 1


def encode(array: Any) -> dict[str, Any]:
    """An array inline: a 1-d array of strings as its UTF-8 and offsets, any other as base64 .npy."""
    array = np.asarray(array)
    if is_strings(array):
        utf8, offsets = string_parts(array)
        return {"strings": {"utf8": encode(utf8), "offsets": encode(offsets)}}
    return {"npy_b64": base64.b64encode(to_npy_bytes(array)).decode("ascii")}


def decode(field: str, value: Any, uploads: "Uploads | None" = None, owner_id: int | None = None) -> Any:
    if isinstance(value, dict) and "table" in value:
        return decode_table(field, value["table"], uploads, owner_id)
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and "strings" in value:
        parts = value["strings"]
        if not isinstance(parts, dict):
            raise DataError(f"{field}.strings", type(parts).__name__, '{"utf8": array, "offsets": array}')
        return strings_from_parts(field, *(_part(f"{field}.{key}", parts.get(key), uploads, owner_id)
                                           for key in ("utf8", "offsets")))
    if isinstance(value, dict) and "npy_b64" in value:
        try:
            raw = base64.b64decode(value["npy_b64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise DataError(field, "invalid base64", "base64 of .npy bytes") from None
        return from_npy_bytes(field, raw)
    if isinstance(value, dict) and "upload" in value and uploads is not None and owner_id is not None:
        start, size = _byte_range(field, value)
        try:
            data = uploads.read(owner_id, value["upload"], start, size)
        except NotFoundError:  # the body names it, so it is the body that is wrong (400), not the route (404)
            raise DataError(f"{field}.upload", repr(value["upload"])[:80],
                            "the id of one of your uploads that has not been fed yet") from None
        except DataError as error:  # a part past the bytes uploaded
            raise DataError(f"{field}.size", error.found, error.expected) from None
        return from_npy_bytes(field, data)
    raise DataError(field, type(value).__name__ if value is not None else "nothing", ARRAY_EXPECTED)


def _part(field: str, value: Any, uploads: "Uploads | None", owner_id: int | None) -> np.ndarray:
    """One array of a ``{"strings": ...}`` form: an .npy array, never a list or another form."""
    if not isinstance(value, dict) or not ("npy_b64" in value or "upload" in value):
        raise DataError(field, type(value).__name__ if value is not None else "nothing",
                        '{"npy_b64": base64 .npy bytes} or {"upload": upload id, ...}')
    return decode(field, value, uploads, owner_id)


def _byte_range(field: str, value: dict) -> tuple[int | None, int | None]:
    """(offset, size) of an upload's part, or (None, None) for all of it."""
    if "offset" not in value and "size" not in value:
        return None, None
    bounds = []
    for key in ("offset", "size"):
        number = value.get(key)
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise DataError(f"{field}.{key}", repr(number)[:80],
                            "a byte count of 0 or more (offset and size go together: the part of the upload)")
        bounds.append(number)
    return bounds[0], bounds[1]


def upload_ids(value: Any) -> list[str]:
    """The uploads an encoded array names, as ``decode`` reads it: its own,
    a string array's parts', or a table's columns' (values and missing
    masks); each once, however many of its arrays one upload carries."""
    found: dict[str, None] = {}
    if isinstance(value, dict) and isinstance(value.get("upload"), str):
        found[value["upload"]] = None
    elif isinstance(value, dict) and isinstance(value.get("strings"), dict):
        for part in (value["strings"].get("utf8"), value["strings"].get("offsets")):
            found.update(dict.fromkeys(upload_ids(part)))
    elif isinstance(value, dict) and isinstance(value.get("table"), list):
        for column in value["table"]:
            if isinstance(column, dict):
                for part in (column.get("values"), column.get("missing")):
                    found.update(dict.fromkeys(upload_ids(part)))
    return list(found)


TABLE_EXPECTED = '[{"name": column, "type": "number"|"bool"|"string", "values": array, "missing": array}, ...]'


def decode_table(field: str, columns: Any, uploads: "Uploads | None" = None, owner_id: int | None = None) -> TableData:
    """A table on the wire: one entry per column, each array encoded as
    ``decode`` takes it (strings as ``{"strings": ...}`` or unicode .npy, with a missing mask)."""
    if not isinstance(columns, list) or not all(isinstance(c, dict) for c in columns):
        raise DataError(f"{field}.table", type(columns).__name__, TABLE_EXPECTED)
    out: dict[str, TableColumn] = {}
    for i, column in enumerate(columns):
        name = column.get("name")
        if not isinstance(name, str) or name in out:
            raise DataError(f"{field}.table[{i}].name", repr(name)[:80], "a column name used once")
        where = f"{field}[{name!r}]"
        values = decode(where, column.get("values"), uploads, owner_id)
        if isinstance(values, list):
            values = _list_column(where, values)
        missing = column.get("missing")
        if missing is not None:
            missing = np.asarray(decode(f"{where}.missing", missing, uploads, owner_id))
        out[name] = TableColumn.of(name, column.get("type"), values, missing, field=field)
    return TableData.of(out, field=field)


def _list_column(where: str, values: list) -> np.ndarray:
    if all(isinstance(v, str) for v in values):
        return np.asarray(values, dtype=str)
    if all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) or isinstance(v, bool) for v in values):
        return np.asarray([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    raise DataError(where, "a list of mixed values", "strings, or numbers and nulls")


class Uploads:
    """Chunked uploads kept as files ``<dir>/<owner id>/<uuid>.part``.

    A chunk must start where the previous one ended (``offset`` = bytes so far),
    so a client can resume after a failure by asking for the current size.
    A chunk that cannot be written whole (a full disk: ``StorageFullError``)
    is cut off again, so the upload keeps its old size and can be resumed.
    """

    def __init__(self, directory: Path, max_total_bytes: int = 4 * 1024**3):
        self.directory = Path(directory)
        self.max_total_bytes = max_total_bytes
        self._lock = threading.Lock()

    @classmethod
    def in_data_dir(cls, data_dir: str | Path) -> "Uploads":
        """The uploads of the service whose data directory is ``data_dir``."""
        return cls(Path(data_dir) / "uploads")

    def _owner_dir(self, owner_id: int) -> Path:
        return self.directory / str(int(owner_id))

    def _path(self, owner_id: int, upload_id: Any) -> Path:
        try:
            uid = uuid.UUID(str(upload_id)).hex
        except ValueError:
            raise NotFoundError(f"upload {upload_id!r} not found") from None
        return self._owner_dir(owner_id) / f"{uid}.part"

    def create(self, owner_id: int) -> str:
        uid = uuid.uuid4().hex
        path = self._owner_dir(owner_id) / f"{uid}.part"
        open_now = len(list(path.parent.glob("*.part"))) if path.parent.is_dir() else 0
        if open_now >= MAX_OPEN_UPLOADS:
            raise QuotaExceededError(f"{open_now} uploads not fed yet, the most one user may have open: feed or "
                                     "let one expire first", field="uploads", found=str(open_now),
                                     expected=f"at most {MAX_OPEN_UPLOADS}")
        with self._disk_full_is_storage_full():
            # the uploads dir too (mkdir gives a missing parent the umask's mode, e.g. 0755)
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            path.parent.mkdir(exist_ok=True, mode=0o700)
            path.touch(mode=0o600)
        return uid

    def usage(self, owner_id: int) -> int:
        """Bytes in the owner's uploads that are not fed yet (her quota counts them)."""
        total = 0
        for path in self._owner_dir(owner_id).glob("*.part"):
            try:
                total += path.stat().st_size
            except FileNotFoundError:  # fed or swept meanwhile
                continue
        return total

    def discard_owner(self, owner_id: int) -> tuple[int, int]:
        """Delete every upload of an owner whose account goes, and her
        directory: (files, bytes) deleted."""
        directory = self._owner_dir(owner_id)
        count = size = 0
        for path in directory.glob("*.part"):
            try:
                length = path.stat().st_size
                path.unlink()
            except FileNotFoundError:  # fed or swept meanwhile
                continue
            count, size = count + 1, size + length
        try:
            directory.rmdir()
        except OSError:  # missing, or an upload started meanwhile (a hub login of hers): the sweep takes it later
            pass
        return count, size

    @contextlib.contextmanager
    def _disk_full_is_storage_full(self) -> Iterator[None]:
        try:
            yield
        except OSError as error:
            full = storage_full(error, self.directory)
            if full is not None:
                raise full from None
            raise

    def size(self, owner_id: int, upload_id: str) -> int:
        path = self._path(owner_id, upload_id)
        if not path.is_file():
            raise NotFoundError(f"upload {upload_id!r} not found")
        return path.stat().st_size

    def append(self, owner_id: int, upload_id: str, offset: int, data: bytes, *,
               reserve: Callable[[int], None] | None = None) -> int:
        """Add ``data`` at ``offset``; the new size. ``reserve(len(data))``,
        when given, may refuse the chunk by raising (the owner's quota)."""
        with self._lock:
            size = self.size(owner_id, upload_id)
            if offset != size:
                raise InvalidStateError(f"offset: found {offset}, expected {size} (the bytes received so far)")
            if size + len(data) > self.max_total_bytes:
                raise DataError("upload", f"{size + len(data)} bytes", f"at most {self.max_total_bytes} bytes")
            if reserve is not None:
                reserve(len(data))
            path = self._path(owner_id, upload_id)
            with self._disk_full_is_storage_full(), open(path, "r+b", buffering=0) as handle:
                try:
                    handle.seek(size)
                    rest = memoryview(data)
                    while rest:  # an unbuffered write may take part of it
                        rest = rest[handle.write(rest):]
                except BaseException:
                    handle.truncate(size)  # the chunk is all or nothing
                    raise
            return size + len(data)

    def read(self, owner_id: int, upload_id: Any, offset: int | None = None, size: int | None = None) -> bytes:
        """The upload's bytes, or ``size`` of them from ``offset`` (a
        DataError naming ``upload`` when they are not all there yet)."""
        total = self.size(owner_id, upload_id)
        path = self._path(owner_id, upload_id)
        if offset is None or size is None:
            return path.read_bytes()
        if offset + size > total:
            raise DataError("upload", f"bytes {offset} to {offset + size} of an upload of {total} bytes",
                            "a part of the bytes uploaded so far")
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(size)

    def sweep(self, max_age_seconds: float) -> int:
        """Delete uploads not written to for ``max_age_seconds`` (started and
        never fed); returns how many went."""
        import time

        cutoff = time.time() - max_age_seconds
        removed = 0
        with self._lock:
            for path in self.directory.glob("*/*.part"):
                try:
                    if path.stat().st_mtime < cutoff:
                        path.unlink()
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed

    def delete(self, owner_id: int, upload_id: str) -> None:
        try:
            os.unlink(self._path(owner_id, upload_id))
        except FileNotFoundError:
            pass

    def consume(self, owner_id: int, *values: Any) -> None:
        """Delete every upload the encoded arrays ``values`` name (``upload_ids``):
        a request's uploads serve that request only, whatever its answer."""
        self.consume_ids(owner_id, [u for value in values for u in upload_ids(value)])

    def consume_ids(self, owner_id: int, ids: Iterable[str]) -> None:
        """``consume`` for a caller that has the ids already (``upload_ids``
        of its request's arrays): deletes those uploads."""
        for upload_id in ids:
            try:
                self.delete(owner_id, upload_id)
            except NotFoundError:  # not an upload id at all: nothing to delete
                pass
