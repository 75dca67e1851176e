"""Argument checks and state rules shared by every backend.

Both backends call these before touching their data, so a bad argument raises
the same error (``DataError`` naming the field, found and expected) from the
memory store and from SQL, and a failed call never leaves anything behind.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from datetime import datetime, timezone
from typing import Any, Mapping

from ease_jupyter.errors import DataError, InvalidStateError, StaleParentError

from .base import JOB_TRANSITIONS, Job, JobStatus, JobUpdate, NewChunk, Node, NodeKind, VersionKind

DIGEST_PATTERN = re.compile(r"[0-9a-f]{64}")
TAG_ENTITIES = ("task", "dataset", "job", "user")
# Job model names, metric names and tag keys: per-config metric names carry a
# user's grid (``val_score[clf__C=0.1,...]``). One bound on every backend, within
# what a PostgreSQL index row holds (the keys are in primary keys).
MAX_KEY_BYTES = 1000


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def check_latest_parent(task_id: int, parent_id: int | None, latest_id: int | None) -> None:
    """A new version builds on the task's latest version (None: it has none yet)."""
    if parent_id != latest_id:
        raise StaleParentError(f"task {task_id}: parent_id {parent_id} is no longer its latest dataset version "
                               f"({latest_id}); another feed or refine stored one meanwhile")


def check_id(field: str, value: Any) -> int:
    """An integer id. Integral numpy scalars are accepted; bools and strings are not,
    because SQL would silently coerce '3' while a dict lookup would not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DataError(field, repr(value), "an integer id")
    return int(value)


def check_text(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataError(field, repr(value), "a non-empty string")
    return value


def check_key(field: str, value: Any) -> str:
    """A non-empty string of at most ``MAX_KEY_BYTES`` bytes in UTF-8 (what a
    PostgreSQL index row counts)."""
    check_text(field, value)
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_KEY_BYTES:
        raise DataError(field, f"{size} bytes in UTF-8", f"a string of at most {MAX_KEY_BYTES} bytes in UTF-8")
    return value


def check_digest(field: str, value: Any) -> str:
    if not isinstance(value, str) or DIGEST_PATTERN.fullmatch(value) is None:
        raise DataError(field, repr(value), "a sha256 digest (64 lowercase hex characters)")
    return value


def check_finite(field: str, value: Any, *, minimum: float | None = None) -> float:
    # NaN cannot round-trip through SQLite (it stores NULL), so no backend accepts it.
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise DataError(field, repr(value), "a finite number")
    if minimum is not None and value < minimum:
        raise DataError(field, repr(value), f"a number >= {minimum}")
    return float(value)


def check_count(field: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise DataError(field, repr(value), f"an integer >= {minimum}")
    return int(value)


def normalize_json(field: str, value: Any) -> Any:
    """A plain JSON value (dict with str keys, list, str, finite float, int, bool, None).

    Both backends store exactly this, so a config reads back the same from
    memory and from SQL (tuples come back as lists, then frozen to tuples).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return check_finite(field, value)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise DataError(f"{field} key {key!r}", type(key).__name__, "a string key")
            out[key] = normalize_json(f"{field}.{key}", item)
        return out
    if isinstance(value, (list, tuple)):
        return [normalize_json(f"{field}[{i}]", item) for i, item in enumerate(value)]
    raise DataError(field, f"{type(value).__name__} {value!r}", "a JSON value (dict, list, str, number, bool, None)")


def check_config(config: Any) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise DataError("config", type(config).__name__, "a mapping of option names to JSON values")
    return normalize_json("config", config)


def check_entity(entity: Any) -> str:
    if entity not in TAG_ENTITIES:
        raise DataError("entity", repr(entity), "one of " + ", ".join(map(repr, TAG_ENTITIES)))
    return entity


def check_node(node: Any) -> Node:
    if not isinstance(node, Node):
        raise DataError("node", repr(node), "a Node")
    try:
        kind = NodeKind(node.kind)
    except ValueError:
        raise DataError("node.kind", repr(node.kind), "'dataset' or 'model'") from None
    return Node(kind, check_id("node.id", node.id))


