"""Scores of a run's predictions table, as ``queerbench run`` writes them and ``queerbench score`` recomputes them.

Each scoring policy of a run is written here once: which text the toxicity scorer reads (:func:`default_toxicity_input`
per config), which rows are scored (a generative run's sentences without a one-word answer are not), and the ``k`` a
run reports (an ``instructed`` run asked for ``k`` replies per sentence and scores only its one-word ones, so it is
top-``k``, not top-<most words any sentence got>: :func:`k_asked`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from queerbench.scoring.aggregate import GROUP_ORDER, ScoringOptions, compute

__all__ = [
    "TOXICITY_INPUTS",
    "answered",
    "default_toxicity_input",
    "k_asked",
    "queergen_of_predictions",
    "score_predictions",
    "toxicity_column",
    "with_every_group",
]

TOXICITY_INPUTS = ("neutral", "full", "frame")
"""What the toxicity scorer reads: the subject-blind neutral sentence, the full sentence, or 'The person is <word>.'"""


def default_toxicity_input(config: str) -> str:
    """``neutral`` in the default and queergen configs, ``full`` (the published method) in the paper config."""
    return "neutral" if config in ("default", "queergen") else "full"


def toxicity_column(toxicity_input: str) -> str | None:
    """The predictions column the toxicity scorer reads (None: the frame ``The person is <word>.``)."""
    return {"neutral": "neutral_sentence", "full": "masked_sentence", "frame": None}[toxicity_input]


def answered(predictions: pd.DataFrame) -> pd.DataFrame:
    """The rows with at least one predicted word (an instructed sentence none of whose replies gave one word has none)."""
    return predictions[[len(t) > 0 for t in predictions["tokens"]]].reset_index(drop=True)


def k_asked(predictions: pd.DataFrame, k: int | None, scored_k: int) -> int:
    """The ``k`` a run's scores report: ``k`` (or the scored ``scored_k``), except for an instructed run, whose k is the
    number of replies asked per sentence (capped by ``k``)."""
    if "reply" in predictions and "method" in predictions and set(predictions["method"]) == {"instructed"}:
        asked = max(len(r) for r in predictions["reply"])
        return min(k, asked) if k else asked
    return scored_k


def score_predictions(
    predictions: pd.DataFrame, options: ScoringOptions, toxicity_input: str, k: int | None = None
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Score a predictions table (a run's ``predictions.parquet``) with ``options``; top-``k`` (all when None).

    Returns the metric result and the per-sentence table (with the sentence columns the report shows).
    """
    rows = answered(predictions)  # scores use the `ok` answers only
    tokens = [list(t)[: k or len(t)] for t in rows["tokens"]]
    column = toxicity_column(toxicity_input)
    result = compute(
        tokens,
        rows["group"].tolist(),
        sentences=None if column is None else rows[column].tolist(),
        template_ids=rows["template_id"].tolist(),
        options=options,
        return_per_sentence=True,
    )
    per_sentence = result.pop("per_sentence")
    for col in ("id", "group", "category", "subject", "masked_sentence"):
        per_sentence[col] = rows[col].to_numpy()
    result["k"] = k_asked(rows, k, result["k"])
    return with_every_group(result, predictions["group"].tolist()), per_sentence


def with_every_group(result: dict[str, Any], groups: list[str]) -> dict[str, Any]:
    """``result`` with a row for every group of the run's sentences, in the paper's order: a group none of whose
    sentences was scored (an instructed run's group that never got a one-word answer) gets ``n`` 0 and no scores,
    so that tables and figures show it as "no data" instead of leaving it out."""
    keys = ("queerbench", "afinn", "hurtlex", "toxicity")
    present = list(dict.fromkeys([*groups, *result["n"]]))
    order = [g for g in GROUP_ORDER if g in present] + [g for g in present if g not in GROUP_ORDER]
    result["n"] = {g: result["n"].get(g, 0) for g in order}
    for key in keys:
        result[key] = {g: result[key].get(g) for g in order}
    return result


def queergen_of_predictions(
    predictions: pd.DataFrame, k_reported: int, k: int | None = None, **block: Any
) -> dict[str, Any]:
    """QueerGen's scores (:func:`queerbench.tasks.queergen.score.queergen_block` with ``block``'s settings) of a
    ``queergen`` run's answered rows, top-``k`` words (all when None), reporting the run's ``k_reported``."""
    from queerbench.tasks.queergen.score import queergen_block

    rows = answered(predictions)
    scores = queergen_block(rows.assign(words=[list(t)[: k or len(t)] for t in rows["tokens"]]), **block)
    scores["k"] = k_reported
    return scores
