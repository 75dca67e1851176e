"""The service's operations, one method per API call, independent of HTTP.

Every method takes the calling ``User`` and answers only about that user's
tasks: another user's task is "not found", exactly like a missing one.
Results are plain JSON-ready dicts.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import tempfile
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import datasets
from ..errors import AlreadyExistsError, DataError, InvalidStateError, NotFoundError
from ..jobspec import parse_job
from ..schema import format_program, parse, program_from_shapes
from ..schema.limits import check_program_size, check_program_text
from ..store import DatasetVersion, Edge, Job, Node, NodeKind, Store, BlobStore, Task, User, open_store
from ..store.base import LOCAL
from ..store.sql.engine import sqlite_file
from ..user_confine import protect
from . import arrays, deletion, task_schema
from .auth import TokenCache, check_name, create_user, revoke_token
from .config import ServiceConfig, engine_form
from .events import EventBus
from .export_processes import ExportProcesses
from .feed_processes import FeedProcesses
from .feeding import Fed, Feeder, json_object
from .notebooks import NotebookRegistry
from .quota import Quota, forget_usage
from .loop import ControlLoop
from .loop.provision import service_pools
from .loop.lanes import ShortLane
from . import models
from . import export as model_export
from . import budget_api
from . import user_models
from . import own_model_calls
from . import notify
from . import reads
from .executors import JobExecutor, JobRunner, ProcessExecutor, ThreadExecutor
from .mop import TorchJobs, measure_torch_pool
from .runner import SklearnJobs
from .tag_limits import CONTROL_CHARACTERS, MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS, MAX_TAGS_PER_TASK
from .scheduler_view import decision_event, scheduler_view
from .suspicion import DEFAULT_TOP_K, MAX_TOP_K, NoModelError, SuspicionScorer
from .validation import validation_sizes
from ..zoo import Engine

log = logging.getLogger(__name__)


def _iso(value) -> str | None:
    return None if value is None else value.isoformat()


def task_json(task: Task) -> dict[str, Any]:
    return {"id": task.id, "name": task.name, "program": task.program, "created_at": _iso(task.created_at),
            "cancelled": task.cancelled}


def version_json(v: DatasetVersion) -> dict[str, Any]:
    return {"id": v.id, "number": v.number, "kind": v.kind.value, "parent_id": v.parent_id,
            "n_examples": v.n_examples, "created_at": _iso(v.created_at)}


def _may_have_gpus(config: ServiceConfig) -> bool:
    """Whether the torch pool may have GPU workers, told without importing
    torch here: a cluster may; a local engine only on a host with an NVIDIA
    driver."""
    if not config.torch:
        return False
    if config.engine != "local":
        return True
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")


def job_json(job: Job, version_number: int | None = None, error_code: str | None = None) -> dict[str, Any]:
    return {"id": job.id, "model": job.model, "config": dict(job.config), "status": job.status.value,
            "dataset_version_id": job.dataset_version_id, "dataset_version": version_number,
            "accuracy": job.accuracy, "cost_seconds": job.cost_seconds, "error": job.error, "error_code": error_code,
            "attempts": job.attempts, "created_at": _iso(job.created_at), "started_at": _iso(job.started_at),
            "finished_at": _iso(job.finished_at)}


def edge_json(edge: Edge) -> dict[str, Any]:
    node = lambda n: None if n is None else {"kind": n.kind.value, "id": n.id}  # noqa: E731
    return {"id": edge.id, "kind": edge.kind.value, "src": node(edge.src), "dst": node(edge.dst),
            "job_id": edge.job_id, "created_at": _iso(edge.created_at)}


def _rows(data: datasets.LoadedData, page: slice) -> datasets.LoadedData:
    """``data``'s rows in ``page``."""
    X = data.X[page] if isinstance(data.X, (np.ndarray, list)) else tuple(column[page] for column in data.X)
    return replace(data, example_ids=data.example_ids[page], X=X, y=data.y[page],
                   split_keys=None if data.split_keys is None else data.split_keys[page])


def _gone_as_missing(method):
    """A ``Service`` method of the caller's task ``name``: a task deleted (by
    another notebook of hers) between the method's look-up of it and its
    reads answers as a name she has no task by (``Store.task_by_name``'s
    404), not with the store's id it had. Any other NotFoundError (a
    version, a job) is raised as it is."""
    @functools.wraps(method)
    def wrapper(self: "Service", caller: User, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, caller, name, *args, **kwargs)
        except NotFoundError:
            self._task_cache.pop((caller.id, name), None)
            self.store.task_by_name(caller.id, name)  # the name's own 404 where the task is gone
            raise
    return wrapper


