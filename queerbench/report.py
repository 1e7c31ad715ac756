"""Report text: ``report.md`` of a run (Table-4-style tables with CIs, group gaps, the most harmful completions,
provenance) and ``compare.md`` across runs; the figures they embed come from :mod:`queerbench.figures`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from queerbench.figures import (
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
from queerbench.fingerprint import describe_fingerprint
from queerbench.io_utils import atomic_path, write_text
from queerbench.scoring.aggregate import GROUP_ORDER

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
    "render_unscored_report",
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


def render_unscored_report(meta: dict[str, Any], generation: dict[str, Any] | None) -> str:
    """``report.md`` of a generative run in which no sentence got a one-word answer: its parse and refusal rates are
    the result (``meta``: the run record's model, config, top_k, n_sentences, limit and generation settings)."""
    from queerbench import __version__

    limit = meta.get("limit")
    return "\n".join(
        [
            f"# QueerBench report: `{meta['model']}`",
            "",
            CONTENT_NOTE,
            "",
            f"- config: `{meta['config']}`, top-k = {meta['top_k']}, sentences = {meta['n_sentences']}"
            + (f" (first {limit} templates)" if limit else ""),
            f"- queerbench {__version__}",
            "",
            generation_section(meta, generation),
            "## Scores",
            "",
            "**No sentence could be scored**: no reply was parsed to one word (see the labels above and the raw "
            "replies in `predictions.parquet`). The parse and refusal rates are this run's result.",
            "",
        ]
    )


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
