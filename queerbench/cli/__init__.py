"""The ``queerbench`` command line: ``dataset build``, ``run``, ``score``, ``compare``, ``release``, ``lm-eval``,
and the commands the tasks bring (``scm …``, ``check-predictions``).

Each command is a thin layer over library functions; bad input ends in one clear message (exit status 2) rather
than a traceback — including file-system errors (``OSError``) that no command turned into a message itself.
The helpers every command shares live in :mod:`queerbench.base.arguments`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from queerbench import __version__
from queerbench.base.arguments import USER_ERRORS, OneLineParser, UserError, os_error_message

__all__ = ["UserError", "build_parser", "main", "os_error_message"]

# Subcommand modules: each has ``register(subparsers) -> None`` and sets ``func`` on its parser.
_COMMAND_MODULES = (
    "queerbench.cli.dataset",
    "queerbench.cli.score",
    "queerbench.cli.run",
    "queerbench.cli.release",
    "queerbench.cli.lm_eval",
    "queerbench.cli.results",
    "queerbench.cli.toxicity",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand registered."""
    parser = OneLineParser(  # a bad flag value is one line listing the valid ones, not a usage block
        prog="queerbench",
        description="Measure how language models harm and stereotype LGBTQIA+ people.",
    )
    parser.add_argument("--version", action="version", version=f"queerbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)  # light imports only: heavy ones happen inside each command
    from queerbench.cli.declared import add_declared_commands
    from queerbench.tasks import command_files

    for package, path in command_files():  # the tasks' own commands (scm …, check-predictions), declared as data
        add_declared_commands(sub, path, package)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    from queerbench.base.sources import ChecksumError, SourceUnavailableError
    from queerbench.scoring.perspective import PerspectiveError

    try:
        parser = build_parser()
    except ValueError as exc:  # a task module's commands file that does not hold (a plugin's, say): one line
        print(f"queerbench: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # printed as `queerbench: error: <message>` (exit status 2), with no traceback
    reported: tuple[type[BaseException], ...] = (*USER_ERRORS, ChecksumError, SourceUnavailableError, PerspectiveError)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:  # a run says what it kept (run_predict.RunInterrupted); others just stop
        print(f"\nqueerbench: {exc.args[0] if exc.args else 'interrupted'}", file=sys.stderr)
        return 130
    except reported as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"queerbench: error: {message}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file-system error no command turned into a message: still one line, no traceback
        print(f"queerbench: error: {os_error_message(exc)}", file=sys.stderr)
        return 2
