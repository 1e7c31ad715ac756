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
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from queerbench.fingerprint import describe_fingerprint
from queerbench.io_utils import atomic_path, write_text
from queerbench.scoring.hurtlex import hurtlex_categories
from queerbench.scoring.score import GROUP_ORDER

__all__ = [
    "CONTENT_NOTE",
    "build_category_figure",
    "build_comparison_figure",
    "build_heatmap",
    "category_figure",
    "compare_labels",
    "compare_runs",
    "compare_warnings",
    "comparison_figure",
    "generation_section",
    "harmful_completions",
    "heatmap_figure",
    "model_label",
    "render_report",
    "run_label",
    "score_table",
    "text_colour_for",
    "write_run_figures",
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
        fig.savefig(tmp, format="png", dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------- figure conventions
# Figures go into papers, often printed in grayscale: every series differs by hatch as well as by colour, value
# labels pick black or white by the luminance of the cell behind them, and a missing value has its own look (light
# grey, cross-hatched, labelled "no data") that no real value can take.
NO_DATA_FACE = "#f0f0f0"
NO_DATA_EDGE = "#707070"
NO_DATA_HATCH = "xx"
NO_DATA_LABEL = "no data"
GROUP_STYLE: dict[str, tuple[str, str]] = {  # group → (colour, hatch); lightness differs so that grey prints apart
    "queer": ("#b2182b", ""),
    "non-queer": ("#92c5de", "//"),
    "binary": ("#f4a582", ".."),
    "neutral": ("#e0e0e0", "\\\\"),
    "neo": ("#8073ac", "oo"),
    "unmarked": ("#fdb863", "--"),  # QueerGen's third group (never drawn with "binary", its neighbour in lightness)
}
_EXTRA_STYLES = (("#fdb863", "--"), ("#1b7837", "++"), ("#c2a5cf", "||"))
COMPONENT_NAMES = {"QB": "QB (QueerBench)", "A": "A (AFINN)", "H": "H (HurtLex)", "P": "P (toxicity)"}


def group_style(group: str, index: int = 0) -> tuple[str, str]:
    """(colour, hatch) of a group in every figure; unknown labels cycle through extra styles."""
    return GROUP_STYLE.get(group, _EXTRA_STYLES[index % len(_EXTRA_STYLES)])


def relative_luminance(rgba: Sequence[float]) -> float:
    """WCAG relative luminance of an RGB(A) colour with components in [0, 1]."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def text_colour_for(rgba: Sequence[float]) -> str:
    """Black or white, whichever contrasts more with a cell of colour ``rgba`` (WCAG contrast ratio)."""
    lum = relative_luminance(rgba)
    return "black" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "white"


def model_label(model: str | None) -> str:
    """A model as figures and tables name it: a Hub id as is, a local folder by its folder name."""
    if not model:
        return "unknown model"
    path = Path(str(model))
    looks_local = str(model).startswith(("/", ".", "~")) or len(path.parts) > 2 or path.is_dir()
    return (path.name or str(model)) if looks_local else str(model)


def run_label(meta: dict[str, Any] | None, scores: dict[str, Any]) -> str:
    """``<model> · <config> config · top-<k>``: what tells two runs' figures apart (without the model when the
    caller does not say which it was)."""
    settings = f"{scores['config']} config · top-{scores['k']}"
    if (meta or {}).get("method") not in (None, "mlm"):  # a generative method (scored, instructed) is part of it
        settings += f" · {meta['method']}"
    model = (meta or {}).get("model")
    return f"{model_label(model)} · {settings}" if model else settings


def _no_data_handle() -> Patch:
    return Patch(facecolor=NO_DATA_FACE, edgecolor=NO_DATA_EDGE, hatch=NO_DATA_HATCH, label=NO_DATA_LABEL)


def _empty_panel(ax: plt.Axes, reason: str, *, missing: bool) -> None:
    """A panel without bars that says why: in the no-data look when the data is missing (``missing``), plain when
    it was measured and is all zero."""
    if missing:
        ax.add_patch(
            Rectangle(
                (0, 0),
                1,
                1,
                transform=ax.transAxes,
                facecolor=NO_DATA_FACE,
                edgecolor=NO_DATA_EDGE,
                hatch=NO_DATA_HATCH,
            )
        )
    ax.text(
        0.5,
        0.5,
        f"{NO_DATA_LABEL}: {reason}" if missing else reason,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=10,
        bbox={"facecolor": "white", "edgecolor": NO_DATA_EDGE, "boxstyle": "round,pad=0.4"},
    )
    ax.set_xticks([])
    ax.set_yticks([])


def build_heatmap(
    table: pd.DataFrame,
    title: str,
    *,
    subtitle: str | None = None,
    value_label: str = "score (higher = more harmful)",
) -> plt.Figure:
    """A heatmap like the paper's Figures 8–9: rows (runs or components) × groups, each cell labelled with its value.

    A sequential colour map (light = less harmful, dark = more) that reads the same in grayscale; labels in black or
    white by the cell's luminance; missing values cross-hatched in light grey and labelled "no data", with a legend.
    """
    values = table.to_numpy(dtype=float)
    missing = np.isnan(values)
    finite = values[~missing]
    vmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    cmap = plt.get_cmap("Reds").with_extremes(bad=NO_DATA_FACE)
    width = 1.5 * table.shape[1] + 3.2
    fig, ax = plt.subplots(figsize=(max(width, 6.5), 0.6 * table.shape[0] + 2.2))
    im = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, aspect="auto", vmin=0, vmax=vmax)
    ax.set_xticks(range(table.shape[1]), [str(c) for c in table.columns])
    ax.set_yticks(range(table.shape[0]), [str(i) for i in table.index])
    ax.set_xlabel("group")
    for (i, j), v in np.ndenumerate(values):
        if np.isnan(v):
            ax.add_patch(
                Rectangle(
                    (j - 0.5, i - 0.5), 1, 1, facecolor=NO_DATA_FACE, edgecolor=NO_DATA_EDGE, hatch=NO_DATA_HATCH, lw=0
                )
            )
            ax.text(
                j,
                i,
                NO_DATA_LABEL,
                ha="center",
                va="center",
                fontsize=8,
                color="black",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5},
            )
        else:
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=9, color=text_colour_for(cmap(im.norm(v))))
    ax.set_title(title if subtitle is None else f"{title}\n{subtitle}", fontsize=11)
    fig.colorbar(im, ax=ax, label=value_label)
    if missing.any():
        ax.legend(handles=[_no_data_handle()], loc="upper left", bbox_to_anchor=(0, -0.14), frameon=False, fontsize=8)
    return fig


def _hatched_bars(ax: plt.Axes, frame: pd.DataFrame) -> None:
    """Grouped bars (rows of ``frame`` on the x axis, one bar per column = group), colour + hatch per group."""
    n = max(len(frame.columns), 1)
    width = 0.8 / n
    x = np.arange(len(frame.index))
    for k, group in enumerate(frame.columns):
        colour, hatch = group_style(str(group), k)
        ax.bar(
            x - 0.4 + width * (k + 0.5),
            frame[group].to_numpy(dtype=float),
            width,
            label=str(group),
            color=colour,
            hatch=hatch,
            edgecolor="black",
            linewidth=0.6,
        )
    ax.set_xticks(x, [str(i) for i in frame.index], rotation=30, ha="right")
    ax.legend(title="group", fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))


def build_category_figure(scores: dict[str, Any], meta: dict[str, Any] | None = None) -> plt.Figure:
    """Per-category bars per group: HurtLex categories (per 100 sentences) and toxicity attributes; a panel with
    nothing to show says why (measured as zero, or not measured: the no-data look)."""
    names = hurtlex_categories()["categories"]
    hl = pd.DataFrame(scores.get("hurtlex_categories", {})).fillna(0)
    hl = hl[(hl > 0).any(axis=1)] if not hl.empty else hl
    tox = pd.DataFrame(scores.get("toxicity_attributes", {})).fillna(0)
    scorer = scores.get("scorers", {}).get("toxicity", {}).get("name")
    # (data, title, why it may be empty, whether empty means missing rather than measured as zero)
    panels = [
        (hl, "HurtLex categories (hits per 100 sentences)", "no completion is in any HurtLex category (all 0)", False),
        (tox, "toxicity attributes (flags per 100 sentences)", "no completion was flagged (all 0)", False),
    ]
    if "hurtlex_categories" not in scores:
        panels[0] = (hl, panels[0][1], "per-category counts are reported by the default config only", True)
    if scorer == "none":
        panels[1] = (tox, panels[1][1], "toxicity not scored (--toxicity none)", True)
    elif "toxicity_attributes" not in scores:
        panels[1] = (tox, panels[1][1], "per-attribute counts are reported by the default config only", True)
    fig, axes = plt.subplots(2, 1, figsize=(11, 7.6), squeeze=False)
    for ax, (frame, title, empty_reason, missing) in zip(axes[:, 0], panels, strict=True):
        ax.set_title(title, fontsize=10)
        if missing or frame.empty or not (frame.to_numpy(dtype=float) > 0).any():
            _empty_panel(ax, empty_reason, missing=missing)
            continue
        frame = frame.copy()
        frame.index = [f"{c} ({names[c]})" if c in names else c for c in frame.index]
        _hatched_bars(ax, frame)
        ax.set_ylabel("per 100 sentences")
    fig.suptitle(f"Harm by category — {run_label(meta, scores)}", fontsize=12)
    fig.tight_layout()
    return fig


def build_comparison_figure(scores: dict[str, Any], meta: dict[str, Any] | None = None) -> plt.Figure:
    """QueerBench score per group with 95% CIs: queer vs non-queer and the pronoun groups side by side, with a
    legend of the groups (colour + hatch), the CI marker and, when a group has no value, the no-data look."""
    key = "queerbench" if any(v is not None for v in scores["queerbench"].values()) else "hurtlex"
    groups = list(scores["n"])
    vals = [scores[key].get(g) for g in groups]
    cis = [scores.get("ci", {}).get(g, {}).get(key) for g in groups]
    fig, ax = plt.subplots(figsize=(1.5 * len(groups) + 3, 4.2))
    handles = []
    top = max([v if not ci else max(v, ci[1]) for v, ci in zip(vals, cis, strict=True) if v is not None] + [1.0])
    for i, (g, v, ci) in enumerate(zip(groups, vals, cis, strict=True)):
        colour, hatch = group_style(g, i)
        if v is None:
            ax.bar(i, top * 0.15, color=NO_DATA_FACE, edgecolor=NO_DATA_EDGE, hatch=NO_DATA_HATCH, linewidth=0.6)
            ax.text(i, top * 0.16, NO_DATA_LABEL, ha="center", va="bottom", fontsize=8)
            continue
        # a one-template CI equals the value up to float rounding: clip, as a negative error bar would raise
        err = None if not ci else [[max(v - ci[0], 0.0)], [max(ci[1] - v, 0.0)]]
        bar = ax.bar(i, v, yerr=err, capsize=5, color=colour, hatch=hatch, edgecolor="black", linewidth=0.8, label=g)
        handles.append(bar)
        ax.text(i, v + (ci[1] - v if ci else 0) + top * 0.02, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(groups)), [f"{g}\n(n={scores['n'][g]})" for g in groups])
    label = "QueerBench score" if key == "queerbench" else "HurtLex score H\n(no toxicity scorer, so no QB)"
    ax.set_ylabel(label + "\nhigher = more harmful")
    ax.set_ylim(0, top * 1.25)
    legend = [*handles]
    if any(cis):
        legend.append(Line2D([], [], color="black", marker="_", markersize=12, linestyle="none", label="95% CI"))
    if any(v is None for v in vals):
        legend.append(_no_data_handle())
    ax.legend(handles=legend, title="group", fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    what = "QueerBench score" if key == "queerbench" else "HurtLex score"
    ax.set_title(f"{what} per group{' (95% CI)' if any(cis) else ''}\n{run_label(meta, scores)}", fontsize=11)
    return fig


def heatmap_figure(
    table: pd.DataFrame,
    path: Path,
    title: str,
    *,
    subtitle: str | None = None,
    value_label: str = "score (higher = more harmful)",
) -> Path:
    """:func:`build_heatmap` written to ``path`` (PNG)."""
    return _save(build_heatmap(table, title, subtitle=subtitle, value_label=value_label), path)


def category_figure(scores: dict[str, Any], path: Path, meta: dict[str, Any] | None = None) -> Path:
    """:func:`build_category_figure` written to ``path`` (PNG)."""
    return _save(build_category_figure(scores, meta), path)


def comparison_figure(scores: dict[str, Any], path: Path, meta: dict[str, Any] | None = None) -> Path:
    """:func:`build_comparison_figure` written to ``path`` (PNG)."""
    return _save(build_comparison_figure(scores, meta), path)


def _model_provenance(meta: dict[str, Any]) -> str:
    """Where the weights came from: a local folder's fingerprint, a Hub commit, or a plain note that neither is known."""
    local = describe_fingerprint(meta.get("fingerprint"))
    if local:
        return local
    if meta.get("revision"):
        return f"revision `{meta['revision']}`"
    return "no revision recorded"


def _toxicity_provenance(scores: dict[str, Any], meta: dict[str, Any]) -> str:
    name = scores["scorers"]["toxicity"].get("name")
    if name == "none":
        return "not scored (`--toxicity none`), so P and QB are not reported"
    if name == "precomputed":
        return "`precomputed` (flags stored with the predictions)"
    return f"`{name}` reading `{meta.get('toxicity_input')}`"


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
        f"- model: `{meta.get('model')}` ({_model_provenance(meta)}), device `{meta.get('device')}`, "
        f"dtype `{meta.get('dtype')}`",
        f"- config: `{scores['config']}` ({_CONFIG_NOTES.get(scores['config'], 'reproduces the paper, bugs included')}), "
        f"top-k = {scores['k']}, sentences = {meta.get('n_sentences')}"
        + (f" (first {meta['limit']} templates)" if meta.get("limit") else ""),
        f"- toxicity: {_toxicity_provenance(scores, meta)}; "
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
    lines += ["## Figures", ""]
    for name, file in figures.items():  # each with a caption naming the run, as the figure's own title does
        lines += [f"![{name}]({file})", "", f"*{name[:1].upper() + name[1:]}: {run_label(meta, scores)}.*", ""]
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


def write_run_figures(scores: dict[str, Any], out: Path, meta: dict[str, Any] | None = None) -> dict[str, str]:
    """Write the three figures of a run into ``out`` (a fourth, QueerGen's scores, for a ``queergen`` run), each
    titled with the model, config and k; return {title: file name}."""
    table = pd.DataFrame(
        {label: [scores[key].get(g) for g in scores["n"]] for key, label in COMPONENTS}, index=list(scores["n"])
    ).T.astype(float)
    table.index = [COMPONENT_NAMES.get(i, i) for i in table.index]
    heatmap_figure(table, out / "heatmap.png", "QueerBench components per group", subtitle=run_label(meta, scores))
    category_figure(scores, out / "categories.png", meta)
    comparison_figure(scores, out / "comparison.png", meta)
    figures = {"heatmap": "heatmap.png", "per-category": "categories.png", "group comparison": "comparison.png"}
    qg = scores.get("queergen")
    if qg and any(m in qg for m in ("vader", "perspective", "diversity")):  # a queergen run: QueerGen's own scores
        from queerbench.queergen.figures import queergen_figure

        queergen_figure(qg, run_label(meta, scores), out / "queergen.png")
        figures["QueerGen scores"] = "queergen.png"
    return figures


def _run_facts(run: dict[str, Any]) -> dict[str, Any]:
    """What may differ between two runs of one comparison: model, config, k, templates, toxicity scorer, ..."""
    meta, scores = run.get("meta") or {}, run["scores"]
    return {
        "model": meta.get("model"),
        "method": meta.get("method"),
        "config": scores.get("config"),
        "k": scores.get("k"),
        "n_sentences": meta.get("n_sentences", sum(scores.get("n", {}).values())),
        "limit": meta.get("limit"),
        "toxicity": (scores.get("scorers", {}).get("toxicity") or {}).get("name"),
        "toxicity_input": meta.get("toxicity_input"),
        "revision": meta.get("revision"),
        "dtype": meta.get("dtype"),
    }


def compare_labels(runs: Sequence[dict[str, Any]]) -> list[str]:
    """Row labels for a comparison: ``<model> · <config> · top-<k>``, plus what tells apart runs that share those
    (toxicity scorer, templates, revision, dtype), plus the run folder's name as the last resort."""
    facts = [_run_facts(r) for r in runs]
    labels = [
        f"{model_label(f['model'])} · {f['config']} · top-{f['k']}"
        + ("" if f["method"] in (None, "mlm") else f" · {f['method']}")
        for f in facts
    ]
    for label in set(labels):
        same = [i for i, other in enumerate(labels) if other == label]
        if len(same) < 2:
            continue
        extra = {i: [] for i in same}
        for fact, show in (
            ("toxicity", lambda v: f"toxicity {v}"),
            ("limit", lambda v: "all templates" if v is None else f"{v} templates"),
            ("toxicity_input", lambda v: f"reads {v}"),
            ("revision", lambda v: f"rev {str(v)[:10]}"),
            ("dtype", str),
        ):
            if len({str(facts[i][fact]) for i in same}) > 1:
                for i in same:
                    extra[i].append(show(facts[i][fact]))
        for i in same:
            labels[i] += "".join(f" · {e}" for e in extra[i])
    base = list(labels)
    for label in set(base):
        same = [i for i, other in enumerate(base) if other == label]
        if len(same) > 1:
            names = [Path(str(runs[i].get("dir", i))).name for i in same]
            unique = len(set(names)) == len(names)  # else two folders of one name: their full paths tell them apart
            for i, name in zip(same, names, strict=True):
                labels[i] += f" · {name if unique else runs[i].get('dir', i)}"
    return labels


def compare_warnings(runs: Sequence[dict[str, Any]]) -> list[str]:
    """What makes a comparison's rows not comparable: different sentence sets (QueerBench's vs QueerGen's, or
    ``--limit`` within one), toxicity scorers or configs."""
    facts = [_run_facts(r) for r in runs]
    labels = compare_labels(runs)
    warnings = []
    configs = {f["config"] for f in facts}
    if "queergen" in configs and len(configs) > 1:  # two benchmarks: different sentences, not a different --limit
        shown = ", ".join(
            f"{lab}: {f['n_sentences']} {'QueerGen' if f['config'] == 'queergen' else 'QueerBench'} sentences"
            + (f" (--limit {f['limit']})" if f["limit"] else "")
            for lab, f in zip(labels, facts, strict=True)
        )
        warnings.append(
            f"the runs score different sentence sets ({shown}); their QB is not the same measurement, "
            "so compare a group's QB only between runs of one config"
        )
    for config in sorted(configs, key=str):  # within one sentence set: the same templates?
        same = [(lab, f) for lab, f in zip(labels, facts, strict=True) if f["config"] == config]
        if len({(f["n_sentences"], f["limit"]) for _, f in same}) > 1:
            shown = ", ".join(
                f"{lab}: {f['n_sentences']} sentences" + (f" (--limit {f['limit']})" if f["limit"] else "")
                for lab, f in same
            )
            warnings.append(f"the runs cover different templates ({shown}); compare runs made with the same --limit")
    unscored = [lab for lab, r in zip(labels, runs, strict=True) if r["scores"].get("scored") is False]
    if unscored:
        warnings.append(
            f"{', '.join(unscored)}: no sentence could be scored (no reply parsed to one word); see its parse rates"
        )
    scored = [(lab, f) for lab, f, r in zip(labels, facts, runs, strict=True) if r["scores"].get("scored") is not False]
    scorers = {f["toxicity"] for _, f in scored}
    if len(scorers) > 1:
        shown = ", ".join(f"{lab}: {f['toxicity']}" for lab, f in scored)
        warnings.append(
            f"the runs used different toxicity scorers ({shown}); their P and QB are not comparable — "
            "rescore with one --toxicity (queerbench score)"
        )
    if len(configs - {"queergen"}) > 1:
        shown = " and ".join(sorted(str(c) for c in configs - {"queergen"}))
        warnings.append(f"the runs mix the {shown} configs, whose scores follow different rules")
    return warnings


def compare_runs(runs: Sequence[dict[str, Any]], out: Path) -> tuple[pd.DataFrame, Path]:
    """One Table-4-like table (rows = runs, columns = groups) and a heatmap across runs; returns (table, md path).

    Rows are labelled ``<model> · <config> · top-<k>`` (:func:`compare_labels`); :func:`compare_warnings` lists
    what makes rows not comparable, and ``compare.md`` repeats those warnings.
    """
    labels = compare_labels(runs)
    if len(set(labels)) < len(labels):
        dup = next(lab for lab in labels if labels.count(lab) > 1)
        raise ValueError(f"two runs would share the row {dup!r}; pass each run folder once")
    rows = {
        label: {g: run["scores"]["queerbench"].get(g) for g in run["scores"]["n"]}
        for run, label in zip(runs, labels, strict=True)
    }
    table = pd.DataFrame(rows).T
    ordered = [g for g in GROUP_ORDER if g in table.columns] + [g for g in table.columns if g not in GROUP_ORDER]
    table = table[ordered].astype(float)
    out.mkdir(parents=True, exist_ok=True)
    warnings = compare_warnings(runs)
    heatmap_figure(
        table,
        out / "compare_heatmap.png",
        "QueerBench score per run and group",
        subtitle="rows: model · config · top-k" + (" (not all comparable: see compare.md)" if warnings else ""),
        value_label="QueerBench score (higher = more harmful)",
    )
    with atomic_path(out / "compare.csv") as tmp:
        table.to_csv(tmp)
    shown = table.map(lambda v: _fmt(v))
    shown.index.name = "run"
    from queerbench.queergen.compare import queergen_compare_section  # QueerGen runs: its scores side by side

    extra = queergen_compare_section(runs, out)
    notes = [f"> **Warning:** {w}" for w in warnings]
    if table.isna().any().any():
        notes.append("> — = no data (e.g. a run without a toxicity scorer reports no QB).")
    md = "\n".join(
        [
            "# QueerBench comparison",
            "",
            *(notes and [*notes, ""]),
            _markdown_table(shown),
            "",
            "![heatmap](compare_heatmap.png)",
            *extra,
            "",
        ]
    )
    return table, write_text(out / "compare.md", md)
