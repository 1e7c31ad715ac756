"""QueerBench and QueerGen side by side: runs of the same models (``queerbench compare``) and the two papers' own
published numbers for the models both evaluated.

The two benchmarks do not measure the same thing on the same sentences: QueerBench fills a blank in 106 templates
about 62 identity nouns and 16 pronoun rows and scores AFINN, HurtLex and a Perspective flag rate (its score, higher
= more harmful); QueerGen completes 10 prefix templates about 10 subjects, unmarked or marked with 30 identity
markers, and reports VADER, Perspective probabilities, diversity and regard per group. The tables here put them next
to each other and say where sentence sets, scorers or k differ; they never merge them into one number.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.files import atomic_path
from queerbench.scoring.caveats import small_n, small_n_threshold
from queerbench.tasks.queergen.spec import spec

__all__ = ["BOTH_PAPERS", "papers_side_by_side", "queergen_compare_section", "queergen_report_section"]

BOTH_PAPERS = {
    "BERT Base": "BERTbase",
    "BERT Large": "BERTlarge",
    "RoBERTa Base": "RoBERTabase",
    "RoBERTa Large": "RoBERTalarge",
}
"""The models both papers evaluated: QueerGen's table label → QueerBench's Table 4 column stem."""


def _model(run: dict[str, Any]) -> str:
    return str(run["meta"].get("model", run.get("dir", "?")))


def _column_keys(runs: Sequence[dict[str, Any]]) -> list[str]:
    """One column per model and method, so that a QueerBench run and a QueerGen run of one model share it; two runs
    of the same benchmark that would share a column are told apart by k, then by their folder's name."""
    from queerbench.reporting.figures import model_label

    keys = []
    for run in runs:
        method = (run.get("meta") or {}).get("method")
        # whether the method belongs in a label is the method registry's to say: the generic comparison hands it
        # over as ``method_in_label``; a run handed over without it shows any method it records
        shown = run.get("method_in_label", method is not None)
        keys.append(model_label(_model(run)) + (f" · {method}" if shown else ""))
    for extra in (
        lambda r: f"top-{r['scores'].get('k')}",
        lambda r: Path(str(r.get("dir", "?"))).name,
        lambda r: str(r.get("dir", "?")),
    ):
        for key in set(keys):
            same = [i for i, k in enumerate(keys) if k == key]
            kinds = ["queergen" in runs[i]["scores"] for i in same]  # a run with QueerGen's scores
            if len(kinds) > len(set(kinds)):
                for i in same:
                    keys[i] += f" · {extra(runs[i])}"
    return keys


def _differences(runs: Sequence[dict[str, Any]]) -> list[str]:
    notes = []
    keys = _column_keys(runs)
    configs = {f"{key} ({r['scores'].get('config')})": r for key, r in zip(keys, runs, strict=True)}
    sets = {r["scores"].get("config") for r in runs}

    def sentences(r: dict[str, Any]) -> str:
        meta, n = r.get("meta") or {}, r["scores"].get("n", {})
        count = meta.get("n_sentences", sum(n.values()) if isinstance(n, dict) else None)
        kind = "QueerGen" if "queergen" in r["scores"] else "QueerBench"
        return f"{kind} {count if count is not None else '?'}" + (
            f" (--limit {meta['limit']})" if meta.get("limit") else ""
        )

    if len(sets) > 1:
        notes.append(
            "sentence sets differ: "
            + ", ".join(f"{k}: {sentences(r)}" for k, r in configs.items())
            + " — QueerBench scores of different sentence sets are not comparable cell for cell"
        )
    if "queergen" in sets and len(sets) > 1:
        notes.append(
            "scorers differ by design: QB = AFINN, HurtLex and the toxicity-flag rate of the filled sentence "
            "(QueerBench); QG = VADER of the word, the mean toxicity probability of the unmarked sentence + word, "
            "and the diversity of the words (QueerGen)"
        )
    tox = {
        k: (r["scores"].get("scorers", {}).get("toxicity", {}) or {}).get("name")
        for k, r in configs.items()
        if r["scores"].get("scored") is not False  # a run that scored nothing used no scorer
    }
    if len(set(tox.values())) > 1:
        notes.append("toxicity scorers differ: " + ", ".join(f"{k}: {v}" for k, v in tox.items()))
    reads = {
        k: (r.get("meta") or {}).get("toxicity_input")
        for k, r in configs.items()
        if r["scores"].get("scored") is not False
    }
    if len({v for v in reads.values() if v is not None}) > 1:
        notes.append(
            "the QB toxicity scorer reads different inputs: " + ", ".join(f"{k}: {v}" for k, v in reads.items())
        )
    ks = {k: r["scores"].get("k") for k, r in configs.items()}
    if len(set(ks.values())) > 1:
        notes.append("k differs: " + ", ".join(f"{k}: top-{v}" for k, v in ks.items()))
    qg = {
        k: r["scores"]["queergen"]["scorers"].get("perspective", {}).get("name")
        for k, r in configs.items()
        if "queergen" in r["scores"]
    }
    if len(set(qg.values())) > 1:
        notes.append("QueerGen Perspective scorers differ: " + ", ".join(f"{k}: {v}" for k, v in qg.items()))
    return notes


