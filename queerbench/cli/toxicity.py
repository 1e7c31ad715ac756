"""``queerbench toxicity agreement``: how well an offline toxicity scorer agrees with the Perspective values stored in
the papers' own evaluation files (docs/metric-and-toxicity.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``toxicity agreement`` to the CLI."""
    tox = sub.add_parser("toxicity", help="toxicity scorers against the Perspective values the papers stored")
    tsub = tox.add_subparsers(dest="toxicity_command", metavar="ACTION", required=True)
    agree = tsub.add_parser(
        "agreement",
        help="score the texts of QueerBench/QueerGen evaluation CSVs and compare with their stored Perspective values",
    )
    agree.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="per-sentence evaluation CSVs: QueerBench's data/evaluation/*_template_1.csv, QueerGen's "
        "evaluations/prompt_1/*.csv (each read by its own protocol)",
    )
    agree.add_argument(
        "--toxicity",
        default="embedded",
        help="the scorer: embedded (default), surrogate (fitted per protocol on these files: in-sample), "
        "hf:<model id or path> or perspective",
    )
    agree.add_argument("--out", required=True, help="folder for agreement.json and texts.parquet")
    agree.set_defaults(func=_agreement)


def _agreement(args: argparse.Namespace) -> int:
    from queerbench.base.files import atomic_path, write_json
    from queerbench.scoring.agreement import toxicity_agreement
    from queerbench.scoring.toxicity import get_toxicity_scorer

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; name a folder for agreement.json and texts.parquet")
    for name in args.files:
        if not Path(name).is_file():
            raise FileNotFoundError(f"evaluation file {name} does not exist")
    from queerbench.scoring.aggregate import TOXICITY_CHOICES, check_toxicity_scorer
    from queerbench.scoring.published_files import published_files

    # an unknown name is one line before any file is read; each scorer is built for the protocol of its files
    check_toxicity_scorer(args.toxicity, tuple(c for c in TOXICITY_CHOICES if c not in ("precomputed", "none")))
    scorers: dict[str, Any] = {}

    def scorer_for(protocol: str) -> Any:  # one per protocol: a fitted scorer has a fit per form of text
        if protocol not in scorers:
            form = published_files().protocols[protocol].text_forms[0]
            scorers[protocol] = get_toxicity_scorer(args.toxicity, text_form=form)
        return scorers[protocol]

    try:
        report, texts = toxicity_agreement(args.files, scorer_for, progress=True)
    finally:
        for scorer in scorers.values():
            scorer.close()
    with atomic_path(out / "texts.parquet") as tmp:
        texts.to_parquet(tmp, index=False)
    write_json(out / "agreement.json", report)
    pooled = report["pooled"]["attributes"]
    print(f"{args.toxicity} against Perspective on {report['pooled']['texts']:,} distinct texts (κ at > 0.5, AUC):")
    for attr, stats in pooled.items():
        if "kappa" not in stats:
            print(f"  {attr}: {stats.get('note')}")
            continue
        kappa = "n/a" if stats["kappa"] is None else f"{stats['kappa']:.2f}"
        auc = "n/a" if stats["auc"] is None else f"{stats['auc']:.2f}"
        print(f"  {attr}: κ {kappa}, AUC {auc}, {stats['positives']:,} flagged by Perspective")
    print(f"wrote {out / 'agreement.json'} and {out / 'texts.parquet'}")
    return 0
