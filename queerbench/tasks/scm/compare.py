"""Compare SCM runs of several models (paper Figure 2 and Tables 3 and 5, across models).

``queerbench scm compare RUN_DIR… --out DIR`` reads each run's ``scm.json`` and writes ``compare.json``,
``compare.md`` and ``wc_map_compare.png``:

- one Warmth × Competence map with every model (distinct markers) and, when given, the human means (Figure 2);
- the most frequent elicited keywords (Table 3) and the highest-odds-ratio story words (Table 5) per group and
  model, with the paper's marks: *italics* = used by several models for the same group, **bold** = also among
  the human keywords for that group (only with a human reference that lists keywords), and each word's axis
  code (W/C, + high pole, − low pole, from the run's mapper);
- Spearman ρ between every pair of models per axis, and of each model against the human reference.

Human reference: a CSV with columns ``group,warmth,competence`` (mean ratings; either may be empty) and optional
``keywords`` (``;``-separated). Without one, the bundled reference is the paper's **Competence order only**
(``groups.json``: the column order of Tables 3 and 5, "ordered by ascending human rating for Competence"): the
paper prints no human means and no Warmth order, so Warmth ρ against humans and human points need a user file.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from queerbench.base.files import atomic_path, read_json_object, write_json, write_text
from queerbench.tasks.scm.analysis import display_order
from queerbench.tasks.scm.data import AXES, load_groups, reference_rankings
from queerbench.tasks.scm.report import MARKERS, group_label, no_data_figure

__all__ = ["compare_runs", "load_human_reference"]


def load_human_reference(path: str | Path | None) -> dict[str, Any]:
    """The human reference: ``{"source", "means": {group: {Warmth, Competence}}, "order": {...}, "keywords"}``.

    ``None`` gives the bundled paper Competence order (no means, no Warmth). Group names may be ids
    (``gay_men``) or labels (``Gay men``); unknown groups or non-numeric means are errors.
    """
    ids = {g.id: g.id for g in load_groups()} | {g.label.lower(): g.id for g in load_groups()}
    if path is None:
        return {
            "source": "bundled: the paper's human Competence order (Tables 3/5 column order); no means, no Warmth",
            "means": {},
            "order": {"Competence": reference_rankings()["competence_ascending_human"]},
            "keywords": {},
        }
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--human {p}: no such file (a CSV with columns group,warmth,competence)")
    with p.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or "group" not in rows[0] or not {"warmth", "competence"} & set(rows[0]):
        raise ValueError(f"--human {p}: needs columns group and warmth and/or competence")
    means: dict[str, dict[str, float | None]] = {}
    keywords: dict[str, list[str]] = {}
    for n, row in enumerate(rows, 2):
        gid = ids.get((row.get("group") or "").strip().lower())
        if gid is None:
            raise ValueError(f"--human {p}:{n}: unknown group {row.get('group')!r}; use one of {sorted(set(ids))}")
        vals: dict[str, float | None] = {}
        for axis in AXES:
            raw = (row.get(axis.lower()) or "").strip()
            try:
                vals[axis] = float(raw) if raw else None
            except ValueError:
                raise ValueError(f"--human {p}:{n}: {axis.lower()} {raw!r} is not a number") from None
        means[gid] = vals
        if row.get("keywords"):
            keywords[gid] = [k.strip().lower() for k in row["keywords"].split(";") if k.strip()]

    def ranked(a: str) -> list[str]:  # the groups with a mean on axis ``a``, lowest first (ties in file order)
        present = {g: v for g in means if (v := means[g][a]) is not None}
        return sorted(present, key=present.__getitem__)

    order = {a: ranked(a) for a in AXES}
    return {
        "source": f"user file {p}",
        "means": means,
        "order": {a: o for a, o in order.items() if len(o) >= 3},
        "keywords": keywords,
    }


def _spearman(a: dict[str, float | None], b: dict[str, float | None]) -> dict[str, Any]:
    from scipy.stats import spearmanr

    common = [g for g in a if a.get(g) is not None and b.get(g) is not None]
    if len(common) < 3:
        return {"rho": None, "p": None, "n": len(common)}
    res = spearmanr([a[g] for g in common], [b[g] for g in common])
    rho, pv = float(res.statistic), float(res.pvalue)
    return {"rho": None if math.isnan(rho) else rho, "p": None if math.isnan(pv) else pv, "n": len(common)}


def _means(res: dict[str, Any], key: str) -> dict[str, dict[str, float | None]]:
    data = res.get(key) or {}
    return {g: {a: v[a]["mean"] for a in AXES} for g, v in data.items()}


def _marked_tables(
    per_model: dict[str, dict[str, list[str]]], axes: dict[str, dict[str, str]], human_kw: dict[str, list[str]]
) -> tuple[dict[str, Any], list[str]]:
    """Words per (model, group) with marks: shared across models (italic), shared with humans (bold), axis."""
    groups = display_order(list({g for words in per_model.values() for g in words}))
    users: dict[tuple[str, str], set[str]] = {}
    for model, words in per_model.items():
        for g, ws in words.items():
            for w in ws:
                users.setdefault((g, w), set()).add(model)
    table: dict[str, Any] = {}
    lines = ["| model | " + " | ".join(group_label(g) for g in groups) + " |", "|---" * (len(groups) + 1) + "|"]
    depth = max((len(ws) for words in per_model.values() for ws in words.values()), default=0)
    for model, words in per_model.items():
        table[model] = {}
        for g in groups:
            table[model][g] = [
                {
                    "word": w,
                    "shared_models": sorted(users[(g, w)] - {model}),
                    "human": w in human_kw.get(g, []),
                    "axes": axes.get(model, {}).get(w, ""),
                }
                for w in words.get(g, [])
            ]
        for i in range(depth):
            cells = []
            for g in groups:
                items = table[model][g]
                if i >= len(items):
                    cells.append("")
                    continue
                it = items[i]
                text = it["word"]
                if it["shared_models"]:
                    text = f"*{text}*"
                if it["human"]:
                    text = f"**{text}**"
                cells.append(text + (f" ({it['axes']})" if it["axes"] else ""))
            lines.append(f"| {model if i == 0 else ''} | " + " | ".join(cells) + " |")
    return table, lines


def compare_runs(
    runs: Sequence[str | Path],
    out: str | Path,
    *,
    human: str | Path | None = None,
    names: Sequence[str] | None = None,
    ratings: str = "rating_free",
) -> dict[str, Any]:
    """Compare the runs in ``runs`` (folders with ``scm.json``); write the outputs into ``out`` (module doc)."""
    if len(runs) < 1:
        raise ValueError("give at least one RUN_DIR")
    if names is not None and len(names) != len(runs):
        raise ValueError(f"--names has {len(names)} names for {len(runs)} runs; give one per RUN_DIR")
    if ratings not in ("rating_free", "rating_constrained"):
        raise ValueError("ratings must be rating_free or rating_constrained")
    results: dict[str, dict[str, Any]] = {}
    for i, run in enumerate(runs):
        path = Path(run) / "scm.json"
        if not path.is_file():
            raise FileNotFoundError(f"{run}: no scm.json; give output folders of `queerbench scm run`")
        res = read_json_object(path, fix="delete that run folder's scm.json and rerun `queerbench scm run` for it")
        name = names[i] if names else str(res.get("run", {}).get("model") or Path(run).name)
        if name in results:
            name = f"{name} ({Path(run).name})"
        results[name] = res
    ref = load_human_reference(human)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    means = {m: _means(r, ratings) for m, r in results.items()}
    rho_models: dict[str, Any] = {}
    for a, b in itertools.combinations(means, 2):
        rho_models[f"{a} vs {b}"] = {
            axis: _spearman({g: v[axis] for g, v in means[a].items()}, {g: v[axis] for g, v in means[b].items()})
            for axis in AXES
        }
    rho_human: dict[str, Any] = {}
    for m, mv in means.items():
        rho_human[m] = {}
        for axis in AXES:
            if ref["means"]:
                human_vals = {g: v[axis] for g, v in ref["means"].items()}
            elif axis in ref["order"]:
                human_vals = {g: float(i) for i, g in enumerate(ref["order"][axis])}
            else:
                rho_human[m][axis] = {"rho": None, "p": None, "n": 0, "note": "no human reference for this axis"}
                continue
            rho_human[m][axis] = _spearman({g: v[axis] for g, v in mv.items()}, human_vals)
    human_kw = ref["keywords"]
    axes_codes = {m: r.get("word_axes", {}) for m, r in results.items()}
    kw = {m: {g: [w for w, _ in ws] for g, ws in r.get("top_keywords", {}).items()} for m, r in results.items()}
    ors = {
        m: {g: [x["word"] for x in ws] for g, ws in r.get("generation_odds_ratios", {}).items()}
        for m, r in results.items()
    }
    table3, lines3 = _marked_tables(kw, axes_codes, human_kw)
    table5, lines5 = _marked_tables(ors, axes_codes, {})
    figure = _figure(means, ref, out, ratings)
    summary = {
        "models": list(results),
        "ratings": ratings,
        "human_reference": ref["source"],
        "means": means,
        "spearman_between_models": rho_models,
        "spearman_vs_human": rho_human,
        "table3_keywords": table3,
        "table5_odds_ratio_words": table5,
        "runs": {
            m: {"run": r.get("run", {}).get("settings"), "fingerprint": r.get("run", {}).get("fingerprint")}
            for m, r in results.items()
        },
        "figures": [figure],
    }
    write_json(out / "compare.json", summary)
    md = [f"# SCM comparison of {len(results)} runs", "", f"Human reference: {ref['source']}.", ""]
    md += [
        "## Spearman ρ of group means between models",
        "",
        "| pair | Warmth ρ (n) | Competence ρ (n) |",
        "|---|---|---|",
    ]
    md += [f"| {pair} | " + " | ".join(_rho(v[a]) for a in AXES) + " |" for pair, v in rho_models.items()] or [
        "| – | – | – |"
    ]
    md += ["", "## Spearman ρ against the human reference", "", "| model | Warmth ρ (n) | Competence ρ (n) |"]
    md += ["|---|---|---|"] + [f"| {m} | " + " | ".join(_rho(v[a]) for a in AXES) + " |" for m, v in rho_human.items()]
    md += ["", "## Table 3: most frequent elicited keywords", "", _MARKS, "", *lines3]
    md += ["", "## Table 5: story words with the highest odds ratio", "", _MARKS, "", *lines5]
    md += ["", "## Figures", "", f"![{figure}]({figure})", ""]
    write_text(out / "compare.md", "\n".join(md) + "\n")
    return summary


_MARKS = (
    "*italic*: used by several models for the same group; **bold**: also a human keyword for that group; "
    "(W/C): the word's axis in that run (+ high pole, − low pole, no sign: embedding-mapped)."
)


def _rho(v: dict[str, Any]) -> str:
    return "–" if v.get("rho") is None else f"{v['rho']:.2f} ({v['n']})"


def _figure(means: dict[str, dict[str, dict[str, float | None]]], ref: dict[str, Any], out: Path, key: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name = "wc_map_compare.png"
    title = f"Warmth × Competence, {len(means)} models ({key.replace('_', ' ')}) — paper Fig. 2"
    series = dict(means)
    if ref["means"]:
        series = {"Human": ref["means"]} | series
    pts_any = any(
        v["Warmth"] is not None and v["Competence"] is not None for gs in series.values() for v in gs.values()
    )
    if not pts_any:
        fig = no_data_figure(title, "no model has a group with both Warmth and Competence ratings")
    else:
        fig, ax = plt.subplots(figsize=(6.5, 6))
        for i, (model, gs) in enumerate(series.items()):
            pts = [
                (g, v["Warmth"], v["Competence"])
                for g, v in gs.items()
                if v["Warmth"] is not None and v["Competence"] is not None
            ]
            if not pts:
                ax.scatter([], [], marker=MARKERS[i % len(MARKERS)], label=f"{model} (no data)")
                continue
            ax.scatter(
                [p[1] for p in pts],
                [p[2] for p in pts],
                marker=MARKERS[i % len(MARKERS)],
                color=str(0.1 + 0.6 * i / max(len(series), 1)),
                label=model,
                s=40,
            )
            for g, w, c in pts:
                ax.annotate(group_label(g), (w, c), textcoords="offset points", xytext=(3, 3), fontsize=7)
        ax.set_xlim(1, 5)
        ax.set_ylim(1, 5)
        ax.set_xlabel("Warmth (mean rating)")
        ax.set_ylabel("Competence (mean rating)")
        ax.legend(fontsize=7)
        ax.set_title(title, fontsize=9)
    with atomic_path(out / name) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return name
