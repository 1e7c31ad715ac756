"""Time one whole command as a user runs it (a fresh process), for the benchmark scripts beside this file."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping


def timed_command(command: list[str], env: Mapping[str, str] | None = None) -> float:
    """Wall seconds of ``command`` (with ``env`` as its whole environment when given); a failure exits the
    benchmark with the command and the last line it printed to stderr."""
    start = time.perf_counter()
    done = subprocess.run(command, env=None if env is None else dict(env), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {last}")
    return seconds
