"""``DirectoryBlobStore``: content-addressed files under one directory.

A blob with digest ``abcdef...`` lives at ``root/ab/cdef...``: the two-letter
fan-out keeps directories small. A write goes to a temporary file in the same
directory, is flushed and fsynced, then renamed over the final name with
``os.replace``, which is atomic on POSIX and Windows. A reader therefore sees
the whole blob or nothing, and a crash leaves at worst a ``.tmp-*`` file, never
a truncated blob under a real name.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from ease_jupyter.errors import EaseMLError, NotFoundError

from ._validate import check_digest
from .base import BlobStore

TEMP_PREFIX = ".tmp-"


class BlobCorruptedError(EaseMLError, OSError):
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
        self.root.mkdir(parents=True, exist_ok=True)

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
        if final.exists():
            return digest  # same name, same content: nothing to do
        final.parent.mkdir(parents=True, exist_ok=True)
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
        return digest

    def get_bytes(self, digest: str) -> bytes:
        path = self.path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"blob {digest}: not found under {self.root}") from None
        if self.verify and hashlib.sha256(data).hexdigest() != digest:
            raise BlobCorruptedError(f"blob {digest}: the file {path} is corrupted (its content has another sha256)")
        return data

    def exists(self, digest: str) -> bool:
        return self.path(digest).is_file()


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
