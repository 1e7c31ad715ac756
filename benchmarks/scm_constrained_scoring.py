"""Does constrained selection scoring still pick the first-listed option? Prints the three methods side by side.

A script, not a test: it prints its figures. Usage::

    QUEERBENCH_DATA_DIR=<data folder> python benchmarks/scm_constrained_scoring.py [--model ID] [--shuffle]

On the 14 selection prompts (2 variants × 7 groups) of a local model (default: the embedded SmolLM2-135M-Instruct)
it scores the 22 terms with ``sum`` (raw summed log-probabilities), ``mean`` (length-normalised) and ``calibrated``
(minus the log-probability under the "N/A" prompt), and prints per method: how often the top term is the first
listed ("warm" in the paper's order), the most frequent top terms, and the mean probability mass on Warmth terms.
With ``--shuffle`` the list order is shuffled per prompt (seeded), which separates position from term.
"""

from __future__ import annotations

import argparse
from collections import Counter

from queerbench.models.backends import open_backend
from queerbench.models.registry import model_ref
from queerbench.models.spec import ModelSpec
from queerbench.tasks.scm.dataset import scm_splits, shuffled_selection_rows
from queerbench.tasks.scm.pipeline import SCORING_METHODS, constrained_scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--shuffle", action="store_true")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    rows = scm_splits()["survey"]
    rows = rows[rows["task"] == "selection"]
    if args.shuffle:
        rows = shuffled_selection_rows(rows, 1, seed=0)
    # the model as an SCM run opens it: the backend that answers its generate requests, asked for the options'
    # loglikelihood in the run's batch size
    backend = open_backend(model_ref(args.model), "generate", ModelSpec(batch_size=args.batch_size), announce=False)
    print(f"{backend.name}: {len(rows)} selection prompts, list {'shuffled' if args.shuffle else 'in Table 1 order'}")
    for method in SCORING_METHODS:
        s = constrained_scores(backend, rows, method)
        top = Counter(s["top_term"]).most_common(3)
        print(
            f"  {method:<10} top is first listed {int(s['top_is_first'].sum()):>2}/{len(s)}; "
            f"P(Warmth) mean {s['p_warmth'].mean():.3f} (min {s['p_warmth'].min():.3f}, max {s['p_warmth'].max():.3f}); "
            f"top terms {top}"
        )


if __name__ == "__main__":
    main()
