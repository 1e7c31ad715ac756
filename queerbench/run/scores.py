"""Scores of a run's predictions table, as ``queerbench run`` writes them and ``queerbench score`` recomputes them.

Each scoring policy of a run is written here once and asks the task and the method, never their names: which text
the toxicity scorer reads (the task's ``toxicity_input`` unless the run says otherwise: :func:`toxicity_column`),
which rows are scored (a sentence without a predicted word, e.g. an ``instructed`` sentence none of whose replies was
one word, is not: :func:`answered`), the ``k`` a run reports (the method's :meth:`~queerbench.methods.base.Method.k_reported`)
and the scores a task adds next to the QueerBench score (its :meth:`~queerbench.tasks.base.Task.extra_scores`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.methods.base import Method
from queerbench.methods.registry import get_method, registered, registered_names, unrecorded_method
from queerbench.scoring.aggregate import GROUP_ORDER, SCORE_BLOCKS, ScoringOptions, compute
from queerbench.tasks import Task

__all__ = [
    "PREDICTION_COLUMNS",
    "answered",
    "check_predictions_table",
    "method_of",
    "score_predictions",
    "task_scores",
    "toxicity_column",
    "with_every_group",
]

PREDICTION_COLUMNS: tuple[str, ...] = (
    "id",
    "tokens",
    "group",
    "category",
    "subject",
    "template_id",
    "masked_sentence",
    "neutral_sentence",
)
"""The columns of a run's ``predictions.parquet`` that scoring reads."""


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def check_predictions_table(predictions: pd.DataFrame, path: str | Path, fix: str) -> None:
    """Refuse, with one ``ValueError`` line naming ``path``, the row or column and the fix (``fix``: how to get a good
    file again), a predictions table that scoring would misread rather than reject:

    - a table of no rows (nothing to score);
    - a missing column of :data:`PREDICTION_COLUMNS`;
    - a ``tokens`` cell that is not a list of strings: text would be scored letter by letter, ``None`` fails deep in
      the scorers (a sentence with no answer has an empty list, as ``queerbench run`` writes it);
    - a missing or non-text ``group``: it would become a group named ``nan``;
    - a sentence (``masked_sentence``, ``neutral_sentence``) that is not text with a ``[MASK]``: the toxicity
      scorer fills it;
    - a ``method`` that is not a method's name;
    - a missing or repeated ``id``: each sentence of a run has its own id (the ``paper`` set's repeated sentences
      too), so a repeated id is a repeated row, which would be counted twice (n doubles, the CIs narrow).

    Rows are counted from 0, as pandas shows them."""
    if len(predictions) == 0:  # before the columns: a file of no rows (pandas drops its schema) has nothing to score
        raise ValueError(
            f"{path} has no rows: there are no predictions to score (a run's predictions.parquet has one row per "
            f"sentence); {fix}"
        )
    absent = [c for c in PREDICTION_COLUMNS if c not in predictions.columns]
    if absent:
        raise ValueError(f"{path} lacks the column(s) {absent}, which a run's predictions.parquet has; {fix}")
    for i, words in enumerate(predictions["tokens"]):
        if _missing(words):
            raise ValueError(
                f"{path} row {i}: column tokens is empty (None); it must hold the list of the sentence's predicted "
                f"words ([] for a sentence with no answer); {fix}"
            )
        if isinstance(words, (str, bytes)) or not hasattr(words, "__len__") or not hasattr(words, "__iter__"):
            raise ValueError(
                f"{path} row {i}: column tokens holds {type(words).__name__} {words!r}, not a list of words; each "
                f"row's tokens must be the list of its top-k predicted words, e.g. ['hero', 'nurse']; {fix}"
            )
        for j, word in enumerate(words):
            if not isinstance(word, str):
                raise ValueError(
                    f"{path} row {i}: tokens[{j}] is {word!r} ({type(word).__name__}), not a word; the tokens column "
                    f"holds the predicted words as text; {fix}"
                )
    for i, group in enumerate(predictions["group"]):
        if _missing(group) or not isinstance(group, str) or not group:
            shown = "empty" if _missing(group) or group == "" else f"{group!r} ({type(group).__name__})"
            raise ValueError(
                f"{path} row {i}: column group is {shown}; every sentence needs its group label as text (e.g. "
                f"queer, non-queer, neo); {fix}"
            )
    for column in ("masked_sentence", "neutral_sentence"):  # what the toxicity scorer reads: text with a [MASK]
        for i, sentence in enumerate(predictions[column]):
            if not isinstance(sentence, str) or "[MASK]" not in sentence:
                raise ValueError(
                    f"{path} row {i}: column {column} is {sentence!r}; it must be the sentence as text, with the "
                    f"[MASK] that each predicted word fills; {fix}"
                )
    if "method" in predictions.columns:  # the method that made the rows (tables older than methods have none)
        for name in dict.fromkeys(predictions["method"]):
            if not isinstance(name, str) or registered(name) is None:
                raise ValueError(
                    f"{path}: column method is {name!r}; expected one of {', '.join(registered_names())}; {fix}"
                )
    ids = predictions["id"]
    absent_ids = [i for i, value in enumerate(ids) if _missing(value)]
    if absent_ids:
        raise ValueError(f"{path} row {absent_ids[0]}: column id is empty; every sentence needs its id; {fix}")
    repeated = ids[ids.duplicated(keep=False)]
    if len(repeated):
        first = repeated.iloc[0]
        rows = [i for i, value in enumerate(ids) if value == first]
        extra = int(ids.duplicated().sum())
        raise ValueError(
            f"{path}: id {first!r} occurs in rows {rows} ({extra} repeated row(s) in all); each sentence must occur "
            "once, or it is scored twice (n doubles, the CIs narrow): drop the repeated rows (a file made by "
            "joining runs' predictions repeats them)"
        )


