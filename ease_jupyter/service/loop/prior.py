"""The selector's GP prior in the live service, from other tasks' quality
vectors (ease.ml arXiv:1708.07308, App. A: a model's features are its
qualities on the "training set" users), refitted as tasks finish.

*History.* A task counts once it is **finished**: every arm (candidate model)
of its latest dataset version has a finished job (succeeded, or failed for a
reason of its own, not for want of storage) and no job of that version is
queued or running. Its quality vector holds, per arm, the best accuracy of
the succeeded jobs on that version; a failed arm is a missing cell (the loop
scores it 0 for its own task, but a failure says little of the model
elsewhere). Tasks of every user count, over the one catalogue.

*Blocks.* Models measured on the same tasks form a block: the connected
components of "measured together" (flat classification and regression share
four models; image nets are a block of their own). A block measured on at
least :data:`MIN_TASKS` finished tasks gets App. A's kernel fitted on them
(``ModelPrior``, missing cells imputed); every other model keeps the prior
shipped with the package (fitted the same way on the measured matrices in
``benchmarks/data``; ``benchmarks/fit_prior.py``), and a model the shipped
prior does not cover keeps the descriptor kernel. Blocks are independent: a
task's arms lie within one block, and a kernel learnt on one family says
nothing about another.

*A task never informs its own prior.* All tenants share one prior, fitted on
finished tasks only. A finished task has tried every arm, so its prior
decides none of its picks. When a task of the fit set gets work again (a new
dataset version, or resumed), the loop recomputes the prior without its row
(the fitted kernels kept, so it is a few K x K products on the loop's
thread) before that task's first pick; the next refit leaves it out anyway
(it is not finished).

*Off the hot path.* The prior is fitted once at start, before the first
turn. After that, every :data:`REFIT_EVERY` newly finished tasks, a
background thread reads the store and fits a new prior; the loop's thread
swaps it in at the start of a turn, under the loop's lock
(``Selector.set_prior``: each tenant's GP is rebuilt and her observations
replayed).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import defaultdict
from dataclasses import dataclass
from importlib import resources
from typing import Callable, Iterable, Sequence

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from sklearn.gaussian_process.kernels import Kernel

from ...selection.gp import ModelPrior, impute_history
from ...store import JobStatus, Store
from ..candidates import arm_specs
from ..failures import failure_code
from .state import arm_key, measured_quality

log = logging.getLogger(__package__)

MIN_TASKS = 5  # finished tasks measuring a block before the service's own history replaces the shipped prior
REFIT_EVERY = 3  # newly finished tasks between two background refits
SHIPPED_PRIOR = "prior.json"  # in ease_jupyter/selection/data (benchmarks/fit_prior.py writes it)


@dataclass(frozen=True)
class History:
    """Finished tasks' quality vectors over the catalogue (NaN: not measured)."""

    task_ids: tuple[int, ...]
    quality: np.ndarray  # len(task_ids) x K

    def without(self, task_ids: Iterable[int]) -> "History":
        drop = set(task_ids)
        keep = [i for i, t in enumerate(self.task_ids) if t not in drop]
        return History(tuple(self.task_ids[i] for i in keep), self.quality[keep])


@dataclass(frozen=True)
class Block:
    """Models whose prior was fitted together on ``n_tasks`` tasks, and the fitted kernel."""

    models: tuple[int, ...]  # catalogue indices
    kernel: Kernel
    n_tasks: int


@dataclass(frozen=True)
class ServicePrior:
    """The prior the loop's selector uses, and what it was fitted on."""

    prior: ModelPrior
    history: History  # the finished tasks behind it (empty: the shipped prior alone)
    blocks: tuple[Block, ...]  # blocks fitted on ``history``; the other models keep the shipped prior

    @property
    def source(self) -> str:
        """``"store"`` once a block is fitted on this service's own tasks, ``"shipped"`` before,
        ``"descriptors"`` without a cross-user prior."""
        if self.prior.source_ != "history":
            return self.prior.source_
        return "store" if self.blocks else "shipped"

    @property
    def task_ids(self) -> frozenset[int]:
        return frozenset(self.history.task_ids)


# ---------------------------------------------------------------- fitting (pure)
def co_measured_blocks(quality: np.ndarray) -> list[np.ndarray]:
    """Column groups of models measured on the same tasks (connected components
    of the co-measurement graph), each sorted; models never measured are left out."""
    seen = ~np.isnan(quality)
    measured = np.flatnonzero(seen.any(axis=0))
    if measured.size == 0:
        return []
    together = seen[:, measured].T.astype(float) @ seen[:, measured].astype(float)
    n, labels = connected_components(csr_matrix(together > 0), directed=False)
    return [measured[labels == c] for c in range(n)]