def queergen_compare_section(runs: Sequence[dict[str, Any]], out: Path) -> list[str]:
    """Markdown lines (and ``compare_queergen.csv`` in ``out``) putting QueerBench and QueerGen runs of the same
    models side by side; empty when no run has QueerGen scores."""
    if not any("queergen" in r["scores"] for r in runs):
        return []
    rows: dict[str, dict[str, Any]] = {}
    counts: dict[tuple[str, str], int] = {}  # (column, row) → n of the cell
    for run, key in zip(runs, _column_keys(runs), strict=True):
        scores, row = run["scores"], rows.setdefault(key, {})
        if "queergen" in scores:  # a run on QueerGen's sentences
            for g, v in scores["queerbench"].items():
                row[f"QB on QueerGen sentences: {g}"] = v
                counts[key, f"QB on QueerGen sentences: {g}"] = int(scores["n"].get(g) or 0)
        else:
            for g in ("queer", "non-queer"):
                if g in scores["queerbench"]:
                    row[f"QB ({scores.get('config')}): {g}"] = scores["queerbench"][g]
                    counts[key, f"QB ({scores.get('config')}): {g}"] = int(scores["n"].get(g) or 0)
        generation = (scores.get("generation") or {}).get("overall")
        if generation:  # instructed runs: how many replies parsed to one word (the rest are not scored)
            row["instructed: replies parsed to one word"] = generation["parse_rate"]
            row["instructed: sentences scored"] = generation["n_scored"]
        qg = scores.get("queergen")
        if qg:
            for metric in ("vader", "perspective", "diversity"):
                for g in qg.get("groups", []):
                    if metric in qg and g in qg[metric]:
                        row[f"QG {metric}: {g}"] = qg[metric][g]["mean"]
                        counts[key, f"QG {metric}: {g}"] = int((qg.get("n") or {}).get(g) or 0)
    table = pd.DataFrame(rows).T
    table.index.name = "model"
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "compare_queergen.csv") as tmp:
        table.to_csv(tmp)

    def fmt(column: str, row: str, v: Any) -> str:
        n = counts.get((column, row))
        if n == 0:
            return "no data"
        if pd.isna(v):
            return "—"
        if row.endswith("sentences scored"):
            return str(int(v))
        if row.endswith("parsed to one word"):
            return f"{100 * v:.1f}%"
        return f"{v:.3f}" + ("" if n is None else f" (n={n}){' ⚠' if small_n(n) else ''}")

    shown = pd.DataFrame(
        {c: [fmt(str(c), str(row), table.loc[c, row]) for row in table.columns] for c in table.index},
        index=table.columns,
    )
    header = "| | " + " | ".join(shown.columns) + " |"
    lines = ["", "## QueerBench and QueerGen side by side", "", header, "|" + "---|" * (len(shown.columns) + 1)]
    lines += [f"| {idx} | " + " | ".join(shown.loc[idx]) + " |" for idx in shown.index]
    notes = _differences(runs)
    lines += ["", *(f"- {n}" for n in notes)] if notes else ["", "- same sentence set, scorers and k in every run"]
    if any(small_n(n) for n in counts.values()):
        lines.append(f"- ⚠ = fewer than {small_n_threshold()} scored sentences: indicative only")
    return lines


def papers_side_by_side(queerbench_results: str | Path, queergen_tables: str | Path) -> pd.DataFrame:
    """The two papers' published numbers for the four masked LMs both evaluated (top-1): QueerBench's Table 4
    (queer / non-queer QB score, from its result files) next to QueerGen's VADER, Perspective and diversity means
    (unmarked / non-queer / queer, from its ``tables/``)."""
    from queerbench.tasks.queerbench.paper_data import read_table4

    qb = read_table4(queerbench_results)
    qg_tables = {m: pd.read_csv(Path(queergen_tables) / f"{m}_all.csv") for m in ("VADER", "Perspective", "Diversity")}
    rows = []
    for label, stem in BOTH_PAPERS.items():
        row: dict[str, Any] = {
            "model": label,
            "QB queer": qb.loc[f"{stem}[1]", "queer"],
            "QB non-queer": qb.loc[f"{stem}[1]", "non-queer"],
        }
        for metric, table in qg_tables.items():
            sub = table[table.Model == label].set_index("type")[metric]
            for upstream, short in (("Unmarked", "U"), ("Non Queer", "NQ"), ("Queer", "Q")):
                row[f"QG {metric} {short}"] = float(sub[upstream])
        rows.append(row)
    return pd.DataFrame(rows).set_index("model")


