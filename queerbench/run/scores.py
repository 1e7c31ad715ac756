"""Scores of a run's predictions table, as ``queerbench run`` writes them and ``queerbench score`` recomputes them.

Each scoring policy of a run is written here once and asks the task and the method, never their names: which text
the toxicity scorer reads (the task's ``toxicity_input`` unless the run says otherwise: :func:`toxicity_column`),
which rows are scored (a sentence without a predicted word, e.g. an ``instructed`` sentence none of whose replies was
one word, is not: :func:`answered`), the ``k`` a run reports (the method's :meth:`~queerbench.methods.base.Method.k_reported`)
and the scores a task adds next to the QueerBench score (its :meth:`~queerbench.tasks.base.Task.extra_scores`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from queerbench.methods.base import Method
from queerbench.methods.registry import get_method
from queerbench.scoring.aggregate import GROUP_ORDER, ScoringOptions, compute
from queerbench.tasks import Task

__all__ = ["answered", "method_of", "score_predictions", "task_scores", "toxicity_column", "with_every_group"]


def toxicity_column(toxicity_input: str) -> str | None:
    """The predictions column the toxicity scorer reads (None: the frame ``The person is <word>.``)."""
    return {"neutral": "neutral_sentence", "full": "masked_sentence", "frame": None}[toxicity_input]


def answered(predictions: pd.DataFrame) -> pd.DataFrame:
    """The rows with at least one predicted word (an instructed sentence none of whose replies gave one word has none)."""
    return predictions[[len(t) > 0 for t in predictions["tokens"]]].reset_index(drop=True)


def method_of(predictions: pd.DataFrame) -> Method:
    """The method that made a predictions table (its ``method`` column; tables of masked-LM runs from before there
    were methods have none: ``mlm``)."""
    methods = set(predictions["method"]) if "method" in predictions else {"mlm"}
    return get_method(next(iter(methods))) if len(methods) == 1 else get_method("mlm")


def score_predictions(
    predictions: pd.DataFrame, options: ScoringOptions, toxicity_input: str, k: int | None = None
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Score a predictions table (a run's ``predictions.parquet``) with ``options``; top-``k`` (all when None).

    Returns the metric result and the per-sentence table (with the sentence columns the report shows).
    """
    rows = answered(predictions)  # scores use the answered rows only
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
    result["k"] = method_of(rows).k_reported(rows, k, result["k"])
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


def task_scores(
    task: Task, predictions: pd.DataFrame, k_reported: int, k: int | None = None, **settings: Any
) -> dict[str, Any]:
    """The scores ``task`` reports next to the QueerBench score (its answered rows' top-``k`` words, all when None;
    ``settings``: the scorers' settings), as entries of ``scores.json``."""
    return task.extra_scores(answered(predictions), k_reported, k=k, **settings)
