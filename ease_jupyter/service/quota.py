"""Per-user storage quotas: what a user's data takes, and refusing a write
that would take her over her limit (``QuotaExceededError``, HTTP 413
``quota_exceeded``).

A user's usage is the size of the blobs her rows reference
(``Store.owner_blobs``: her dataset versions' example lists and arrays, her
jobs' models), each distinct blob once, plus her uploads not fed yet. What
the service keeps for itself (selector states, the checkpoints of a torch job
still training) is not hers. Three writes are checked: an upload chunk, a
feed (its new arrays; the uploads it consumes are counted as freed) and a
trained model. A model refused while she had room left, but not enough for
it, is ``ModelOverQuotaError``: training it again on the same data makes the
same model, so its job fails as a model that fails on its own does (the
selector scores the arm 0 and does not pick it again for that version). A
model refused because she is at her quota already fails as a storage
failure (the selector is not told, and the task is held, see
``failures.fail_job``): freeing space lets it train. A refine writes only a list of example ids: it is
counted, never refused. The check and the write are not one transaction, so
concurrent writes of one user may pass the limit by what they write at once.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from ..errors import QuotaExceededError
from ..store import BlobStore, DatasetVersion, Job, OwnerBlobsStamp, Store, Task
from ..store.space import human_size


@dataclass(frozen=True)
class Usage:
    """One user's stored bytes."""

    data: int  # dataset versions: example lists and the fed arrays
    models: int  # trained models (jobs' artifacts)
    uploads: int  # chunked uploads not fed yet

    @property
    def total(self) -> int:
        return self.data + self.models + self.uploads


class ModelOverQuotaError(QuotaExceededError):
    """A trained model larger than the room its owner has left (code
    ``quota_exceeded``). Deterministic for its arm on that dataset version,
    unlike a write refused because she is at her quota already: training
    again makes a model of the same size, so it is not retried
    (``failures.fail_job`` records it as the model's own failure)."""


@dataclass(frozen=True)
class Quota:
    """A per-user limit in bytes (None or 0: none) and where the uploads are. Plain data,
    so that worker processes get a copy and check the models they store."""

    limit_bytes: int | None
    uploads_dir: Path | None = None

    def usage(self, store: Store, blobs: BlobStore, owner_id: int, *, stamp: OwnerBlobsStamp | None = None) -> Usage:
        """``stamp``: ``Store.owner_blobs_stamp`` as read just before (a feed
        reads it with its other reads), so a count it matches is not asked for again."""
        data, models = _STORED.of(store, blobs, owner_id, stamp=stamp)
        uploads = 0
        if self.uploads_dir is not None:
            from .arrays import Uploads

            uploads = Uploads(self.uploads_dir).usage(owner_id)
        return Usage(data=data, models=models, uploads=uploads)

    def check(self, store: Store, blobs: BlobStore, owner_id: int, adding: int, *, what: str,
              releasing: int = 0, stamp: OwnerBlobsStamp | None = None) -> None:
        """Raise ``QuotaExceededError`` if storing ``adding`` more bytes (and
        freeing ``releasing``, e.g. the uploads a feed consumes) would take
        the owner over her limit; ``what`` names the write ("feed")."""
        if not self.limit_bytes:
            return
        usage = self.usage(store, blobs, owner_id, stamp=stamp)
        after = usage.total - releasing + adding
        if after <= self.limit_bytes:
            return
        raise self._refusal(usage, adding, after, what=what)

    def _refusal(self, usage: Usage, adding: int, after: int, *, what: str, then: str = "",
                 error: type[QuotaExceededError] = QuotaExceededError) -> QuotaExceededError:
        """The error refusing ``adding`` bytes at ``usage`` (``after``: her
        total with them); ``then`` says what happens next."""
        return error(
            f"{what}: {human_size(adding)} more would take your storage to {human_size(after)}, over your quota "
            f"of {human_size(self.limit_bytes or 0)} (in use: {human_size(usage.total)}: data "
            f"{human_size(usage.data)}, models {human_size(usage.models)}, uploads not fed yet "
            f"{human_size(usage.uploads)}){then}",
            field="quota", found=f"{after} bytes", expected=f"at most {self.limit_bytes} bytes")

    def check_model(self, store: Store, blobs: BlobStore, task: Task, job: Job, size: int) -> None:
        """``check`` for a job's trained model of ``size`` bytes (1 before
        training: no training for a model that could not be kept). While
        she has room left, a model larger than it is ``ModelOverQuotaError``
        (its arm is not retried); at her quota, any model is a plain
        ``QuotaExceededError`` (the task waits, and retries once she frees space)."""
        from .models import model_name  # here: a feed process checks data only, and skips the model code's imports

        if not self.limit_bytes:
            return
        usage = self.usage(store, blobs, task.owner_id)
        after = usage.total + size
        if after <= self.limit_bytes:
            return
        what = f"{model_name(task, job)}: its model"
        if usage.total < self.limit_bytes:
            raise self._refusal(usage, size, after, what=what, error=ModelOverQuotaError,
                                then="; it is not trained again on this dataset version (free some storage, "
                                     "or ask for a larger quota, and feed again)")
        raise self._refusal(usage, size, after, what=what)

    def reserve(self, store: Store, blobs: BlobStore, owner_id: int, *, what: str,
                releasing: int = 0, stamp: OwnerBlobsStamp | None = None) -> Callable[[int], None]:
        """``check`` as the ``reserve(n_bytes)`` callback that ``datasets.feed``
        and ``Uploads.append`` call before they write. ``stamp`` serves the
        first check only: a later one (a feed's retry after another writer
        stored a version first) reads the owner's stamp afresh."""
        stamps = [stamp]

        def reserve(adding: int) -> None:
            self.check(store, blobs, owner_id, adding, what=what, releasing=releasing,
                       stamp=stamps.pop() if stamps else None)
        return reserve


