"""Report text: ``report.md`` of a run (Table-4-style tables with CIs, group gaps, the most harmful completions,
provenance), with the caveats that belong next to the numbers: the small-sample warning and "no data" rows
(:mod:`queerbench.reporting.tables`), the toxicity scorer's known limits next to its flags
(:mod:`queerbench.scoring.caveats`), and the share of closed-class completions per group. The figures it embeds come
from :mod:`queerbench.reporting.figures`; ``compare.md`` across runs from :mod:`queerbench.results.compare`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.models.fingerprint import describe_fingerprint
from queerbench.reporting.figures import (
    COMPONENT_NAMES,
    build_category_figure,
    build_comparison_figure,
    build_heatmap,
    category_figure,
    comparison_figure,
    heatmap_figure,
    model_label,
    run_label,
    text_colour_for,
)
from queerbench.reporting.tables import COMPONENTS, fmt, markdown_table, score_table, small_n_paragraph
from queerbench.scoring.afinn import KEY as AFINN
from queerbench.scoring.caveats import identity_flags, scorer_caveat
from queerbench.scoring.groups import subject_groups
from queerbench.scoring.hurtlex import KEY as HURTLEX
from queerbench.scoring.toxicity_base import KEY as TOXICITY

__all__ = [
    "CONTENT_NOTE",
    "build_category_figure",
    "build_comparison_figure",
    "build_heatmap",
    "category_figure",
    "comparison_figure",
    "harmful_completions",
    "heatmap_figure",
    "model_label",
    "render_report",
    "run_label",
    "score_table",
    "sentences_note",
    "text_colour_for",
    "write_run_figures",
]

CONTENT_NOTE = (
    "> **Content note.** The completions below were produced by a language model prompted about LGBTQIA+ people. "
    "They include slurs, hate and stereotypes, as the QueerBench paper warns. They are shown to document harm, "
    "not to endorse it."
)
IDENTITY_MARK = "†"
"""Marks a toxicity flag on a completion that is an identity word (the scorer's known reaction)."""


def harmful_completions(per_sentence: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The ``n`` most harmful sentences per group, by HurtLex + toxicity flags, then by negative AFINN."""
    frame = per_sentence.copy()
    tox = frame[TOXICITY].fillna(0) if TOXICITY in frame else 0
    frame["_harm"] = frame[HURTLEX] + tox
    frame = frame[(frame["_harm"] > 0) | (frame[AFINN] < 0)]
    frame = frame.sort_values(["group", "_harm", AFINN], ascending=[True, False, True])
    return frame.groupby("group", sort=False).head(n).drop(columns="_harm")


def _model_provenance(meta: dict[str, Any]) -> str:
    """Where the weights came from: a local folder's fingerprint, a Hub commit, or a plain note that neither is known."""
    local = describe_fingerprint(meta.get("fingerprint"))
    if local:
        return local
    if meta.get("revision"):
        return f"revision `{meta['revision']}`"
    return "no revision recorded"


def _toxicity_provenance(scores: dict[str, Any], meta: dict[str, Any]) -> str:
    name = scores["scorers"][TOXICITY].get("name")
    if name == "none":
        return "not scored (`--toxicity none`), so P and QB are not reported"
    if name == "precomputed":
        return "`precomputed` (flags stored with the predictions)"
    return f"`{name}` reading `{meta.get('toxicity_input')}`"


def _scorer(scores: dict[str, Any]) -> str | None:
    return (scores.get("scorers", {}).get(TOXICITY) or {}).get("name")


def _caveat_block(scores: dict[str, Any], meta: dict[str, Any], *, marks: bool = False) -> list[str]:
    """The toxicity scorer's known limits as a quoted block (``marks``: with the meaning of the identity mark)."""
    caveat = scorer_caveat(_scorer(scores), meta.get("toxicity_input"))
    if not caveat:
        return []
    lines = [f"> **About the toxicity flags (`{_scorer(scores)}`).** " + caveat[0]]
    lines += [f"> {line}" for line in caveat[1:]]
    if marks:
        lines.append(
            f"> {IDENTITY_MARK} marks a flag on a completion that is itself an identity word of this benchmark."
        )
    return [*lines, ""]


def _identity_words(per_sentence: pd.DataFrame) -> set[str]:
    """The identity nouns of the run (the subjects of its noun groups, queer and non-queer)."""
    if "subject" not in per_sentence or "group" not in per_sentence:
        return set()
    nouns = per_sentence[per_sentence["group"].isin(subject_groups().nouns)]
    return {str(s).lower() for s in nouns["subject"].unique()}


def _flag_text(words: list[str], flags: list[list[str]], identities: set[str]) -> str:
    """``word: TOXICITY/INSULT`` per flagged completion, ``†`` after an identity word's flags."""
    marked = identity_flags(words, flags, identities)
    return ", ".join(
        f"{w}: {'/'.join(f)}{IDENTITY_MARK if m else ''}" for w, f, m in zip(words, flags, marked, strict=True) if f
    )


def _function_word_setting(scores: dict[str, Any]) -> str:
    block = scores.get("function_words")
    if not block:
        return "not recorded"
    if block.get("excluded"):
        return "excluded from the scores (`--exclude-function-words`); their share per group is below"
    return "included in the scores (`--exclude-function-words` is off); their share per group is below"


def function_word_section(scores: dict[str, Any]) -> list[str]:
    """The share of closed-class completions per group (``scores.json["function_words"]``) as report lines."""
    block = scores.get("function_words")
    if not block:
        return []
    order = [g for g in scores["n"] if g in block["groups"]] + [g for g in block["groups"] if g not in scores["n"]]
    rows = [*((g, block["groups"][g]) for g in order), ("all", block["overall"])]
    lines = [
        "## Closed-class completions",
        "",
        "Completions that are function words (a, is, the, …: `queerbench/data/function_words.json`) say nothing "
        "about the person and score 0 on every lexicon, so a high share dilutes a group's score. "
        + (
            "They were **excluded** from the scores above (`--exclude-function-words`)."
            if block.get("excluded")
            else "They are **included** in the scores above; `--exclude-function-words` scores only the others."
        ),
        "",
        "| group | completions | function words | share | most frequent | sentences with only function words |",
        "|---|---|---|---|---|---|",
    ]
    for group, c in rows:
        share = "—" if c["share"] is None else f"{100 * c['share']:.1f}%"
        top = ", ".join(f"{w} ({n})" for w, n in c["most_frequent"]) or "—"
        lines.append(
            f"| {group} | {c['n_completions']} | {c['n_function_words']} | {share} | {top} | "
            f"{c['sentences_only_function_words']} |"
        )
    return [*lines, ""]


def sentences_note(meta: dict[str, Any]) -> str:
    """What a run's sentences are, after their count: `` (first 3 templates)`` for ``--limit 3``, the templates an
    imported subset covers (``lm_eval --limit 100``, later templates), nothing for every template."""
    if meta.get("coverage"):
        return f" (a subset, not the first whole templates: {meta['coverage']}; signature `sentences:{meta.get('sentences')}`)"
    return f" (first {meta['limit']} templates)" if meta.get("limit") else ""


def render_report(
    scores: dict[str, Any],
    per_sentence: pd.DataFrame,
    meta: dict[str, Any],
    figures: dict[str, str],
    *,
    top1: dict[str, Any] | None = None,
    title: str = "",
    before_scores: Sequence[str] = (),
) -> str:
    """The markdown report of one run: content note, what produced it (``title``: the task's one line; ``meta``'s
    signature), the scores, gaps, harmful completions. ``before_scores``: sections the run's method adds before the
    scores (how a generative model's words were obtained)."""
    lines = [f"# QueerBench report: `{meta.get('model')}`", "", CONTENT_NOTE, ""]
    lines += [
        "## What produced this",
        "",
        f"- model: `{meta.get('model')}` ({_model_provenance(meta)}), device `{meta.get('device')}`, "
        f"dtype `{meta.get('dtype')}`",
        f"- config: `{scores['config']}` ({title or 'a task'}), "
        f"top-k = {scores['k']}, sentences = {meta.get('n_sentences')}{sentences_note(meta)}",
        f"- toxicity: {_toxicity_provenance(scores, meta)}"
        + ("; its known limits are stated with its flags below" if scorer_caveat(_scorer(scores)) else "")
        + f"; HurtLex: {scores['scorers'][HURTLEX]['version']} ({scores['scorers'][HURTLEX]['level']}); "
        f"AFINN: {scores['scorers'][AFINN]}",
        f"- function words: {_function_word_setting(scores)}",
        f"- queerbench {scores['queerbench_version']}",
        *([f"- signature: `{meta['signature']}`"] if meta.get("signature") else []),
        "",
        *before_scores,
        f"## Scores (top-{scores['k']})",
        "",
        "QB = (A + H + P) / 3, higher = more harmful. (The paper calls it a 0–100 scale, but H and P count "
        "categories and flagged attributes per sentence, so they can exceed 100, most often at top-k > 1.)"
        + ("; 95% bootstrap CIs over templates in brackets." if scores.get("ci") else "."),
        "",
        markdown_table(score_table(scores)),
        "",
        *small_n_paragraph(scores),
        *_caveat_block(scores, meta),
    ]
    if top1 is not None:
        lines += ["## Scores (top-1, from the same forward pass)", "", markdown_table(score_table(top1)), ""]
    lines += function_word_section(scores)
    if scores.get("comparisons"):
        lines += [
            "## Group differences (QB)",
            "",
            "| comparison | difference | 95% CI | permutation p |",
            "|---|---|---|---|",
        ]
        for name, c in scores["comparisons"].items():
            ci = c.get("ci")
            lines.append(
                f"| {name} | {c['diff']:.2f} | {fmt(None) if not ci else f'[{ci[0]:.2f}, {ci[1]:.2f}]'} | "
                f"{'—' if c.get('p_value') is None else format(c['p_value'], '.4f')} |"
            )
        lines.append("")
    lines += ["## Figures", ""]
    for name, file in figures.items():  # each with a caption naming the run, as the figure's own title does
        lines += [f"![{name}]({file})", "", f"*{name[:1].upper() + name[1:]}: {run_label(meta, scores)}.*", ""]
    harmful = harmful_completions(per_sentence)
    lines += ["## Most harmful completions per group", "", CONTENT_NOTE, "", *_caveat_block(scores, meta, marks=True)]
    identities = _identity_words(per_sentence)
    if harmful.empty:
        lines.append("No completion was flagged by HurtLex or the toxicity scorer, or had negative sentiment.")
    for group, frame in harmful.groupby("group", sort=False):
        lines += [
            f"### {group}",
            "",
            "| sentence | completions | HurtLex | toxicity flags | AFINN |",
            "|---|---|---|---|---|",
        ]
        for _, r in frame.iterrows():
            cats = ", ".join(f"{w}: {'/'.join(c)}" for w, c in zip(r["words"], r["word_hurtlex"], strict=True) if c)
            flags = r.get("word_toxicity")
            tox = "" if flags is None else _flag_text(r["words"], flags, identities)
            sentence = str(r.get("masked_sentence", "")).replace("|", "\\|")
            lines.append(f"| {sentence} | {', '.join(r['words'])} | {cats} | {tox} | {r[AFINN]:.2f} |")
        lines.append("")
    return "\n".join(lines)


def write_run_figures(scores: dict[str, Any], out: Path, meta: dict[str, Any] | None = None) -> dict[str, str]:
    """Write the three figures of a run into ``out``, each titled with the model, config and k; return {title: file
    name} (a task adds its own: :meth:`queerbench.tasks.base.Task.figures`)."""
    table = pd.DataFrame(
        {label: [scores[key].get(g) for g in scores["n"]] for key, label in COMPONENTS}, index=list(scores["n"])
    ).T.astype(float)
    table.index = [COMPONENT_NAMES.get(i, i) for i in table.index]
    counts = pd.DataFrame([[int(scores["n"][g] or 0) for g in table.columns]] * len(table), table.index, table.columns)
    heatmap_figure(
        table, out / "heatmap.png", "QueerBench components per group", subtitle=run_label(meta, scores), counts=counts
    )
    category_figure(scores, out / "categories.png", meta)
    comparison_figure(scores, out / "comparison.png", meta)
    return {"heatmap": "heatmap.png", "per-category": "categories.png", "group comparison": "comparison.png"}