def _override(mean: np.ndarray, cov: np.ndarray, cols: np.ndarray, bmean: np.ndarray, bcov: np.ndarray) -> None:
    """Put a block's mean and covariance in place, independent of the other models."""
    cov[cols, :] = 0.0
    cov[:, cols] = 0.0
    cov[np.ix_(cols, cols)] = bcov
    mean[cols] = bmean


def _block_with_kernel(q: np.ndarray, kernel: Kernel) -> tuple[np.ndarray, np.ndarray]:
    """``ModelPrior``'s last step with its kernel kept: mean and covariance of App. A's features."""
    q = impute_history(q)
    features = q.T / math.sqrt(q.shape[0])
    return q.mean(axis=0), np.asarray(kernel(features), dtype=float)


def fit_blocks(quality: np.ndarray, base_mean: np.ndarray, base_cov: np.ndarray, *, min_tasks: int = MIN_TASKS,
               random_state: int | None = 0, kernels: Sequence[Block] = ()
               ) -> tuple[np.ndarray, np.ndarray, tuple[Block, ...]]:
    """The prior over the catalogue: each co-measured block of ``quality``
    with at least ``min_tasks`` tasks gets App. A's kernel fitted on them
    (``ModelPrior``; a block of ``kernels`` with the same models keeps its
    kernel, unoptimised); the other models keep ``base_mean``/``base_cov``.
    Returns (mean, cov, the blocks fitted)."""
    mean, cov = np.array(base_mean, dtype=float), np.array(base_cov, dtype=float)
    kept = {b.models: b.kernel for b in kernels}
    blocks: list[Block] = []
    for cols in co_measured_blocks(quality):
        rows = ~np.isnan(quality[:, cols]).all(axis=1)
        n = int(rows.sum())
        if n < min_tasks:
            continue
        q = quality[np.ix_(rows, cols)]
        kernel = kept.get(tuple(int(c) for c in cols))
        if kernel is None:
            fitted = ModelPrior(random_state=random_state).fit(q)
            kernel, bmean, bcov = fitted.kernel_, fitted.mean_, fitted.cov_
        else:
            bmean, bcov = _block_with_kernel(q, kernel)
        _override(mean, cov, cols, bmean, bcov)
        blocks.append(Block(tuple(int(c) for c in cols), kernel, n))
    return mean, cov, tuple(blocks)


def as_model_prior(mean: np.ndarray, cov: np.ndarray, n_history: int) -> ModelPrior:
    """A ``ModelPrior`` of given arrays. Its source is ``history``: the
    selector then refits no user's kernel from her own observations (the
    composite has no one kernel to refit)."""
    prior = ModelPrior.from_arrays(mean, cov)
    prior.source_ = "history"
    prior.n_history_ = n_history
    return prior


