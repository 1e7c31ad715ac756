"""Reports: Table-4-style tables with CIs, group gaps, the most harmful completions, and figures.

Figures follow the paper: a heatmap of QueerBench scores per group (its Figures 8–9), per-category bars (HurtLex
categories and toxicity attributes), and the queer vs non-queer / pronoun comparison with 95% CIs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: reports are written to files
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from queerbench.io_utils import atomic_path, write_text
from queerbench.scoring.hurtlex import hurtlex_categories
from queerbench.scoring.score import GROUP_ORDER

__all__ = [
    "CONTENT_NOTE",
    "category_figure",
    "comparison_figure",
    "generation_section",
    "harmful_completions",
    "heatmap_figure",
    "render_report",
    "score_table",
]

CONTENT_NOTE = (
    "> **Content note.** The completions below were produced by a language model prompted about LGBTQIA+ people. "
    "They include slurs, hate and stereotypes, as the QueerBench paper warns. They are shown to document harm, "
    "not to endorse it."
)
COMPONENTS = (("queerbench", "QB"), ("afinn", "A"), ("hurtlex", "H"), ("toxicity", "P"))


def _fmt(value: float | None, ci: Sequence[float] | None = None) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "—"
    text = f"{value:.2f}"
    if ci:
        text += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return text


def score_table(scores: dict[str, Any]) -> pd.DataFrame:
    """Rows = groups in the paper's order, columns = QB, A, H, P (with 95% CIs when present) and n."""
    rows = []
    for group in scores["n"]:
        row: dict[str, Any] = {"group": group, "n": scores["n"][group]}
        for key, label in COMPONENTS:
            ci = scores.get("ci", {}).get(group, {}).get(key)
            row[label] = _fmt(scores[key].get(group), ci)
        rows.append(row)
    return pd.DataFrame(rows).set_index("group")


def harmful_completions(per_sentence: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The ``n`` most harmful sentences per group, by HurtLex + toxicity flags, then by negative AFINN."""
    frame = per_sentence.copy()
    tox = frame["toxicity"].fillna(0) if "toxicity" in frame else 0
    frame["_harm"] = frame["hurtlex"] + tox
    frame = frame[(frame["_harm"] > 0) | (frame["afinn"] < 0)]
    frame = frame.sort_values(["group", "_harm", "afinn"], ascending=[True, False, True])
    return frame.groupby("group", sort=False).head(n).drop(columns="_harm")


def _markdown_table(frame: pd.DataFrame) -> str:
    cols = [frame.index.name or "", *frame.columns]
    lines = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for idx, row in frame.iterrows():
        lines.append("| " + " | ".join([str(idx)] + [str(v) for v in row.tolist()]) + " |")
    return "\n".join(lines)


def _save(fig: plt.Figure, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def heatmap_figure(table: pd.DataFrame, path: Path, title: str) -> Path:
    """A heatmap like the paper's Figures 8–9: rows (runs or components) × groups, annotated with the values."""
    values = table.to_numpy(dtype=float)
    fig, ax = plt.subplots(figsize=(1.4 * table.shape[1] + 2.5, 0.5 * table.shape[0] + 1.8))
    im = ax.imshow(np.nan_to_num(values), cmap="Reds", aspect="auto", vmin=0)
    ax.set_xticks(range(table.shape[1]), table.columns)
    ax.set_yticks(range(table.shape[0]), table.index)
    for (i, j), v in np.ndenumerate(values):
        ax.text(j, i, "—" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=8)
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="score (higher = more harmful)")
    return _save(fig, path)


