"""``easeml serve``: the scheduler service (HTTP API, events, control loop).

    easeml serve --data-dir /srv/easeml --port 8585
    easeml serve --db postgresql+psycopg2://easeml@db/easeml --data-dir /srv/easeml --engine local
    easeml serve --jupyterhub --data-dir /srv/easeml    # as c.JupyterHub.services' "command" (docs/service.md)
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import click

from ._data_dir import FiniteFloat, db_option, make_data_dir


@click.command("serve")
@db_option("SQLAlchemy URL (default: SQLite in the data dir; memory:// for a throwaway). Also read from "
           "$EASEML_DB, which keeps a password off the command line, where every local user can read it.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Blobs, uploads and the SQLite file (default: $EASEML_DATA_DIR or ~/.easeml).")
@click.option("--engine", default="local", show_default=True, metavar="ENGINE",
              help="Where picks train: local; dask (a local Dask cluster of --workers processes); gateway (a "
                   "dask-gateway cluster, configured by dask-gateway's own config, shut down on stop); the address "
                   "of a Dask scheduler (tcp://HOST:PORT, tls://HOST:PORT); or module:callable, a factory returning "
                   "a distributed.Client or a cluster (dask-jobqueue, dask-kubernetes). See docs/clusters.md.")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
              help="Arithmetic of torch training units: fp32, or mixed precision bf16 / fp16 (with a gradient "
                   "scaler) on GPUs.")
@click.option("--blob-url", default=None, metavar="URL",
              help="fsspec URL (s3://bucket/path, file:///shared/path) through which MOP partitions and "
                   "checkpoints travel when the workers share no file system with the service.")
@click.option("--policy", default="default", show_default=True, metavar="NAME",
              help="The selection rule: default (the selector's default rule), hybrid (ease.ml's), greedy, "
                   "round_robin, spearmint, fifo (first come, first served: each task's models in the zoo's "
                   "order, as tasks arrive), ...; every policy of docs/selection.md but the oracles.")
@click.option("--cross-user-prior/--no-cross-user-prior", default=True, show_default=True,
              help="The selector's GP prior from other tasks' results (the tasks finished in this store, else the "
                   "prior shipped with the package); --no-cross-user-prior: model descriptors only.")
@click.option("--long-job-seconds", default=30.0, show_default=True, type=FiniteFloat(min=0, min_open=True, allow_inf=True),
              help="A pick predicted to take longer is a long job: it may not take the slots kept for short jobs "
                   "(--short-slots), so a newcomer's quick models need not wait for it. inf: no such limit.")
@click.option("--short-slots", default=0, show_default=True, type=click.IntRange(0, 64),
              help="Slots of each engine kept for short jobs: one user's long jobs may run on at most the engine's "
                   "slots less these (at least one). 0: none.")
@click.option("--express-slots", default=1, show_default=True, type=click.IntRange(0, 64), metavar="N",
              help="Job slots per engine (scikit-learn, torch) beyond its own that take only a task's first "
                   "pick, predicted to take at most --long-job-seconds, while the engine's own slots are busy: a "
                   "newcomer's first model need not wait for someone else's long job. 0: none.")
@click.option("--host", default="127.0.0.1", show_default=True, metavar="ADDRESS",
              help="Address to listen on: 127.0.0.1 (this machine only), or 0.0.0.0 (every network interface).")
@click.option("--port", default=8585, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64), help="Local training workers (W).")
@click.option("--executor", type=click.Choice(["process", "thread"]), default="process", show_default=True,
              help="Where scikit-learn jobs run: spawned worker processes, or threads in the service.")
@click.option("--feed-processes", default=1, show_default=True, type=click.IntRange(0, 64), metavar="N",
              help="Processes that store feeds, each with its own database connection, so that many clients' "
                   "feeds use other cores than the API's; 0: in the service's process.")
@click.option("--max-running", default=2, show_default=True, type=click.IntRange(1, 1000),
              help="Cap on running jobs per user (k).")
@click.option("--torch-epochs", default=None, type=click.IntRange(1, 1000), metavar="N",
              help="The most epochs a torch pick's configs train (poor ones stop early) where a task sets no "
                   "max_epochs. Default: by data size, see `easeml models`.")
@click.option("--mop-partitions", default=None, type=click.IntRange(1, 1024), metavar="N",
              help="Data partitions per torch (MOP) job; an interrupted job resumes from its last finished "
                   "partition unit (default: one per engine worker).")
@click.option("--max-torch-workloads", default=4, show_default=True, type=click.IntRange(1, 64), metavar="N",
              help="Torch picks (MOP workloads) that train at once on the shared workers, their units "
                   "interleaved and the workers shared equally among their owners.")
@click.option("--max-json-mb", default=1.0, show_default=True, type=FiniteFloat(0.01), help="Largest JSON body.")
@click.option("--max-chunk-mb", default=64.0, show_default=True, type=FiniteFloat(0.01), help="Largest upload chunk.")
@click.option("--idle-shutdown", default=None, type=FiniteFloat(min=0, min_open=True), metavar="SECONDS",
              help="Stop after this long with no request and no running job (default: never).")
@click.option("--worker-nice", default=5, show_default=True, type=click.IntRange(0, 19),
              help="Niceness added to training worker processes, so the API stays responsive.")
@click.option("--upload-ttl", default=24 * 3600.0, show_default=True, type=FiniteFloat(min=0, min_open=True),
              metavar="SECONDS", help="Discard a chunked upload not fed or appended to for this long.")
@click.option("--quota-gb", default=4.0, show_default=True, type=FiniteFloat(min=0), metavar="GIB",
              help="Each user's storage quota in GiB: fed data, trained models and uploads not fed yet; a write "
                   "over it is refused (413 quota_exceeded). 0: no quota.")
@click.option("--blob-gc", default=6 * 3600.0, show_default=True, type=FiniteFloat(min=0), metavar="SECONDS",
              help="Delete unreferenced blobs (superseded checkpoints, old selector states) older than an hour, "
                   "a minute after start-up and then this often; 0 turns it off (see `easeml gc`).")
@click.option("--allow-user-models/--no-allow-user-models", default=False, show_default=True,
              help="Take users' own models (task.add_model), whose code runs on the shared workers; an admin "
                   "allows or forbids one user with `easeml users allow-models NAME [--off]` either way.")
@click.option("--user-model-timeout", default=600.0, show_default=True, type=FiniteFloat(min=0, min_open=True),
              metavar="SECONDS", help="The most seconds a job of a user's own model may run; past it the job fails.")
@click.option("--notebook-timeout", default=90.0, show_default=True, type=FiniteFloat(min=0, min_open=True),
              metavar="SECONDS", help="A registered notebook session unheard of (no heartbeat) for this long is "
                                      "listed as gone (GET /api/v1/notebooks).")
@click.option("--price-cpu", default=0.0316, show_default=True, type=FiniteFloat(0, what="price per hour"), metavar="PRICE",
              help="The auto-provisioner's price of a CPU core per hour (ACAI's cost = runtime x hourly price of "
                   "the resources). Defaults: Google Cloud N1 on-demand list prices, us-east1 (placeholders).")
@click.option("--price-gb", default=0.0042, show_default=True, type=FiniteFloat(0, what="price per hour"), metavar="PRICE",
              help="The auto-provisioner's price of a GB of memory per hour.")
@click.option("--price-gpu", default=0.35, show_default=True, type=FiniteFloat(0, what="price per hour"), metavar="PRICE",
              help="The auto-provisioner's price of a GPU per hour (default: an NVIDIA T4 on Google Cloud).")
@click.option("--jupyterhub", is_flag=True, default=False,
              help="Run as a JupyterHub service: users authenticate with hub API tokens (or the hub's OAuth "
                   "login); the API lives under $JUPYTERHUB_SERVICE_PREFIX, and --host/--port default to "
                   "$JUPYTERHUB_SERVICE_URL.")
def command(db_url, data_dir, engine, precision, blob_url, policy, cross_user_prior, long_job_seconds, short_slots, express_slots, host, port, workers, executor, feed_processes, max_running, torch_epochs, mop_partitions,
            max_torch_workloads, max_json_mb, max_chunk_mb,
            idle_shutdown, worker_nice, upload_ttl, quota_gb, blob_gc, allow_user_models, user_model_timeout,
            notebook_timeout, price_cpu, price_gb, price_gpu, jupyterhub) -> None:
    """Run the scheduler service until interrupted."""
    from ease_jupyter.service import ServiceConfig, serve
    from ease_jupyter.store import default_data_dir

    base_url = "/"
    if jupyterhub:
        from ease_jupyter.service import hub

        try:
            hub.check_environment()
            bind = hub.service_bind()
        except hub.HubConfigError as error:
            raise click.UsageError(str(error)) from None
        context = click.get_current_context()
        if bind is not None:
            if context.get_parameter_source("host") == click.core.ParameterSource.DEFAULT:
                host = bind[0]
            if context.get_parameter_source("port") == click.core.ParameterSource.DEFAULT:
                port = bind[1]
        base_url = hub.service_prefix()

    if db_url == "memory://" and click.get_current_context().get_parameter_source("feed_processes") \
            == click.core.ParameterSource.DEFAULT:
        feed_processes = 0  # no other process can open an in-memory store
    try:
        config = ServiceConfig(db_url=db_url, data_dir=data_dir or default_data_dir(), host=host, port=port,
                               engine=engine, precision=precision, blob_url=blob_url, policy=policy,
                               cross_user_prior=cross_user_prior, long_job_seconds=long_job_seconds,
                               short_slots=short_slots, express_slots=express_slots, workers=workers, executor=executor,
                               feed_processes=feed_processes, max_running_per_user=max_running, torch_epochs=torch_epochs,
                               mop_partitions=mop_partitions, max_torch_workloads=max_torch_workloads,
                               max_json_bytes=int(max_json_mb * 1024 * 1024), max_chunk_bytes=int(max_chunk_mb * 1024 * 1024),
                               idle_shutdown_seconds=idle_shutdown, worker_nice=worker_nice, upload_ttl_seconds=upload_ttl,
                               quota_bytes=int(quota_gb * 1024**3) or None,
                               blob_gc_seconds=blob_gc or None,
                               allow_user_models=allow_user_models, user_model_timeout=user_model_timeout,
                               notebook_timeout_seconds=notebook_timeout,
                               price_cpu=price_cpu, price_gb=price_gb, price_gpu=price_gpu,
                               jupyterhub=jupyterhub, base_url=base_url)
    except ValueError as error:
        raise _bad_setting(error) from None
    from ease_jupyter.execution.engine import EngineError
    from ease_jupyter.execution.engine.clusters import check_engine_spec

    try:
        check_engine_spec(engine)  # a factory that does not import stops us here
    except EngineError as error:
        raise click.BadParameter(str(error), param_hint="'--engine'") from None
    if blob_url is not None:
        _check_blob_url(blob_url)
    from ease_jupyter.service.app import AddressInUse, AddressUnusable
    from ease_jupyter.service.embedded import DataDirInUse, holder

    # Before the store's check, which opens (and may migrate) the database of the service that holds it;
    # serve() takes the lock itself, which settles a race between two that start at once.
    other = holder(config.data_dir) if config.data_dir is not None else None
    if other is not None:
        raise click.BadParameter(str(DataDirInUse(Path(config.data_dir), other)), param_hint="'--data-dir'")
    make_data_dir(data_dir)  # a usage error where it cannot be made (a file in the way), not the database's
    require_writable_store(config)
    warn_if_exposed(Path(config.data_dir))  # once the store made a missing data dir (mode 0700)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    try:
        serve(config, announce=lambda line: click.echo(line))
    except EngineError as error:  # the gateway started no cluster, the factory failed: the option's to fix
        raise click.BadParameter(str(error).removeprefix("engine: "), param_hint="'--engine'") from None
    except DataDirInUse as error:
        raise click.BadParameter(str(error), param_hint="'--data-dir'") from None
    except AddressInUse as error:
        raise click.BadParameter(f"{error.port}: address already in use on {error.host} (use --port 0 for a "
                                 "free one)", param_hint="'--port'") from None
    except AddressUnusable as error:
        found = error.host if error.option == "host" else error.port
        expected = ("an IPv4 address of this machine (127.0.0.1, 0.0.0.0 for every interface) or a name that "
                    "resolves to one" if error.option == "host" else "a port of 1024 or above, or 0 for a free one")
        raise click.BadParameter(f"found {found!r}, {error.reason}; expected {expected}",
                                 param_hint=f"'--{error.option}'") from None


# The option of each ServiceConfig field that `easeml serve` sets, for the
# config's own errors ("field: found ..., expected ...").
_OPTIONS = {
    "db_url": "--db", "data_dir": "--data-dir", "host": "--host", "port": "--port", "engine": "--engine",
    "precision": "--precision", "blob_url": "--blob-url", "policy": "--policy",
    "cross_user_prior": "--cross-user-prior", "long_job_seconds": "--long-job-seconds",
    "short_slots": "--short-slots", "express_slots": "--express-slots", "workers": "--workers",
    "executor": "--executor", "feed_processes": "--feed-processes", "max_running_per_user": "--max-running",
    "torch_epochs": "--torch-epochs", "mop_partitions": "--mop-partitions",
    "max_torch_workloads": "--max-torch-workloads", "max_json_bytes": "--max-json-mb",
    "max_chunk_bytes": "--max-chunk-mb", "idle_shutdown_seconds": "--idle-shutdown",
    "worker_nice": "--worker-nice", "upload_ttl_seconds": "--upload-ttl", "quota_bytes": "--quota-gb",
    "blob_gc_seconds": "--blob-gc", "allow_user_models": "--allow-user-models",
    "user_model_timeout": "--user-model-timeout", "notebook_timeout_seconds": "--notebook-timeout",
    "price_cpu": "--price-cpu", "price_gb": "--price-gb", "price_gpu": "--price-gpu",
    "jupyterhub": "--jupyterhub", "base_url": "--jupyterhub",  # the base URL comes from the hub's environment
}


def _bad_setting(error: ValueError) -> click.BadParameter:
    """A ServiceConfig error as a usage error naming the option of its field."""
    text = str(error)
    field = re.match(r"\w+", text)
    option = _OPTIONS.get(field.group(0)) if field else None
    if option is None:
        return click.BadParameter(text)
    if text.startswith(f"{field.group(0)}: "):  # the option names the field now
        text = text[len(field.group(0)) + 2:]
    return click.BadParameter(text, param_hint=f"'{option}'")


def _check_blob_url(blob_url: str) -> None:
    """A --blob-url whose protocol fsspec has no file system for (or whose
    package is not installed) stops the start, not the first torch job."""
    import fsspec
    from fsspec.core import split_protocol

    protocol = split_protocol(blob_url)[0] or "file"
    try:
        fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as error:
        raise click.BadParameter(f"found {blob_url!r}, whose protocol {protocol!r} fsspec cannot open ({error}); "
                                 "expected an fsspec URL such as s3://bucket/path or file:///shared/path",
                                 param_hint="'--blob-url'") from None


def require_writable_store(config) -> None:  # noqa: ANN001 - a ServiceConfig
    """Refuse to start on a database this process cannot write: the service
    would accept requests and then fail them one by one."""
    from ease_jupyter.errors import StorageError
    from ease_jupyter.store import MEMORY_URL, open_store

    if config.db_url == MEMORY_URL:
        return
    database = _database_name(config)
    try:
        store, _ = open_store(config.db_url, config.data_dir)
        try:
            store.check_writable()
        finally:
            store.close()
    except (StorageError, OSError) as error:
        reason = getattr(error, "found", None) or error
        if type(error) is StorageError:  # no SQLite database, or a damaged one: no mode bits mend it
            raise click.ClickException(
                f"cannot open the database {database}: {reason}. Expected the service's database: name the right "
                "one (--db or $EASEML_DB), or restore the file from a backup.") from None
        raise click.ClickException(
            f"cannot write the database {database}: {reason}. Make the database writable by this user (for SQLite: "
            "the file, its -wal and -shm files and their directory; for a server: a read-write connection with "
            "space left), then start again.") from None


def warn_if_exposed(data_dir: Path) -> None:
    """A warning on stderr where the data dir is open to group or others (a
    directory made beforehand, e.g. by ``mkdir``, with the umask's 755): the
    service starts anyway, the operator's to fix."""
    from ease_jupyter.store import exposed_dir_warning

    warning = exposed_dir_warning(data_dir)
    if warning is not None:
        click.echo(f"easeml serve: {warning}", err=True)


def _database_name(config) -> str:  # noqa: ANN001 - a ServiceConfig
    from ._data_dir import database_name

    return database_name(config.db_url, Path(config.data_dir))
