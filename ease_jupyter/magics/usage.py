"""What ``%easeml``, ``%easeml --help`` and ``%easeml COMMAND --help`` print.

The commands' lines come from the magic's docstring (one place to keep
them), the options from its parser; ``OPTIONS`` says which options go with
which command. ``%easeml?`` still shows the whole docstring and every option.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import re
from typing import Sequence

HELP_WORDS = ("-h", "--help")

# The options (argparse dests) of each command; --debug goes with every one.
OPTIONS: dict[str, tuple[str, ...]] = {
    "connect": ("token",),
    "task": ("input", "output", "program", "like", "target"),
    "feed": ("mode",),
    "refine": ("keep", "drop"),
    "status": ("timeout", "all"),
    "infer": (),
    "provenance": (),
    "models": (),
    "model": ("grid", "model_name"),
    "cancel": (),
    "delete": ("yes",),
    "export": ("format",),
}
COMMON = ("debug",)

_COMMAND_LINE = re.compile(r"^%%?easeml (\w+)")


def wants_help(words: Sequence[str]) -> bool:
    """An empty line, or ``-h``/``--help`` anywhere on it."""
    return not words or any(word in HELP_WORDS for word in words)


def synopsis(description: str, command: str | None = None) -> list[str]:
    """The docstring's lines of ``command`` (each with the lines that go on
    with it), or of every command."""
    out: list[str] = []
    keep = False
    for line in inspect.cleandoc(description).splitlines():
        if not line.strip():
            keep = False
            continue
        match = _COMMAND_LINE.match(line)
        if match:
            keep = command is None or match.group(1) == command
        elif not line[0].isspace():
            keep = False
        if keep:
            out.append(line)
    return out


def help_text(parser: argparse.ArgumentParser, words: Sequence[str]) -> str:
    """The help for a line that asked for it: the named command's (its
    lines and options), else the overview of every command."""
    command = next((word for word in words if word in OPTIONS), None)
    if command is None:
        return "\n".join([
            "usage: %easeml COMMAND [NAME] [VALUES ...] [--OPTION ...]   (options may come anywhere on the line)",
            "",
            "commands:",
            *("  " + line for line in synopsis(parser.description or "")),
            "",
            "%easeml COMMAND --help: one command's options, e.g. %easeml status --help",
            "%easeml?: the whole help, with every option",
        ])
    formatter = argparse.HelpFormatter(prog=f"%easeml {command}", max_help_position=30)
    formatter.start_section("options (anywhere on the line)")
    formatter.add_arguments([_own(action, command) for action in parser._actions
                             if action.dest in OPTIONS[command] + COMMON])
    formatter.end_section()
    return "\n".join(["usage:", *("  " + line for line in synopsis(parser.description or "", command)), "",
                      formatter.format_help().rstrip(), "", "%easeml --help: every command"])


def _own(action: argparse.Action, command: str) -> argparse.Action:
    """``action`` with its help's "status: " prefix off (it names the command shown)."""
    shown = copy.copy(action)
    if shown.help:
        shown.help = re.sub(rf"^{command}( --\w+)?: ", "", shown.help)
    return shown
