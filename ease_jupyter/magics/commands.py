"""One function per ``%easeml`` subcommand: ``(session, args, user_ns) -> Result``.

Kept apart from IPython so they can be called and tested without a kernel.
``session`` holds the connected ``Client`` (connecting to the embedded
service on first use when ``connect`` was not called).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..client import Client, NoModelError, Task
from ..errors import DataError, NotFoundError, ProgramSyntaxError
from ..jobspec import describe_job
from .display import Result

SHOWN_ROWS = 20  # predictions shown by `infer` (all of them are in .data)


class Session:
    """The kernel's connection. ``%easeml connect URL`` also makes that URL
    (and its token) the kernel's default: a ``Client()`` made in the notebook
    with no URL connects there too (``default``, which ``client.py`` asks
    through ``kernel_default``). ``%easeml connect`` with no URL goes back to
    the kernel's own default: ``$EASEML_URL``, else the embedded service."""

    def __init__(self) -> None:
        self.client: Client | None = None
        self.default: tuple[str, str] | None = None  # (url, token) of the last `connect URL`

    def get(self) -> Client:
        if self.client is None:
            self.client = Client()
        return self.client

    def connect(self, url: str | None, token: str | None) -> tuple[Client, dict[str, Any]]:
        """A client of ``url`` (None: the kernel's own default) that answered,
        now the session's and the kernel's default; (client, whoami)."""
        previous, self.default = self.default, None  # no URL: not the last `connect URL`'s service
        try:
            client = Client(url, token)
            me = client.whoami()  # first: a connection that fails leaves the working one in place
        except BaseException:
            self.default = previous
            raise
        self.client = client
        self.default = (client.url, client.token) if url is not None else None
        return client, me

    def default_in(self, shell: Any) -> Callable[[], tuple[str, str] | None]:
        """``client.kernel_default`` for ``shell``: this session's default
        while ``shell`` is the running IPython shell, so that it never
        outlives its shell (a test's, say) in the process."""
        def default() -> tuple[str, str] | None:
            from IPython import get_ipython

            return self.default if get_ipython() is shell else None

        return default


def _need(args: Any, what: str = "NAME") -> str:
    if not args.name:
        raise ValueError(f"%easeml {args.command}: expected {what}")
    return args.name


def _name_only(args: Any, what: str = "NAME") -> str:
    """``_need``, for the commands that take nothing after the name: extra
    words are refused, never dropped (``task my task`` must not make "my")."""
    name = _need(args, what)
    if args.values:
        from ..service.auth import NAME_EXPECTED

        words = " ".join([name, *args.values])
        expected = (f"one {what} after %easeml {args.command}" if args.command == "connect"
                    else f"one task name of {NAME_EXPECTED}, without spaces")
        raise DataError("name", f"{len(args.values) + 1} words {words!r}", expected)
    return name


def _evaluated(user_ns: dict, expr: str) -> Any:
    """A variable of the notebook (or an attribute/index path of one); its evaluation's error otherwise."""
    if expr in user_ns:
        return user_ns[expr]
    return eval(expr, {}, user_ns)  # noqa: S307 - the notebook's own namespace, typed by its user


def _value(user_ns: dict, expr: str, what: str) -> Any:
    try:
        return _evaluated(user_ns, expr)
    except Exception as error:  # noqa: BLE001
        raise ValueError(f"{what}: found {expr!r}, expected a variable of the notebook ({error})") from None


_TABLE_SOURCE = ("a DataFrame variable (--from df), or the path of a CSV or Parquet file (--from data/penguins.csv; "
                 "in quotes where it has spaces: --from \"my data.csv\")")


