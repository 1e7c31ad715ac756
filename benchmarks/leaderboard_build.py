"""How long ``queerbench leaderboard build`` takes: every reference row from the papers' published files.

The whole command as a user runs it (a fresh process: imports, reading the pinned files from the cache or
``QUEERBENCH_DATA_DIR``, scoring, 1,000 bootstrap and permutation resamples per row, writing
``reference_rows.json``), timed from outside, once with ``--workers 1`` and once with one process per core, in turn
(A B A B ...) so that a drift in the machine's speed hits both. Printed: each run's wall seconds, the median of each,
the ratio one process ÷ all cores, and whether the median build with all cores is under a minute. Every build is
also checked to agree with the first (the rows are the same whatever the number of processes).

With ``--cold``, instead: one build from an empty queerbench cache (``QUEERBENCH_CACHE`` pointing at a new folder:
every offline scorer's rows, the surrogate's fits included), one with the fits cached but no score cached (the
toxicity scorers' caches removed), and one with everything cached, in one run; their rows are checked to agree (to
1e-8: the embedded classifier's probabilities can differ in the tenth decimal with the batches it is given).

Run: ``python benchmarks/leaderboard_build.py [--runs 3] [--resamples 1000] [--cold]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from timed_command import timed_command


def build(out: Path, workers: int, resamples: int, cache: Path | None = None) -> float:
    """Wall seconds of one ``queerbench leaderboard build`` writing ``out`` (with ``QUEERBENCH_CACHE=cache`` when
    given); exits on failure with its output."""
    command = [sys.executable, "-m", "queerbench", "leaderboard", "build", "--out", str(out)]
    command += ["--workers", str(workers), "--resamples", str(resamples)]
    return timed_command(command, {**os.environ, **({"QUEERBENCH_CACHE": str(cache)} if cache else {})})


def rows_of(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def _same(a: object, b: object) -> bool:
    """``a`` and ``b`` equal, their floats to 1e-8."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-8)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def cold(resamples: int) -> None:
    """The build from an empty cache, with the fits cached, and with everything cached (see the module doc)."""
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        times = {"empty cache (fits included)": build(Path(tmp) / "cold.json", cores, resamples, cache)}
        shutil.rmtree(cache / "toxicity")  # the scorers' caches: every text is scored again, by the cached fits
        times["fits cached, no score cached"] = build(Path(tmp) / "fits.json", cores, resamples, cache)
        times["everything cached"] = build(Path(tmp) / "warm.json", cores, resamples, cache)
        rows = [rows_of(Path(tmp) / f"{name}.json") for name in ("cold", "fits", "warm")]
        if not (_same(rows[1], rows[0]) and _same(rows[2], rows[0])):
            sys.exit("the three builds gave other rows")
        scorers = json.loads((Path(tmp) / "cold.json").read_text())["scorers"]
        print(f"queerbench leaderboard build: {len(rows[0])} reference rows ({', '.join(scorers)}), {cores} processes")
        for name, seconds in times.items():
            print(f"  {name}: {seconds:.0f} s ({seconds / 60:.1f} min)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--cold", action="store_true", help="time the build from an empty cache (see the doc)")
    args = parser.parse_args()
    if args.cold:
        cold(args.resamples)
        return
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
