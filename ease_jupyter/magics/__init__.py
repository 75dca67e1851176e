"""IPython magics: ``%load_ext ease_jupyter``, then ``%easeml ...``.

Thin over ``Client``: the line is parsed by IPython's ``magic_arguments`` and
routed to one function per subcommand in ``commands.py``.
"""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .commands import ROUTER, Session
from .display import Result

__all__ = ["EaseMLMagics", "Result", "load_ipython_extension"]


@magics_class
class EaseMLMagics(Magics):
    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self.session = Session()

    @magic_arguments()
    @argument("command", choices=sorted(ROUTER), help="what to do (see above)")
    @argument("name", nargs="?", help="task name (for connect: the service URL)")
    @argument("values", nargs="*", help="notebook variables: X y for feed, X for infer")
    @argument("--input", help="input shape for a new task, e.g. 4 or 64,64,3")
    @argument("--output", help="output shape for a new task, e.g. 3")
    @argument("--program", help="an ease.ml program for a new task")
    @argument("--token", help="connect: the token (default $EASEML_TOKEN)")
    @argument("--keep", help="refine: ids to turn on, as 1,2,3 or a variable")
    @argument("--drop", help="refine: ids to turn off, as 1,2,3 or a variable")
    @argument("--timeout", type=float, help="status: wait up to this many seconds for the task to be idle")
    @argument("--all", action="store_true", help="status: the service view across all users")
    @line_cell_magic
    def easeml(self, line: str, cell: str | None = None) -> Result:
        """Declarative model selection on the shared ease.ml service.

        %easeml connect [URL] [--token T]   connect (no URL: the embedded service)
        %easeml task NAME --input 4 --output 3   create or open a task
        %easeml task NAME --program "input: [4] output: [3]"
        %%easeml task NAME                  the cell body is the ease.ml program
        %easeml feed NAME X y               add examples from notebook variables
        %easeml refine NAME --drop 3,5      turn examples off (or --keep ids on)
        %easeml refine NAME                 the refine panel: page, toggle, filter, sort, save
        %easeml status NAME [--timeout S]   one task: live leaderboard and curves (optionally wait)
        %easeml status                      the best model of each of your tasks
        %easeml status --all                the service: every user, who is served now and why
        %easeml infer NAME X                predict with the best model so far
        %easeml provenance NAME             the task's provenance DAG (click, trace back/forward)
        %easeml models NAME                 the models trained for the task, best first
        %easeml cancel NAME                 stop exploring the task

        Each returns a Result: shown as a table, with the raw answer in `.data`;
        status, refine (no ids) and provenance show a live widget (`.widget`).
        """
        args = parse_argstring(self.easeml, line)
        if cell is not None and args.command != "task":
            raise ValueError("%%easeml: only 'task NAME' takes a cell (the program)")
        user_ns = self.shell.user_ns if self.shell is not None else {}
        if args.command == "task":
            return ROUTER["task"](self.session, args, user_ns, cell)
        return ROUTER[args.command](self.session, args, user_ns)


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magics(EaseMLMagics)
