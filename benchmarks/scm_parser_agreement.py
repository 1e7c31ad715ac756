"""How well does the SCM reply parser agree with hand-labelled replies, and how does it change refusal tables?

A script, not a test: it prints its figures. Three modes::

    # agreement with tests/data/scm_replies.jsonl, both refusal rules (same figures as `queerbench scm parser-check`)
    QUEERBENCH_DATA_DIR=... python benchmarks/scm_parser_agreement.py

    # re-parse the stored replies of a `queerbench scm run` folder with the parser importable from PYTHONPATH
    # (no model calls) and keep every label and the group x prompt refusal tables (paper Figures 6-9)
    PYTHONPATH=<checkout> python benchmarks/scm_parser_agreement.py --run RUN_DIR --json labels.json

    # two such files side by side: refusal tables before / after and every reply whose label changed
    python benchmarks/scm_parser_agreement.py --compare before.json after.json

The ``--run`` mode uses only ``queerbench.tasks.scm.analysis.parse_frame``, which every version of the parser has, so the
same script reads a run with an older checkout on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

SPLITS = {"survey": ("rating", "selection", "elicitation"), "story": ("generation",)}


def agreement(path: str) -> None:
    from queerbench.tasks.scm.parser_check import format_agreement, load_labelled, parser_agreement

    records = load_labelled(path)
    print(f"{len(records)} labelled replies from {path}")
    for rule in ("appendix_b", "patterns"):
        print(format_agreement(parser_agreement(records, rule), "agreement"))
    held = [r for r in records if r.get("held_out")]
    if held:
        print(format_agreement(parser_agreement(held), f"held-out records only ({len(held)})"))


def _plain(value: Any) -> Any:
    """``None`` for pandas' missing values (NaN), a list for arrays, the value otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return list(value) if hasattr(value, "__len__") and not isinstance(value, str) else value


def reparse(run: str, out: str) -> None:
    import pandas as pd

    import queerbench
    from queerbench.tasks.scm.analysis import parse_frame

    frame = pd.read_parquet(Path(run) / "responses.parquet")
    frame = frame.drop(columns=[c for c in ("rating", "selected", "keywords", "parsed", "refusal") if c in frame])
    parsed = parse_frame(frame.drop(columns=[c for c in ("refusal_kind", "analysed") if c in frame]))
    labels = {}
    for rec in parsed.to_dict("records"):
        labels[rec["id"] + (f"#{rec['sample']}" if "sample" in rec else "")] = {
            "task": rec["task"],
            "prompt_type": rec["prompt_type"],
            "group": rec["group"],
            "refusal": None if _plain(rec["refusal"]) is None else bool(rec["refusal"]),
            "kind": rec["refusal_kind"],
            "rating": _plain(rec["rating"]),
            "selected": _plain(rec["selected"]),
            "keywords": _plain(rec["keywords"]) or [],
            "response": rec["response"],
        }
    Path(out).write_text(
        json.dumps({"parser": queerbench.__file__, "run": str(run), "labels": labels}, indent=1, default=str) + "\n",
        encoding="utf-8",
    )
    print(f"wrote {out}: {len(labels)} replies")


def _table(labels: dict[str, dict[str, Any]], split: str) -> dict[tuple[str, str], tuple[int, int]]:
    cells: dict[tuple[str, str], list[int]] = {}
    for v in labels.values():
        if v["task"] in SPLITS[split] and v["refusal"] is not None:
            cell = cells.setdefault((v["group"], v["prompt_type"]), [0, 0])
            cell[0] += v["refusal"]
            cell[1] += 1
    return {k: (a, n) for k, (a, n) in cells.items()}


def compare(before_path: str, after_path: str) -> None:
    before = json.loads(Path(before_path).read_text(encoding="utf-8"))["labels"]
    after = json.loads(Path(after_path).read_text(encoding="utf-8"))["labels"]
    groups = ["nonbinary", "women", "bisexual", "gay_men", "lesbians", "heterosexual", "men"]  # the paper's order
    for split in SPLITS:
        tb, ta = _table(before, split), _table(after, split)
        types = sorted({t for _, t in ta} | {t for _, t in tb})
        print(f"\n{split}: refusals before -> after (k/n), by group x prompt type, with the margins (Figures 6-9)\n")
        print("| group | " + " | ".join(types) + " | all |")
        print("|---" * (len(types) + 2) + "|")

        def cell(t: dict[tuple[str, str], tuple[int, int]], keys: list[tuple[str, str]]) -> str:
            k = sum(t.get(x, (0, 0))[0] for x in keys)
            n = sum(t.get(x, (0, 0))[1] for x in keys)
            return f"{k}/{n}"

        for g in [g for g in groups if any(k[0] == g for k in ta)]:
            row = [f"{cell(tb, [(g, t)])} → {cell(ta, [(g, t)])}" for t in types]
            every = [(g, t) for t in types]
            print(f"| {g} | " + " | ".join(row) + f" | {cell(tb, every)} → {cell(ta, every)} |")
        cols = [f"{cell(tb, [(g, t) for g in groups])} → {cell(ta, [(g, t) for g in groups])}" for t in types]
        every = [(g, t) for g in groups for t in types]
        print("| **all** | " + " | ".join(cols) + f" | {cell(tb, every)} → {cell(ta, every)} |")
    print("\nreplies whose label changed (id: before -> after):")
    for key in sorted(after):
        b, a = before.get(key), after[key]
        if b is None:
            continue
        fields = [f for f in ("refusal", "rating", "selected", "keywords") if b[f] != a[f]]
        if fields:
            text = " ".join(str(a["response"]).split())[:160]
            change = ", ".join(f"{f} {b[f]!r} -> {a[f]!r}" for f in fields)
            print(f"- {key} [{b['kind']} -> {a['kind']}] {change}: {text!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=str(Path(__file__).parents[1] / "tests" / "data" / "scm_replies.jsonl"))
    parser.add_argument("--run", default=None, help="a `queerbench scm run` output folder to re-parse")
    parser.add_argument("--json", default=None, help="with --run: where to write the labels")
    parser.add_argument("--compare", nargs=2, default=None, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
    elif args.run:
        if not args.json:
            parser.error("--run needs --json PATH")
        reparse(args.run, args.json)
    else:
        agreement(args.file)


if __name__ == "__main__":
    main()
