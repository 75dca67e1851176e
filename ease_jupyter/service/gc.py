"""Mark-and-sweep garbage collection of the blob store.

Blobs are content-addressed and written before anything references them;
nothing deletes them as they go out of use. Two writers produce garbage:
every finished MOP train unit of a torch job writes a checkpoint
(``mop.PROGRESS_TAG``), and every selector-state save writes a state blob of
which only the newest is ever read (``loop.STATE_TAG``). ``collect_garbage``
finds what the store still references (``references``), then deletes the
other blobs that are older than a grace period.

What is referenced (the mark):

* every dataset version's ``members_blob`` and every chunk's ``x_blob`` and
  ``y_blob``: versions are immutable and all of them stay loadable;
* every job's ``artifact_blob`` (finished jobs need nothing else: the
  artifact of a torch job is its best checkpoint);
* every user model's code (``user_models.blob_references``);
* the selector state on the newest job carrying ``easeml.selector_state``
  (the one ``ControlLoop`` restores); the states on older jobs are garbage;
* for every unfinished (queued or running) job, every digest in its
  ``easeml.mop.progress`` record: ``ckpts``, ``best``, ``units[*].ckpt``.
  The record is scanned for any 64-hex-digit string, so a field added later
  is kept too; a stray match only keeps a blob that could have gone.

The grace period (the sweep): a writer puts a blob first and references it
afterwards (a feed's arrays before its version, a checkpoint before the
progress tag, a state before its tag), so a blob that is not referenced
yet may be about to be. The sweep deletes a blob only if it was written
(or put again: ``put_bytes`` of stored content refreshes ``written_at``)
before ``start - grace``, where ``start`` is taken before the mark, and
``BlobStore.delete(..., if_older_than=...)`` re-checks that at the moment of
deletion. A collection is therefore safe while the service runs, provided no
writer takes longer than the grace period between its put and its reference.
With a grace of 0 it is safe only when nothing writes to the store.

Deleting a task (``delete_unreferenced``) sweeps only the blobs its rows
referenced, at once, by the same rules: a blob that another task's rows
(or anything in the mark) reference stays, and so does one written within
``DELETE_GRACE_SECONDS``, since another writer may have just put the same
content and not yet referenced it; ``easeml gc`` takes those later.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterable

from ..store import BlobStore, DirectoryBlobStore, Store
from .loop import STATE_TAG, saved_state_digest
from .mop import PROGRESS_TAG
from .user_models import blob_references

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 3600.0
# Longer than any writer takes between a put and the row that references it.
DELETE_GRACE_SECONDS = 60.0
# A temporary file of the directory store (a crashed put or delete) is removed
# only when older than this, whatever the grace: a put in progress owns one.
TEMPORARY_MIN_AGE_SECONDS = 3600.0
_DIGEST = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


@dataclass(frozen=True)
class GCReport:
    """What one collection found and did. ``deleted``/``deleted_bytes`` are
    what a dry run would delete. Every stored blob is counted once, as
    ``kept`` (referenced), ``young`` (not referenced, but within the grace
    period, or put again while the sweep ran) or ``deleted``."""

    stored: int  # blobs listed before the sweep
    stored_bytes: int
    referenced: int  # distinct digests the store references
    missing: int  # referenced but not stored (damage, or another data dir)
    kept: int
    kept_bytes: int
    young: int
    young_bytes: int
    deleted: int
    deleted_bytes: int
    temporaries: int  # leftover temporary files removed (directory store only)
    temporaries_bytes: int
    grace_seconds: float
    dry_run: bool
    interrupted: bool  # stopped early by ``should_stop``
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)


def references(store: Store) -> dict[str, str]:
    """Every blob digest the store references -> what references it (for
    messages, e.g. ``"job 12 artifact"``). Reads the store only."""
    refs: dict[str, str] = {}

    def add(digest: str | None, holder: str) -> None:
        if digest:
            refs.setdefault(digest, holder)

    for task in store.list_tasks():
        for version in store.list_dataset_versions(task.id):
            add(version.members_blob, f"dataset version {version.id} members")
        for chunk in store.list_chunks(task.id):
            add(chunk.x_blob, f"chunk {chunk.id} inputs")
            add(chunk.y_blob, f"chunk {chunk.id} labels")
    for job in store.list_jobs():
        add(job.artifact_blob, f"job {job.id} artifact")
        if not job.status.is_finished():
            progress = store.tags("job", job.id).get(PROGRESS_TAG)
            for digest in _DIGEST.findall(progress or ""):
                add(digest, f"job {job.id} progress")
    for digest, holder in blob_references(store):  # the code of users' own models
        add(digest, holder)
    saved = saved_state_digest(store)
    if saved is not None:
        add(saved[1], f"job {saved[0]} selector state")
    return refs


def job_tag_digests(store: Store, job_ids: Iterable[int]) -> set[str]:
    """The blobs that the tags of these jobs point at: MOP checkpoints
    (``PROGRESS_TAG``) and saved selector states (``STATE_TAG``)."""
    found: set[str] = set()
    for job_id in job_ids:
        tags = store.tags("job", job_id)
        found.update(_DIGEST.findall(tags.get(PROGRESS_TAG) or ""))
        found.update(_DIGEST.findall(tags.get(STATE_TAG) or ""))
    return found


def delete_unreferenced(store: Store, blobs: BlobStore, digests: Iterable[str], *,
                        grace_seconds: float = DELETE_GRACE_SECONDS) -> tuple[int, int]:
    """Delete those of ``digests`` that nothing in ``store`` references
    (``references``) and that were last written more than
    ``grace_seconds`` ago: (blobs deleted, their bytes)."""
    cutoff = time.time() - grace_seconds  # before the mark: see the module docstring
    refs = references(store)
    deleted = deleted_bytes = 0
    for digest in sorted(set(digests) - refs.keys()):
        size = blobs.size(digest)
        if size is not None and blobs.delete(digest, if_older_than=cutoff):
            deleted, deleted_bytes = deleted + 1, deleted_bytes + size
    return deleted, deleted_bytes


def collect_garbage(store: Store, blobs: BlobStore, *, grace_seconds: float = DEFAULT_GRACE_SECONDS,
                    dry_run: bool = False, should_stop: Callable[[], bool] | None = None) -> GCReport:
    """Delete the blobs that nothing in ``store`` references and that were
    last written more than ``grace_seconds`` ago (see the module docstring).
    With ``dry_run``, delete nothing and report what would go.
    ``should_stop`` is asked between blobs; True ends the sweep early."""
    if grace_seconds < 0:
        raise ValueError(f"grace_seconds: found {grace_seconds}, expected >= 0")
    started = time.monotonic()
    cutoff = time.time() - grace_seconds  # before the mark: see the module docstring
    refs = references(store)
    stored = stored_bytes = kept = kept_bytes = young = young_bytes = deleted = deleted_bytes = 0
    present: set[str] = set()
    interrupted = False
    for info in blobs.iter_blobs():
        if should_stop is not None and should_stop():
            interrupted = True
            break
        stored, stored_bytes = stored + 1, stored_bytes + info.size
        if info.digest in refs:
            present.add(info.digest)
            kept, kept_bytes = kept + 1, kept_bytes + info.size
        elif info.written_at >= cutoff or not (dry_run or blobs.delete(info.digest, if_older_than=cutoff)):
            young, young_bytes = young + 1, young_bytes + info.size  # or put again, or gone meanwhile
        else:
            deleted, deleted_bytes = deleted + 1, deleted_bytes + info.size
    temporaries = temporaries_bytes = 0
    if isinstance(blobs, DirectoryBlobStore) and not interrupted:
        temporaries, temporaries_bytes = blobs.remove_temporaries(
            time.time() - max(grace_seconds, TEMPORARY_MIN_AGE_SECONDS), dry_run=dry_run)
    missing = [holder for digest, holder in refs.items() if digest not in present]
    if missing and not interrupted:
        log.warning("%d referenced blob(s) are not in the blob store, e.g. %s", len(missing),
                    ", ".join(sorted(missing)[:5]))
    return GCReport(stored=stored, stored_bytes=stored_bytes, referenced=len(refs),
                    missing=0 if interrupted else len(missing), kept=kept, kept_bytes=kept_bytes, young=young,
                    young_bytes=young_bytes, deleted=deleted, deleted_bytes=deleted_bytes, temporaries=temporaries,
                    temporaries_bytes=temporaries_bytes, grace_seconds=float(grace_seconds), dry_run=dry_run,
                    interrupted=interrupted, seconds=time.monotonic() - started)


def describe(report: GCReport) -> str:
    """One log line."""
    verb = "would delete" if report.dry_run else "deleted"
    line = (f"blob gc: {verb} {report.deleted} blob(s), {human_size(report.deleted_bytes)}; "
            f"kept {report.kept} referenced ({human_size(report.kept_bytes)}) and {report.young} younger than "
            f"{report.grace_seconds:g} s ({human_size(report.young_bytes)}) in {report.seconds:.2f} s")
    if report.temporaries:
        line += f"; {report.temporaries} leftover temporary file(s), {human_size(report.temporaries_bytes)}"
    if report.missing:
        line += f"; {report.missing} referenced blob(s) missing"
    if report.interrupted:
        line += " (interrupted)"
    return line


def human_size(n: float) -> str:
    """Bytes for people: 512 B, 1.5 KiB, 3.2 MiB."""
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            break
    return f"{n:.1f} {unit}"
