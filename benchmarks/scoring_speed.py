"""How fast is scoring? AFINN + HurtLex on 8,268 sentences × top-5 (the paper's size), after the lexicons load.

A script, not a test: it prints its figures. Usage::

    QUEERBENCH_DATA_DIR=<data folder> python benchmarks/scoring_speed.py [--repeat 5]

It scores the paper's bert-base-uncased top-5 predictions (from the shared upstream copy) with the `paper` rules and
the `default` rules (toxicity from the stored counts, so only AFINN, HurtLex and aggregation are timed), and the
`default` rules with 1,000 bootstrap resamples and 1,000 permutations per comparison.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from queerbench.scoring.afinn import afinn_word_score
from queerbench.scoring.aggregate import ScoringOptions, compute
from queerbench.scoring.hurtlex import load_hurtlex
from queerbench.tasks.queerbench.paper_data import read_paper_csv


def _time(fn, repeat: int) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    data = Path(os.environ["QUEERBENCH_DATA_DIR"]) / "upstream/queerbench/data/evaluation"
    ev = read_paper_csv(data / "bert-base-uncased_template_5.csv")
    tokens, groups, counts = ev["tokens"].tolist(), ev["group"].tolist(), ev["perspective_counts"].tolist()
    templates = [i // 78 for i in range(len(ev))]

    start = time.perf_counter()
    load_hurtlex("conservative")
    afinn_word_score("warmup")
    print(f"lexicon load (HurtLex + AFINN, once per process): {time.perf_counter() - start:.2f} s")
    afinn_word_score.cache_clear()  # time cold word lookups too

    cases = {
        "paper rules": ScoringOptions("paper", "precomputed"),
        "default rules, no uncertainty": ScoringOptions("default", "precomputed", n_bootstrap=0, n_permutations=0),
        "default rules + 1000 bootstrap + 1000 permutations": ScoringOptions("default", "precomputed"),
    }
    print(f"sentences: {len(tokens):,} x top-{len(tokens[0])} = {sum(map(len, tokens)):,} words")
    for name, options in cases.items():
        median, best = _time(
            lambda o=options: compute(tokens, groups, toxicity_counts=counts, template_ids=templates, options=o),
            args.repeat,
        )
        print(f"{name:<52} median {median * 1000:7.1f} ms   best {best * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
