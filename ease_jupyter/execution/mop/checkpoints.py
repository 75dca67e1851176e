"""The hop store: each trial's latest checkpoint, the one its next unit starts from.

In MOP the model hops, not the data (Cerebro §3.1, §4.2): after every
training unit the trial's weights move to whichever worker trains it next.
A checkpoint reference is what a unit takes and returns (``units``): the
bytes themselves with the ``"bytes"`` hop, or a path in a directory that
every worker can read with the ``"directory"`` hop. Only a completed unit
moves a trial's reference, so a lost unit runs again from the same one
(§5.6).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

from ease_jupyter.errors import EaseMLError, InvalidStateError, NotFoundError
from ease_jupyter.execution.units import HOP_MODES, read_checkpoint

__all__ = ["Ref", "HopStore"]

#: A checkpoint reference: the bytes ("bytes" hop) or a file path ("directory" hop).
Ref = bytes | str


class HopStore:
    """Each trial's latest checkpoint reference, for one run.

    Args:
        hop: ``"bytes"`` or ``"directory"`` (``units.HOP_MODES``).
        directory: the "directory" hop's directory, shared by all workers;
            None makes a temporary one at :meth:`open`, removed at
            :meth:`close`. A given directory is kept.
    """

    def __init__(self, hop: str, directory: str | None = None):
        if hop not in HOP_MODES:
            raise EaseMLError(f"hop: found {hop!r}, expected one of {list(HOP_MODES)}")
        self.hop = hop
        self._given = directory
        self._dir: str | None = None
        self._own = False
        self._latest: dict[str, Ref] = {}

    # -- life cycle -----------------------------------------------------------------------------
    def open(self) -> "HopStore":
        """Create the directory the "directory" hop needs (no-op for "bytes")."""
        if self.hop == "directory" and self._dir is None:
            if self._given is None:
                self._dir, self._own = tempfile.mkdtemp(prefix="easeml-ckpt-"), True
            else:
                self._dir = self._given
                os.makedirs(self._dir, exist_ok=True)
        return self

    def close(self) -> None:
        """Remove the directory if :meth:`open` made it."""
        if self._own and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir, self._own = None, False

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
        return read_checkpoint(self.ref(trial))

    def read_all(self) -> dict[str, bytes]:
        """Every trial's latest checkpoint as bytes."""
        return {t: read_checkpoint(ref) for t, ref in self._latest.items()}

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
        sub = os.path.join(self._dir, "init")
        os.makedirs(sub, exist_ok=True)
        # A unique name: a count of files could repeat once _discard removed some.
        path = os.path.join(sub, f"{uuid.uuid4().hex}.pt")
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        return path

    @staticmethod
    def _discard(ref: Ref | None) -> None:
        if isinstance(ref, str):
            try:
                os.remove(ref)
            except FileNotFoundError:
                pass
