"""Threads per fit: a limit on the BLAS and OpenMP thread pools (scikit-learn,
numpy, scipy) and on torch's intra-op threads while a job's fits run. The
auto-provisioner chooses the threads (``profiling.Resources.threads``); the
runners make them real here (in a user model's child process too:
``user_sandbox.set_call_threads``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

from threadpoolctl import ThreadpoolController

from ..user_sandbox import set_call_threads


@functools.cache
def _blas_controller() -> ThreadpoolController:
    return ThreadpoolController()


def blas_threads(threads: int) -> Any:
    """``threadpool_limits(threads)`` at a fraction of its cost.

    ``threadpoolctl.threadpool_limits`` scans every loaded shared library on
    each call (``dl_iterate_phdr`` with a Python callback per library): 20-200
    ms of GIL-holding work per call on a busy machine. The control loop used
    it on every turn, which starved the service's IOLoop (the read p99 under
    training, docs/service.md "Measured"). One ``ThreadpoolController`` made
    on first use and reused limits in about 0.03 ms. It covers the libraries
    loaded when it was made (numpy's and scipy's BLAS, scikit-learn's OpenMP:
    all imported with the service).

    The BLAS limit holds for the whole process (the local engine's worker
    threads included); OpenMP's for the calling thread.
    """
    return _blas_controller().limit(limits=int(threads))


@dataclasses.dataclass(frozen=True)
class ThreadedBuilder:
    """A candidate's ``build`` that limits the BLAS and OpenMP threads where
    the estimator is built. A grid task builds its estimator where it fits
    it (``execution.grid``), on an engine's worker thread or a Dask worker
    process, which a limit set around the grid does not reach (OpenMP's
    limit is per thread, and a Dask worker is another process). The limit
    is left set after the fit: every job's builder sets its own. A user's
    estimator fits in a child process (``user_sandbox``), which this
    thread's limits do not reach: the thread count is also set for this
    thread's calls into user code, and the child limits her fit to it."""

    inner: Callable[[Any], Any]
    threads: int

    @property
    def option(self) -> str | None:  # the grid's tuned option, as the inner builder's
        return getattr(self.inner, "option", None)

    @property
    def params_prefix(self) -> str:
        return getattr(self.inner, "params_prefix", "")

    def __call__(self, config: Any) -> Any:
        blas_threads(self.threads)  # entered, not exited: the limit holds for the fit that follows
        set_call_threads(self.threads)  # and for her fit in the job's child process
        return self.inner(config)


def limit_threads(model: Any, threads: int) -> Any:
    """A zoo candidate whose estimators fit at ``threads`` threads
    (:class:`ThreadedBuilder`); a plain estimator as it is."""
    if dataclasses.is_dataclass(model) and hasattr(model, "build"):
        return dataclasses.replace(model, build=ThreadedBuilder(model.build, int(threads)))
    return model


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads at ``threads`` inside, restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)