def queergen_report_section(qg: dict[str, Any]) -> str:
    """The QueerGen part of a ``queergen`` run's ``report.md``: its scores per group with 95% t-CIs, the ANOVA and
    JSD, and which scorers and rules produced them."""
    metrics = [m for m in ("vader", "perspective", "diversity") if m in qg]
    what = {
        "vader": "VADER of the word (−1…1, higher = more positive)",
        "perspective": "Perspective-style toxicity on the unmarked sentence + word (0…1, mean of "
        f"{len(qg.get('perspective_attributes', []))} attributes)",
        "diversity": "diversity % (higher = more varied)",
    }
    lines = [
        "",
        f"## QueerGen scores (top-{qg['k']}, {qg['config']} rules)",
        "",
        "Mean ± 95% t-CI per group (QueerGen, Findings of EACL 2026): " + ", ".join(what[m] for m in metrics) + ".",
        "",
        "| group | n | " + " | ".join(metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]
    batch = int((qg.get("diversity_rule") or {}).get("batch_size") or 100)

    def cell(metric: str, g: str) -> str:
        c = qg[metric][g]
        if metric == "diversity" and c.get("n_batches") == 1:  # QueerGen prints CI 0 for its one-batch groups
            return f"{c['mean']:.3f} (one batch of {c['n_rows']} rows)"
        return f"{c['mean']:.3f} ± {c['ci']:.3f}" if c.get("n", 2) > 1 else f"{c['mean']:.3f} (n = 1: no CI)"

    groups = list(qg["groups"])
    if qg.get("sentence_set") == "queergen":  # a group nothing was scored for is a row too (instructed runs)
        groups = [g for g in spec()["group_order"] if g in groups or g not in qg["n"]]
    for g in groups:
        if g not in qg["groups"]:
            lines.append(f"| {g} | 0 | " + " | ".join("no data" for _ in metrics) + " |")
            continue
        mark = " ⚠" if small_n(qg["n"][g]) else ""
        lines.append(f"| {g} | {qg['n'][g]}{mark} | " + " | ".join(cell(m, g) for m in metrics) + " |")
    small = [g for g in qg["groups"] if small_n(qg["n"].get(g))]
    if small:
        widths = "; ".join(
            f"{g}: "
            + (", ".join(f"{m} CI width {2 * qg[m][g]['ci']:.3f}" for m in metrics if qg[m][g].get("ci")) or "no CI")
            for g in small
        )
        lines += [
            "",
            f"⚠ fewer than {small_n_threshold()} scored sentences ({widths}): these groups' scores are indicative "
            "only.",
        ]
    small = [g for g in qg["groups"] if (qg.get("diversity", {}).get(g) or {}).get("n_rows", batch) < batch]
    if "diversity" in metrics and small:
        lines += [
            "",
            f"Diversity of {', '.join(small)}: fewer than {batch} scored rows, so not comparable with QueerGen's "
            f"{batch}-row batches (a type-token ratio falls as the batch grows).",
        ]
    anova = {k: v for k, v in qg.get("anova", {}).items() if v}
    undefined = [k for k, v in qg.get("anova", {}).items() if not v]
    if anova or undefined:
        lines += [
            "",
            "One-way ANOVA across groups: "
            + "; ".join(
                [f"{k} F={v['F']:.2f}, p={v['p']:.3f}" for k, v in anova.items()]
                + [f"{k} not defined (it needs two groups of two scores each, and scores that vary)" for k in undefined]
            ),
        ]
    if qg.get("jsd"):
        lines += [
            "",
            "Jensen-Shannon distance between group vocabularies: "
            + "; ".join(f"{k} {v:.3f}" for k, v in qg["jsd"].items()),
        ]
    s = qg.get("scorers", {})
    lines += [
        "",
        f"Scorers: VADER `{s.get('vader')}`; Perspective `{s.get('perspective', {}).get('name', 'none')}`; "
        f"regard `{s.get('regard', {}).get('name', s.get('regard', {}).get('model', 'none'))}`; diversity rule "
        f"`{qg['diversity_rule']['batches']}` batches of {qg['diversity_rule']['batch_size']} {qg['diversity_rule']['unit']}s, seed {qg['diversity_rule']['seed']}.",
        "",
    ]
    return "\n".join(lines)
