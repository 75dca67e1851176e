"""Shared fixtures. Keep this file small: package-specific fixtures live in
their own tests/<package>/conftest.py."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

POSTGRES_URL_ENV = "EASEML_TEST_POSTGRES_URL"
POSTGRES_SKIP_REASON = (
    "PostgreSQL not available: run scripts/postgres.sh start and export EASEML_TEST_POSTGRES_URL"
)


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database for this test module, dropped afterwards.

    Skips when ``EASEML_TEST_POSTGRES_URL`` is unset. Mark tests that use it
    ``@pytest.mark.postgres``.
    """
    from ease_jupyter.service.testing import fresh_postgres_database

    server_url = os.environ.get(POSTGRES_URL_ENV)
    if not server_url:
        pytest.skip(POSTGRES_SKIP_REASON)
    with fresh_postgres_database(server_url) as url:
        yield url


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` skip with a reason where CUDA is missing (torch
    is imported only when such a test was collected)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False on this machine")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def embedded_data_dir(tmp_path, monkeypatch):
    """A data dir of the test's own for the embedded service, with no
    service URL or token from the environment; its service is stopped after."""
    from ease_jupyter.service import embedded

    for name in ("EASEML_URL", "EASEML_TOKEN", "KERNEL_EASEML_URL", "KERNEL_EASEML_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EASEML_DATA_DIR", str(tmp_path / "data"))
    yield tmp_path / "data"
    embedded.stop(tmp_path / "data", timeout=10)


@pytest.fixture
def notes(tmp_path_factory, monkeypatch):
    """A folder where a user's code may write what a test reads back (the pids
    it ran in): a confined child writes nowhere else (``user_confine``), so the
    worker's environment opens this one, as a deployment may open a scratch
    folder. Set before the service or its workers start. Not in ``tmp_path``,
    which a test's service may take as its data directory: a folder opened to
    her code may not lie in one."""
    from ease_jupyter.user_confine import WRITABLE_ENV

    folder = tmp_path_factory.mktemp("notes")
    monkeypatch.setenv(WRITABLE_ENV, str(folder))
    return folder