def _program_text(body: dict[str, Any]) -> str | None:
    program, inp, out = body.get("program"), body.get("input"), body.get("output")
    if program is not None and (inp is not None or out is not None):
        raise DataError("program", "both a program and input/output shapes", "one of them")
    if program is not None:
        if not isinstance(program, str):
            raise DataError("program", type(program).__name__, "ease.ml program text")
        return format_program(check_program_size(parse(check_program_text(program)), field="program"))
    if inp is None and out is None:
        return None
    for field, shape in (("input", inp), ("output", out)):
        if not (isinstance(shape, list) and shape and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
            raise DataError(field, repr(shape)[:80], "a non-empty list of positive integers, e.g. [64]")
    return format_program(program_from_shapes(inp, out))  # checks the size limits


MODEL_CALL_SECONDS = 600.0  # the longest a request waits for a model run where the jobs run
EXAMPLES_PAGE_BYTES = 8 * 1024 * 1024  # the arrays of one GET /examples page, before base64
CONTROL_CHARACTER = re.compile(CONTROL_CHARACTERS)


class Service:
    """Store + blobs + uploads + control loop + event bus."""

    def __init__(self, config: ServiceConfig, *, store: Store | None = None, blobs: BlobStore | None = None):
        self.config = config
        data_dir = Path(config.data_dir) if config.data_dir else Path(tempfile.mkdtemp(prefix="easeml-"))
        self.data_dir = data_dir
        # Before any worker or child starts: they inherit it (docs/models.md, "Trust").
        protect(data_dir, *([] if config.db_url is None else sqlite_file(config.db_url)))
        own_store = store is None  # opened from the config, as a feed process can too
        if own_store:
            store, blobs = open_store(config.db_url, data_dir)
        self.store, self.blobs = store, blobs
        self.uploads = arrays.Uploads.in_data_dir(data_dir)
        self.quota = Quota(config.quota_bytes, self.uploads.directory)
        self.tokens = TokenCache(self.store)
        self._task_cache: dict[tuple[int, str], Task] = {}  # see _task
        self.feeder = Feeder(self.store, self.blobs, self.uploads, self.quota)
        # Feeds in processes of their own (feed_processes.py); they open the store by its URL.
        self.feed_processes = (FeedProcesses(config.feed_processes, config.db_url, data_dir, config.quota_bytes)
                               if config.feed_processes and own_store else None)
        # Zoo scikit-learn exports in processes of their own, started at the first export (export_processes.py).
        self.export_processes = ExportProcesses()
        self.last_request = time.monotonic()  # for the idle shutdown (see app.housekeeping)
        self.events = EventBus()
        self.streams: Counter[int] = Counter()  # open event streams per user id (websocket.py; the IOLoop's)
        self.model_calls: Counter[int] = Counter()  # requests running a model per user id (handlers.py; the IOLoop's)
        self.passive_streams = 0  # of them, those that only listen (notifications): no activity
        self.notebooks = NotebookRegistry(config.notebook_timeout_seconds)  # notebooks.py: in memory
        self.suspicion_scorer = SuspicionScorer(self.store, self.blobs, torch_outputs=self._torch_outputs,
                                                own_outputs=self._own_outputs)
        self.started_at = time.time()
        processes = config.executor == "process" and config.db_url != "memory://"
        engine = self._engine_address(config)

        def executor(runner: JobRunner, workers: int, *, start_workers: bool = True) -> JobExecutor:
            if processes:
                return ProcessExecutor(runner, config.db_url, data_dir, workers, nice=config.worker_nice,
                                       publish=self.events.publish, start_workers=start_workers)
            return ThreadExecutor(runner, self.store, self.blobs, workers, publish=self.events.publish)

        runners = {Engine.SKLEARN: SklearnJobs(engine, self.quota),
                   Engine.TORCH: TorchJobs(engine, config.workers, config.seed or 0, config.mop_partitions,
                                           self.quota, config.precision, config.blob_url)}
        executors = {Engine.SKLEARN: executor(runners[Engine.SKLEARN], config.workers)}
        if config.torch:  # several MOP workloads at once, on one engine of `workers` workers
            executors[Engine.TORCH] = executor(runners[Engine.TORCH], config.max_torch_workloads)
        # Express slots (Admission.pick_express): per engine, job slots of their own beside these,
        # whose processes start once the engine's own slots first fill (until then none can be used).
        express = ({kind: executor(runners[kind], config.express_slots, start_workers=False) for kind in executors}
                   if config.express_slots else None)
        self.loop = ControlLoop(self.store, self.blobs, executors=executors, torch_epochs=config.torch_epochs,
                                max_running_per_user=config.max_running_per_user,
                                publish=notify.Notifier(self.store, self.events.publish),
                                tick_seconds=config.tick_seconds, seed=config.seed,
                                save_every_seconds=config.state_save_seconds, on_decision=self._publish_decision,
                                policy=config.policy, cross_user_prior=config.cross_user_prior,
                                prices=config.prices,
                                pools=service_pools(cpus=os.cpu_count() or 1, sklearn_slots=config.workers,
                                                    own_processes=processes,
                                                    grid_workers=1 if config.engine == "local" else config.workers,
                                                    mop_workers=config.workers, mop_partitions=config.mop_partitions),
                                lane=ShortLane(config.long_job_seconds, config.short_slots), express=express)

    def _where_jobs_run(self, engine: Engine, fn: Any, task: Task, job: Job, *args: Any) -> Any:
        """``fn(store, blobs, task.id, job.id, *args)`` where ``engine``'s jobs
        run (a worker process by default), so a request holds the service's GIL
        only to decode and encode, and a user's code is never unpickled here."""
        future = self.loop.executors[engine].call(fn, task.id, job.id, *args)
        return model_export.waited_where_jobs_run(future, task, job, "predicting", MODEL_CALL_SECONDS)

    def _torch_outputs(self, task: Task, job: Job, X: np.ndarray) -> np.ndarray:
        """A torch model's outputs where the torch jobs run; here when this service trains no torch."""
        if Engine.TORCH not in self.loop.executors:
            return models.torch_outputs(self.store, self.blobs, task, job, X)
        if parse_job(job.model, job.config).is_user_model:
            return self._own_call(Engine.TORCH, own_model_calls.own_net_outputs_of, task, job, X)
        return self._where_jobs_run(Engine.TORCH, models.torch_outputs_of, task, job, X)

    def _own_call(self, engine: Engine, fn: Any, task: Task, job: Job, *args: Any) -> Any:
        """``_where_jobs_run`` for a call into a user's own model: its deadline
        is fixed now, as the request arrives, and ends before this wait does
        (``own_model_calls.request_deadline``)."""
        deadline = own_model_calls.request_deadline(job, MODEL_CALL_SECONDS)
        future = self.loop.executors[engine].call(fn, task.id, job.id, *args, deadline)
        return own_model_calls.waited(future, job, MODEL_CALL_SECONDS)

    def _own_predictions(self, task: Task, job: Job, X: Any) -> np.ndarray:
        """A user's own scikit-learn model's predictions, where the scikit-learn jobs run
        (in a child killed at her model's time limit: ``own_model_calls``)."""
        return self._own_call(Engine.SKLEARN, own_model_calls.own_predictions_of, task, job, X)

    def _own_outputs(self, task: Task, job: Job, X: Any, *args: Any) -> Any:
        """A user's own scikit-learn model's suspicion outputs, where the scikit-learn jobs run."""
        return self._own_call(Engine.SKLEARN, own_model_calls.own_outputs_of, task, job, X, *args)

    def _engine_address(self, config: ServiceConfig) -> Any:
        """``local``, or the address of a Dask scheduler (or a picklable
        ``clusters.Connection``) that every job slot (scikit-learn and torch)
        is a client of. ``engine="dask"`` starts that cluster here:
        ``workers`` processes; ``gateway`` and ``module:callable`` open one
        (``clusters.open_cluster``); either is closed on stop."""
        self._cluster = None
        if config.engine == "gateway" or engine_form(config.engine) == "factory":
            from ..execution.engine.clusters import open_cluster

            # One cluster for the whole service, shut down on stop; job slots
            # (threads or spawned processes) connect to it through a
            # picklable Connection, never making clusters of their own.
            self._cluster = open_cluster(config.engine, workers=config.workers)
            return self._cluster.connection
        if config.engine != "dask":
            return config.engine
        from ..execution.engine.dask import local_cluster

        self._cluster = local_cluster(config.workers)
        return self._cluster.scheduler_address

    def start(self) -> "Service":
        self.loop.start()
        if _may_have_gpus(self.config):
            self.measure_devices()
        return self

    def measure_devices(self) -> "Future[Any] | None":
        """Measure the speed of each device kind torch picks train on, in the
        background, and price the arms by it once known (``loop.use_speeds``);
        None where this service trains no torch."""
        executor = self.loop.executors.get(Engine.TORCH)
        if executor is None:
            return None
        future = executor.call(measure_torch_pool, executor.runner)

        def priced(done: "Future[Any]") -> None:
            try:
                speeds = done.result()
            except Exception:  # noqa: BLE001 - the arms keep the default speed
                log.warning("could not measure the devices of the torch pool", exc_info=True)
                return
            if speeds is not None:
                log.info("device speeds: %s", {k: f"{v.flops_per_second:.3g} FLOP/s" for k, v in speeds.kinds.items()})
                self.loop.use_speeds(speeds)

        future.add_done_callback(priced)
        return future

    def stop(self) -> None:
        """Stop the loop (running jobs finish and are recorded) and close the store; idempotent."""
        if getattr(self, "_stopped", False):
            return
        self._stopped = True
        self.loop.stop()
        if self.feed_processes is not None:
            self.feed_processes.close()
        self.export_processes.close()
        if self._cluster is not None:
            self._cluster.close()
        self.store.close()

    # ------------------------------------------------------------ users
    def add_user(self, caller: User, body: dict[str, Any]) -> dict[str, Any]:
        """A local account with a new token. Never a hub user's: in JupyterHub
        mode the hub's user of the same name stays another user."""
        self._admin(caller)
        admin = body.get("admin", False)
        if not isinstance(admin, bool):  # "false" is a true string: no admin by a typo
            raise DataError("admin", repr(admin)[:40], "true or false (a JSON boolean)")
        user, token = create_user(self.store, body.get("name"), admin=admin)
        return {"id": user.id, "name": user.name, "admin": user.is_admin, "origin": user.origin, "token": token}

    def revoke_tokens(self, caller: User, name: str) -> dict[str, Any]:
        """The local account ``name``'s ease.ml token stops working, here at
        once (the token cache forgets it, her open event streams close); its
        tasks stay."""
        self._admin(caller)
        user, _ = revoke_token(self.store, name)
        self.rights_changed(user.id)
        return {"id": user.id, "name": user.name, "origin": user.origin, "revoked": True}

    def delete_user(self, caller: User, name: str, origin: str | None = None) -> dict[str, Any]:
        """Delete the account ``name`` (``?origin=`` as ``budget_api.user_named``)
        with everything of hers (``deletion.delete_user``): her token first
        (so she starts nothing new), then each of her tasks as ``delete_task``
        deletes one (a running job ends first; content another user also fed
        stays), her uploads, her notebook sessions, her budgets, caps and
        settings, and her account row; this service forgets what it kept
        about her (tokens, hub name, quota count, budget gate, task cache).
        An admin cannot delete her own account (409): another admin can, or
        ``easeml users delete`` on the database."""
        from .budget_api import user_named

        self._admin(caller)
        user = user_named(self, name, origin)
        if user.id == caller.id:
            raise InvalidStateError(f"user {name!r} is the caller: an admin cannot delete her own account here; "
                                    f"another admin can, or `easeml users delete {name}` on the database with the "
                                    "service stopped")
        if user.origin == LOCAL:  # a hub user has no token: the hub is how she logs in
            self.store.set_user_token_hash(user.id, None)
        self.rights_changed(user.id)  # before anything of hers goes, and before a new account gets her id
        try:
            out = deletion.delete_user(self.store, self.blobs, self.loop, user,
                                       uploads=self.uploads,
                                       deleted=lambda task: self._task_cache.pop((user.id, task.name), None))
        finally:
            self._forget_owner(user.id)
            self.events.close_user(user.id)  # a hub user's stream opened meanwhile
        out["notebooks_deleted"] = self.notebooks.forget_user(user.id)
        return out

    def rights_changed(self, user_id: int) -> None:
        """A user's token or rights changed in the store (revoked, deleted,
        made or unmade an admin): her cached look-ups go, so her next request
        has the new rights, and her open event streams end now rather than at
        their next recheck."""
        self.tokens.forget_user(user_id)
        self.events.close_user(user_id)

    def _forget_owner(self, owner_id: int) -> None:
        """Forget what this service keeps in memory about an owner whose rows
        were deleted (a SQLite database from before schema 0004 may still
        give a later user her id once)."""
        self.tokens.forget_user(owner_id)
        forget_usage(self.store, owner_id)
        if self.feed_processes is not None:
            self.feed_processes.forget(owner_id)
        for key in [k for k in self._task_cache if k[0] == owner_id]:
            self._task_cache.pop(key, None)
        self.loop.budget_changed(owner_id)

    def list_users(self, caller: User) -> list[dict[str, Any]]:
        self._admin(caller)
        return [{"id": u.id, "name": u.name, "admin": u.is_admin, "origin": u.origin, "created_at": _iso(u.created_at)}
                for u in self.store.list_users()]

    def whoami(self, caller: User) -> dict[str, Any]:
        return {"id": caller.id, "name": caller.name, "admin": caller.is_admin, "origin": caller.origin}

    @staticmethod
    def _admin(caller: User) -> None:
        if not caller.is_admin:
            raise PermissionError("admin rights needed")

    # ------------------------------------------------------------ tasks
    def _task(self, caller: User, name: str) -> Task:
        """The caller's task by name (NotFoundError for others' tasks too).

        Cached: a task's owner, name and program never change, and its one
        mutable field, ``cancelled``, changes only through ``cancel``/``resume``
        below, which refresh the cache. This saves two of a read's 3-5 queries."""
        check_name("task", name)
        key = (caller.id, name)
        task = self._task_cache.get(key)
        if task is None:
            task = self.store.task_by_name(caller.id, name)
            self._task_cache[key] = task
        return task

    def _cached(self, task: Task) -> Task:
        self._task_cache[(task.owner_id, task.name)] = task
        return task

    def create_task(self, caller: User, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create, or open when the same program is given again; (task, created)."""
        name = check_name("name", body.get("name"))
        table = task_schema.table_program(body)  # (program, schema) of a table task declared from data
        text = table[0] if table is not None else _program_text(body)
        try:  # the store, not the cache: a deleted task's name must be free again at once
            existing = self.store.task_by_name(caller.id, name)
        except NotFoundError:
            if text is None:
                raise DataError("program", "nothing", "a program or input/output shapes for a new task") from None
            task = self._cached(self.store.create_task(caller.id, name, text))
            if table is not None:
                task_schema.store_table_schema(self.store, task, table[1])
            self.loop.notify(task.id)
            self.events.publish(caller.id, {"type": "task", "task_id": task.id, "name": name, "status": "created"})
            # Its fields come from the table and class-name tags, which only its table
            # (just stored) and feeds write: a tensor task made just now has none to read.
            tags = self.store.tags("task", task.id) if table is not None else {}
            return {**task_json(task), **task_schema.fields_in(tags)}, True
        if table is not None:
            task_schema.check_same_table(self.store, existing, table[1])
        elif text is not None and existing.program != text:
            raise AlreadyExistsError(
                f"task {name!r} exists with program {existing.program}, not {text}: open it as it is with "
                f"client.task({name!r}) or `%easeml task {name}` (no shapes), or replace it by deleting it first "
                f"(task.delete() or `%easeml delete {name}`) and declaring it again")
        return {**task_json(existing), **task_schema.fields_in(self.store.tags("task", existing.id))}, False

    def list_tasks(self, caller: User) -> list[dict[str, Any]]:
        return [task_json(t) for t in self.store.list_tasks(caller.id)]

    def get_task(self, caller: User, name: str) -> dict[str, Any]:
        return reads.task_page(self.store, self._task(caller, name), task_json, version_json, self.loop.task_status)

    def cancel(self, caller: User, name: str) -> dict[str, Any]:
        task = self._cached(self.store.set_task_cancelled(self._task(caller, name).id, True))
        self.loop.notify(task.id)
        self.events.publish(caller.id, {"type": "task", "task_id": task.id, "name": name, "status": "cancelled"})
        return task_json(task)

    def set_muted(self, caller: User, name: str, body: Any) -> dict[str, Any]:
        """Mute (or unmute) the task's notifications (``notify.py``)."""
        task = self._task(caller, name)
        muted = notify.muted_from_body(body)
        notify.set_muted(self.store, task.id, muted)
        return {"name": task.name, "muted": notify.is_muted(self.store, task.id)}

    def resume(self, caller: User, name: str) -> dict[str, Any]:
        task = self._cached(self.store.set_task_cancelled(self._task(caller, name).id, False))
        self.loop.notify(task.id)
        return task_json(task)

    def delete_task(self, caller: User, name: str, task_id: int | None = None,
                    created_at: str | None = None) -> dict[str, Any]:
        """Remove the task with its versions, jobs and the blobs only it used
        (``deletion.py``). ``task_id``, ``created_at``: the task's as the
        caller last saw it; a task of that name that is another (deleted and
        declared again since) is a NotFoundError like no task at all, and is
        left alone (``deletion.same_task``)."""
        task = self._cached(self.store.set_task_cancelled(
            deletion.same_task(self.store, self._task(caller, name), caller, task_id, created_at).id, True))
        out = deletion.delete_task(self.store, self.blobs, self.loop, task)
        forget_usage(self.store, task.owner_id)  # (quota.py: deleting may bring back a counted stamp)
        if self.feed_processes is not None:
            self.feed_processes.forget(task.owner_id)
        self._task_cache.pop((caller.id, name), None)
        self.events.publish(caller.id, {"type": "task", "task_id": task.id, "name": name, "status": "deleted"})
        return out

    # ------------------------------------------------------------ data
    def feed(self, caller: User, name: str, body: dict[str, Any] | bytes | bytearray) -> dict[str, Any]:
        """Store a feed of the task: ``body`` is the request's JSON object, or
        its raw bytes (``POST /tasks/{name}/feed``), parsed where the feed
        runs: in its owner's feed process when the service has them."""
        try:
            task = self._task(caller, name)
        except NotFoundError:  # the feed never reaches a feeder, which consumes its uploads whatever the answer
            with contextlib.suppress(DataError):
                parsed = body if isinstance(body, dict) else json_object(body)
                self.uploads.consume(caller.id, parsed.get("X"), parsed.get("y"))
            raise
        try:
            if self.feed_processes is not None:
                raw = bytes(body) if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
                fed = self.feed_processes.feed(caller, task, raw)
            else:
                fed = self.feeder.feed(caller, task, body if isinstance(body, dict) else json_object(body))
        finally:
            # Whatever the answer, the loop looks at the task: a feed that failed after its version
            # was stored (its process killed after the commit), and the retry that then finds it
            # stored (created False), must not leave a new version untrained.
            self.loop.notify(task.id)
        return self._fed(caller, task, fed)

    def _fed(self, caller: User, task: Task, fed: Fed) -> dict[str, Any]:
        out = self._new_version(caller, task, fed.version) if fed.created else version_json(fed.version)
        return {**out, "created": fed.created, "new": fed.new, "duplicates": fed.duplicates, "mode": fed.mode}

    def refine(self, caller: User, name: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """(version, created): a refine that changes nothing gives the latest version and starts nothing."""
        task = self._task(caller, name)
        keep, drop = body.get("keep"), body.get("drop")
        for field, ids in (("keep", keep), ("drop", drop)):
            if ids is not None and not (isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
                raise DataError(field, repr(ids)[:80], "a list of integer example ids")
        version, created = datasets.refine_or_reuse(self.store, self.blobs, task, keep=keep, drop=drop)
        return (self._new_version(caller, task, version) if created else version_json(version)), created

    def _new_version(self, caller: User, task: Task, version: DatasetVersion) -> dict[str, Any]:
        self.loop.notify(task.id)
        out = version_json(version)
        self.events.publish(caller.id, {"type": "version", "task_id": task.id, "version": out})
        return out

    def versions(self, caller: User, name: str) -> list[dict[str, Any]]:
        task = self._task(caller, name)
        return [version_json(v) for v in self.store.list_dataset_versions(task.id)]

    def _version(self, task: Task, number: int | None) -> DatasetVersion:
        """Dataset version ``number`` of the task (None: the latest)."""
        versions = self.store.list_dataset_versions(task.id)
        if not versions:
            raise NotFoundError(f"task {task.name!r} has no data yet")
        match = versions[-1] if number is None else next((v for v in versions if v.number == number), None)
        if match is None:
            raise NotFoundError(f"task {task.name!r} has no dataset version {number}")
        return match

    def examples(self, caller: User, name: str, number: int | None, offset: int | None = None,
                 limit: int | None = None) -> dict[str, Any]:
        """One page of a version's examples, in example-id order: from
        position ``offset`` (default 0), at most ``limit`` rows and never more
        than ``EXAMPLES_PAGE_BYTES`` of arrays, so no answer holds a whole
        large version. ``next_offset`` is where the next page starts (None
        after the last)."""
        task = self._task(caller, name)
        match = self._version(task, number)
        total = match.n_examples
        start = 0 if offset is None else offset
        if not 0 <= start <= total:
            raise DataError("offset", str(start), f"a position from 0 to {total}, the version's examples")
        if limit is not None and limit < 1:
            raise DataError("limit", str(limit), "at least 1 row")
        data = self._page(match, start, min(total, start + (limit or total)))
        out = {"version": version_json(match), "offset": start, "total": total,
               "next_offset": start + len(data.y) if start + len(data.y) < total else None,
               "example_ids": arrays.encode(data.example_ids), "y": arrays.encode(data.y)}
        if isinstance(data.X, np.ndarray):
            out["X"] = arrays.encode(data.X)
        schema = task_schema.table_schema(self.store, task)
        if schema is not None:
            out["table"] = task_schema.table_json(schema, data.X, arrays.encode)
        return out

    def _page(self, version: DatasetVersion, start: int, stop: int) -> datasets.LoadedData:
        """The examples at positions ``start`` to at most ``stop`` that fit in
        ``EXAMPLES_PAGE_BYTES`` (at least one), read from the chunks that hold
        them, each once: the chunks are read until their rows fill a page, and
        the page is cut at its rows' size."""
        if start == stop:  # an empty page, shaped as the version's rows
            return _rows(datasets.load_span(self.store, self.blobs, version, 0, 1), slice(0, 0))
        data = datasets.load_span(self.store, self.blobs, version, start, stop, max_bytes=EXAMPLES_PAGE_BYTES)
        return _rows(data, slice(0, max(1, EXAMPLES_PAGE_BYTES // max(datasets.row_bytes(data), 1))))

    # ------------------------------------------------------------ results
    @_gone_as_missing
    def jobs(self, caller: User, name: str) -> list[dict[str, Any]]:
        # each with its predicted seconds beside the measured ones (profile_view.py)
        return reads.jobs_page(self.store, self._task(caller, name), job_json)

    def profile(self, caller: User, name: str) -> dict[str, Any]:
        """The profiler's predictions and the provisioner's chosen configuration for each candidate of the task."""
        return self.loop.task_profile(self._task(caller, name))

    @_gone_as_missing
    def history(self, caller: User, name: str) -> list[dict[str, Any]]:
        rows = self.jobs(caller, name)
        sizes = validation_sizes(self.store, self.blobs, {r["dataset_version_id"] for r in rows if r["accuracy"] is not None})
        for row in rows:
            row["validation_size"] = sizes.get(row["dataset_version_id"])  # held-out examples behind its accuracy
            metrics: dict[int, dict[str, float]] = {}
            for m in self.store.list_metrics(row["id"]):
                metrics.setdefault(m.epoch, {})[m.name] = m.value
            row["metrics"] = [dict(epoch=e, **v) for e, v in sorted(metrics.items())]
        return rows

    @_gone_as_missing
    def export_model(self, caller: User, name: str, fmt: str | None) -> tuple[bytes, str, str]:
        """(zip bytes, media type, file name): the best model in ``fmt`` with
        its model card (``export.py``); a torch model is converted where the
        torch jobs run, a zoo scikit-learn model in the export processes."""
        file_name, data = model_export.export_best(self.store, self.blobs, self._task(caller, name), fmt,
                                                   self.loop.executors.get(Engine.TORCH), MODEL_CALL_SECONDS,
                                                   self.loop.executors.get(Engine.SKLEARN), self.export_processes)
        return data, model_export.MEDIA_TYPE, file_name + ".zip"

    @_gone_as_missing
    def best(self, caller: User, name: str) -> dict[str, Any]:
        return models.best(self.store, self._task(caller, name), self.blobs)

    def leaderboard(self, caller: User) -> list[dict[str, Any]]:
        return reads.leaderboard(self.store, self.blobs, caller.id)  # models.best of each task, read at once

    @_gone_as_missing
    def infer(self, caller: User, name: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            task = self._task(caller, name)
            X = arrays.decode("X", body.get("X"), self.uploads, caller.id)
        finally:  # the uploads sent for one infer (a table's columns too) serve it alone, whatever the answer
            self.uploads.consume(caller.id, body.get("X"))
        predictions = models.infer(self.store, self.blobs, task, X, self._torch_outputs, self._own_predictions)
        # class indices, and the names they stand for (the client answers with the names)
        out: dict[str, Any] = {"predictions": arrays.encode(predictions), **task_schema.names_json(self.store, task)}
        if predictions.size <= 10_000:
            out["list"] = predictions.tolist()
        return out

    @_gone_as_missing
    def suspicion(self, caller: User, name: str, number: int | None, k: int | None = None) -> dict[str, Any]:
        """Per-example loss and disagreement of the finished models on a version
        (default latest); see ``suspicion.py``. 409 ``no_model`` before the first model."""
        task = self._task(caller, name)
        k = DEFAULT_TOP_K if k is None else k
        if not 1 <= k <= MAX_TOP_K:
            raise DataError("k", repr(k), f"an integer from 1 to {MAX_TOP_K}")
        if number is None and self.store.latest_dataset_version(task.id) is None:
            raise NoModelError(f"task {name!r} has no data and no model yet")
        version = self._version(task, number)
        result = self.suspicion_scorer.scores(task, version, k)
        out = dict(result)
        for field in ("index", "loss", "disagreement", "validation"):
            out[field] = arrays.encode(result[field])
        return out

    def provenance(self, caller: User, name: str, direction: str = "backward") -> dict[str, Any]:
        task = self._task(caller, name)
        if direction not in ("backward", "forward", "all"):
            raise DataError("direction", repr(direction), "backward, forward or all")
        versions = self.store.list_dataset_versions(task.id)
        edges: dict[int, Edge] = {}
        if direction == "all":
            for v in versions:
                for e in self.store.lineage(Node(NodeKind.DATASET, v.id), direction="forward"):
                    edges[e.id] = e
                for e in self.store.lineage(Node(NodeKind.DATASET, v.id), direction="backward"):
                    edges[e.id] = e
        elif versions:
            for e in self.store.lineage(Node(NodeKind.DATASET, versions[-1].id), direction=direction):
                edges[e.id] = e
        return {"versions": [version_json(v) for v in versions],
                "edges": [edge_json(e) for _, e in sorted(edges.items())]}

    # ------------------------------------------------------------ tags
    def tags(self, caller: User, name: str) -> dict[str, str]:
        return dict(self.store.tags("task", self._task(caller, name).id))

    def set_tags(self, caller: User, name: str, body: dict[str, Any]) -> dict[str, str]:
        task = self._task(caller, name)
        if not isinstance(body, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in body.items()):
            raise DataError("tags", "a non-string key or value", "an object of string keys and values")
        for key, value in body.items():
            if key.startswith("easeml."):
                raise DataError("tags", repr(key), "keys not starting with 'easeml.' (reserved)")
            if not 0 < len(key) <= MAX_TAG_KEY_CHARS or CONTROL_CHARACTER.search(key):
                raise DataError("tags", repr(key[:40]), f"keys of 1 to {MAX_TAG_KEY_CHARS} characters, "
                                "no control characters")
            if len(value) > MAX_TAG_VALUE_CHARS or CONTROL_CHARACTER.search(value):
                raise DataError(f"tags.{key}", "a control character" if CONTROL_CHARACTER.search(value)
                                else f"a value of {len(value)} characters",
                                f"at most {MAX_TAG_VALUE_CHARS} characters, no control characters")
        users_keys = {k for k in self.store.tags("task", task.id) if not k.startswith("easeml.")} | set(body)
        if len(users_keys) > MAX_TAGS_PER_TASK:
            raise DataError("tags", f"{len(users_keys)} tags on the task", f"at most {MAX_TAGS_PER_TASK}")
        for key, value in body.items():
            self.store.set_tag("task", task.id, key, value)
        return dict(self.store.tags("task", task.id))

    # ------------------------------------------------------------ user models (user_models.py)
    def add_user_model(self, caller: User, name: str, body: Any) -> dict[str, Any]:
        return user_models.api_add(self, caller, name, body)

    def user_models(self, caller: User, name: str) -> list[dict[str, Any]]:
        return user_models.api_list(self, caller, name)

    def set_user(self, caller: User, name: str, body: Any, origin: str | None = None) -> dict[str, Any]:
        return user_models.api_set_user(self, caller, name, body, origin)

    # ------------------------------------------------------------ budgets (budget_api.py)
    def budget(self, caller: User) -> dict[str, Any]:
        return budget_api.get_budget(self, caller)

    def set_budget(self, caller: User, body: Any) -> dict[str, Any]:
        return budget_api.set_budget(self, caller, body)

    def user_budget(self, caller: User, name: str) -> dict[str, Any]:
        return budget_api.get_user_budget(self, caller, name)

    def set_user_budget(self, caller: User, name: str, body: Any) -> dict[str, Any]:
        return budget_api.set_user_cap(self, caller, name, body)

    def task_budget(self, caller: User, name: str) -> dict[str, Any]:
        return budget_api.get_task_budget(self, caller, name)

    def set_task_budget(self, caller: User, name: str, body: Any) -> dict[str, Any]:
        return budget_api.set_task_budget(self, caller, name, body)

    # ------------------------------------------------------------ uploads
    def new_upload(self, caller: User) -> dict[str, Any]:
        return {"id": self.uploads.create(caller.id), "size": 0}

    def upload_chunk(self, caller: User, upload_id: str, offset: int, data: bytes) -> dict[str, Any]:
        reserve = self.quota.reserve(self.store, self.blobs, caller.id, what=f"upload {upload_id}")
        return {"id": upload_id, "size": self.uploads.append(caller.id, upload_id, offset, data, reserve=reserve)}

    def upload_size(self, caller: User, upload_id: str) -> dict[str, Any]:
        return {"id": upload_id, "size": self.uploads.size(caller.id, upload_id)}

    def delete_upload(self, caller: User, upload_id: str) -> dict[str, Any]:
        """Drop one of the caller's uploads (404 for another's or none)."""
        self.uploads.size(caller.id, upload_id)  # NotFoundError naming it
        self.uploads.delete(caller.id, upload_id)
        return {"id": upload_id, "deleted": True}

    # ------------------------------------------------------------ admin
    def progress(self, caller: User) -> dict[str, Any]:
        self._admin(caller)
        users = []
        for user in self.store.list_users():
            tasks = self.store.list_tasks(user.id)
            counts: dict[str, int] = {}
            best = []
            for task in tasks:
                for job in self.store.list_jobs(task.id):
                    counts[job.status.value] = counts.get(job.status.value, 0) + 1
                job = models.best_job(self.store, task)
                if job is not None:
                    best.append(job.accuracy)
            users.append({"name": user.name, "tasks": len(tasks), "jobs": counts,
                          "mean_best_accuracy": float(np.mean(best)) if best else None})
        return {"users": users, "loop": self.loop.progress(), "uptime_seconds": time.time() - self.started_at}

    def scheduler(self, caller: User) -> dict[str, Any]:
        """Policy, mode, the last decision and per-user progress; others
        anonymised for non-admins (see ``scheduler_view.py``)."""
        return scheduler_view(self.store, self.loop.scheduler_state(), caller)

    def _publish_decision(self, raw: dict[str, Any]) -> None:
        if self.events.n_subscribers:
            self.events.broadcast(decision_event(self.store, raw))

    def touch(self) -> None:
        """A request came in (see ``idle_seconds``)."""
        self.last_request = time.monotonic()

    def idle_seconds(self) -> float:
        """Seconds with no request, no WebSocket client (but passive ones) and no running job (0 when busy)."""
        if self.events.n_subscribers > self.passive_streams or self.loop.n_running():
            return 0.0
        return time.monotonic() - self.last_request

    def health(self, caller: User | None = None) -> dict[str, Any]:
        """Liveness. Anyone (no token needed) learns only that the service is
        up; an admin also sees the version, workers and WebSocket subscribers."""
        out: dict[str, Any] = {"status": "ok"}
        if caller is None or not caller.is_admin:
            return out
        from .. import __version__

        out.update(version=__version__, workers=self.loop.workers, subscribers=self.events.n_subscribers,
                   store=self.loop.store_status())
        return out
