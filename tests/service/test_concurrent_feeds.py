"""Feeds of one task at the same time: every example ends up in the latest
version, whichever feed stores its version first (a feed that read a version
that another feed then extended starts again from the new latest one)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.store import open_store


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_concurrent_feeds_each_keep_every_example_before_them(tmp_path, backend):
    store, blobs = open_store("memory://" if backend == "memory" else None, tmp_path)
    try:
        user = store.create_user("ada", "h" * 64)
        task = store.create_task(user.id, "t", "input: [2] output: [8]")
        writers, rows = 8, 3
        start = threading.Barrier(writers)
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                start.wait()
                for _ in range(2):
                    datasets.feed(store, blobs, task, np.full((rows, 2), i, dtype=np.float32), np.full(rows, i),
                                  mode="append")  # each writer's rows twice: every feed stores a version
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        versions = store.list_dataset_versions(task.id)
        assert len(versions) == 2 * writers
        assert [v.parent_id for v in versions] == [None] + [v.id for v in versions[:-1]]
        for before, after in zip(versions, versions[1:]):
            kept = datasets.load(store, blobs, before).example_ids
            assert np.isin(kept, datasets.load(store, blobs, after).example_ids).all()
        latest = datasets.load(store, blobs, versions[-1])
        assert latest.example_ids.tolist() == list(range(2 * writers * rows))
        assert sorted(np.bincount(latest.y).tolist()) == [2 * rows] * writers  # every writer's rows, each once
        assert (latest.X[:, 0] == latest.y).all()  # each row's X with its own label
    finally:
        store.close()
