"""The QueerBench paper's Table 4 as reference rows: one row per published model and k, recomputed from the paper's
own per-sentence evaluation files (pinned sources, fetched and cached, never redistributed).

Each row holds the ``paper`` task's QueerBench score per group — the published cell, bug for bug (the stored
Perspective counts, the paper's truncation and HurtLex whitelist) — and what the paper did not report: a 95% CI per
group from a bootstrap over templates and the queer − non-queer gap with its CI and a sign-flip permutation test,
both over templates (:mod:`queerbench.scoring.uncertainty`). The paper's files name each sentence, not its template; the ``paper`` task's items map
every sentence to its template (all 8,268 map). ``extra.published`` holds the Table 4 cells themselves and
``extra.matches_published`` whether every recomputed cell equals them at two decimals.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from pathlib import Path
from typing import Any

from queerbench import __version__
from queerbench.base.signature import described, format_signature, short_hash
from queerbench.base.sources import fetch, get_source, list_sources, sha256_file
from queerbench.reporting.rows import ResultRow
from queerbench.scoring.aggregate import compute

__all__ = ["EVALUATION_PREFIX", "paper_reference_row", "paper_reference_sources"]

EVALUATION_PREFIX = "queerbench_paper_evaluation_"
"""The pinned sources of the paper's per-sentence evaluation files (16: 8 models × k = 1, 5)."""
_TABLE4 = ("queerbench_paper_results_total_score_pronouns", "queerbench_paper_results_total_score_term")


def paper_reference_sources() -> list[str]:
    """The names of the paper's 16 evaluation files among the pinned sources."""
    return sorted(s.name for s in list_sources() if s.name.startswith(EVALUATION_PREFIX))


def _model_of(source: str, path: Path) -> str:
    """The model a paper evaluation file holds, as its reference rows name it (``vinai/`` for the BERTweets)."""
    relpath = get_source(source).relpath or path.name
    match = re.fullmatch(r"(.+)_template_(\d+)\.csv", Path(relpath).name)
    if match is None:
        raise ValueError(f"{source}: not a QueerBench evaluation file (<model>_template_<k>.csv)")
    return f"vinai/{match.group(1)}" if "/vinai/" in relpath else match.group(1)


def published_model(path: Path) -> str | None:
    """The published model whose evaluation file ``path`` is (the SHA-256 of one of the pinned files), as its
    reference rows name it; ``None`` for any other file."""
    digest = sha256_file(Path(path))
    for source in paper_reference_sources():
        if get_source(source).sha256 == digest:
            return _model_of(source, Path(path))
    return None


@cache
def _table4() -> Any:
    from queerbench.tasks.queerbench.paper_data import read_table4

    paths = [fetch(name) for name in _TABLE4]
    return read_table4(paths[0].parent)


def paper_reference_row(task: Any, source: str, *, n_resamples: int, seed: int, scorer: str | None = None) -> ResultRow:
    """The reference row of one evaluation file (``source``: a pinned source name) under ``task`` (``paper``): with
    the stored Perspective counts (``scorer`` None), or re-scored by the offline toxicity scorer ``scorer`` (a
    ``--toxicity`` name) exactly as ``queerbench score FILE --config paper --toxicity SCORER`` scores it
    (:meth:`~queerbench.tasks.queerbench.task.QueerBenchTask.score_file`: each template with ``[MASK]`` filled by each
    token, the text Perspective scored), the scorer told which model it scores (``held_out_model``, the row's
    ``model``), so that a scorer fitted on the published files scores it with a fit that never saw its outputs."""
    from queerbench.tasks.queerbench.paper_data import TABLE4_MODELS, read_paper_csv, table4_column

    path = fetch(source)
    model = _model_of(source, path)
    k = int(re.fullmatch(r".+_template_(\d+)\.csv", Path(get_source(source).relpath or path.name).name).group(1))
    frame = read_paper_csv(path)
    items = task.items()
    template_of = dict(zip(items["masked_sentence"], items["template_id"], strict=True))
    missing = [s for s in frame["template"] if s not in template_of]
    if missing:
        raise ValueError(f"{source}: {len(missing)} sentences are not the paper task's (first: {missing[0]!r})")
    if scorer is None:
        options = task.scoring_options(toxicity="precomputed", n_bootstrap=n_resamples, n_permutations=n_resamples)
        options = dataclasses.replace(options, seed=seed, rules=dataclasses.replace(options.rules, uncertainty=True))
        result = compute(
            frame["tokens"].tolist(),
            frame["group"].tolist(),
            toxicity_counts=frame["perspective_counts"].tolist(),
            template_ids=[template_of[s] for s in frame["template"]],
            options=options,
        )
    else:
        options = task.scoring_options(
            toxicity=scorer,
            n_bootstrap=n_resamples,
            n_permutations=n_resamples,
            seed=seed,
            toxicity_kwargs={"held_out_model": model},
        )
        options = dataclasses.replace(options, rules=dataclasses.replace(options.rules, uncertainty=True))
        result = task.score_file(path, {"options": options, "config": task.name, "top_k": None})
    column = table4_column(Path(get_source(source).relpath or path))
    published = {g: float(v) for g, v in _table4().loc[column].items()}
    matches = all(f"{result['queerbench'][g]:.2f}" == f"{v:.2f}" for g, v in published.items())
    label = "perspective" if scorer is None else scorer
    first, second = task.headline_gap
    comparison = (result.get("comparisons") or {}).get(f"{first} - {second}") or {}
    digest = sha256_file(path)
    signature = format_signature(
        [
            ("task", task.name),
            ("method", "published"),
            ("model", model),
            ("k", k),
            (
                "tox",
                "perspective(stored)"
                if scorer is None
                else described(scorer, (result.get("scorers") or {}).get("toxicity")),
            ),
            ("hurtlex", "paper-whitelist"),
            ("ci", f"{n_resamples}/{n_resamples}/{seed}"),
            ("src", f"{source}@{short_hash(digest)}"),
            ("qb", __version__),
        ]
    )
    return ResultRow(
        task=task.name,
        benchmark=task.benchmark,
        model=model,
        method="mlm",
        k=k,
        toxicity=label,
        scores={g: float(v) for g, v in result["queerbench"].items()},
        ci={g: (result.get("ci") or {}).get(g, {}).get("queerbench") for g in result["queerbench"]},
        n={g: int(v) for g, v in result["n"].items()},
        gap={"groups": f"{first} - {second}", **comparison} if comparison else {},
        extra={
            "label": TABLE4_MODELS.get(model, model),
            "published": published,
            "matches_published": matches,
            "afinn": result["afinn"],
            "hurtlex": result["hurtlex"],
            "toxicity": result["toxicity"],
            **({} if scorer is None else {"toxicity_scorer": (result.get("scorers") or {}).get("toxicity")}),
        },
        signature=signature,
        source=f"{source} ({get_source(source).version}, sha256 {short_hash(digest)})",
        reference=True,
        caveats=[
            (
                "the paper's predictions and stored Perspective counts"
                if scorer is None
                else f"the paper's predictions re-scored with {scorer} (the full sentences Perspective scored)"
            )
            + "; the paper's scoring code, bugs included (truncation, HurtLex whitelist)"
        ],
    )
