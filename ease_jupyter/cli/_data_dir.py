"""The database option of every command that opens a service's store, the
store of an existing data dir for the commands that act on one offline
(``easeml gc``, ``easeml fsck``, ``easeml users``), and the finite number
type of the commands' numeric options."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any, Callable, Iterator

import click

MEMORY_URL = "memory://"  # the store module's, repeated so that --help imports no store


class FiniteFloat(click.FloatRange):
    """A float option that refuses nan (every comparison with it is False,
    so it would pass any later check) and, unless ``allow_inf``, +-inf (a
    size or a period of inf overflows or never comes)."""

    def __init__(self, min: float | None = None, max: float | None = None, *, min_open: bool = False,
                 max_open: bool = False, allow_inf: bool = False, what: str = "number"):
        super().__init__(min, max, min_open=min_open, max_open=max_open)
        self.allow_inf, self.what = allow_inf, what  # what: the option's number in words ("price per hour")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if math.isnan(number) or (math.isinf(number) and not self.allow_inf):
            expected = f"a {self.what} or inf" if self.allow_inf else f"a finite {self.what}"
            self.fail(f"found {value!r}, expected {expected}{self._range_words()}", param, ctx)
        try:
            return super().convert(number, param, ctx)
        except click.BadParameter:  # out of range: said in the option's own words, as above
            self.fail(f"found {value!r}, expected a {self.what}{self._range_words()}", param, ctx)

    def _describe_range(self) -> str:
        # click's would be "x<=None" for a number with neither bound
        return "" if self.min is None and self.max is None else super()._describe_range()

    def _range_words(self) -> str:
        words = []
        if self.min is not None:
            words.append(f"{'>' if self.min_open else '>='} {self.min:g}")
        if self.max is not None:
            words.append(f"{'<' if self.max_open else '<='} {self.max:g}")
        return f" {' and '.join(words)}" if words else ""


def _db_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The URL, once it parses and its dialect's driver imports: else a
    usage error now, not a traceback from the first connection."""
    if value is None or value == MEMORY_URL:
        return value
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    example = "expected an SQLAlchemy URL such as postgresql+psycopg2://USER@HOST/DB or sqlite:////path/easeml.sqlite"
    try:
        url = make_url(value)
    except (ArgumentError, ValueError):
        raise click.BadParameter(f"found {value!r}, {example}", ctx, param) from None
    shown = url.render_as_string(hide_password=True)
    try:
        dialect = url.get_dialect()
    except NoSuchModuleError:
        raise click.BadParameter(f"found {shown!r}, whose database kind {url.drivername!r} SQLAlchemy does not "
                                 f"know; {example}", ctx, param) from None
    try:
        dialect.import_dbapi()
    except ImportError as error:
        hint = ""
        if url.get_backend_name() == "postgresql" and url.get_driver_name() != "psycopg2":
            # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; the package's extras ship psycopg2
            hint = "; use postgresql+psycopg2://..., whose driver the postgres extra installs"
        raise click.BadParameter(f"found {shown!r}, whose driver {url.get_driver_name()!r} is not installed "
                                 f"({error}){hint}", ctx, param) from None
    return value


def db_option(help: str = "SQLAlchemy URL (default: SQLite in the data dir).") -> Callable[[Any], Any]:
    """``--db``, also read from $EASEML_DB: the variable that ``easeml serve``
    reads, so a command run in the service's environment opens its database."""
    return click.option("--db", "db_url", default=None, envvar="EASEML_DB", show_envvar=True, help=help,
                        callback=_db_url)


def database_name(db_url: str | None, directory: Path) -> str:
    """The database a command opens, for a message: the SQLite file, or the URL without its password."""
    if db_url is None:
        from ease_jupyter.store import SQLITE_FILE

        return str(directory / SQLITE_FILE)
    from sqlalchemy.engine import make_url

    return make_url(db_url).render_as_string(hide_password=True)