def shipped_base(keys: Sequence[str], descriptors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The prior shipped with the package over this catalogue: its blocks
    where it names the models, the descriptor kernel (``ModelPrior``'s
    fallback) for the models it does not cover."""
    fallback = ModelPrior().fit(descriptors=descriptors)
    mean, cov = fallback.mean_.copy(), fallback.cov_.copy()
    index = {k: i for i, k in enumerate(keys)}
    for block in load_shipped()["blocks"]:
        named = [(j, index[m]) for j, m in enumerate(block["models"]) if m in index]
        if not named:
            continue
        local, cols = (np.asarray(x, dtype=int) for x in zip(*named))
        _override(mean, cov, cols, np.asarray(block["mean"])[local], np.asarray(block["cov"])[np.ix_(local, local)])
    return mean, cov


def load_shipped() -> dict:
    """The shipped prior's JSON (blocks and provenance)."""
    return json.loads((resources.files("ease_jupyter.selection") / "data" / SHIPPED_PRIOR).read_text())


# ---------------------------------------------------------------- the store's history
def read_history(store: Store, keys: Sequence[str], *, torch_epochs: int | None) -> History:
    """The finished tasks' quality vectors (see the module docstring)."""
    index = {k: i for i, k in enumerate(keys)}
    jobs_by_task = defaultdict(list)
    for job in store.list_jobs():
        jobs_by_task[job.task_id].append(job)
    ids: list[int] = []
    rows: list[np.ndarray] = []
    for task in store.list_tasks():
        jobs = jobs_by_task.get(task.id)
        latest = store.latest_dataset_version(task.id) if jobs else None
        if latest is None:
            continue
        arms = {k for k in arm_specs(task, torch_epochs=torch_epochs) if k in index}
        row = np.full(len(keys), np.nan)
        done: set[str] = set()
        for job in jobs:
            if job.dataset_version_id != latest.id or job.status is JobStatus.CANCELLED:
                continue
            if job.status in (JobStatus.QUEUED, JobStatus.RUNNING):
                break
            key = arm_key(job)
            if key not in arms or (job.status is JobStatus.FAILED and failure_code(store, job) is not None):
                continue
            done.add(key)
            quality = measured_quality(job)
            if quality is not None:
                row[index[key]] = np.fmax(row[index[key]], quality)
        else:
            if arms and done >= arms and not np.isnan(row).all():
                ids.append(task.id)
                rows.append(row)
    return History(tuple(ids), np.asarray(rows, dtype=float).reshape(len(rows), len(keys)))


# ---------------------------------------------------------------- the loop's side
class PriorRefits:
    """Keeps the loop's prior fitted on the store's finished tasks: a fit at
    start (:meth:`fit_now`), then every :data:`REFIT_EVERY` newly finished
    tasks (:meth:`finished`) a fit on a background thread, handed to the
    loop's thread by :meth:`take`. ``wake`` tells the loop one is ready.

    ``cross_user=False`` keeps the prior of model descriptors alone (each
    task's GP learns from its own results only, refitting its kernel on them:
    ``Selector.refit_every_doubling``), for comparison."""

    def __init__(self, store: Store, keys: Sequence[str], descriptors: np.ndarray, *, torch_epochs: int | None,
                 seed: int | None, wake: Callable[[], None], min_tasks: int = MIN_TASKS,
                 refit_every: int = REFIT_EVERY, cross_user: bool = True):
        self.store, self.keys, self.torch_epochs, self.seed = store, list(keys), torch_epochs, seed
        self.wake, self.min_tasks, self.refit_every = wake, int(min_tasks), int(refit_every)
        self.cross_user = bool(cross_user)
        self.descriptor_prior = ModelPrior(random_state=seed).fit(descriptors=descriptors)
        self.base_mean, self.base_cov = shipped_base(self.keys, descriptors)
        self.current: ServicePrior | None = None
        self.refits = 0  # background fits finished (tests and /admin/progress)
        self._since = 0  # tasks finished since the last fit started
        self._lock = threading.Lock()
        self._ready: ServicePrior | None = None
        self._thread: threading.Thread | None = None

    def fit(self, history: History, kernels: Sequence[Block] = ()) -> ServicePrior:
        mean, cov, blocks = fit_blocks(history.quality, self.base_mean, self.base_cov, min_tasks=self.min_tasks,
                                       random_state=self.seed, kernels=kernels)
        n = max((b.n_tasks for b in blocks), default=0)
        return ServicePrior(as_model_prior(mean, cov, n), history, blocks)

    def fit_now(self) -> ServicePrior:
        """Read the store and fit, on the caller's thread."""
        if not self.cross_user:
            return ServicePrior(self.descriptor_prior, History((), np.zeros((0, len(self.keys)))), ())
        return self.fit(read_history(self.store, self.keys, torch_epochs=self.torch_epochs))

    def without(self, prior: ServicePrior, task_ids: Iterable[int]) -> ServicePrior:
        """``prior`` with these tasks' rows left out, its kernels kept (cheap)."""
        return self.fit(prior.history.without(task_ids), kernels=prior.blocks)

    def finished(self, task_ids: Iterable[int]) -> None:
        """These tasks just became idle: every ``refit_every`` of them not in
        the prior yet (a restart finds its finished tasks idle again), start
        a background fit."""
        if not self.cross_user:
            return
        fitted = self.current.task_ids if self.current is not None else frozenset()
        self._since += sum(task_id not in fitted for task_id in task_ids)
        if self._since < self.refit_every or (self._thread is not None and self._thread.is_alive()):
            return
        self._since = 0
        self._thread = threading.Thread(target=self._refit, name="easeml-prior-refit", daemon=True)
        self._thread.start()

    def _refit(self) -> None:
        try:
            fitted = self.fit_now()
        except Exception:  # noqa: BLE001 - the loop keeps its prior; the next finished tasks try again
            log.exception("refitting the selector's prior failed")
            return
        with self._lock:
            self._ready = fitted
            self.refits += 1
        self.wake()

    def describe(self) -> dict:
        """Where the prior comes from: ``source`` (``store``, ``shipped`` or ``descriptors``),
        the finished ``tasks`` behind it, the models fitted on them, ``refits``."""
        current = self.current
        if current is None:
            return {"source": None, "tasks": 0, "models": [], "refits": self.refits}
        return {"source": current.source, "tasks": len(current.task_ids),
                "models": [self.keys[i] for b in current.blocks for i in b.models], "refits": self.refits}

    def take(self) -> ServicePrior | None:
        """The prior a background fit made since the last call, if any (the loop's thread)."""
        with self._lock:
            ready, self._ready = self._ready, None
        return ready

    def join(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
