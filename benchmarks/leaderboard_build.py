"""How long ``queerbench leaderboard build`` takes: every reference row from the papers' published files.

The whole command as a user runs it (a fresh process: imports, reading the pinned files from the cache or
``QUEERBENCH_DATA_DIR``, scoring, 1,000 bootstrap and permutation resamples per row, writing
``reference_rows.json``), timed from outside, once with ``--workers 1`` and once with one process per core, in turn
(A B A B ...) so that a drift in the machine's speed hits both. Printed: each run's wall seconds, the median of each,
the ratio one process ÷ all cores, and whether the median build with all cores is under a minute. Every build is
also checked to agree with the first (the rows are the same whatever the number of processes).

Run: ``python benchmarks/leaderboard_build.py [--runs 3] [--resamples 1000]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build(out: Path, workers: int, resamples: int) -> float:
    """Wall seconds of one ``queerbench leaderboard build`` writing ``out``; exits on failure with its output."""
    command = [sys.executable, "-m", "queerbench", "leaderboard", "build", "--out", str(out)]
    command += ["--workers", str(workers), "--resamples", str(resamples)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return seconds


def rows_of(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        first = Path(tmp) / "first.json"
        build(first, cores, args.resamples)  # warm-up: fills the cache of pinned files, not timed
        expected = rows_of(first)
        times: dict[int, list[float]] = {1: [], cores: []}
        for run in range(args.runs):
            for workers in (1, cores):
                out = Path(tmp) / f"rows-{workers}-{run}.json"
                times[workers].append(build(out, workers, args.resamples))
                if rows_of(out) != expected:
                    sys.exit(f"--workers {workers} built other rows than the first build")
        print(f"queerbench leaderboard build: {len(expected)} reference rows, {args.resamples} resamples each")
        for workers, seconds in times.items():
            shown = ", ".join(f"{s:.1f}" for s in seconds)
            print(f"  --workers {workers}: median {statistics.median(seconds):.1f} s (runs: {shown})")
        one, all_cores = statistics.median(times[1]), statistics.median(times[cores])
        print(f"  1 process / {cores} processes: {one / all_cores:.2f}x")
        verdict = "under" if all_cores < 60 else "OVER"
        print(f"  with {cores} processes the build takes {all_cores:.1f} s: {verdict} a minute")


if __name__ == "__main__":
    main()
