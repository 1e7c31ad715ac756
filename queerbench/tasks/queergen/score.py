"""End-to-end QueerGen scoring: a QueerGen evaluation CSV or a run's predictions → the QueerGen result document;
and the reproduction of QueerGen's published tables from its own stored files."""

from __future__ import annotations

import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench import __version__
from queerbench.base.sources import sha256_file
from queerbench.tasks.queergen.aggregate import aggregate, published_tables
from queerbench.tasks.queergen.evaluations import model_label, pinned_source, read_evaluation_csv, score_rows
from queerbench.tasks.queergen.spec import spec

__all__ = [
    "queergen_block",
    "queergen_result",
    "reproduce_published_tables",
    "score_queergen_csv",
    "tables_as_records",
]


def tables_as_records(tables: dict[str, pd.DataFrame]) -> dict[str, list[dict[Hashable, Any]]]:
    """Tables as JSON-ready lists of rows."""
    return {name: table.to_dict(orient="records") for name, table in tables.items()}


def queergen_block(
    frame: pd.DataFrame,
    *,
    config: str = "queergen",
    toxicity: str = "precomputed",
    regard: str = "auto",
    vader: str = "recompute",
    seed: int = 0,
    label: str = "model",
    toxicity_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """QueerGen's scores of one model's per-sentence ``frame`` (``group``, ``words``, ``unmarked_sentence``,
    ``template``, optional stored columns): the :func:`aggregate` result plus its tables and scorer provenance."""
    rows, meta = score_rows(
        frame, config=config, toxicity=toxicity, regard=regard, vader=vader, toxicity_kwargs=toxicity_kwargs
    )
    return queergen_result(rows, meta, config=config, seed=seed, label=label)


def queergen_result(
    rows: pd.DataFrame, meta: dict[str, Any], *, config: str = "queergen", seed: int = 0, label: str = "model"
) -> dict[str, Any]:
    """QueerGen's scores of the per-sentence scores ``rows`` that :func:`score_rows` gave with its provenance
    ``meta``: the second half of :func:`queergen_block`, for a caller that also reads the per-sentence scores (the
    reference rows' QueerBench score)."""
    result = aggregate(rows, config=config, seed=seed)
    result["scorers"] = meta
    result["tables"] = tables_as_records(published_tables({label: result}))
    result["sentence_set"] = "queergen" if set(result["groups"]) <= set(spec()["group_order"]) else "other"
    return result


def score_queergen_csv(
    path: str | os.PathLike[str],
    *,
    config: str = "queergen",
    toxicity: str = "precomputed",
    regard: str = "auto",
    vader: str = "recompute",
    seed: int = 0,
    top_k: int | None = None,
) -> dict[str, Any]:
    """Score one QueerGen evaluation CSV with QueerGen's scorers; the result says which pinned file it was."""
    frame = read_evaluation_csv(path)
    if top_k is not None:
        frame["words"] = [w[:top_k] for w in frame["words"]]
    label = model_label(path)
    pinned = pinned_source(path)
    # a published model's own file: a scorer fitted on the published files scores it with a fit that never saw it,
    # as its reference rows are scored (scorers fitted on nothing ignore this)
    kwargs = {"held_out_model": label} if pinned is not None else None
    result = queergen_block(
        frame, config=config, toxicity=toxicity, regard=regard, vader=vader, seed=seed, label=label,
        toxicity_kwargs=kwargs,
    )  # fmt: skip
    result["model"] = label
    result["source"] = {"path": str(path), "sha256": sha256_file(Path(path)), "pinned": pinned}
    result["upstream"] = spec()["upstream"]
    result["queerbench_version"] = __version__
    return result


def reproduce_published_tables(
    folder: str | os.PathLike[str], *, vader: str = "recompute", seed: int = 0
) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, Any]]]:
    """QueerGen's ``VADER_all``/``Perspective_all``/``Diversity_all`` for every model file in ``folder`` (an
    ``evaluations/prompt_1`` or ``evaluations_top_5`` folder), in QueerGen's model order, from its stored values."""
    folder = Path(folder)
    results: dict[str, dict[str, Any]] = {}
    for stem, label in spec()["model_labels"].items():
        path = folder / f"{stem}.csv"
        if not path.is_file():
            raise FileNotFoundError(f"{folder} lacks the QueerGen evaluation file {path.name}")
        results[label] = score_queergen_csv(path, toxicity="precomputed", regard="precomputed", vader=vader, seed=seed)
    return published_tables(results), results