def _table_source(user_ns: dict, text: str) -> Any:
    """``--from``: a notebook variable or expression (``df``, ``frames["a"]``),
    else the path of an existing file as typed: a path needs no quotes, as
    IPython splits the line at spaces only, and is taken only where no
    variable or expression is (``penguins`` is the variable even beside a
    file of that name). A quoted path is its text already (``unquote``)."""
    try:
        value = _evaluated(user_ns, text)
    except Exception as error:  # noqa: BLE001 - any failure: not an expression of the notebook
        if Path(text).expanduser().is_file():
            return str(Path(text).expanduser())
        raise DataError("--from", f"{text!r}, which is neither a variable of the notebook ({type(error).__name__}: "
                        f"{error}) nor an existing file (relative paths start at {os.getcwd()!r})",
                        _TABLE_SOURCE) from None
    if isinstance(value, (str, os.PathLike)) and not Path(value).expanduser().exists():
        raise DataError("--from", f"the path {str(value)!r}, which does not exist (relative paths start at "
                        f"{os.getcwd()!r})", _TABLE_SOURCE)
    return value


def _ids(text: str | None, user_ns: dict) -> list[int] | None:
    if text is None:
        return None
    if all(part.strip().lstrip("-").isdigit() for part in text.split(",")):
        return [int(p) for p in text.split(",")]
    return [int(i) for i in np.asarray(_value(user_ns, text, "ids")).ravel()]


def _shape(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(p) for p in text.strip("[]").split(",") if p.strip()]
    except ValueError:
        raise DataError(option, repr(text), "comma-separated integers, e.g. 64,64,3") from None


def _version(task: Task, v: dict) -> Result:
    title = f"{task.name}: dataset version {v['number']} ({v['kind']}, {v['n_examples']} examples)"
    if "new" in v:  # a feed: what it added
        title += f"; fed {v['new']} new row(s), {v['duplicates']} already there"
        if v["mode"] == "append" and v["duplicates"]:
            title += " (appended again)"
        elif not v.get("created", True):
            title += ", no new version"
    return Result(title, v)


def connect(session: Session, args: Any, user_ns: dict) -> Result:
    if args.name is not None:
        _name_only(args, "URL")
    client, me = session.connect(args.name, args.token)
    return Result(f"connected to {client.url} as {me['name']}", me)


def task(session: Session, args: Any, user_ns: dict, cell: str | None = None) -> Result:
    name = _name_only(args)
    in_cell = bool(cell and cell.strip())
    # only the end trimmed: the lines of the program stay those of the cell (the parser skips blank lines)
    program = cell.rstrip() if in_cell else args.program
    like = getattr(args, "like", None)
    if like is not None:  # a table task whose schema comes from a DataFrame (or a CSV/Parquet path)
        t = session.get().task(name, like=_table_source(user_ns, like), target=getattr(args, "target", None))
    else:
        try:
            t = session.get().task(name, input=_shape(args.input, "--input"), output=_shape(args.output, "--output"),
                                   program=program)
        except ProgramSyntaxError as error:
            if not in_cell:
                raise
            # counted as she sees the cell: its first line is `%%easeml task NAME`
            raise ProgramSyntaxError(error.message, line=error.line + 1, column=error.column, found=error.found,
                                     expected=error.expected, of="the cell") from error
    user_ns.setdefault("_easeml_tasks", {})[name] = t
    return Result(f"task {name}", t.info, [{"name": t.name, "program": t.program}])


def feed(session: Session, args: Any, user_ns: dict) -> Result:
    name = _need(args)
    if len(args.values) not in (1, 2):
        raise ValueError("%easeml feed NAME X [y]: expected X and y (or one table with its target column, "
                         "or an image folder's path)")
    t = session.get().task(name)
    X = _value(user_ns, args.values[0], "X")
    y = _value(user_ns, args.values[1], "y") if len(args.values) == 2 else None
    return _version(t, t.feed(X, y, mode=getattr(args, "mode", None)))


