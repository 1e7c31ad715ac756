"""Write ``report.md`` and the PNG figures of an SCM run (Figures 2–9 of the paper).

Presentation rules: a missing value is never drawn as 0 (no bar, an "n/a" mark); a figure with no data at all is
still written, with a distinct "no data" note, so a reader sees what is missing; rates carry their n; confidence
intervals are clipped to the 1–5 scale; groups are in the paper's figure order (ascending human Competence);
titles name the model and the decoding settings; markers and hatches keep the figures readable in grayscale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from queerbench.base.files import atomic_path, write_text
from queerbench.tasks.scm.analysis import display_order
from queerbench.tasks.scm.data import AXES, load_groups

__all__ = ["MARKERS", "group_label", "no_data_figure", "settings_line", "write_figures", "write_report"]

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
"""Marker per series (grayscale-safe)."""
_GRAYS = ("0.35", "0.8", "0.55", "0.95")
_HATCHES = ("", "//", "..", "xx")


def group_label(gid: str) -> str:
    """The display label of a group id (``gay_men`` → ``Gay men``)."""
    return {g.id: g.label for g in load_groups()}.get(gid, gid)


def _fmt(x: Any, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _ci(v: dict[str, Any]) -> str:
    """``2.10–3.40``, or ``–`` when there is no interval (fewer than two answers)."""
    return "–" if v.get("lo") is None or v.get("hi") is None else f"{_fmt(v['lo'])}–{_fmt(v['hi'])}"


def _rate(c: dict[str, Any] | None) -> str:
    """``12.5% (3/24)`` or ``– (0/0)``."""
    if not c or not c.get("n"):
        return "– (n = 0)"
    return f"{100 * c['rate']:.1f}% ({c['k']}/{c['n']})"


def settings_line(meta: dict[str, Any]) -> str:
    """``model · T 0.6, top-p 0.9 · survey ×10, stories ×10`` for figure titles."""
    s = meta.get("settings", {})
    sv, st = s.get("survey", {}), s.get("story", {})
    top_p = sv.get("top_p")
    return (
        f"{meta.get('model', '?')} · T {sv.get('temperature')}, top-p {'unset' if top_p is None else top_p} · "
        f"survey ×{sv.get('samples')}, stories ×{st.get('samples')}"
        + (f", limit {s['limit']}" if s.get("limit") else "")
    )


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def no_data_figure(title: str, why: str) -> Any:
    """A figure that says plainly that there is nothing to draw, and why."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 2.2))
    ax.axis("off")
    ax.text(0.5, 0.55, "NO DATA", ha="center", va="center", fontsize=20, color="0.4", weight="bold")
    ax.text(0.5, 0.18, why, ha="center", va="center", fontsize=9, wrap=True)
    ax.set_title(title, fontsize=9)
    return fig


def _bars(ax: Any, groups: list[str], series: dict[str, list[float | None]], ns: list[int] | None = None) -> None:
    """Side-by-side bars; ``None`` gets no bar but an "n/a" mark at the baseline."""
    width = 0.8 / max(len(series), 1)
    for i, (name, vals) in enumerate(series.items()):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(groups))]
        for x, v in zip(xs, vals, strict=True):
            if v is None:
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7, rotation=90, color="0.3")
        pts = [(x, v) for x, v in zip(xs, vals, strict=True) if v is not None]
        if pts:
            ax.bar(
                [p[0] for p in pts],
                [p[1] for p in pts],
                width,
                label=name,
                color=_GRAYS[i % len(_GRAYS)],
                hatch=_HATCHES[i % len(_HATCHES)],
                edgecolor="black",
                linewidth=0.5,
            )
        else:
            ax.bar([], [], width, label=f"{name} (no data)")
    labels = [group_label(g) + (f"\n(n = {ns[j]})" if ns is not None else "") for j, g in enumerate(groups)]
    ax.set_xticks(range(len(groups)), labels, rotation=30, ha="right", fontsize=8)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.legend(fontsize=8, loc="best")


