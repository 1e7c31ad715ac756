"""Write ``report.md`` and the PNG figures of an SCM run (Figures 2–5 and the refusal tables of the paper)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from queerbench.io_utils import atomic_path, write_text
from queerbench.scm.data import AXES, load_groups

__all__ = ["write_figures", "write_report"]


def _label(gid: str) -> str:
    return {g.id: g.label for g in load_groups()}.get(gid, gid)


def _fmt(x: Any, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def write_figures(res: dict[str, Any], out: Path) -> list[str]:
    """Warmth × Competence map (Fig. 2), axis-share bars (Figs. 3–5) and refusal bars (Figs. 6–9); returns names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []

    def save(fig: Any, name: str) -> None:
        with atomic_path(out / name) as tmp:
            fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        names.append(name)

    for key, title in (("rating_free", "free-text ratings"), ("rating_constrained", "constrained scoring")):
        data = res.get(key) or {}
        pts = [
            (g, v["Warmth"]["mean"], v["Competence"]["mean"])
            for g, v in data.items()
            if v["Warmth"]["mean"] is not None and v["Competence"]["mean"] is not None
        ]
        if not pts:
            continue
        fig, ax = plt.subplots(figsize=(5, 5))
        for g, w, c in pts:
            ax.scatter(w, c)
            ax.annotate(_label(g), (w, c), textcoords="offset points", xytext=(4, 4))
        ax.set_xlabel("Warmth (mean rating)")
        ax.set_ylabel("Competence (mean rating)")
        ax.set_xlim(1, 5)
        ax.set_ylim(1, 5)
        ax.set_title(f"Warmth × Competence ({title})")
        save(fig, f"wc_map_{key}.png")
    for key, title in (
        ("selection_free", "Selection"),
        ("selection_constrained", "Selection (constrained)"),
        ("elicitation", "Elicitation"),
        ("generation", "Text generation"),
    ):
        data = res.get(key)
        if not data:
            continue
        groups = list(data)
        fig, ax = plt.subplots(figsize=(7, 3.5))
        width = 0.4
        for i, axis in enumerate(AXES):
            vals = [data[g].get(axis) or 0.0 for g in groups]
            ax.bar([x + (i - 0.5) * width for x in range(len(groups))], vals, width, label=axis)
        ax.set_xticks(range(len(groups)), [_label(g) for g in groups], rotation=30, ha="right")
        ax.set_ylabel("% of answers / words")
        ax.set_title(f"{title}: % Warmth and Competence")
        ax.legend()
        save(fig, f"bars_{key}.png")
    for key in ("by_group", "by_prompt_type"):
        data = {k: v for k, v in res["refusal_rate"][key].items() if v is not None}
        if not data:
            continue
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.bar(range(len(data)), [100 * v for v in data.values()])
        ax.set_xticks(range(len(data)), [_label(k) for k in data], rotation=30, ha="right")
        ax.set_ylabel("% refusals")
        ax.set_title(f"Refusals {key.replace('_', ' ')}")
        save(fig, f"refusals_{key}.png")
    return names


def write_report(res: dict[str, Any], meta: dict[str, Any], figures: list[str], out: Path) -> Path:
    """The Markdown report: run settings, counts, rating table, axis shares, refusals, top words, Spearman ρ."""
    lines = ["# SCM probes (Ostrow & Lopez) — run report", ""]
    lines += [
        f"- model: `{meta.get('model')}` ({meta.get('prompt_format')} prompts)",
        f"- settings: {meta.get('settings')}",
        f"- responses: {res['n_responses']} ({res['n_errors']} failed calls, {meta.get('cached', 0)} from cache)",
        f"- parse rate by task: {', '.join(f'{k} {_fmt(v)}' for k, v in res['parse_rate'].items())}",
        "",
    ]
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
            "| group | Warmth | 95% CI | n | Competence | 95% CI | n |",
            "|---|---|---|---|---|---|---|",
        ]
        for g, v in res[key].items():
            w, c = v["Warmth"], v["Competence"]
            lines.append(
                f"| {_label(g)} | {_fmt(w['mean'])} | {_fmt(w['lo'])}–{_fmt(w['hi'])} | {w['n']} | "
                f"{_fmt(c['mean'])} | {_fmt(c['lo'])}–{_fmt(c['hi'])} | {c['n']} |"
            )
        lines.append("")
    for key, title in (
        ("selection_free", "Selection (free text)"),
        ("selection_constrained", "Selection (constrained)"),
        ("elicitation", "Elicitation keywords"),
        ("generation", "Generated content words"),
    ):
        if key in res:
            lines += [
                f"## {title}: % Warmth / % Competence",
                "",
                "| group | Warmth % | Competence % |",
                "|---|---|---|",
            ]
            lines += [
                f"| {_label(g)} | {_fmt(v.get('Warmth'), 1)} | {_fmt(v.get('Competence'), 1)} |"
                for g, v in res[key].items()
            ]
            lines.append("")
    lines += ["## Refusals (Appendix B rule, `data/refusal_patterns.json`)", "", "| by group | rate |", "|---|---|"]
    lines += [f"| {_label(g)} | {_fmt(v)} |" for g, v in res["refusal_rate"]["by_group"].items()]
    lines += ["", "| by prompt type | rate |", "|---|---|"]
    lines += [f"| {p} | {_fmt(v)} |" for p, v in res["refusal_rate"]["by_prompt_type"].items()]
    lines += ["", "## Top words", ""]
    for g in res["top_keywords"]:
        kws = ", ".join(f"{w} ({n})" for w, n in res["top_keywords"][g])
        ors = ", ".join(f"{r['word']} ({r['odds_ratio']:.2f})" for r in res["generation_odds_ratios"].get(g, []))
        lines.append(f"- **{_label(g)}** — elicited: {kws or '–'}; generation (odds ratio): {ors or '–'}")
    lines += ["", "## Spearman ρ against the paper's human Competence order", ""]
    for key, v in res["spearman"].items():
        if key != "reference":
            lines.append(f"- {key}: ρ = {_fmt(v['Competence']['rho'])} (n = {v['Competence']['n']})")
    lines += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figures]
    return write_text(out / "report.md", "\n".join(lines) + "\n")