def refine(session: Session, args: Any, user_ns: dict) -> Result:
    t = session.get().task(_name_only(args))
    if args.keep is None and args.drop is None:  # no ids: the refine panel
        from ..widgets import RefinePanel

        versions = t.versions()
        if not versions:
            raise ValueError(f"%easeml refine {t.name}: the task has no data yet; feed it first")
        latest = versions[-1]
        return Result(f"{t.name}: refine panel on dataset version {latest['number']} ({latest['n_examples']} examples)",
                      latest, widget=lambda: RefinePanel(t))
    return _version(t, t.refine(keep=_ids(args.keep, user_ns), drop=_ids(args.drop, user_ns)))


def _best_config(best: dict | None) -> str | None:
    """The best model's config: the grid point that won, else the pick's configs."""
    if not best:
        return None
    return best.get("best_config") or describe_job(best["model"], best.get("config") or {})


def status(session: Session, args: Any, user_ns: dict) -> Result:
    client = session.get()
    if getattr(args, "all", False):
        if args.name:
            raise ValueError("%easeml status --all: expected no NAME (it shows every user)")
        return _service(client)
    if not args.name:
        board = client.leaderboard()
        rows = [{"task": r["task"], "model": (r["best"] or {}).get("model"), "config": _best_config(r["best"]),
                 "accuracy": (r["best"] or {}).get("accuracy")} for r in board]
        return Result(f"{len(rows)} task(s)", board, rows, ["task", "model", "config", "accuracy"])
    t = client.task(_name_only(args))
    waited = "" if args.timeout is None or t.wait(timeout=args.timeout) else f" (still training after {args.timeout:g} s)"
    info = t.refresh()
    latest = info.get("latest_version") or {}
    row = {"task": t.name, "version": latest.get("number"), "examples": latest.get("n_examples"),
           **info.get("jobs", {}), "idle": info.get("idle"), "cancelled": info.get("cancelled")}
    from ..widgets._jobs import metric_name

    try:
        best = t.best()
        # a regression task's score is R² (clipped to [0, 1]), not accuracy
        row.update({"best": best["model"], "config": _best_config(best), metric_name(info.get("program")): best["accuracy"]})
    except (NoModelError, NotFoundError):  # no model yet (the task itself was just read); other errors are hers to see
        pass

    def live() -> Any:
        from ..widgets import TaskStatus

        return TaskStatus(t)

    # static: without a widget front end the leaderboard's rows and the budget line show as text and HTML;
    # key: showing the status of this task again stops the previous display's live updates
    return Result(f"task {t.name}{waited}", info, [row], widget=live, key=(id(client), "status", t.name),
                  static=True)


def _service(client: Client) -> Result:
    """``status --all``: every user's loss estimate and compute share, and who is served now."""
    from ..widgets.service_view import ServiceView, _user_row, explain

    state = client.scheduler()
    rows = [_user_row(u) for u in state.get("users", [])]
    title = f"scheduler ({state.get('policy')}, mode {state.get('mode')}): {explain(state.get('last_decision'))}"
    return Result(title, state, rows, ["name", "tasks", "running", "best_accuracy", "loss_estimate", "compute_share"],
                  widget=lambda: ServiceView(client))


def infer(session: Session, args: Any, user_ns: dict) -> Result:
    name = _need(args)
    if len(args.values) != 1:
        raise ValueError("%easeml infer NAME X: expected one variable name")
    pred = session.get().task(name).infer(_value(user_ns, args.values[0], "X"))
    shown = [{"row": i, "prediction": p} for i, p in enumerate(pred.tolist()[:SHOWN_ROWS])]
    cut = f", showing the first {SHOWN_ROWS} (all of them in .data)" if len(pred) > SHOWN_ROWS else ""
    return Result(f"{name}: {len(pred)} prediction(s){cut}", pred, shown)


def provenance(session: Session, args: Any, user_ns: dict) -> Result:
    t = session.get().task(_name_only(args))
    graph = t.provenance(direction="all")
    node = lambda n: "outside" if n is None else f"{n['kind']}:{n['id']}"  # noqa: E731
    rows = [{"edge": e["kind"], "from": node(e["src"]), "to": node(e["dst"]), "job": e["job_id"]} for e in graph["edges"]]

    def live() -> Any:
        from ..widgets import ProvenanceGraph

        return ProvenanceGraph(t)

    return Result(f"provenance of {args.name}: {len(rows)} edge(s)", graph, rows, widget=live,
                  key=(id(t.client), "provenance", t.name))