def toxicity_column(toxicity_input: str) -> str | None:
    """The predictions column the toxicity scorer reads (None: the frame ``The person is <word>.``)."""
    return {"neutral": "neutral_sentence", "full": "masked_sentence", "frame": None}[toxicity_input]


def answered(predictions: pd.DataFrame) -> pd.DataFrame:
    """The rows with at least one predicted word (an instructed sentence none of whose replies gave one word has none)."""
    return predictions[[len(t) > 0 for t in predictions["tokens"]]].reset_index(drop=True)


def method_of(predictions: pd.DataFrame) -> Method:
    """The method that made a predictions table (its ``method`` column; a table from before there were methods has
    none: :func:`~queerbench.methods.registry.unrecorded_method`, which a table of several methods falls back to
    too)."""
    methods = set(predictions["method"]) if "method" in predictions else set()
    return get_method(next(iter(methods))) if len(methods) == 1 else unrecorded_method()


def score_predictions(
    predictions: pd.DataFrame,
    options: ScoringOptions,
    toxicity_input: str,
    k: int | None = None,
    *,
    method: Method | None = None,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Score a predictions table (a run's ``predictions.parquet``) with ``options``; top-``k`` (all when None).
    ``method``: the method that made it, as the run resolved it (None: read from the table, :func:`method_of`).

    Returns the metric result and the per-sentence table (with the sentence columns the report shows).
    """
    if k is not None and (not isinstance(k, int) or k < 1):
        raise ValueError(f"--top-k must be a positive integer, got {k!r}")
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
    result["k"] = (method or method_of(rows)).k_reported(rows, k, result["k"])
    return with_every_group(result, predictions["group"].tolist()), per_sentence


def with_every_group(result: dict[str, Any], groups: list[str]) -> dict[str, Any]:
    """``result`` with a row for every group of the run's sentences, in the paper's order: a group none of whose
    sentences was scored (an instructed run's group that never got a one-word answer) gets ``n`` 0 and no scores,
    so that tables and figures show it as "no data" instead of leaving it out."""
    present = list(dict.fromkeys([*groups, *result["n"]]))
    order = [g for g in GROUP_ORDER if g in present] + [g for g in present if g not in GROUP_ORDER]
    result["n"] = {g: result["n"].get(g, 0) for g in order}
    for key in SCORE_BLOCKS:
        result[key] = {g: result[key].get(g) for g in order}
    return result


def task_scores(
    task: Task, predictions: pd.DataFrame, k_reported: int, k: int | None = None, **settings: Any
) -> dict[str, Any]:
    """The scores ``task`` reports next to the QueerBench score (its answered rows' top-``k`` words, all when None;
    ``settings``: the scorers' settings), as entries of ``scores.json``."""
    return task.extra_scores(answered(predictions), k_reported, k=k, **settings)
