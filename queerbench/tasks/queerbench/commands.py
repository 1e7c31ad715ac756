"""``queerbench check-predictions``: QueerBench's own command (a run's top-k against the paper's prediction CSVs),
declared in ``commands.json`` next to this module and built by the CLI (:mod:`queerbench.cli.declared`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["check"]


def check(run_dir: str, against: str) -> int:
    """Print the agreement of the run's top-k (``run_dir`` or its ``predictions.parquet``) with ``against``."""
    from queerbench.tasks.queerbench.prediction_check import check_predictions

    target = Path(run_dir)
    if target.is_dir():
        target = target / "predictions.parquet"
    report = check_predictions(target, against)
    print(json.dumps(report, indent=2, ensure_ascii=False, default=str))
    for warning in report["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0