def sqlite_file(db_url: str) -> Path | None:
    """The file of a SQLite URL (relative to the working directory, as
    SQLite reads it); None for any other URL, an in-memory SQLite one, or a
    ``file:`` URI (``?uri=true``), whose options this does not read."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:" \
            or url.query.get("uri"):
        return None
    return Path(url.database).expanduser()


def option_hint(option: str, envvar: str) -> str:
    """How a message names a setting: ``$ENVVAR`` where the option was not
    given and its value came from that variable, else ``option``."""
    import os

    ctx = click.get_current_context(silent=True)
    name = option.lstrip("-").replace("-", "_")
    source = None
    if ctx is not None:
        for param in ctx.command.params:  # the parameter's own name (--db is db_url)
            if option in getattr(param, "opts", ()):
                name = param.name
        source = ctx.get_parameter_source(name)
    if source == click.core.ParameterSource.ENVIRONMENT:
        return f"${envvar}"
    if source in (None, click.core.ParameterSource.DEFAULT) and os.environ.get(envvar):
        return f"${envvar}"  # an option that defaults to None and reads the variable later (--data-dir)
    return option


def require_existing_database(db_url: str | None) -> None:
    """A usage error where ``db_url`` names a SQLite file that does not
    exist: a command that only reads or repairs a database must not make an
    empty one at a mistyped path (SQLite creates the file it is asked to
    open)."""
    if db_url is None or db_url == MEMORY_URL:
        return
    path = sqlite_file(db_url)
    if path is not None and not path.is_file():
        raise click.BadParameter(f"no SQLite database at {path}, expected the service's database: pass the URL "
                                 "that easeml serve uses (a file that exists)",
                                 param_hint=option_hint("--db", "EASEML_DB"))


def make_data_dir(data_dir: Path | None) -> Path:
    """The data dir (default: $EASEML_DATA_DIR or ~/.easeml), made (mode
    0700) if need be: a usage error naming --data-dir (or the variable it
    came from) with the system's reason where it cannot be made (a file on
    the way, no permission)."""
    from ease_jupyter.store import default_data_dir, ensure_private_dir

    directory = (data_dir or default_data_dir()).expanduser()
    try:
        return ensure_private_dir(directory)
    except OSError as error:
        reason = "a file of that name is in the way" if directory.exists() else error.strerror or error
        raise click.BadParameter(f"cannot make the data dir {directory} ({reason}), expected a "
                                 "directory, or a path where this user can make one",
                                 param_hint=option_hint("--data-dir", "EASEML_DATA_DIR")) from None


@contextlib.contextmanager
def store_errors(db_url: str | None, directory: Path) -> Iterator[None]:
    """A store that cannot be reached or written (StorageError) as a clean
    error naming the database, not a traceback."""
    from ease_jupyter.errors import StorageError

    try:
        yield
    except StorageError as error:
        raise click.ClickException(f"the database {database_name(db_url, directory)}: {error} (--db or "
                                   "$EASEML_DB names the service's database)") from None


@contextlib.contextmanager
def existing_store(db_url: str | None, data_dir: Path | None, doing: str, *,
                   force: bool = False) -> Iterator[tuple[Any, Any, Path]]:
    """(store, blobs, directory) of the data dir (default: $EASEML_DATA_DIR or
    ~/.easeml), closed on exit. A usage error for ``memory://`` (such a store
    lives in its service's process), for a data dir that does not exist, for
    no ``--db`` where the data dir has no SQLite database (none is created:
    the service's database is elsewhere), and, unless ``force``, for a
    database with no users beside a data dir that holds blobs (another
    service's database, or a new one: its rows reference none of them)."""
    from ease_jupyter.store import SQLITE_FILE, default_data_dir, open_store

    if db_url == MEMORY_URL:
        raise click.BadParameter(f"a memory:// store lives in its service's process; nothing to {doing} here",
                                 param_hint="--db")
    directory = (data_dir or default_data_dir()).expanduser()
    if not directory.is_dir():
        raise click.ClickException(f"no data dir at {directory}")
    if db_url is None and not (directory / SQLITE_FILE).is_file():
        raise click.BadParameter(f"no SQLite database at {directory / SQLITE_FILE}, expected the service's "
                                 "database: pass the URL that easeml serve uses (--db or $EASEML_DB)",
                                 param_hint="--db")
    require_existing_database(db_url)  # a mistyped --db makes no empty database
    with store_errors(db_url, directory):
        store, blobs = open_store(db_url, directory)
    try:
        with store_errors(db_url, directory):
            no_users = not store.list_users()
        if not force and no_users and next(iter(blobs.iter_blobs()), None) is not None:
            raise click.BadParameter(
                f"the database holds no users, but {directory / 'blobs'} holds blobs, expected the database "
                f"of the service that wrote them: pass its URL (--db or $EASEML_DB), or --force to {doing} "
                "anyway", param_hint="--db")
        yield store, blobs, directory  # (the blob store's own errors are not the database's)
    finally:
        store.close()


@contextlib.contextmanager
def no_service_in(directory: Path, instead: str) -> Iterator[None]:
    """Hold the data dir's lock for the block: no service runs on
    ``directory`` and none starts until it ends. A service running there is
    a click error naming it, then ``instead`` (what to do)."""
    from ease_jupyter.service.embedded import DataDirInUse, DataDirLock

    try:
        lock = DataDirLock(directory)
    except DataDirInUse as busy:
        raise click.ClickException(
            f"a service (pid {busy.pid or '?'}, {busy.url or 'still starting'}) uses {directory}: {instead}") from None
    try:
        yield
    finally:
        lock.release()


def writable_dir(directory: Path, param_hint: str) -> Path:
    """``directory``, created if need be, once a file can be written in it:
    an output path that cannot take the result fails before the run, not
    after it."""
    import tempfile

    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):  # a real write: os.access says yes to root on a read-only mount
            pass
    except OSError as error:
        raise click.BadParameter(f"cannot write in {directory} ({error.strerror or error}), expected a directory "
                                 "this user can write", param_hint=param_hint) from None
    return directory
