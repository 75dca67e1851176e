"""Helpers shared by the store tests."""

from __future__ import annotations

import hashlib

from ease_jupyter.store import NewChunk, Store, VersionKind


def digest(seed: object) -> str:
    """A well-formed blob digest (the store never reads the blobs)."""
    return hashlib.sha256(repr(seed).encode()).hexdigest()


def feed(store: Store, task_id: int, count: int, *, parent_id: int | None = None, seed: object = None):
    return store.create_dataset_version(
        task_id,
        kind=VersionKind.FEED,
        parent_id=parent_id,
        members_blob=digest(("members", seed, count)),
        n_examples=count,
        chunk=NewChunk(digest(("x", seed)), digest(("y", seed)), count),
    )


def refine(store: Store, task_id: int, parent_id: int, toggles: dict[int, bool], n_examples: int = 1):
    return store.create_dataset_version(
        task_id,
        kind=VersionKind.REFINE,
        parent_id=parent_id,
        members_blob=digest(("refine", parent_id, sorted(toggles.items()))),
        n_examples=n_examples,
        toggles=toggles,
    )
