"""Service settings: one frozen dataclass, filled from the CLI or by tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from ..execution.device import PRECISIONS
from ..execution.engine.clusters import engine_spec_form as engine_form, is_url
from ..selection.baselines import DEFAULT_POLICY, POLICIES
from ..selection.provisioner import DEFAULT_PRICES, Prices
from .loop.lanes import LONG_SECONDS, RESERVED_SLOTS, ShortLane

MIB = 1024 * 1024
GIB = 1024 * MIB
DEFAULT_QUOTA_BYTES = 4 * GIB
#: Selection rules a live service can run: every policy but the oracles, which need the true qualities.
LIVE_POLICIES = (DEFAULT_POLICY, *(name for name, (_, chooser) in POLICIES.items()
                                   if chooser != "oracle" and name != DEFAULT_POLICY))


@dataclass(frozen=True)
class ServiceConfig:
    """Everything ``easeml serve`` can be told.

    Attributes:
        db_url: SQLAlchemy URL, ``"memory://"``, or None for SQLite in ``data_dir``.
        data_dir: blobs, SQLite file, uploads and ``service.json`` live here.
        host, port: where to listen (port 0 picks a free one).
        max_running_per_user: ACAI's cap on running jobs per user (k).
        engine: where picks train: ``"local"`` (each job slot's own
            in-process engine), ``"dask"`` (a Dask LocalCluster of
            ``workers`` processes, started by the service), ``gateway`` (a
            dask-gateway cluster the service starts, configured by
            dask-gateway's own configuration, shut down on stop), a scheduler
            address (``tcp://...``, ``tls://...``) or ``module:callable`` (a
            factory returning a ``distributed.Client`` or a cluster object:
            dask-jobqueue, dask-kubernetes; docs/clusters.md). Torch picks
            run as MOP workloads, and the grid of a scikit-learn pick as
            concurrent Seneca tasks, there.
        precision: the torch units' arithmetic: ``fp32`` (default), or mixed
            precision ``bf16`` or ``fp16`` (with a gradient scaler) on GPUs.
        blob_url: an fsspec URL (``s3://bucket/easeml``, ``file:///shared``)
            through which MOP partitions and checkpoints travel between the
            service and the workers when they share no file system; None:
            checkpoints hop as bytes (or through a local directory where the
            workers share the service's file system).
        torch: offer torch candidates (image tasks) to the selector.
        allow_user_models: take users' own models (``task.add_model``,
            ``service/user_models.py``), whose code then runs on the shared
            workers; an admin's per-user setting overrides it either way
            (``easeml users allow-models``). Off for ``easeml serve``, on for
            the embedded single-user service.
        user_model_timeout: the most seconds a job of a user's own model may
            run (a user may ask for less); past it the job fails.
        price_cpu, price_gb, price_gpu: the auto-provisioner's unit prices
            per hour of a CPU core, a GB of memory and a GPU (ACAI §4.3;
            ``service/provisioning.py``). Defaults: Google Cloud N1 on-demand
            list prices in us-east1 (placeholders, set your own).
        notebook_timeout_seconds: a notebook session unheard of (no heartbeat,
            no registration) for this long is gone (``notebooks.py``).
        torch_epochs: the most epochs a torch pick's configs train (its
            successive halving's last rung) where a task sets no
            ``max_epochs``; None: by data size (``zoo.default_max_epochs``).
        mop_partitions: data partitions of a torch pick's MOP workload
            (None: one per engine worker, Cerebro §3.1). A unit is one
            partition of one epoch of one config, and an interrupted job
            resumes from its last finished unit, so more partitions mean
            less work lost to a restart at the price of more model hops.
        max_torch_workloads: torch picks that train at once. Their MOP
            workloads share the engine's workers: one driver draws the units
            of all of them, one unit per worker at a time, with the workers
            shared equally among the jobs' owners (``mop.pool_driver``).
        workers: size of the local worker pool (W).
        executor: ``"process"`` (spawned worker processes; the default) or
            ``"thread"`` (threads in the service; always used for ``memory://``).
        feed_processes: processes that store feeds (``feed_processes.py``),
            each with its own store connection, so that feeds use cores the
            service's process (bound by the GIL) cannot; 0, the default and
            the embedded service's setting: feeds run in the service's
            process. ``easeml serve`` starts one. Not with ``memory://``.
        max_json_bytes: largest JSON request body (413 above it).
        max_chunk_bytes: largest upload chunk body (413 above it).
        tick_seconds: how often the control loop wakes up with nothing to do.
        worker_nice: niceness added to the worker processes of the
            ``"process"`` executor (0 to 19): training is throughput work and
            the API is latency work, so on a small machine the kernel should
            prefer the service process when both want a core.
        idle_shutdown_seconds: stop the service after this long with no
            request, no WebSocket client and no running job (None: never).
            The embedded service (``Client()`` with no URL) uses 30 minutes.
        upload_ttl_seconds: a chunked upload not fed (or appended to) for
            this long is deleted.
        quota_bytes: each user's storage quota (``quota.py``): her fed
            data, her trained models and her uploads not fed yet. A write
            that would take her over it is refused (413 ``quota_exceeded``);
            None or 0: no quota.
        housekeeping_seconds: how often the idle check and the upload sweep run.
        blob_gc_seconds: collect blob garbage (``service/gc.py``: superseded
            MOP checkpoints, old selector states) at the first housekeeping
            run and then this often; None or 0 disables it. Blobs written in
            the last hour are always kept (``gc.DEFAULT_GRACE_SECONDS``).
        seed: random state of the selector.
        policy: the selection rule (``selection.baselines.POLICIES``, one of
            :data:`LIVE_POLICIES`): ``default`` is the selector's default
            rule; ``hybrid`` is ease.ml's, ``fifo`` a first-come-first-served
            queue (each task's models in the zoo's order, as tasks arrive).
        cross_user_prior: the selector's GP prior from other tasks' results
            (ease.ml App. A: the tasks finished in this store, else the prior
            shipped with the package; ``loop/prior.py``). False: model
            descriptors only, each task learning from its own results.
        long_job_seconds, short_slots: a pick predicted to take longer than
            ``long_job_seconds`` is long, and one user's long jobs may run on
            at most her engine's slots less ``short_slots`` (at least one),
            keeping slots for short jobs (``loop/lanes.py``; 0: off).
        express_slots: job slots per engine (scikit-learn, and torch when
            it trains torch) beyond its own, in executors of their own, that
            take only a task's first pick on its data, predicted to take at
            most ``long_job_seconds``, while the engine's own slots are all
            busy (``Admission.pick_express``): a newcomer's first result need
            not wait for someone else's long job. 0: none.
        state_save_seconds: save the selector state at most this often (0:
            after every change). Each save is a new blob, so a busy service
            may want a few seconds; a restart reconciles an older state with
            the jobs in the store either way.
        jupyterhub: run as a JupyterHub service (``easeml serve --jupyterhub``,
            ``hub.py``): a request's token may be a hub API token (or the
            browser's hub OAuth cookie), resolved with the hub named by
            ``$JUPYTERHUB_API_URL``/``$JUPYTERHUB_API_TOKEN``; the hub user
            becomes the ease.ml user of the same name. ease.ml tokens stay valid.
        base_url: URL path the API lives under (``<base_url>api/v1/...``);
            ``$JUPYTERHUB_SERVICE_PREFIX`` (``/services/easeml/``) in hub mode,
            because the hub's proxy forwards the prefix unchanged.
    """

    db_url: str | None = None
    data_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 0
    max_running_per_user: int = 2
    engine: str = "local"
    workers: int = 1
    executor: str = "process"
    feed_processes: int = 0
    max_json_bytes: int = 1 * MIB
    max_chunk_bytes: int = 64 * MIB
    tick_seconds: float = 0.5
    seed: int | None = 0
    policy: str = DEFAULT_POLICY
    cross_user_prior: bool = True
    long_job_seconds: float = LONG_SECONDS  # loop/lanes.py: picks predicted longer are long ...
    short_slots: int = RESERVED_SLOTS  # ... and may not fill this many slots per engine (0: none, the default)
    express_slots: int = 0
    state_save_seconds: float = 0.0
    torch: bool = True
    torch_epochs: int | None = None
    mop_partitions: int | None = None
    max_torch_workloads: int = 4
    worker_nice: int = 5
    idle_shutdown_seconds: float | None = None
    upload_ttl_seconds: float = 24 * 3600.0
    quota_bytes: int | None = DEFAULT_QUOTA_BYTES
    housekeeping_seconds: float = 60.0
    blob_gc_seconds: float | None = 6 * 3600.0
    jupyterhub: bool = False
    base_url: str = "/"
    precision: str = "fp32"
    blob_url: str | None = None
    allow_user_models: bool = False
    user_model_timeout: float = 600.0
    notebook_timeout_seconds: float = 90.0
    price_cpu: float = DEFAULT_PRICES.cpu
    price_gb: float = DEFAULT_PRICES.gb
    price_gpu: float = DEFAULT_PRICES.gpu

    def __post_init__(self) -> None:
        self.prices  # noqa: B018 - checks the prices (DataError, a ValueError, naming price_cpu/gb/gpu)
        if not self.notebook_timeout_seconds > 0:
            raise ValueError(f"notebook_timeout_seconds: found {self.notebook_timeout_seconds}, expected > 0 seconds")
        if not self.user_model_timeout > 0:
            raise ValueError(f"user_model_timeout: found {self.user_model_timeout}, expected > 0 seconds")
        if self.max_running_per_user < 1:
            raise ValueError(f"max_running_per_user: found {self.max_running_per_user}, expected >= 1")
        if self.workers < 1:
            raise ValueError(f"workers: found {self.workers}, expected >= 1")
        if not (isinstance(self.feed_processes, int) and 0 <= self.feed_processes <= 64):
            raise ValueError(f"feed_processes: found {self.feed_processes!r}, expected an integer from 0 to 64")
        if self.feed_processes and self.db_url == "memory://":
            raise ValueError("feed_processes: found a memory:// store, which other processes cannot open; "
                             "expected 0 with it, or a file or PostgreSQL store")
        if isinstance(self.express_slots, bool) or not (isinstance(self.express_slots, int)
                                                        and 0 <= self.express_slots <= 64):
            raise ValueError(f"express_slots: found {self.express_slots!r}, expected an integer from 0 to 64")
        if self.torch_epochs is not None and self.torch_epochs < 1:
            raise ValueError(f"torch_epochs: found {self.torch_epochs}, expected >= 1")
        if self.mop_partitions is not None and self.mop_partitions < 1:
            raise ValueError(f"mop_partitions: found {self.mop_partitions}, expected >= 1 or None")
        if self.max_torch_workloads < 1:
            raise ValueError(f"max_torch_workloads: found {self.max_torch_workloads}, expected >= 1")
        if not 0 <= self.worker_nice <= 19:
            raise ValueError(f"worker_nice: found {self.worker_nice}, expected 0 to 19")
        if self.idle_shutdown_seconds is not None and not self.idle_shutdown_seconds > 0:
            raise ValueError(f"idle_shutdown_seconds: found {self.idle_shutdown_seconds}, expected > 0 or None")
        if self.blob_gc_seconds is not None and self.blob_gc_seconds < 0:
            raise ValueError(f"blob_gc_seconds: found {self.blob_gc_seconds}, expected >= 0 (0 or None: off)")
        if self.quota_bytes is not None and not (isinstance(self.quota_bytes, int) and self.quota_bytes >= 0):
            raise ValueError(f"quota_bytes: found {self.quota_bytes!r}, expected an integer >= 0 (0 or None: no quota)")
        if not (self.upload_ttl_seconds > 0 and self.housekeeping_seconds > 0):
            raise ValueError("upload_ttl_seconds and housekeeping_seconds: expected > 0")
        if not (self.base_url.startswith("/") and self.base_url.endswith("/")) or "//" in self.base_url:
            raise ValueError(f"base_url: found {self.base_url!r}, expected a path such as / or /services/easeml/")
        if self.executor not in ("process", "thread"):
            raise ValueError(f"executor: found {self.executor!r}, expected 'process' or 'thread'")
        if engine_form(self.engine) is None:
            raise ValueError(f"engine: found {self.engine!r}, expected local, dask, gateway, a scheduler address "
                             "such as tcp://HOST:PORT, or module:callable (a factory of a Dask client or cluster)")
        try:  # the lane's own checks, named by this config's fields
            ShortLane(self.long_job_seconds, self.short_slots)
        except DataError as error:
            field = {"long_seconds": "long_job_seconds", "reserved": "short_slots"}[error.field]
            raise ValueError(f"{field}: found {error.found}, expected {error.expected}") from None
        if self.policy not in LIVE_POLICIES:
            raise ValueError(f"policy: found {self.policy!r}, expected one of {', '.join(LIVE_POLICIES)}")
        if not isinstance(self.cross_user_prior, bool):  # a string such as "false" would read as on
            raise ValueError(f"cross_user_prior: found {self.cross_user_prior!r}, expected True or False")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: found {self.precision!r}, expected one of {', '.join(PRECISIONS)}")
        if self.blob_url is not None and not is_url(self.blob_url):
            raise ValueError(f"blob_url: found {self.blob_url!r}, expected an fsspec URL such as s3://bucket/path "
                             "or file:///shared/path")

    @property
    def prices(self) -> Prices:
        """The provisioner's unit prices per hour."""
        return Prices(cpu=self.price_cpu, gb=self.price_gb, gpu=self.price_gpu)
