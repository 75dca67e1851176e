"""IPython magics: ``%load_ext ease_jupyter``, then ``%easeml ...``.

Thin over ``Client``: the line is parsed by IPython's ``magic_arguments``
parser (intermixed: options may come before, between or after the command's
words) and routed to one function per subcommand in ``commands.py``.
``%easeml``, ``--help`` and ``COMMAND --help`` print help (``usage.py``).
"""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.utils.process import arg_split

from .commands import ROUTER, Session
from .display import Result
from .errors import shorten
from .usage import help_text, wants_help

__all__ = ["EaseMLMagics", "Result", "load_ipython_extension"]


@magics_class
class EaseMLMagics(Magics):
    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self.session = Session()

    @magic_arguments()
    @argument("command", choices=sorted(ROUTER), help="what to do (see above)")
    @argument("name", nargs="?", help="task name (for connect: the service URL)")
    @argument("values", nargs="*", default=[], help="notebook variables: X y for feed, X for infer")
    @argument("--input", help="input shape for a new task, e.g. 4 or 64,64,3")
    @argument("--output", help="output shape for a new task, e.g. 3")
    @argument("--program", help="an ease.ml program for a new task")
    @argument("--from", dest="like", metavar="DF_OR_PATH",
              help="task: a DataFrame variable (or CSV/Parquet path) to infer a table task from")
    @argument("--target", help="task --from: the target column")
    @argument("--token", help="connect: the token (default $EASEML_TOKEN)")
    @argument("--keep", help="refine: ids to turn on, as 1,2,3 or a variable")
    @argument("--drop", help="refine: ids to turn off, as 1,2,3 or a variable")
    @argument("--timeout", type=float, help="status: wait up to this many seconds for the task to be idle")
    @argument("--all", action="store_true", help="status: the service view across all users")
    @argument("--mode", choices=("dedupe", "append", "replace"),
              help="feed: rows already there are skipped (dedupe, the default), added again (append), "
                   "or the version holds only the fed rows (replace)")
    @argument("--yes", action="store_true", help="delete: do not ask for a confirmation")
    @argument("--format", help="export: joblib or onnx (scikit-learn), torchscript, onnx or state_dict (torch)")
    @argument("--grid", help="model: the grid, as JSON ({\"C\": [0.1, 1]}) or a notebook variable holding a dict")
    @argument("--as", dest="model_name", help="model: the model's name (default: the object's own)")
    @argument("--debug", action="store_true", help="on an error, show the full traceback (not one line)")
    @line_cell_magic
    def easeml(self, line: str, cell: str | None = None) -> Result:
        """Declarative model selection on the shared ease.ml service.

        %easeml connect [URL] [--token T]   connect; Client() follows it (no URL: $EASEML_URL,
                                            else the embedded service)
        %easeml task NAME --input 4 --output 3   create or open a task
        %easeml task NAME --program "input: [4] output: [3]"
        %%easeml task NAME                  the cell body is the ease.ml program
        %easeml task NAME --from df --target species   a table task, its schema from a DataFrame
        %easeml feed NAME X y [--mode M]    add examples from notebook variables (rows already
                                            there are skipped; --mode append or replace)
        %easeml refine NAME --drop 3,5      turn examples off (or --keep ids on)
        %easeml refine NAME                 the refine panel: page, toggle, filter, sort, save
        %easeml status NAME [--timeout S]   one task: live leaderboard and curves (optionally wait)
        %easeml status                      the best model of each of your tasks
        %easeml status --all                the service: every user, who is served now and why
        %easeml infer NAME X                predict with the best model so far
        %easeml provenance NAME             the task's provenance DAG (click, trace back/forward)
        %easeml models NAME                 the models trained for the task, best first (measured vs
                                            predicted seconds), and each candidate's predicted cost
        %easeml model NAME VAR [--grid G] [--as M]   your own estimator or torch net factory VAR
                                            as a model of the task (docs/models.md)
        %easeml cancel NAME                 stop exploring the task
        %easeml delete NAME [--yes]         delete the task and its data for good (asks first)
        %easeml export NAME PATH [--format F]   the best model to a file, its model card to
                                            PATH.card.json (docs/export.md)

        Each returns a Result: shown as a table, with the raw answer in `.data`;
        status, refine (no ids) and provenance show a live widget (`.widget`).

        Options may come anywhere on the line (`%easeml status --timeout 60
        iris`). `%easeml --help` lists the commands, `%easeml COMMAND --help`
        shows one command's options.

        An error shows as one line (and a hint where one is known); the cell
        still fails. `%easeml --debug ...` shows the full traceback, and
        `_easeml_error.error` holds that of the last failed line.
        """
        parser = self.easeml.parser
        words = arg_split(line)
        if wants_help(words):
            print(help_text(parser, words))
            return None
        # intermixed: `status --timeout 5 iris` as `status iris --timeout 5` (plain parsing ends the
        # positionals at the first option and refuses the words after it)
        args = unquote(parser.parse_intermixed_args(words))
        user_ns = self.shell.user_ns if self.shell is not None else {}
        try:
            if cell is not None and args.command != "task":
                raise ValueError("%%easeml: only 'task NAME' takes a cell (the program)")
            if args.command == "task":
                return ROUTER["task"](self.session, args, user_ns, cell)
            return ROUTER[args.command](self.session, args, user_ns)
        except Exception as error:
            user_ns["_easeml_error"] = Result.failed(error, args.command)
            if not args.debug:
                shorten(error, args.command)
            raise


# Commands whose values are Python expressions of the notebook (``commands._value``).
_EXPRESSIONS = {"feed", "infer", "model"}
# Options that are plain text: a column, a path, a format, a name...
_TEXT_OPTIONS = ("name", "target", "program", "token", "format", "model_name", "input", "output", "keep", "drop")


def _inner(word: str | None) -> str | None:
    if word is not None and len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"":
        return word[1:-1]
    return None


def unquote(args: Any) -> Any:
    """``args`` without one level of matching quotes around a word: IPython's
    argument split keeps them (``--target "penguin species"`` would name the
    column ``"penguin species"``, quotes and all). A quoted expression (``--from``,
    the values of feed, infer and model) stays the text inside, as a literal."""
    for option in _TEXT_OPTIONS:
        inner = _inner(getattr(args, option, None))
        if inner is not None:
            setattr(args, option, inner)

    def expression(word: str) -> str:
        inner = _inner(word)
        return word if inner is None else repr(inner)  # evaluates to exactly the text, backslashes and all

    def text(word: str) -> str:
        inner = _inner(word)
        return word if inner is None else inner

    if getattr(args, "like", None) is not None:
        args.like = expression(args.like)
    args.values = [(expression if args.command in _EXPRESSIONS else text)(word) for word in args.values or []]
    return args


def load_ipython_extension(ipython: Any) -> None:
    from .. import client
    from .notifications import register  # notifications as a line under the next cell's output

    ipython.register_magics(EaseMLMagics)
    session = ipython.magics_manager.registry["EaseMLMagics"].session
    client.kernel_default = session.default_in(ipython)  # Client() in the notebook follows `%easeml connect URL`
    register(ipython, session)
