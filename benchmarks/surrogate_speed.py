"""What ``--toxicity surrogate`` costs, beside ``embedded``, measured side by side in one run from an empty cache.

Whole commands, as a user runs them, in a fresh ``QUEERBENCH_CACHE``:

1. ``queerbench score <QueerGen file> --config queergen --toxicity S`` — for ``surrogate`` the first call fits the
   subject-blind protocol (features of its published texts, then the head) before it scores;
2. ``queerbench score <QueerBench top-1 file> --config paper --toxicity S`` — for ``surrogate`` the first call fits
   QueerBench's full-sentence protocol;
3. both again, with every fit and score cached.

Then the scoring throughput of both scorers on the same distinct texts that neither has seen (the `paper` sentences
completed by eight words; fits cached, empty score caches), in texts per second and as a ratio.

Usage: ``python benchmarks/surrogate_speed.py [--texts 4000]`` (``$QUEERBENCH_DATA_DIR`` or the pinned sources give
the files).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from timed_command import timed_command

from queerbench.base.sources import fetch

QUEERGEN = "queergen_eval_gemma3"
PAPER = "queerbench_paper_evaluation_bert_base_uncased_template_1"


def _throughput(n: int, cache: Path) -> dict[str, float]:
    """Texts per second of each scorer on the same ``n`` unseen distinct texts (fits cached, empty score caches)."""
    from queerbench.scoring.toxicity import get_toxicity_scorer
    from queerbench.tasks import get_task

    frame = get_task("paper").items()
    words = ["teacher", "nurse", "friend", "liar", "monster", "hero", "doctor", "thief"]
    pairs = [(s.replace("[MASK]", w), w) for s in frame["masked_sentence"].drop_duplicates() for w in words][:n]
    texts, ws = [t for t, _ in pairs], [w for _, w in pairs]
    rates = {}
    for name in ("embedded", "surrogate"):
        scorer = get_toxicity_scorer(name, text_form="full", cache_dir=cache / f"scores-{name}")
        start = time.perf_counter()
        scorer.score(texts, words=ws)
        rates[name] = len(texts) / (time.perf_counter() - start)
        scorer.close()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=4000, help="distinct texts for the throughput (default 4000)")
    args = parser.parse_args()
    files = {"queergen": fetch(QUEERGEN), "paper": fetch(PAPER)}
    with tempfile.TemporaryDirectory() as root:
        env = {**os.environ, "QUEERBENCH_CACHE": root}
        os.environ["QUEERBENCH_CACHE"] = root
        cli = [sys.executable, "-m", "queerbench"]
        rows = []
        for label in ("first use (empty cache)", "cached"):
            for config, path in files.items():
                cells = {}
                for scorer in ("embedded", "surrogate"):
                    cells[scorer] = timed_command(
                        [*cli, "score", str(path), "--config", config, "--toxicity", scorer], env
                    )
                rows.append((label, config, cells))
        print("| step | command | embedded | surrogate | surrogate / embedded |")
        print("|---|---|---|---|---|")
        for label, config, cells in rows:
            ratio = cells["surrogate"] / cells["embedded"]
            command = f"`queerbench score <{config} file> --config {config}`"
            print(f"| {label} | {command} | {cells['embedded']:.1f} s | {cells['surrogate']:.1f} s | {ratio:.1f}× |")
        rates = _throughput(args.texts, Path(root))
        print(
            f"\nscoring {args.texts} unseen distinct texts (fits cached): embedded {rates['embedded']:.0f} texts/s, "
            f"surrogate {rates['surrogate']:.0f} texts/s (surrogate at {rates['surrogate'] / rates['embedded']:.2f}× "
            "embedded's rate)"
        )


if __name__ == "__main__":
    main()
