"""What every command of the command line shares, whoever registers it (the CLI or a task): the argument parser
whose bad flag value is one line, the user-error type and the errors printed as one line, the message for a
file-system error, and the endpoint flags with their one set of defaults.

A bad flag value is one line, not a usage block:

argparse prints the whole usage (13 lines for ``queerbench run``) before its message; with many flags the message,
the one line that matters, is lost under it. :class:`OneLineParser` prints only
``queerbench: error: <argparse's message>; see `<command> --help```, which for a value outside a flag's choices
already lists the valid ones (``argument --config: invalid choice: 'nonsense' (choose from 'default', 'paper',
'queergen')``), and exits with argparse's status 2. Subcommand parsers made by ``add_subparsers`` inherit the class.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from queerbench.base.http import DEFAULT_CONCURRENCY, DEFAULT_REQUEST_TIMEOUT, DEFAULT_REQUESTS_PER_MINUTE

__all__ = ["USER_ERRORS", "OneLineParser", "UserError", "endpoint_arguments", "os_error_message"]


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr (exit status 2); ``--help`` is unchanged."""

    def error(self, message: str) -> NoReturn:
        """Print ``queerbench: error: <message>; see `<prog> --help``` and exit with status 2."""
        self.exit(2, f"queerbench: error: {' '.join(message.split())}; see `{self.prog} --help`\n")


class UserError(Exception):
    """An error caused by the user's input; printed as one line without a traceback."""


USER_ERRORS: tuple[type[BaseException], ...] = (UserError, ValueError, FileExistsError, FileNotFoundError, KeyError)
"""The exception types :func:`queerbench.cli.main` prints as ``queerbench: error: <message>`` (exit status 2)."""


def endpoint_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, endpoint_help: str) -> None:
    """Add ``--endpoint``, ``--concurrency``, ``--requests-per-minute`` and ``--request-timeout`` with one set of
    defaults for every command that can talk to an OpenAI-compatible endpoint (``run``, ``scm run``)."""
    parser.add_argument("--endpoint", default=None, help=endpoint_help)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help="endpoint requests in flight, within the rate limit (default: %(default)s)",
    )
    parser.add_argument(
        "--requests-per-minute",
        type=float,
        default=DEFAULT_REQUESTS_PER_MINUTE,
        help="endpoint rate limit on top of --concurrency; lower it to your provider's quota (default: %(default)s)",
    )
    parser.add_argument(
        "--request-timeout",
        type=_seconds,
        default=DEFAULT_REQUEST_TIMEOUT,
        metavar="SECONDS",
        help="give up on one endpoint request after this long (it is retried); a server that answers none of the "
        "first 2 x --concurrency requests is taken for dead (default: %(default)s)",
    )


def _seconds(value: str) -> float:
    """A positive number of seconds (``--request-timeout``)."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a number of seconds, got {value!r}") from None
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {value!r}")
    return seconds


def os_error_message(exc: OSError) -> str:
    """One line for an ``OSError`` (permission denied, not a directory, disk full, ...): what failed on which path,
    and the fix."""
    what = exc.strerror or type(exc).__name__
    path = f" {exc.filename}" if exc.filename else ""
    if exc.filename2:
        path += f" -> {exc.filename2}"
    if isinstance(exc, PermissionError):
        fix = "choose a path you can write to (e.g. another --out) or fix its permissions"
    elif isinstance(exc, (NotADirectoryError, IsADirectoryError)):
        fix = "check that each folder in the path is a folder and each file a file"
    else:
        fix = "check the path, its permissions and the free disk space"
    return f"{what}:{path}; {fix}"