def check_status(status: Any) -> JobStatus:
    try:
        return JobStatus(status)
    except ValueError:
        expected = "one of " + ", ".join(s.value for s in JobStatus)
        raise DataError("status", repr(status), expected) from None


def check_version_args(
    *,
    kind: Any,
    parent_id: Any,
    members_blob: Any,
    n_examples: Any,
    chunk: NewChunk | None,
    toggles: Mapping[int, bool] | None,
) -> tuple[VersionKind, int | None, dict[int, bool]]:
    """Check what ``create_dataset_version`` can check without reading the store.

    Returns the kind, the parent id and the toggles as a plain ``{id: bool}``.
    """
    try:
        kind = VersionKind(kind)
    except ValueError:
        raise DataError("kind", repr(kind), "'feed' or 'refine'") from None
    parent = None if parent_id is None else check_id("parent_id", parent_id)
    check_digest("members_blob", members_blob)
    check_count("n_examples", n_examples, minimum=0)
    clean_toggles: dict[int, bool] = {}
    if kind is VersionKind.FEED:
        if not isinstance(chunk, NewChunk):
            raise DataError("chunk", repr(chunk), "a NewChunk for a feed")
        check_digest("chunk.x_blob", chunk.x_blob)
        check_digest("chunk.y_blob", chunk.y_blob)
        check_count("chunk.count", chunk.count, minimum=1)
        if toggles:
            raise DataError("toggles", repr(dict(toggles)), "none for a feed (it only adds examples)")
    else:
        if parent is None:
            raise DataError("parent_id", "None", "the id of the version a refine starts from")
        if chunk is not None:
            raise DataError("chunk", repr(chunk), "None for a refine (it adds no examples)")
        if not isinstance(toggles, Mapping):
            raise DataError("toggles", repr(toggles), "a mapping of example id to on (True) or off (False)")
        for example_id, active in toggles.items():
            example_id = check_count("toggles key", example_id, minimum=0)
            if not isinstance(active, bool):
                raise DataError(f"toggles[{example_id}]", repr(active), "True or False")
            clean_toggles[example_id] = active
    return kind, parent, clean_toggles


def apply_job_update(job: Job, status: Any, update: JobUpdate | None, now: datetime) -> Job:
    """The job after moving it to ``status``, or ``InvalidStateError``.

    Stamps: entering RUNNING sets ``started_at`` and counts an attempt; a
    re-queue clears ``started_at`` (the job waits again); entering a finished
    state sets ``finished_at``. Fields of ``update`` that are not None replace
    the job's.
    """
    status = check_status(status)
    if status not in JOB_TRANSITIONS[job.status]:
        allowed = sorted(s.value for s in JOB_TRANSITIONS[job.status]) or ["nothing (it is finished)"]
        raise InvalidStateError(
            f"job {job.id}: cannot move from {job.status.value!r} to {status.value!r}; "
            f"expected one of {', '.join(allowed)}"
        )
    changes: dict[str, Any] = {"status": status}
    if status is JobStatus.RUNNING:
        changes.update(started_at=now, attempts=job.attempts + 1)
    elif status is JobStatus.QUEUED:
        changes.update(started_at=None)
    if status.is_finished():
        changes["finished_at"] = now
    if update is not None:
        if not isinstance(update, JobUpdate):
            raise DataError("update", repr(update), "a JobUpdate or None")
        if update.accuracy is not None:
            changes["accuracy"] = check_finite("update.accuracy", update.accuracy)
        if update.cost_seconds is not None:
            changes["cost_seconds"] = check_finite("update.cost_seconds", update.cost_seconds, minimum=0.0)
        if update.artifact_blob is not None:
            changes["artifact_blob"] = check_digest("update.artifact_blob", update.artifact_blob)
        if update.error is not None:
            if not isinstance(update.error, str):
                raise DataError("update.error", repr(update.error), "a string")
            changes["error"] = update.error
    return dataclasses.replace(job, **changes)


def adds_train_edge(before: Job, after: Job) -> bool:
    """Whether an update produced a model: it entered SUCCEEDED with an artifact."""
    return (
        after.status is JobStatus.SUCCEEDED
        and before.status is not JobStatus.SUCCEEDED
        and after.artifact_blob is not None
    )