def write_figures(res: dict[str, Any], out: Path, meta: dict[str, Any] | None = None) -> list[str]:
    """Warmth × Competence map (Fig. 2), axis-share bars (Figs. 3–5), refusals (Figs. 6–9); returns file names."""
    plt = _plt()
    meta = meta or res.get("run", {})
    sub = settings_line(meta)
    names: list[str] = []

    def save(fig: Any, name: str) -> None:
        with atomic_path(out / name) as tmp:
            fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        names.append(name)

    for key, title in (("rating_free", "free-text ratings"), ("rating_constrained", "constrained scoring")):
        if key not in res and key == "rating_constrained":
            continue
        data = res.get(key) or {}
        groups = display_order(list(data))
        pts = [
            (g, data[g]["Warmth"], data[g]["Competence"])
            for g in groups
            if data[g]["Warmth"]["mean"] is not None and data[g]["Competence"]["mean"] is not None
        ]
        full = f"Warmth × Competence ({title})\n{sub}"
        if not pts:
            save(no_data_figure(full, "no group has both a Warmth and a Competence rating"), f"wc_map_{key}.png")
            continue
        fig, ax = plt.subplots(figsize=(5.5, 5.5))
        for i, (g, w, c) in enumerate(pts):
            xerr = None if w["lo"] is None else [[w["mean"] - w["lo"]], [w["hi"] - w["mean"]]]
            yerr = None if c["lo"] is None else [[c["mean"] - c["lo"]], [c["hi"] - c["mean"]]]
            ax.errorbar(
                w["mean"],
                c["mean"],
                xerr=xerr,
                yerr=yerr,
                fmt=MARKERS[i % len(MARKERS)],
                color="black",
                ecolor="0.6",
                capsize=2,
                label=f"{group_label(g)} (n = {w['n']}/{c['n']})",
            )
            ax.annotate(group_label(g), (w["mean"], c["mean"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
        missing = [group_label(g) for g in groups if g not in {p[0] for p in pts}]
        ax.set_xlabel("Warmth (mean rating, 95% CI clipped to 1–5)")
        ax.set_ylabel("Competence (mean rating)")
        ax.set_xlim(1, 5)
        ax.set_ylim(1, 5)
        ax.legend(fontsize=7, loc="lower left")
        if missing:
            ax.text(1.05, 4.85, "no data: " + ", ".join(missing), fontsize=7, color="0.3")
        ax.set_title(full, fontsize=9)
        save(fig, f"wc_map_{key}.png")
    for key, title, n_key in (
        ("selection_free", "Selection (Fig. 3)", "n"),
        ("selection_constrained", "Selection, constrained", "n"),
        ("elicitation", "Elicitation (Fig. 4)", "n_words"),
        ("generation", "Text generation (Fig. 5)", "n_words"),
    ):
        if key not in res:
            continue
        data = res[key]
        groups = display_order(list(data))
        full = f"{title}: % Warmth and Competence\n{sub}"
        if not groups or all(data[g].get("Warmth") is None for g in groups):
            save(no_data_figure(full, "no parsed answers or words for any group"), f"bars_{key}.png")
            continue
        fig, ax = plt.subplots(figsize=(7.5, 3.8))
        ns = [int(data[g].get(n_key) or 0) for g in groups] if n_key else None
        _bars(ax, groups, {a: [data[g].get(a) for g in groups] for a in AXES}, ns)
        ax.set_ylabel("% of answers" if key.startswith("selection") else "% of words")
        ax.set_title(full, fontsize=9)
        save(fig, f"bars_{key}.png")
        if key in ("elicitation", "generation"):
            fig, ax = plt.subplots(figsize=(7.5, 3.8))
            series: dict[str, list[float | None]] = {}
            for a in AXES:
                series[f"{a} high"] = [data[g].get(f"{a}_high") for g in groups]
                series[f"{a} low"] = [None if data[g].get(f"{a}_low") is None else -data[g][f"{a}_low"] for g in groups]
            _bars(ax, groups, series, ns)
            ax.set_ylabel("% of words (low pole negative)")
            ax.set_title(f"{title}: SADCAT direction, high vs low pole\n{sub}", fontsize=9)
            save(fig, f"signed_{key}.png")
    ref = res.get("refusals", {})
    splits = [s for s in ("survey", "story") if s in ref]
    full = f"Refusals by group, survey vs story prompts (Figs. 6, 8)\n{sub}"
    if not splits:
        save(no_data_figure(full, "no successful replies"), "refusals_by_group.png")
    else:
        groups = display_order(list({g for s in splits for g in ref[s]["by_group"]}))
        fig, ax = plt.subplots(figsize=(7.5, 3.8))
        series = {
            f"{s} (n = {ref[s]['overall']['n']})": [
                None if ref[s]["by_group"].get(g, {}).get("rate") is None else 100 * ref[s]["by_group"][g]["rate"]
                for g in groups
            ]
            for s in splits
        }
        _bars(ax, groups, series)
        ax.set_ylabel("% refusals")
        ax.set_title(full, fontsize=9)
        save(fig, "refusals_by_group.png")
        fig, axes = plt.subplots(1, len(splits), figsize=(4 * len(splits) + 1, 3.6), squeeze=False)
        for ax, s in zip(axes[0], splits, strict=True):
            items = ref[s]["by_prompt_type"]
            keys = list(items)
            ax.bar(range(len(keys)), [100 * (items[k]["rate"] or 0) for k in keys], color="0.5", edgecolor="black")
            ax.set_xticks(range(len(keys)), [f"{k}\n(n = {items[k]['n']})" for k in keys], rotation=30, fontsize=7)
            ax.set_title(f"{s} prompts", fontsize=9)
            ax.set_ylabel("% refusals")
        fig.suptitle(f"Refusals by prompt type (Figs. 7, 9)\n{sub}", fontsize=9)
        save(fig, "refusals_by_prompt_type.png")
    return names


def write_report(res: dict[str, Any], meta: dict[str, Any], figures: list[str], out: Path) -> Path:
    """The Markdown report: run settings and their provenance, counts, ratings, shares, refusals, words, ρ."""
    s = meta.get("settings", {})
    lines = ["# SCM probes (Ostrow & Lopez) — run report", ""]
    lines += [
        f"- model: `{meta.get('model')}` ({meta.get('prompt_format')} prompts); fingerprint "
        f"`{meta.get('fingerprint')}`",
        f"- survey decoding: {s.get('survey')}; story decoding: {s.get('story')}",
        f"- limit {s.get('limit')}, system prompt {s.get('system_prompt')!r}, extra body keys "
        f"{s.get('extra_body_keys')}, selection list {'shuffled per sample' if s.get('shuffle_selection') else 'in Table 1 order (paper)'}",
        f"- refusal rule: `{s.get('refusal_rule')}`; constrained scoring: {s.get('scoring') or 'not run'}",
        f"- responses: {res['n_responses']} ({res['n_errors']} failed calls, {meta.get('cached', 0)} from cache)",
        f"- parse rate by task: {', '.join(f'{k} {_fmt(v)}' for k, v in res['parse_rate'].items())}",
        *([f"- signature: `{meta['signature']}`"] if meta.get("signature") else []),
        "",
    ]
    prov = meta.get("defaults") or {}
    if prov:
        lines += [f"Decoding defaults: family `{prov.get('family')}` — {prov.get('family_note')}", ""]
        lines += ["| setting | value | source |", "|---|---|---|"]
        lines += [f"| {k} | {v['value']} | {v['source']} |" for k, v in prov.get("values", {}).items()]
        lines.append("")
    if meta.get("prompt_format") == "plain":
        lines += ["> **Warning:** the model has no chat template; prompts were fed as plain text.", ""]
    for key, title in (
        ("rating_free", "Mean rating (free text)"),
        ("rating_constrained", "Expected rating (constrained)"),
    ):
        if key not in res:
            continue
        lines += [
            f"## {title}",
            "",
            "| group | Warmth | 95% CI (clipped to 1–5) | n | Competence | 95% CI | n |",
            "|---|---|---|---|---|---|---|",
        ]
        for g in display_order(list(res[key])):
            w, c = res[key][g]["Warmth"], res[key][g]["Competence"]
            lines.append(
                f"| {group_label(g)} | {_fmt(w['mean'])} | {_ci(w)} | {w['n']} | "
                f"{_fmt(c['mean'])} | {_ci(c)} | {c['n']} |"
            )
        lines.append("")
    if "constrained_diagnostics" in res:
        d = res["constrained_diagnostics"]
        lines += [
            "## Constrained scoring diagnostics",
            "",
            f"Method `{d.get('method')}`: {d.get('description')}",
            "",
            f"- selection: top option is the first listed in {_rate(d.get('top_is_first'))} of prompts; "
            f"most frequent top term {d.get('most_frequent_top')!r}",
            "",
        ]
    for key, title in (
        ("selection_free", "Selection (free text)"),
        ("selection_constrained", "Selection (constrained)"),
    ):
        if key in res:
            lines += [f"## {title}: % Warmth / % Competence", "", "| group | Warmth % | Competence % | n |"]
            lines += ["|---|---|---|---|"]
            lines += [
                f"| {group_label(g)} | {_fmt(res[key][g].get('Warmth'), 1)} | "
                f"{_fmt(res[key][g].get('Competence'), 1)} | {res[key][g].get('n', '–')} |"
                for g in display_order(list(res[key]))
            ]
            lines.append("")
    for key, title in (("elicitation", "Elicitation keywords"), ("generation", "Generated content words")):
        if key in res:
            lines += [
                f"## {title}: % of words per axis (paper: unsigned) and by SADCAT pole",
                "",
                "| group | Warmth % | W high | W low | W signed | Competence % | C high | C low | C signed | words |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for g in display_order(list(res[key])):
                v = res[key][g]
                lines.append(
                    f"| {group_label(g)} | "
                    + " | ".join(
                        _fmt(v.get(f"{a}{suffix}"), 1) for a in AXES for suffix in ("", "_high", "_low", "_signed")
                    )
                    + f" | {v.get('n_words', 0)} |"
                )
            lines.append("")
    if "mapper" in res:
        m = res["mapper"]
        cal = m.get("calibration") or {}
        agree = cal.get("agreement") or ({"macro_f1": cal.get("macro_f1")} if "macro_f1" in cal else None)
        lines += [
            "## Word → axis mapping",
            "",
            f"SADCAT first, then {m.get('embedder')} cosine similarity to the seed centroid > {m.get('threshold')} "
            f"(source: {cal.get('source')}; metric: {cal.get('metric', '–')}; agreement: {agree}). "
            f"Word sources: {res.get('word_sources')}. Signed shares use SADCAT's high/low pole; embedding-mapped "
            "words have no pole.",
            "",
        ]
    ref = res.get("refusals", {})
    lines += [f"## Refusals (rule `{ref.get('rule')}`, `data/refusal_patterns.json`, paper Appendix B)", ""]
    splits = [sp for sp in ("survey", "story") if sp in ref]
    if splits:
        lines += ["| group | " + " | ".join(f"{sp} prompts" for sp in splits) + " |"]
        lines += ["|---" * (len(splits) + 1) + "|"]
        groups = display_order(list({g for sp in splits for g in ref[sp]["by_group"]}))
        lines += [
            f"| {group_label(g)} | " + " | ".join(_rate(ref[sp]["by_group"].get(g)) for sp in splits) + " |"
            for g in groups
        ]
        lines += ["| **all** | " + " | ".join(_rate(ref[sp]["overall"]) for sp in splits) + " |", ""]
        lines += ["| prompt type | refusals |", "|---|---|"]
        for sp in splits:
            lines += [f"| {p} | {_rate(c)} |" for p, c in ref[sp]["by_prompt_type"].items()]
        lines.append("")
        for sp in splits:
            trunc = ref[sp].get("truncated")
            lines.append(f"- {sp}: reply kinds {ref[sp]['kinds']}; truncated at the token limit: {_rate(trunc)}")
        lines.append("")
    lines += ["## Top words", ""]
    for g in display_order(list(res["top_keywords"])):
        kws = ", ".join(f"{w} ({n})" for w, n in res["top_keywords"][g])
        ors = ", ".join(f"{r['word']} ({r['odds_ratio']:.2f})" for r in res["generation_odds_ratios"].get(g, []))
        lines.append(f"- **{group_label(g)}** — elicited: {kws or '–'}; generation (odds ratio): {ors or '–'}")
    lines += ["", "## Spearman ρ against the paper's human Competence order", ""]
    for key, v in res["spearman"].items():
        if key != "reference":
            lines.append(f"- {key}: ρ = {_fmt(v['Competence']['rho'])} (n = {v['Competence']['n']} groups)")
    lines += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figures]
    return write_text(out / "report.md", "\n".join(lines) + "\n")
