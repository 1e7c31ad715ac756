"""The command line's argument parser: a bad flag value is one line, not a usage block.

argparse prints the whole usage (13 lines for ``queerbench run``) before its message; with many flags the message,
the one line that matters, is lost under it. :class:`OneLineParser` prints only
``queerbench: error: <argparse's message>; see `<command> --help```, which for a value outside a flag's choices
already lists the valid ones (``argument --config: invalid choice: 'nonsense' (choose from 'default', 'paper',
'queergen')``), and exits with argparse's status 2. Subcommand parsers made by ``add_subparsers`` inherit the class.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["OneLineParser"]


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr (exit status 2); ``--help`` is unchanged."""

    def error(self, message: str) -> NoReturn:
        """Print ``queerbench: error: <message>; see `<prog> --help``` and exit with status 2."""
        self.exit(2, f"queerbench: error: {' '.join(message.split())}; see `{self.prog} --help`\n")
