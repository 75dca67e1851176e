"""The hop store: each trial's latest checkpoint, the one its next unit starts from.

In MOP the model hops, not the data (Cerebro §3.1, §4.2): after every
training unit the trial's weights move to whichever worker trains it next.
A checkpoint reference is what a unit takes and returns (``units``): the
bytes themselves with the ``"bytes"`` hop, or a file in a directory that
every worker can read with the ``"directory"`` hop. Only a completed unit
moves a trial's reference, so a lost unit runs again from the same one
(§5.6).

The directory is a local path (a file system the driver and the workers
share) or an fsspec URL (``s3://bucket/easeml``, ``file:///shared``) where
they share none; references into a URL are URLs themselves.
"""

from __future__ import annotations

import datetime
import os
import shutil
import tempfile
import time
import uuid

from ease_jupyter.errors import EaseMLError, InvalidStateError, NotFoundError
from ease_jupyter.execution.blob_io import is_url, read_bytes, remove, write_atomic
from ease_jupyter.execution.units import HOP_MODES

__all__ = ["Ref", "HopStore", "RUN_PREFIX", "sweep_runs"]

#: The folder a run makes under its ``under`` URL: ``easeml-run-<uuid>``.
RUN_PREFIX = "easeml-run-"

#: A checkpoint reference: the bytes ("bytes" hop) or a file path or URL ("directory" hop).
Ref = bytes | str


def read_ref(ref: Ref) -> bytes:
    """Checkpoint bytes from either hop mode's reference (a path or an fsspec URL)."""
    if isinstance(ref, (bytes, bytearray, memoryview)):
        return bytes(ref)
    return read_bytes(ref)


def remove_tree(location: str) -> None:
    """Remove a directory (a path or an fsspec URL) and everything in it; a missing one is fine."""
    if not is_url(location):
        shutil.rmtree(location, ignore_errors=True)
        return
    import fsspec

    fs, path = fsspec.core.url_to_fs(location)
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


def sweep_runs(under: str, older_than: float, *, now: float | None = None) -> list[str]:
    """Remove the run folders under ``under`` (a path or fsspec URL) in which
    nothing was written for ``older_than`` seconds; their URLs. A run removes
    its own folder when it ends (:meth:`HopStore.close`); one whose process
    was killed leaves it, with its staged copies of a user's data, behind.
    A running workload writes a checkpoint after every unit, so its folder
    stays while no unit takes ``older_than``."""
    import fsspec

    fs, base = fsspec.core.url_to_fs(under)
    now = time.time() if now is None else now
    try:
        entries = fs.ls(base, detail=True)
    except FileNotFoundError:
        return []
    removed = []
    for entry in entries:
        path = entry["name"].rstrip("/")
        if entry.get("type") != "directory" or not path.rsplit("/", 1)[-1].startswith(RUN_PREFIX):
            continue
        written = [_written_at(info) for info in fs.find(path, detail=True).values()]
        if max((t for t in written if t is not None), default=0.0) < now - older_than:
            try:
                fs.rm(path, recursive=True)
            except FileNotFoundError:  # another service's sweep took it
                continue
            removed.append(fs.unstrip_protocol(path))
    return removed


def _written_at(info: dict) -> float | None:
    """When an fsspec file entry was last written (epoch seconds): ``mtime``
    on a file system, ``LastModified`` and the like on an object store."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


class HopStore:
    """Each trial's latest checkpoint reference, for one run.

    Args:
        hop: ``"bytes"`` or ``"directory"`` (``units.HOP_MODES``).
        directory: the "directory" hop's directory (a path or an fsspec
            URL), shared by all workers; kept at :meth:`close`.
        under: with no ``directory``, :meth:`open` makes the run's own
            folder under this path or fsspec URL (default: the local
            temporary directory); :meth:`close` removes it with everything
            in it.
    """

    def __init__(self, hop: str, directory: str | None = None, *, under: str | None = None):
        if hop not in HOP_MODES:
            raise EaseMLError(f"hop: found {hop!r}, expected one of {list(HOP_MODES)}")
        if directory is not None and under is not None:
            raise EaseMLError(f"under: found {under!r} with directory {directory!r}, expected one of the two")
        self.hop = hop
        self._given = directory
        self._under = under
        self._dir: str | None = None
        self._own = False
        self._latest: dict[str, Ref] = {}

    # -- life cycle -----------------------------------------------------------------------------
    def open(self) -> "HopStore":
        """Create the directory the "directory" hop needs (no-op for "bytes")."""
        if self.hop == "directory" and self._dir is None:
            if self._given is not None:
                location = self._given
            elif self._under is None:
                location, self._own = tempfile.mkdtemp(prefix="easeml-ckpt-"), True
            else:  # a URL's folders exist once an object is written in them
                location, self._own = f"{self._under.rstrip('/')}/{RUN_PREFIX}{uuid.uuid4().hex}", True
            if not is_url(location):
                os.makedirs(location, exist_ok=True)
            self._dir = location.rstrip("/")
        return self

    def close(self) -> None:
        """Remove the directory (and everything in it) if :meth:`open` made it."""
        if self._own and self._dir is not None:
            remove_tree(self._dir)
            self._dir, self._own = None, False

    @property
    def directory(self) -> str | None:
        """The open "directory" hop's directory (a path or URL), else None."""
        return self._dir

    @property
    def out_dir(self) -> str | None:
        """Where training units write their checkpoints: the directory, or
        None for the "bytes" hop (units return bytes)."""
        return self._dir if self.hop == "directory" else None

    # -- references -------------------------------------------------------------------------------
    def __contains__(self, trial: object) -> bool:
        return trial in self._latest

    def get(self, trial: str) -> Ref | None:
        """``trial``'s latest reference, or None."""
        return self._latest.get(trial)

    def ref(self, trial: str) -> Ref:
        """``trial``'s latest reference (what its next unit takes)."""
        try:
            return self._latest[trial]
        except KeyError:
            raise NotFoundError(f"trial: found {trial!r}, expected one of {sorted(self._latest)}") from None

    def read(self, trial: str) -> bytes:
        """``trial``'s latest checkpoint as bytes."""
        return read_ref(self.ref(trial))

    def read_all(self) -> dict[str, bytes]:
        """Every trial's latest checkpoint as bytes."""
        return {t: read_ref(ref) for t, ref in self._latest.items()}

    def put(self, trial: str, data: bytes) -> None:
        """Store ``data`` as ``trial``'s checkpoint (a new trial's first one)."""
        self._latest[trial] = self._write(data)

    def advance(self, trial: str, ref: Ref) -> None:
        """``trial``'s unit completed with checkpoint ``ref``: it replaces the
        previous one, whose file (if any) is removed."""
        old = self._latest.get(trial)
        self._latest[trial] = ref
        self._discard(old)

    # -- files ------------------------------------------------------------------------------------
    def _write(self, data: bytes) -> Ref:
        if self.hop == "bytes":
            return data
        if self._dir is None:
            raise InvalidStateError("hop store: found it not open, expected open() before the first checkpoint")
        # A unique name: a count of files could repeat once _discard removed some.
        return write_atomic(self._dir, f"init/{uuid.uuid4().hex}.pt", data)

    @staticmethod
    def _discard(ref: Ref | None) -> None:
        if isinstance(ref, str):
            remove(ref, missing_ok=True)
