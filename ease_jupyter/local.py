"""The local, in-process path: one user's tasks on a store, with no service.

``LocalWorkspace`` mirrors the future ``Client`` API (DESIGN.md) on top of the
same functions the service will call (``datasets``, ``training``), so the whole
path -- register, feed, refine, train, best, infer, provenance -- can be run and
tested before the service exists.
"""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from . import datasets, training
from .errors import AlreadyExistsError, DataError, NotFoundError
from .schema import DataType, Program, TensorField, format_program, parse
from .schema.limits import check_program_size
from .store import DatasetVersion, Edge, Job, Node, NodeKind, Store, BlobStore, open_store


def program_from_shapes(input: Sequence[int], output: Sequence[int]) -> Program:
    """The program of one input tensor and one output tensor; DataError naming
    ``input`` or ``output`` when a shape is over the limits (``schema.limits``)."""
    program = Program(
        DataType((TensorField(tuple(int(d) for d in input)),)),
        DataType((TensorField(tuple(int(d) for d in output)),)),
    )
    return check_program_size(program)


class LocalTask:
    """One task, bound to its workspace. Obtain it from ``LocalWorkspace.task``."""

    def __init__(self, workspace: "LocalWorkspace", task_id: int):
        self._ws = workspace
        self._task_id = task_id

    @property
    def record(self):
        return self._ws.store.get_task(self._task_id)

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def program(self) -> Program:
        return parse(self.record.program)

    def feed(self, X: Any, y: Any) -> DatasetVersion:
        return datasets.feed(self._ws.store, self._ws.blobs, self.record, X, y)

    def refine(self, *, keep: Iterable[int] | None = None, drop: Iterable[int] | None = None) -> DatasetVersion:
        return datasets.refine(self._ws.store, self._ws.blobs, self.record, keep=keep, drop=drop)

    def versions(self) -> tuple[DatasetVersion, ...]:
        return self._ws.store.list_dataset_versions(self._task_id)

    def data(self, version: DatasetVersion | None = None) -> datasets.LoadedData:
        version = version or self._ws.store.latest_dataset_version(self._task_id)
        if version is None:
            raise DataError("task", f"task {self.name!r} with no data", "a feed first")
        return datasets.load(self._ws.store, self._ws.blobs, version)

    def train(self, *, on_job=None, only: Iterable[str] | None = None) -> list[Job]:
        return training.train_all(self._ws.store, self._ws.blobs, self.record, on_job=on_job, only=only)

    def best(self) -> dict[str, Any]:
        return training.best(self._ws.store, self.record)

    def infer(self, X: Any) -> np.ndarray:
        return training.infer(self._ws.store, self._ws.blobs, self.record, X)

    def history(self) -> list[dict[str, Any]]:
        """Every job with its per-epoch metrics, oldest first."""
        store = self._ws.store
        rows = []
        for job in store.list_jobs(self._task_id):
            metrics: dict[int, dict[str, float]] = {}
            for metric in store.list_metrics(job.id):
                metrics.setdefault(metric.epoch, {})[metric.name] = metric.value
            rows.append(
                {
                    "job_id": job.id,
                    "model": job.model,
                    "config": dict(job.config),
                    "status": job.status.value,
                    "accuracy": job.accuracy,
                    "dataset_version": store.get_dataset_version(job.dataset_version_id).number,
                    "metrics": [dict(epoch=e, **m) for e, m in sorted(metrics.items())],
                }
            )
        return rows

    def provenance(self, version: DatasetVersion | None = None, *, direction: str = "backward") -> tuple[Edge, ...]:
        """Edges reachable from a version (default: the latest), backward or forward."""
        version = version or self._ws.store.latest_dataset_version(self._task_id)
        if version is None:
            return ()
        return self._ws.store.lineage(Node(NodeKind.DATASET, version.id), direction=direction)


class LocalWorkspace:
    """A user's view of a store and blob directory, in this process."""

    def __init__(self, store: Store, blobs: BlobStore, *, user: str = "local"):
        self.store, self.blobs = store, blobs
        self.user = self._ensure_user(user)

    @classmethod
    def open(cls, *, url: str | None = None, data_dir: str | Path | None = None, user: str = "local") -> "LocalWorkspace":
        store, blobs = open_store(url, data_dir)
        return cls(store, blobs, user=user)

    def as_user(self, name: str) -> "LocalWorkspace":
        """The same store seen by another user."""
        return LocalWorkspace(self.store, self.blobs, user=name)

    def _ensure_user(self, name: str):
        try:
            return self.store.user_by_name(name)
        except NotFoundError:
            token_hash = hashlib.sha256(secrets.token_bytes(32)).hexdigest()
            try:
                return self.store.create_user(name, token_hash)
            except AlreadyExistsError:  # created concurrently
                return self.store.user_by_name(name)

    def task(
        self,
        name: str,
        *,
        input: Sequence[int] | None = None,
        output: Sequence[int] | None = None,
        program: str | Program | None = None,
    ) -> LocalTask:
        """Create a task from shapes or an ease.ml program, or open an existing
        one of this user's by name (no schema given)."""
        if program is not None and (input is not None or output is not None):
            raise ValueError("give either program or input/output shapes, not both")
        if (input is None) != (output is None):
            raise ValueError("input and output shapes go together")
        if program is None and input is None:
            return LocalTask(self, self.store.task_by_name(self.user.id, name).id)
        parsed = program if isinstance(program, Program) else (
            parse(program) if program is not None else program_from_shapes(input, output)  # type: ignore[arg-type]
        )
        text = format_program(parsed)
        try:
            existing = self.store.task_by_name(self.user.id, name)
        except NotFoundError:
            return LocalTask(self, self.store.create_task(self.user.id, name, text).id)
        if existing.program != text:
            raise AlreadyExistsError(
                f"task {name!r} exists with program {existing.program}, not {text}"
            )
        return LocalTask(self, existing.id)

    def tasks(self) -> list[LocalTask]:
        return [LocalTask(self, t.id) for t in self.store.list_tasks(self.user.id)]
