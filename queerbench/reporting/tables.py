"""The tables of the reports (``report.md``, ``compare.md``, the Space): numbers with their CIs, and with the caveats
that belong next to them.

Every group score is shown with its n; a group with fewer than 30 scored sentences carries the small-sample warning
with the width of its 95% CI (:func:`queerbench.scoring.caveats.small_n_note`), and a group of the run with no
scored sentence is a row that says "no data" rather than a missing row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from queerbench.scoring.aggregate import GAP_BLOCK, SCORE_LABELS, UNTOXIC_BLOCK
from queerbench.scoring.caveats import small_n, small_n_note, small_n_threshold

__all__ = [
    "COMPONENTS",
    "NO_DATA",
    "fmt",
    "markdown_table",
    "n_note",
    "score_table",
    "small_n_groups",
    "small_n_paragraph",
]

COMPONENTS = tuple(SCORE_LABELS.items())
"""The score blocks of ``scores.json`` and their column labels."""
NO_DATA = "no data"


def fmt(value: float | None, ci: Sequence[float] | None = None) -> str:
    """A score to two decimals with its CI in brackets; ``—`` for a missing value."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "—"
    text = f"{value:.2f}"
    if ci:
        text += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return text


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of ``frame`` (its index as the first column)."""
    cols = [frame.index.name or "", *frame.columns]
    lines = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for idx, row in frame.iterrows():
        lines.append("| " + " | ".join([str(idx)] + [str(v) for v in row.tolist()]) + " |")
    return "\n".join(lines)


def _headline_ci(scores: dict[str, Any], group: str) -> list[float] | None:
    """The CI of the group's headline score: QB when it was scored, else H (no toxicity scorer)."""
    cis = scores.get("ci", {}).get(group, {})
    return cis.get(GAP_BLOCK) or cis.get(UNTOXIC_BLOCK)


def _note(scores: dict[str, Any], group: str) -> str:
    n = scores["n"][group]
    if not n:
        return f"{NO_DATA}: no scored sentence"
    note = small_n_note(n, _headline_ci(scores, group))
    return f"⚠ small n ({note})" if note else ""


def n_note(scores: dict[str, Any], group: str) -> str:
    """A group's n as the command line prints it: ``n=80``, ``n=12, small sample (n = 12 < 30: CI width 3.41)``,
    ``n=0: no data``."""
    n = scores["n"].get(group) or 0
    if not n:
        return f"n=0: {NO_DATA}"
    note = small_n_note(n, _headline_ci(scores, group))
    return f"n={n}, small sample ({note})" if note else f"n={n}"


def score_table(scores: dict[str, Any]) -> pd.DataFrame:
    """Rows = groups in the paper's order, columns = QB, A, H, P (with 95% CIs when present), n and a note: the
    small-sample warning (n < 30, with the CI width of QB, or of H without a toxicity scorer) or "no data"."""
    rows = []
    for group in scores["n"]:
        row: dict[str, Any] = {"group": group, "n": scores["n"][group]}
        for key, label in COMPONENTS:
            ci = scores.get("ci", {}).get(group, {}).get(key)
            row[label] = fmt(scores[key].get(group), ci) if scores["n"][group] else NO_DATA
        row["note"] = _note(scores, group)
        rows.append(row)
    return pd.DataFrame(rows).set_index("group")


def small_n_groups(scores: dict[str, Any]) -> list[str]:
    """The groups with fewer than 30 (but some) scored sentences."""
    return [g for g, n in scores["n"].items() if small_n(n)]


def small_n_paragraph(scores: dict[str, Any]) -> list[str]:
    """Markdown lines warning about the small groups of ``scores`` and the groups without data (none: ``[]``)."""
    small = small_n_groups(scores)
    empty = [g for g, n in scores["n"].items() if not n]
    lines = []
    if small:
        shown = "; ".join(f"{g}: {small_n_note(scores['n'][g], _headline_ci(scores, g))}" for g in small)
        lines.append(
            f"> **Small samples.** {len(small)} group(s) have fewer than {small_n_threshold()} scored sentences "
            f"({shown}): their scores are indicative only, and their 95% CIs say how far they may be off."
        )
    if empty:
        lines.append(f"> **No data.** {', '.join(empty)}: no sentence of the group was scored; its row says so.")
    return [*lines, ""] if lines else []