class _StoredBytes:
    """(data, models) bytes of each owner, recounted only when her rows may
    have changed behind this process's back.

    Every write that changes what an owner's rows reference adds or removes
    a dataset version or a job's model: versions are immutable, a model is
    stored once, when its job succeeds, and both go only with their task.
    ``Store.owner_blobs_stamp`` (the count and the highest id of each, in
    one statement) therefore changes with every such write, whichever
    process made it (training workers store models; ``easeml fsck`` may
    refine), and a count is reused only while the stamp is the one it was
    counted at. This process's own feeds move the count on to the stamp
    their version gives (``added``); if anyone else wrote meanwhile, the
    stamp differs and the owner is counted again. The one write that could
    bring an old stamp back, deleting a task and then reusing its ids
    (which a SQLite database from before schema 0004 may still do once),
    goes through ``forget``. Blobs are
    content-addressed and never rewritten, so the size of a digest stays
    right while the blob stays; the garbage collector deletes only blobs no
    row references."""

    MAX_OWNERS = 10_000  # per store; least recently counted owners go first

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # store -> owner -> (stamp, {data digest: size}, {model digest: size}); a
        # closed store's counts go with it
        self._counted: weakref.WeakKeyDictionary[Store, OrderedDict[int, _Counted]] = weakref.WeakKeyDictionary()
        # owner -> deletes of her rows so far: a count read across a delete is not kept
        self._forgotten: dict[int, int] = {}

    def of(self, store: Store, blobs: BlobStore, owner_id: int, *,
           stamp: OwnerBlobsStamp | None = None) -> tuple[int, int]:
        if stamp is not None:  # read by the caller: enough to reuse a count, not to keep one it made
            with self._lock:
                found = self._counted.get(store, {}).get(owner_id)
                if found is not None and found[0] == stamp:
                    return sum(found[1].values()), sum(found[2].values())
                if not any(stamp):
                    # No version and no model: she references nothing, at this
                    # stamp whatever else happened (a user's first feed).
                    self._keep(store, owner_id, (stamp, {}, {}))
                    return 0, 0
        with self._lock:
            forgotten = self._forgotten.get(owner_id, 0)
        stamp = store.owner_blobs_stamp(owner_id)
        with self._lock:
            found = self._counted.get(store, {}).get(owner_id)
            if stamp is not None and found is not None and found[0] == stamp:
                return sum(found[1].values()), sum(found[2].values())
        referenced = store.owner_blobs(owner_id)
        data, models = _sizes(blobs, referenced.data), _sizes(blobs, referenced.models)
        if stamp is not None:
            with self._lock:
                if self._forgotten.get(owner_id, 0) != forgotten:  # a delete came between the two reads
                    return sum(data.values()), sum(models.values())
                self._keep(store, owner_id, (stamp, data, models))
        return sum(data.values()), sum(models.values())

    def _keep(self, store: Store, owner_id: int, counted: _Counted) -> None:
        """(Under the lock.) Keep an owner's count at its stamp."""
        owners = self._counted.setdefault(store, OrderedDict())
        owners[owner_id] = counted
        owners.move_to_end(owner_id)
        while len(owners) > self.MAX_OWNERS:
            owners.popitem(last=False)

    def added(self, store: Store, owner_id: int, version: DatasetVersion, sizes: Mapping[str, int]) -> None:
        with self._lock:
            owners = self._counted.get(store, {})
            found = owners.get(owner_id)
            if found is None:
                return
            stamp, data, models = found
            data = {**data, **{d: n for d, n in sizes.items() if d not in data}}
            owners[owner_id] = (stamp.with_version(version), data, {d: n for d, n in models.items() if d not in data})

    def forget(self, store: Store, owner_id: int) -> None:
        with self._lock:
            self._counted.get(store, {}).pop(owner_id, None)
            self._forgotten[owner_id] = self._forgotten.get(owner_id, 0) + 1


_Counted = tuple[OwnerBlobsStamp, dict[str, int], dict[str, int]]


def _sizes(blobs: BlobStore, digests: Iterable[str]) -> dict[str, int]:
    # A missing blob counts nothing here; `easeml fsck` reports it.
    return {digest: size for digest in digests if (size := blobs.size(digest)) is not None}


_STORED = _StoredBytes()


def added_version(store: Store, owner_id: int, version: DatasetVersion, sizes: Mapping[str, int]) -> None:
    """Count the blobs (``sizes``: {digest: bytes}, as the writer knows them)
    of ``version``, which this process just stored for ``owner_id``,
    without counting her again."""
    _STORED.added(store, owner_id, version, sizes)


def forget_usage(store: Store, owner_id: int) -> None:
    """Count ``owner_id``'s stored bytes again at the next check: call it when
    her rows are deleted (``deletion.delete_task``)."""
    _STORED.forget(store, owner_id)
