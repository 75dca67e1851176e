"""``DirectoryBlobStore``: content-addressed files under one directory.

A blob with digest ``abcdef...`` lives at ``root/ab/cdef...``: the two-letter
fan-out keeps directories small. A write goes to a temporary file in the same
directory, is flushed and fsynced, then renamed over the final name with
``os.replace``, which is atomic on POSIX and Windows. A reader therefore sees
the whole blob or nothing, and a crash leaves at worst a ``.tmp-*`` file, never
a truncated blob under a real name.

A blob file's mtime is its ``written_at``: a put of content that is already
stored touches the file instead of writing it again. ``delete`` first renames
the file to a ``.tmp-del-*`` name (atomic), then looks at the mtime of what it
took: if a put touched it after ``if_older_than`` (a put that raced with the
delete), it is renamed back; otherwise it is unlinked. A put that finds the
name already gone writes the blob afresh. Either way a put that returned a
digest leaves that blob in place. (A reader of that very digest may miss it
for the instant between the two renames; garbage collection deletes only
blobs nothing references, which nobody should be reading.)

A put that finds the filesystem full (``ENOSPC``, ``EDQUOT``) removes its
temporary file and raises ``StorageFullError`` naming the filesystem's
size (``space.storage_full``). Errors name digests, never paths.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import Callable, Iterator

from ease_jupyter.errors import NotFoundError, StoreCorruptError

from ._validate import check_digest
from .base import BlobInfo, BlobStore
from .space import storage_full

TEMP_PREFIX = ".tmp-"
_FAN_OUT = re.compile(r"[0-9a-f]{2}")
_REST = re.compile(r"[0-9a-f]{62}")


class BlobCorruptedError(StoreCorruptError):
    """A blob file whose content no longer hashes to its name (e.g. disk damage)."""


class DirectoryBlobStore(BlobStore):
    """Blobs as files under ``root`` (created if missing).

    Args:
        root: The directory. Safe to share between processes and threads:
            writers never collide because equal names mean equal content.
        verify: Re-hash every blob on read and raise ``BlobCorruptedError``
            on a mismatch. Costs one sha256 pass per read.
    """

    def __init__(self, root: str | os.PathLike[str], *, verify: bool = True) -> None:
        self.root = Path(root)
        self.verify = verify
        # Owner only (its parents too, where made here), whatever the umask: the blobs are every user's
        # data. An existing directory keeps its mode.
        _private_mkdir(self.root)

    def __repr__(self) -> str:
        return f"DirectoryBlobStore({str(self.root)!r})"

    def path(self, digest: str) -> Path:
        """Where the blob ``digest`` is (or would be) stored."""
        # The digest check is what keeps '../x' and absolute paths out of root.
        check_digest("digest", digest)
        return self.root / digest[:2] / digest[2:]

    def put_bytes(self, data: bytes) -> str:
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        final = self.path(digest)
        if _touch(final):
            return digest  # same name, same content: only its written_at moves (see delete)
        try:
            self._write(final, data)
        except OSError as error:
            full = storage_full(error, self.root)
            if full is not None:
                raise full from None
            raise
        return digest

    def _write(self, final: Path, data: bytes) -> None:
        if not final.parent.is_dir():
            _private_mkdir(final.parent)
            _fsync_directory(self.root)  # the new fan-out folder's entry, or a blob in it may be lost with it
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=final.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_directory(final.parent)

    def get_bytes(self, digest: str) -> bytes:
        path = self.path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"blob {digest}: not found") from None
        if self.verify and hashlib.sha256(data).hexdigest() != digest:
            raise BlobCorruptedError(f"blob {digest}: corrupted (its content has another sha256)",
                                     field="digest", found="another sha256", expected=digest)
        return data

    def size(self, digest: str) -> int | None:
        try:
            return self.path(digest).stat().st_size
        except FileNotFoundError:
            return None

    def exists(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def delete(self, digest: str, *, if_older_than: float | None = None,
               unless: Callable[[], bool] | None = None) -> bool:
        final = self.path(digest)
        try:
            if if_older_than is not None and os.stat(final).st_mtime >= if_older_than:
                return False
            grave = final.with_name(f"{TEMP_PREFIX}del-{uuid.uuid4().hex}")
            os.rename(final, grave)  # from here on a put writes the blob afresh
        except FileNotFoundError:
            return False
        try:
            # A put touched it between the check and the rename, or a row references it: it stays.
            keep = (if_older_than is not None and os.stat(grave).st_mtime >= if_older_than) or (
                unless is not None and unless())
        except BaseException:
            os.replace(grave, final)
            raise
        if keep:
            os.replace(grave, final)  # replacing a fresh copy of the same content is harmless
            return False
        os.unlink(grave)
        _fsync_directory(final.parent)
        return True

    def iter_blobs(self) -> Iterator[BlobInfo]:
        try:
            fan_out = [e for e in os.scandir(self.root) if _FAN_OUT.fullmatch(e.name) and e.is_dir()]
        except FileNotFoundError:
            return
        for directory in fan_out:
            try:
                entries = list(os.scandir(directory.path))
            except FileNotFoundError:
                continue
            for entry in entries:
                if _REST.fullmatch(entry.name) is None:
                    continue  # temporaries and anything else that is no blob
                try:
                    info = entry.stat()
                except FileNotFoundError:
                    continue  # deleted meanwhile
                yield BlobInfo(directory.name + entry.name, info.st_size, info.st_mtime)

    def remove_temporaries(self, older_than: float, *, dry_run: bool = False) -> tuple[int, int]:
        """Delete ``.tmp-*`` files (left by a crash in the middle of a put or
        a delete) last modified before ``older_than`` (POSIX time); (count,
        bytes). Not part of the ``BlobStore`` API: only files have leftovers.
        A put in progress has a fresh temporary, so pass a cut-off well in
        the past."""
        count = size = 0
        for path in self.root.glob(f"??/{TEMP_PREFIX}*"):
            try:
                info = path.stat()
                if info.st_mtime >= older_than:
                    continue
                if not dry_run:
                    path.unlink()
            except FileNotFoundError:
                continue
            count, size = count + 1, size + info.st_size
        return count, size


def _private_mkdir(directory: Path) -> None:
    """``mkdir -p`` with mode 0700 for each directory it makes (``Path.mkdir``
    gives missing parents the umask's mode); existing ones are left as they are."""
    if directory.is_dir():
        return
    if not directory.parent.is_dir():
        _private_mkdir(directory.parent)
    try:
        directory.mkdir(mode=0o700)  # (a umask clears bits of 0700 only where it would break us anyway)
    except FileExistsError:
        if not directory.is_dir():  # a file of that name, not a writer that made it meanwhile
            raise


def _touch(path: Path) -> bool:
    """Set ``path``'s mtime to now; False if there is no such file. A file we
    may not touch (another user's file, a read-only file system) counts as
    present, as before deletion existed."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    except OSError:
        return path.is_file()
    return True


def _fsync_directory(directory: Path) -> None:
    """Persist the rename itself. Not possible on every platform (e.g. Windows); best effort."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
