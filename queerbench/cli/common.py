"""What every ``queerbench`` command shares: the user-error type and the errors printed as one line, the message for
a file-system error, and the flags more than one command takes (``--config``, the endpoint flags).

:mod:`queerbench.cli` and each module of :mod:`queerbench.cli` import these from
here, so a command never imports the entry point that loads it.
"""

from __future__ import annotations

import argparse

from queerbench import CONFIGS
from queerbench.models.generation.settings import DEFAULT_CONCURRENCY, DEFAULT_REQUESTS_PER_MINUTE

__all__ = ["USER_ERRORS", "UserError", "config_argument", "endpoint_arguments", "os_error_message"]


class UserError(Exception):
    """An error caused by the user's input; printed as one line without a traceback."""


USER_ERRORS: tuple[type[BaseException], ...] = (UserError, ValueError, FileExistsError, FileNotFoundError, KeyError)
"""The exception types :func:`queerbench.cli.main` prints as ``queerbench: error: <message>`` (exit status 2)."""


def config_argument(parser: argparse.ArgumentParser, default: str = "default") -> None:
    """Add the shared ``--config {default,paper,queergen}`` flag."""
    parser.add_argument(
        "--config",
        choices=CONFIGS,
        default=default,
        help="'default': the method done right; 'paper': reproduces the published tables; 'queergen': QueerGen's "
        "sentences and scorers (default: %(default)s)",
    )


def endpoint_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, endpoint_help: str) -> None:
    """Add ``--endpoint``, ``--concurrency`` and ``--requests-per-minute`` with one set of defaults for every command
    that can talk to an OpenAI-compatible endpoint (``run``, ``scm run``)."""
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
