"""How well does the SCM reply parser agree with hand-labelled replies? Prints agreement per label, per rule.

A script, not a test: it prints its figures. Usage::

    QUEERBENCH_DATA_DIR=../shared python benchmarks/scm_parser_agreement.py [--file tests/data/scm_replies.jsonl]

The labelled set holds real-looking replies (refusals with digits, scale echoes, first-person stories, general
statements, partial compliance, selection prose, nested bullets, common words that are not terms) whose labels come
from the paper's definitions (Appendix B for refusals; each record cites its line). Both refusal rules are scored
side by side: ``appendix_b`` (the default) and the narrower ``patterns`` rule.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from queerbench.scm.parser_check import check_record, load_labelled, parser_agreement


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=str(Path(__file__).parents[1] / "tests" / "data" / "scm_replies.jsonl"))
    args = parser.parse_args()
    records = load_labelled(args.file)
    print(f"{len(records)} labelled replies from {args.file}")
    for rule in ("appendix_b", "patterns"):
        res = parser_agreement(records, rule)
        print(f"\nrule {rule}:")
        for key, v in res["agreement"].items():
            print(f"  {key:<18} {v['agree']:>3}/{v['n']:<3} = {v['rate']:.3f}")
        for rid in res["disagreements"]:
            rec = next(r for r in records if r["id"] == rid)
            print(f"  disagrees: {rid} ({rec['category']}): {check_record(rec, rule)}")


if __name__ == "__main__":
    main()
