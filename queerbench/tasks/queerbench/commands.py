"""``queerbench check-predictions``: QueerBench's own command (a run's top-k against the paper's prediction CSVs),
which its task module registers with the CLI (:func:`queerbench.tasks.register_commands`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``check-predictions`` to the CLI."""
    check = sub.add_parser("check-predictions", help="agreement of a run's top-k with the paper's prediction CSV")
    check.add_argument("run_dir", help="a run folder (or its predictions.parquet)")
    check.add_argument("--against", required=True, help="upstream data/prediction/<model>_template_<k>.csv")
    check.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    from queerbench.tasks.queerbench.prediction_check import check_predictions

    target = Path(args.run_dir)
    if target.is_dir():
        target = target / "predictions.parquet"
    report = check_predictions(target, args.against)
    print(json.dumps(report, indent=2, ensure_ascii=False, default=str))
    for warning in report["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0
