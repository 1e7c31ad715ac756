"""QueerGen's 14 published models as reference rows: one row per model and setting (k = 1 and top-5), from
QueerGen's own per-sentence evaluation files (pinned sources, fetched and cached, never redistributed: "academic
research only").

Each row holds QueerGen's own figures as published — VADER, Perspective and regard per marker group with QueerGen's
CIs, and diversity — recomputed from the stored values (:func:`~queerbench.tasks.queergen.score.score_queergen_csv`;
``extra.matches_published`` says whether the VADER and Perspective cells equal QueerGen's published tables at their
three decimals). Rows of the k = 1 files also hold the QueerBench score per marker group (unmarked, non-queer,
queer), computed under the ``queergen`` task's rules from the stored words and the stored Perspective probabilities
(an attribute counts when its probability reaches the task's threshold), with 95% CIs over templates and the
queer − non-queer gap's sign-flip permutation test over the same templates, which QueerGen did not report. The top-5 files store one Perspective value
per row for five words, so their rows have no QueerBench score.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench import __version__
from queerbench.base.signature import described, format_signature, short_hash
from queerbench.base.sources import fetch, get_source, list_sources, sha256_file
from queerbench.reporting.rows import ResultRow
from queerbench.scoring.aggregate import ATTRIBUTES, compute

__all__ = ["queergen_reference_row", "queergen_reference_sources"]

_PREFIX = "queergen_eval_"
_TABLES = {"VADER": "vader_all", "Perspective": "perspective_all"}


def queergen_reference_sources() -> list[str]:
    """The 28 pinned QueerGen evaluation files (14 models × k = 1 and top-5)."""
    return sorted(s.name for s in list_sources() if s.name.startswith(_PREFIX))


@cache
def _published(table: str, top5: bool) -> pd.DataFrame:
    return pd.read_csv(fetch(f"queergen_table_{'top5_' if top5 else ''}{table}"))


def _matches_published(result: dict[str, Any], label: str, top5: bool) -> bool:
    """Whether the model's VADER and Perspective cells equal QueerGen's published tables (3 decimals)."""
    for metric, table in _TABLES.items():
        ours = {(r["type"]): r[metric] for r in result["tables"][f"{metric}_all"]}
        theirs = _published(table, top5)
        theirs = theirs[theirs["Model"] == label]
        if len(theirs) != len(ours):
            return False
        if any(abs(ours.get(r["type"], float("nan")) - r[metric]) > 1e-9 for _, r in theirs.iterrows()):
            return False
    return True


def _queerbench_scores(
    task: Any, frame: pd.DataFrame, n_resamples: int, seed: int, scored: pd.DataFrame | None = None
) -> dict[str, Any]:
    """The QueerBench score per marker group of a k = 1 file: its stored words and the Perspective probabilities
    stored in it, or those of ``scored`` (:func:`~queerbench.tasks.queergen.evaluations.score_rows`' per-sentence
    scores by another scorer; an attribute it does not give is never flagged, as a run counts it)."""
    options = task.scoring_options(toxicity="precomputed", n_bootstrap=n_resamples, n_permutations=n_resamples)
    options = dataclasses.replace(options, seed=seed, rules=dataclasses.replace(options.rules, uncertainty=True))
    threshold = options.threshold
    at_least = options.rules.flag == ">="
    if scored is None:
        probs = frame[[f"perspective_{a}" for a in ATTRIBUTES]].to_numpy(float)
    else:
        columns = [f"perspective_{a}" for a in ATTRIBUTES]
        probs = scored.reindex(columns=columns).fillna(0.0).to_numpy(float)
    flagged = probs >= threshold if at_least else probs > threshold
    counts = [[int(f) * len(words) for f in row] for row, words in zip(flagged, frame["words"], strict=True)]
    return compute(
        [list(w) for w in frame["words"]],
        frame["group"].tolist(),
        toxicity_counts=counts,
        template_ids=frame["template_id"].tolist(),
        options=options,
    )


def _summary(qg: dict[str, Any]) -> dict[str, float | None]:
    """QueerGen's own figures per marker group, as leaderboard columns (VADER and Perspective means, the share of
    negative regard)."""
    out: dict[str, float | None] = {}
    for group in qg["groups"]:
        out[f"VADER {group}"] = (qg["vader"].get(group) or {}).get("mean")
        out[f"Perspective {group}"] = (qg["perspective"].get(group) or {}).get("mean")
        out[f"regard negative {group}"] = ((qg.get("regard") or {}).get(group, {}).get("negative") or {}).get("score")
    return out


def queergen_reference_row(
    task: Any, source: str, *, n_resamples: int, seed: int, scorer: str | None = None
) -> ResultRow:
    """The reference row of one QueerGen evaluation file (``source``: a pinned source name) under ``task``: with the
    stored Perspective values (``scorer`` None), or re-scored by the offline toxicity scorer ``scorer`` (a
    ``--toxicity`` name) as ``queerbench score FILE --config queergen --toxicity SCORER`` scores it (QueerGen's
    Perspective input, the unmarked sentence and the word: :func:`~queerbench.tasks.queergen.evaluations.score_rows`),
    the scorer told which model it scores (``held_out_model``, the row's ``model``), so that a scorer fitted on the
    published files scores it with a fit that never saw its outputs. The QueerBench score of a k = 1 file then flags
    that scorer's probabilities by the task's rule."""
    from queerbench.tasks.queergen.evaluations import read_evaluation_csv, score_rows
    from queerbench.tasks.queergen.score import queergen_result, score_queergen_csv
    from queerbench.tasks.queergen.spec import check_scoring_config, spec

    relpath = Path(get_source(source).relpath or "")
    stem, top5 = relpath.stem, relpath.parent.name == "evaluations_top_5"
    if stem not in spec()["model_labels"]:
        raise ValueError(f"{source}: not one of QueerGen's evaluation files")
    path = fetch(source)
    label = spec()["model_labels"][stem]
    scored = None
    if scorer is None:
        qg = score_queergen_csv(path, toxicity="precomputed", regard="precomputed", vader="recompute", seed=seed)
    else:  # the steps of score_queergen_csv, keeping the per-sentence scores for the QueerBench score
        config = check_scoring_config(task.name)  # the rules `score --config` applies (scorer_rules)
        frame = read_evaluation_csv(path)
        kwargs = {"held_out_model": label}
        scored, meta = score_rows(
            frame, config=config, toxicity=scorer, regard="auto", vader="recompute", toxicity_kwargs=kwargs
        )
        qg = queergen_result(scored, meta, config=config, seed=seed, label=label)
    k = int(qg["k"])
    scores: dict[str, float | None] = {}
    ci: dict[str, Any] = {}
    n = {g: int(v) for g, v in qg["n"].items()}
    gap: dict[str, Any] = {}
    if not top5:
        result = _queerbench_scores(task, read_evaluation_csv(path), n_resamples, seed, scored)
        scores = {g: float(v) for g, v in result["queerbench"].items()}
        ci = {g: (result.get("ci") or {}).get(g, {}).get("queerbench") for g in scores}
        n = {g: int(v) for g, v in result["n"].items()}
        first, second = task.headline_gap
        comparison = (result.get("comparisons") or {}).get(f"{first} - {second}")
        gap = {"groups": f"{first} - {second}", **comparison} if comparison else {}
    digest = sha256_file(path)
    signature = format_signature(
        [
            ("task", task.name),
            ("method", "published"),
            ("model", stem),
            ("k", k),
            ("tox", "perspective(stored)" if scorer is None else described(scorer, qg["scorers"].get("perspective"))),
            ("vader", "recomputed"),
            ("regard", "stored"),
            ("ci", f"{n_resamples}/{n_resamples}/{seed}" if not top5 else "queergen"),
            ("src", f"{source}@{short_hash(digest)}"),
            ("qb", __version__),
        ]
    )
    if scorer is None:
        caveats = ["QueerGen's predictions and stored Perspective and regard values"]
    else:
        caveats = [
            f"QueerGen's predictions re-scored with {scorer} (the unmarked sentence and the word, the text "
            "Perspective scored; its 'Perspective' columns are that scorer's probabilities) and stored regard values"
        ]
    if top5 and scorer is None:
        caveats.append("top-5: one stored Perspective value per row for five words, so no QueerBench score")
    elif top5:
        caveats.append("top-5: QueerGen's 300-sentence sample, so no QueerBench score (as the stored rows)")
    return ResultRow(
        task=task.name,
        benchmark=task.benchmark,
        model=label,
        method=spec()["model_methods"][stem],
        k=k,
        toxicity="perspective" if scorer is None else scorer,
        scores=scores,
        ci=ci,
        n=n,
        gap=gap,
        extra={
            "label": label,
            "file": stem,
            "queergen": {key: qg[key] for key in ("vader", "perspective", "regard", "diversity")},
            "summary": _summary(qg),
            "matches_published": _matches_published(qg, label, top5),
            **({} if scorer is None else {"toxicity_scorer": qg["scorers"].get("perspective")}),
        },
        signature=signature,
        source=f"{source} ({get_source(source).version}, sha256 {short_hash(digest)})",
        reference=True,
        caveats=caveats,
    )
