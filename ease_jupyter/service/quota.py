"""Per-user storage quotas: what a user's data takes, and refusing a write
that would take her over her limit (``QuotaExceededError``, HTTP 413
``quota_exceeded``).

A user's usage is the size of the blobs her rows reference
(``Store.owner_blobs``: her dataset versions' example lists and arrays, her
jobs' models), each distinct blob once, plus her uploads not fed yet. What
the service keeps for itself (selector states, the checkpoints of a torch job
still training) is not hers. Three writes are checked: an upload chunk, a
feed (its new arrays; the uploads it consumes are counted as freed) and a
trained model (the job fails, and the selector is not told, see
``failures.fail_job``). A refine writes only a list of example ids: it is
counted, never refused. The check and the write are not one transaction, so
concurrent writes of one user may pass the limit by what they write at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import QuotaExceededError
from ..store import BlobStore, Job, Store, Task
from ..store.space import human_size
from .models import model_name


@dataclass(frozen=True)
class Usage:
    """One user's stored bytes."""

    data: int  # dataset versions: example lists and the fed arrays
    models: int  # trained models (jobs' artifacts)
    uploads: int  # chunked uploads not fed yet

    @property
    def total(self) -> int:
        return self.data + self.models + self.uploads


@dataclass(frozen=True)
class Quota:
    """A per-user limit in bytes (None or 0: none) and where the uploads are. Plain data,
    so that worker processes get a copy and check the models they store."""

    limit_bytes: int | None
    uploads_dir: Path | None = None

    def usage(self, store: Store, blobs: BlobStore, owner_id: int) -> Usage:
        referenced = store.owner_blobs(owner_id)
        uploads = 0
        if self.uploads_dir is not None:
            from .arrays import Uploads

            uploads = Uploads(self.uploads_dir).usage(owner_id)
        return Usage(data=_total(blobs, referenced.data), models=_total(blobs, referenced.models), uploads=uploads)

    def check(self, store: Store, blobs: BlobStore, owner_id: int, adding: int, *, what: str,
              releasing: int = 0) -> None:
        """Raise ``QuotaExceededError`` if storing ``adding`` more bytes (and
        freeing ``releasing``, e.g. the uploads a feed consumes) would take
        the owner over her limit; ``what`` names the write ("feed")."""
        if not self.limit_bytes:
            return
        usage = self.usage(store, blobs, owner_id)
        after = usage.total - releasing + adding
        if after <= self.limit_bytes:
            return
        raise QuotaExceededError(
            f"{what}: {human_size(adding)} more would take your storage to {human_size(after)}, over your quota "
            f"of {human_size(self.limit_bytes)} (in use: {human_size(usage.total)}: data {human_size(usage.data)}, "
            f"models {human_size(usage.models)}, uploads not fed yet {human_size(usage.uploads)})",
            field="quota", found=f"{after} bytes", expected=f"at most {self.limit_bytes} bytes")

    def check_model(self, store: Store, blobs: BlobStore, task: Task, job: Job, size: int) -> None:
        """``check`` for a job's trained model of ``size`` bytes (1 before
        training: no training for a model that could not be kept)."""
        self.check(store, blobs, task.owner_id, size, what=f"{model_name(task, job)}: its model")

    def reserve(self, store: Store, blobs: BlobStore, owner_id: int, *, what: str,
                releasing: int = 0) -> Callable[[int], None]:
        """``check`` as the ``reserve(n_bytes)`` callback that ``datasets.feed``
        and ``Uploads.append`` call before they write."""
        return lambda adding: self.check(store, blobs, owner_id, adding, what=what, releasing=releasing)


def _total(blobs: BlobStore, digests: frozenset[str]) -> int:
    # A missing blob counts nothing here; `easeml fsck` reports it.
    return sum(size for size in map(blobs.size, digests) if size is not None)