def models(session: Session, args: Any, user_ns: dict) -> Result:
    """The task's jobs (measured and predicted seconds) and each candidate's predicted cost (``model_costs.py``)."""
    from .model_costs import ModelsResult

    t = session.get().task(_name_only(args))
    return ModelsResult(args.name, t.jobs(), t.profile())


def cancel(session: Session, args: Any, user_ns: dict) -> Result:
    info = session.get().task(_name_only(args)).cancel()
    return Result(f"task {args.name} cancelled", info)


def delete(session: Session, args: Any, user_ns: dict, ask: Callable[[str], str] | None = None) -> Result:
    """Delete a task for good, after asking (``--yes`` skips the question)."""
    name = _name_only(args)
    t = session.get().task(name)  # a task that does not exist is a NotFoundError before any question
    if not getattr(args, "yes", False):
        try:
            # `input` as it is now: a kernel puts its own there (one that asks the front end)
            answer = (ask or input)(f"Delete task {name!r} with all its dataset versions, models and stored data? "
                         f"This cannot be undone. Type the task name to confirm: ")
        except (NotImplementedError, EOFError):  # IPython's StdinNotImplementedError: a front end without input
            raise ValueError(f"%easeml delete {name}: cannot ask for a confirmation here (no input: a notebook "
                             f"run headless, e.g. by nbclient or papermill); to delete without asking: "
                             f"%easeml delete {name} --yes") from None
        if answer.strip() != name:
            return Result(f"task {name} not deleted (the answer was not {name!r})", {"deleted": False, "name": name})
    out = t.delete()
    return Result(f"task {name} deleted: {out['versions']} dataset version(s), {out['jobs']} job(s), "
                  f"{out['blobs_deleted']} stored blob(s) ({out['bytes_freed']} bytes) off your quota", out)


def export(session: Session, args: Any, user_ns: dict) -> Result:
    """The task's best model to PATH (its model card beside it), ``--format`` as ``Task.export``."""
    name = _need(args)
    if len(args.values) != 1:
        raise ValueError("%easeml export NAME PATH: expected one path (quote it if it has spaces)")
    path = args.values[0]
    card = session.get().task(name).export(path, format=getattr(args, "format", None))
    from ..service.export_bundle import card_path

    return Result(f"{name}: {card['training']['model']} (job {card['provenance']['job_id']}, "
                  f"{card['metrics']['name']} {card['metrics']['value']:.4g}) exported as {card['format']} to {path}; "
                  f"model card {card_path(path)}", card)


def model(session: Session, args: Any, user_ns: dict) -> Result:
    """``%easeml model NAME VAR [--grid JSON_OR_VAR] [--as MODEL]``: the notebook's
    estimator or factory ``VAR`` as a model of task NAME (``Task.add_model``)."""
    from .model_args import grid_of

    name = _need(args)
    if len(args.values) != 1:
        raise ValueError("%easeml model NAME VAR: expected one variable (an estimator, or a factory of a torch net)")
    obj = _value(user_ns, args.values[0], "model")
    record = session.get().task(name).add_model(obj, grid_of(getattr(args, "grid", None), user_ns),
                                                name=getattr(args, "model_name", None))
    grid = ", ".join(f"{k}={'|'.join(map(str, v))}" for k, v in record["grid"].items()) or "as given"
    return Result(f"{name}: model {record['name']} ({record['kind']}, {grid}) added; it trains beside the zoo's",
                  record)


ROUTER: dict[str, Callable[..., Result]] = {
    "model": model,
    "connect": connect, "task": task, "feed": feed, "refine": refine, "status": status,
    "infer": infer, "provenance": provenance, "models": models, "cancel": cancel, "delete": delete,
    "export": export,
}