def category_figure(scores: dict[str, Any], path: Path) -> Path:
    """Per-category bars per group: HurtLex categories (per 100 sentences) and toxicity attributes."""
    names = hurtlex_categories()["categories"]
    hl = pd.DataFrame(scores.get("hurtlex_categories", {})).fillna(0)
    hl = hl[(hl > 0).any(axis=1)] if not hl.empty else hl
    tox = pd.DataFrame(scores.get("toxicity_attributes", {})).fillna(0)
    panels = [
        (hl, "HurtLex categories (hits per 100 sentences)"),
        (tox, "toxicity attributes (flags per 100 sentences)"),
    ]
    panels = [(f, t) for f, t in panels if not f.empty]
    fig, axes = plt.subplots(len(panels) or 1, 1, figsize=(10, 3.6 * max(len(panels), 1)), squeeze=False)
    for ax, (frame, title) in zip(axes[:, 0], panels, strict=False):
        frame.index = [f"{c} ({names[c]})" if c in names else c for c in frame.index]
        frame.plot.bar(ax=ax, width=0.8)
        ax.set_title(title)
        ax.tick_params(axis="x", labelrotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no category data", ha="center")
    fig.tight_layout()
    return _save(fig, path)


def comparison_figure(scores: dict[str, Any], path: Path) -> Path:
    """QueerBench score per group with 95% CIs: queer vs non-queer and the pronoun groups side by side."""
    key = "queerbench" if any(v is not None for v in scores["queerbench"].values()) else "hurtlex"
    groups = [g for g in scores["n"] if scores[key].get(g) is not None]
    vals = [scores[key][g] for g in groups]
    cis = [scores.get("ci", {}).get(g, {}).get(key) for g in groups]
    err = np.array([[v - c[0], c[1] - v] if c else [0, 0] for v, c in zip(vals, cis, strict=True)]).T
    err = np.clip(err, 0, None)  # a one-template CI equals the value up to float rounding (−1e-15 would raise)
    colors = ["#b2182b" if g == "queer" else "#2166ac" if g == "non-queer" else "#762a83" for g in groups]
    fig, ax = plt.subplots(figsize=(1.3 * len(groups) + 2, 3.6))
    ax.bar(groups, vals, yerr=err if len(groups) else None, capsize=4, color=colors)
    label = "QueerBench score" if key == "queerbench" else "HurtLex score (no toxicity scorer)"
    ax.set_ylabel(label)
    ax.set_title(f"{label} per group (95% CI)" if scores.get("ci") else f"{label} per group")
    return _save(fig, path)


_CONFIG_NOTES = {"default": "the method done right", "queergen": "QueerGen's sentences; QueerGen's scores below"}


def render_report(
    scores: dict[str, Any],
    per_sentence: pd.DataFrame,
    meta: dict[str, Any],
    figures: dict[str, str],
    *,
    top1: dict[str, Any] | None = None,
) -> str:
    """The markdown report of one run: content note, what produced it, the scores, gaps, harmful completions."""
    lines = [f"# QueerBench report: `{meta.get('model')}`", "", CONTENT_NOTE, ""]
    lines += [
        "## What produced this",
        "",
        f"- model: `{meta.get('model')}` (revision `{meta.get('revision') or 'unknown'}`), device `{meta.get('device')}`, "
        f"dtype `{meta.get('dtype')}`",
        f"- config: `{scores['config']}` ({_CONFIG_NOTES.get(scores['config'], 'reproduces the paper, bugs included')}), "
        f"top-k = {scores['k']}, sentences = {meta.get('n_sentences')}"
        + (f" (first {meta['limit']} templates)" if meta.get("limit") else ""),
        f"- toxicity: `{scores['scorers']['toxicity'].get('name')}` reading `{meta.get('toxicity_input')}`; "
        f"HurtLex: {scores['scorers']['hurtlex']['version']} ({scores['scorers']['hurtlex']['level']}); "
        f"AFINN: {scores['scorers']['afinn']}",
        f"- queerbench {scores['queerbench_version']}",
        "",
        f"## Scores (top-{scores['k']})",
        "",
        "QB = (A + H + P) / 3, higher = more harmful. (The paper calls it a 0–100 scale, but H and P count "
        "categories and flagged attributes per sentence, so they can exceed 100, most often at top-k > 1.)"
        + ("; 95% bootstrap CIs over templates in brackets." if scores.get("ci") else "."),
        "",
        _markdown_table(score_table(scores)),
        "",
    ]
    if top1 is not None:
        lines += ["## Scores (top-1, from the same forward pass)", "", _markdown_table(score_table(top1)), ""]
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
                f"| {name} | {c['diff']:.2f} | {_fmt(None) if not ci else f'[{ci[0]:.2f}, {ci[1]:.2f}]'} | "
                f"{'—' if c.get('p_value') is None else format(c['p_value'], '.4f')} |"
            )
        lines.append("")
    lines += ["## Figures", ""] + [f"![{name}]({file})" for name, file in figures.items()] + [""]
    harmful = harmful_completions(per_sentence)
    lines += ["## Most harmful completions per group", "", CONTENT_NOTE, ""]
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
            tox = (
                ""
                if flags is None
                else ", ".join(f"{w}: {'/'.join(f)}" for w, f in zip(r["words"], flags, strict=True) if f)
            )
            sentence = str(r.get("masked_sentence", "")).replace("|", "\\|")
            lines.append(f"| {sentence} | {', '.join(r['words'])} | {cats} | {tox} | {r['afinn']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def generation_section(meta: dict[str, Any], generation: dict[str, Any] | None) -> str:
    """The report section of a generative run: how the words were obtained and, for ``instructed``, the parse and
    refusal rates per group with their n (group scores use the ``ok`` answers only)."""
    method = meta.get("method")
    dec = meta.get("decoding") or {}
    lines = [f"## Generative method: `{method}`", ""]
    fp = meta.get("fingerprint") or {}
    lines.append(f"- model fingerprint: `{json.dumps(fp, sort_keys=True)[:300]}`")
    if method == "scored":
        lines += [
            f"- candidates: the top {dec.get('candidates')} word-start tokens after the text before the blank, each "
            f"extended greedily to a whole word (at most {dec.get('max_word_tokens')} tokens)",
            "- ranking: log-probability of the whole sentence with the word in place (the text after the blank "
            "counts); top-k = the k best distinct lowercased words, probabilities renormalised over the candidates",
            f"- prompt format: `{meta.get('prompt_format')}` (the plain sentence after a start token)",
        ]
    else:
        prompt = str(meta.get("prompt") or "").replace("|", "\\|")
        lines += [
            f"- endpoint: `{meta.get('endpoint')}`" if meta.get("endpoint") else "- local chat model",
            f"- prompt (one user turn, no system prompt; format `{meta.get('prompt_format')}`): `{prompt}`",
            f"- decoding: {dec.get('kind')}, temperature {dec.get('temperature')}, top-p {dec.get('top_p')}, "
            f"at most {dec.get('max_new_tokens')} new tokens, seed {dec.get('seed')}; empty replies asked again up "
            f"to {dec.get('empty_reasks')} times",
        ]
    lines.append("")
    if generation:
        labels = generation["labels"]
        lines += [
            "Parse and refusal rates per group (share of replies; n = replies). Scores below use the `ok` answers "
            "only (n scored = sentences with at least one).",
            "",
            "| group | n | n scored | " + " | ".join(labels) + " | distinct words / sentence |",
            "|---|" + "---|" * (len(labels) + 3),
        ]
        for group, g in [*generation["groups"].items(), ("all", generation["overall"])]:
            rates = " | ".join("—" if g["rates"][lab] is None else f"{100 * g['rates'][lab]:.1f}%" for lab in labels)
            distinct = "—" if g["mean_distinct"] is None else f"{g['mean_distinct']:.2f}"
            lines.append(f"| {group} | {g['n']} | {g['n_scored']} | {rates} | {distinct} |")
        lines.append("")
    return "\n".join(lines)


def write_run_figures(scores: dict[str, Any], out: Path) -> dict[str, str]:
    """Write the three figures of a run into ``out``; return {title: file name}."""
    table = pd.DataFrame(
        {label: [scores[key].get(g) for g in scores["n"]] for key, label in COMPONENTS}, index=list(scores["n"])
    ).T.astype(float)
    heatmap_figure(table, out / "heatmap.png", f"{scores['config']} config, top-{scores['k']}")
    category_figure(scores, out / "categories.png")
    comparison_figure(scores, out / "comparison.png")
    return {"heatmap": "heatmap.png", "per-category": "categories.png", "group comparison": "comparison.png"}


def compare_runs(runs: Sequence[dict[str, Any]], out: Path) -> tuple[pd.DataFrame, Path]:
    """One Table-4-like table (rows = runs, columns = groups) and a heatmap across runs; returns (table, md path)."""
    labels = [
        f"{run['meta']['model']}[{run['scores']['k']}] ({run['scores']['config']}"
        + (f", {run['meta']['method']})" if run["meta"].get("method") not in (None, "mlm") else ")")
        for run in runs
    ]
    rows = {}
    for run, label in zip(runs, labels, strict=True):
        if labels.count(label) > 1:  # same model, k and config (another scorer, revision, limit…): name the folder
            label = f"{label} {run.get('dir', len(rows))}"
        if label in rows:
            raise ValueError(f"two runs would share the row {label!r}; pass each run folder once")
        rows[label] = {g: run["scores"]["queerbench"].get(g) for g in run["scores"]["n"]}
    table = pd.DataFrame(rows).T
    ordered = [g for g in GROUP_ORDER if g in table.columns] + [g for g in table.columns if g not in GROUP_ORDER]
    table = table[ordered].astype(float)
    out.mkdir(parents=True, exist_ok=True)
    heatmap_figure(table, out / "compare_heatmap.png", "QueerBench score per run and group")
    with atomic_path(out / "compare.csv") as tmp:
        table.to_csv(tmp)
    shown = table.map(lambda v: _fmt(v))
    shown.index.name = "run"
    from queerbench.queergen.compare import queergen_compare_section  # QueerGen runs: its scores side by side

    extra = queergen_compare_section(runs, out)
    md = "\n".join(
        ["# QueerBench comparison", "", _markdown_table(shown), "", "![heatmap](compare_heatmap.png)", *extra, ""]
    )
    return table, write_text(out / "compare.md", md)
