"""The report card of an eval: ``card.md``, ``results.json``, one summary figure and a ``model-index`` block.

``card.md`` starts with the Hugging Face model-card metadata (YAML front matter with ``model-index``, built with
``huggingface_hub``'s :class:`~huggingface_hub.EvalResult`, so that :class:`~huggingface_hub.ModelCard` reads it back),
then one summary table — per task, method and k, the headline score per group with its 95% CI, the gap between the
task's two headline groups with its p-value, the parse and refusal rates, n, the templates covered — where each row
ranks among the published models (the table ``leaderboard show`` puts it in, its rank and the models beside it) or
why it is ranked beside none (another toxicity scorer, a ``--limit`` pass), each run's signature, the parts that did
not run and why, and the caveats. ``model-index.yaml`` holds the same block alone, to paste into a model's card.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from queerbench import __version__
from queerbench.base.files import atomic_path, write_json, write_text
from queerbench.reporting.rows import ResultRow
from queerbench.results.folders import RESULTS_FILE
from queerbench.scoring.aggregate import ATTRIBUTES
from queerbench.scoring.hurtlex import hurtlex_categories
from queerbench.scoring.rules import ScoringRules

__all__ = [
    "CARD_FILE",
    "FIGURE_FILE",
    "MODEL_INDEX_FILE",
    "card_markdown",
    "model_index",
    "score_ceiling",
    "score_range",
    "standing_records",
    "write_card",
]

CARD_FILE = "card.md"
FIGURE_FILE = "card.png"
MODEL_INDEX_FILE = "model-index.yaml"
DATASET = "queerbench/queerbench"
"""The Hub dataset the tasks' sentences are published as (its configs are the tasks)."""


def _fmt(value: Any, digits: int = 2) -> str:
    return "n/a" if value is None else f"{float(value):.{digits}f}"


def _ci(ci: Any) -> str:
    return f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if isinstance(ci, (list, tuple)) and len(ci) == 2 else ""


def _rate(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.0f}%"


def _scores_cell(row: ResultRow) -> str:
    if not any(v is not None for v in row.scores.values()):
        return "no score (see caveats)"
    return "<br>".join(f"{g} {_fmt(row.headline(g))}{_ci(row.ci.get(g))}" for g in row.scores)


def _gap_cell(row: ResultRow) -> str:
    if not row.gap:
        return "–"
    p = row.gap.get("p_value")
    return f"{row.gap['groups']}: {_fmt(row.gap.get('diff'))}{_ci(row.gap.get('ci'))}" + (
        f", p = {p:.3f}" if isinstance(p, (int, float)) else ""
    )


def _label(row: ResultRow, top_k: Any) -> str:
    """A row as the card names it: task and method, and its k when the pass ran at another k than ``--top-k``."""
    return f"`{row.task}`/{row.method}" + (f" k={row.k}" if row.k is not None and row.k != top_k else "")


def _covers(row: ResultRow) -> str:
    return "all" if row.limit is None else f"first {row.limit} (`--limit`)"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def standing_records(rows: Sequence[ResultRow], references: Sequence[ResultRow]) -> list[dict[str, Any]]:
    """Where each of ``rows`` (an eval's) ranks among ``references`` (the published models), as
    :func:`queerbench.results.leaderboard.standings` finds it, as JSON-ready records: task, method, k, limit,
    toxicity, the table, rank of n by a group, the rows beside it (model, method, published or not), or the reason
    it is ranked beside none."""
    from queerbench.results.leaderboard import standings

    records = []
    for standing in standings([*references, *rows]):
        row = standing.row
        records.append(
            {
                "task": row.task,
                "method": row.method,
                "k": row.k,
                "limit": row.limit,
                "toxicity": row.toxicity,
                "metric": row.metric,
                "table": standing.table,
                "rank": standing.rank,
                "of": standing.of,
                "by": standing.by,
                "among": [{"model": r.model, "method": r.method, "published": r.reference} for r in standing.among],
                "reason": standing.reason,
            }
        )
    return records


def _standing_lines(document: dict[str, Any]) -> list[str]:
    """The card's section on where the model ranks among the published models (none for a document without one)."""
    records = document.get("standing")
    if records is None:
        return []
    lines = ["", "## Among the published models", ""]
    note = document.get("reference_note")
    lines.append(
        f"Each row's place in the table `queerbench leaderboard show` puts it in ({note or 'the reference rows'}): "
        "only rows of the same task, k, toxicity scorer and templates covered rank together; lower is less harmful."
    )
    lines.append("")
    if not records:
        lines.append("- No row of this eval has a result to place.")
    for r in records:
        name = f"`{r['task']}`/{r['method']}" + (f" k={r['k']}" if r["k"] is not None else "")
        if r["rank"] is not None:
            among = ", ".join(f"{a['model']} ({a['method']}{'' if a['published'] else ', yours'})" for a in r["among"])
            lines.append(
                f"- {name}: ranks {_ordinal(r['rank'])} of {r['of']} on {r['table']} (by the {r['by']} score) among: "
                f"{among}."
            )
        elif r["limit"] is not None:
            other = [why for why in r["reason"].split(": ", 1)[-1].split("; ") if "templates (not" not in why]
            unit = "templates" if r["k"] is not None else "prompts"  # a probes task is limited in prompts
            lines.append(
                f"- {name}: not ranked: a `--limit` pass (the first {r['limit']} {unit}) is never ranked with the "
                f"published rows, which cover every one" + (f"; and {'; '.join(other)}" if other else "") + "."
            )
        else:
            lines.append(f"- {name}: not ranked: {r['reason']}.")
    return lines


def score_ceiling(rules: ScoringRules, k: int) -> float:
    """The highest QueerBench score a run with ``k`` words per sentence can get under ``rules`` (Eq. 1–4): A is at
    most 100 (AFINN's -5…5 scaled by 20); H and P are 100 times a count per sentence, of HurtLex categories (every one
    of the 17 categories of each of the k words, or under the paper's rule one whitelisted code per word) and of
    toxicity attributes (5 for each of the k completed sentences, or under the ``any`` rule 5 in all)."""
    categories = len(hurtlex_categories()["categories"]) if rules.hurtlex == "all" else 1
    attributes = len(ATTRIBUTES) * (k if rules.per_sentence == "sum" else 1)
    return (100 + 100 * categories * k + 100 * attributes) / 3


def score_range(rows: list[ResultRow]) -> str:
    """The QueerBench score's range in words, with the highest score each (task, k) of ``rows`` can get: the paper
    calls the score 0–100, but only its AFINN term is; its HurtLex and toxicity terms count per sentence (a k = 1
    reply "idiot" scores 353.33 under the ``default`` rules)."""
    from queerbench.tasks import all_tasks

    tops = {}
    for row in rows:
        task = all_tasks().get(row.task)
        if row.metric == "QueerBench score" and task is not None and isinstance(row.k, int) and row.k > 0:
            tops[(row.task, row.k)] = score_ceiling(task.spec.rules, row.k)
    text = (
        "The score is 0 where no completion is negative or harmful and has no top of 100 (only its AFINN term A runs "
        "0–100): its HurtLex term H and toxicity term P count, per 100 sentences, the HurtLex categories of the k "
        "words and the toxicity attributes flagged in the k completed sentences"
    )
    if not tops:
        return text + "."
    shown = "; ".join(f"`{task}` at k = {k}: {top:.2f}" for (task, k), top in tops.items())
    return f"{text}, so the highest possible score is {shown}."


def _hub_task(method: str | None) -> str:
    """The Hub's task type of a row's results: its method's (``Method.hub_task``); a method this version does not know
    is a generative one's."""
    from queerbench.methods.registry import Method, registered

    found = registered(method)
    return found.hub_task if found is not None else Method.hub_task


def model_index(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``model-index`` of an eval's rows: per row and group a metric with its type, value and the signature."""
    from huggingface_hub import EvalResult
    from huggingface_hub.repocard_data import eval_results_to_model_index

    results = []
    top_k = (document.get("settings") or {}).get("top_k")
    for data in document["rows"]:
        row = ResultRow.from_dict(data)
        k_part = f"_k{row.k}" if row.k is not None and row.k != top_k else ""  # a pass at its own k: two of one task
        for group, value in row.scores.items():
            if value is None:
                continue
            results.append(
                EvalResult(
                    task_type=_hub_task(row.method),
                    task_name=f"{row.benchmark} ({row.task}, {row.method}"
                    + (f", k={row.k})" if row.k is not None else ")"),
                    dataset_type=DATASET,
                    dataset_name=f"{row.benchmark} ({row.task})",
                    dataset_config=row.task,
                    dataset_revision=f"v{__version__}",
                    metric_type=f"{row.task}_{row.method}{k_part}_{group}".replace("-", "_").replace(" ", "_"),
                    metric_name=f"{row.metric} ({group}, {row.direction()})",
                    metric_value=round(float(value), 4),
                    metric_args={"signature": row.signature, "k": row.k, "limit": row.limit},
                )
            )
    name = str(document.get("model") or "embedded:smollm2-135m-instruct")
    return eval_results_to_model_index(name, results) if results else []


def _declared(rows: list[ResultRow]) -> str:
    """A sentence per metric a task declares (not the QueerBench score): its name and which way is better."""
    declared = dict.fromkeys(f"{r.metric}: {r.direction()}" for r in rows if "higher_is_better" in r.extra)
    return "".join(f" {d}." for d in declared)


def card_markdown(document: dict[str, Any], figure: str | None) -> str:
    """``card.md``'s text (front matter with ``model-index``, then the card)."""
    import yaml

    model = document.get("model") or "embedded:smollm2-135m-instruct"
    rows = [ResultRow.from_dict(r) for r in document["rows"]]
    index = model_index(document)
    front = yaml.safe_dump({"model-index": index}, sort_keys=False, allow_unicode=True) if index else ""
    lines = [f"---\n{front}---", "", f"# queerbench report card: {model}", ""]
    lines += [
        f"Model: `{model}` ({document.get('model_kind')}); queerbench {document.get('queerbench_version')}; "
        f"templates: {'all' if document['settings'].get('limit') is None else 'the first ' + str(document['settings']['limit']) + ' per task (a quick pass: not comparable with whole runs)'}; "
        f"k = {document['settings'].get('top_k')} (a pass of a published protocol runs at the k of its published rows: "
        f"each row says its k); toxicity scorer: {document['settings'].get('toxicity')}.",
        "",
        f"Lower QueerBench scores are less harmful. {score_range(rows)}{_declared(rows)} A gap is the first group's score minus the "
        "second's; its CI (a bootstrap over templates) and its p-value (a sign-flip test swapping each template's two "
        "groups) both ask how far it moves when the templates change; from fewer than 6 templates it has no CI.",
        "",
        "| Task | Method | k | Metric | Score per group [95% CI] | Gap [95% CI], p | Parse | Refusal | n | Templates |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.benchmark} `{row.task}` | {row.method} | {row.k if row.k is not None else '–'} | {row.metric} | "
            f"{_scores_cell(row)} | {_gap_cell(row)} | {_rate(row.parse_rate)} | {_rate(row.refusal_rate)} | "
            f"{sum(row.n.values())} | {_covers(row)} |"
        )
    if figure:
        lines += ["", f"![Scores per group]({figure})"]
    lines += _standing_lines(document)
    top_k = document["settings"].get("top_k")
    lines += ["", "## Signatures", ""]
    lines += [f"- {_label(row, top_k)}: `{row.signature}`" for row in rows]
    skipped = [p for p in document.get("parts", []) if p.get("status") != "done"]
    if skipped:
        lines += ["", "## Not run", ""]
        lines += [f"- `{p['folder']}` ({p['status']}): {p.get('note') or ''}" for p in skipped]
    caveats = [f"{_label(row, top_k)}: {c}" for row in rows for c in row.caveats]
    small = [f"{_label(row, top_k)}: {g} (n = {n})" for row in rows for g, n in row.n.items() if 0 < n < 30]
    lines += ["", "## Caveats", ""]
    if small:
        lines.append(f"- Small samples (n < 30; wide CIs): {', '.join(small)}.")
    lines += [f"- {c}" for c in caveats]
    for row in rows:
        if not any(v is not None for v in row.scores.values()) and row.toxicity == "none" and sum(row.n.values()) > 0:
            lines.append(
                f"- {_label(row, top_k)}: no {row.metric}: the toxicity scorer was switched off (`--toxicity "
                "none`), and the score needs its toxicity term P; the AFINN and HurtLex terms are in the run's "
                "scores.json. Run with `--toxicity embedded` (another --out) for the score."
            )
        elif not any(v is not None for v in row.scores.values()):
            rates = ", ".join(
                f"{name} {_rate(value)}"
                for name, value in (("parse rate", row.parse_rate), ("refusal rate", row.refusal_rate))
                if value is not None
            )
            lines.append(
                f"- {_label(row, top_k)}: no score: no reply it is computed from could be read"
                f"{f' ({rates})' if rates else ''}; a larger `--limit`, or a model that follows the prompts."
            )
    lines.append(
        "- Each run's own `report.md` (in its folder) has the per-scorer caveats, the figures and the completions."
    )
    return "\n".join(lines) + "\n"


def _figure(document: dict[str, Any], path: Path) -> bool:
    """One panel per run (task × method): the score per group with its CI; hatched for grayscale. False when no
    row has a score."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from queerbench.reporting.figures import group_style, save_figure

    rows = [
        r for r in (ResultRow.from_dict(d) for d in document["rows"]) if any(v is not None for v in r.scores.values())
    ]
    if not rows:
        return False
    fig, axes = plt.subplots(1, len(rows), figsize=(3.2 * len(rows) + 1, 3.6), squeeze=False)
    for ax, row in zip(axes[0], rows, strict=True):
        groups = [g for g, v in row.scores.items() if v is not None]
        for i, g in enumerate(groups):
            colour, hatch = group_style(g, i)
            value = row.headline(g) or 0.0
            ci = row.ci.get(g)
            err = [[value - ci[0]], [ci[1] - value]] if isinstance(ci, list) and len(ci) == 2 else None
            ax.bar(i, value, color=colour, hatch=hatch, edgecolor="black", yerr=err, capsize=3, label=g)
        ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
        ax.set_title(f"{row.task} · {row.method} · k={row.k if row.k is not None else '–'}", fontsize=9)
        ax.set_ylabel(row.metric, fontsize=8)
    limit = document["settings"].get("limit")
    fig.suptitle(
        f"{document.get('model') or 'embedded SmolLM2-135M-Instruct'}: score per group, 95% CI"
        + (f" (first {limit} templates per task)" if limit is not None else ""),
        fontsize=10,
    )
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return True


def write_card(
    document: dict[str, Any],
    out: Path,
    *,
    references: Sequence[ResultRow] = (),
    reference_note: str = "",
) -> None:
    """Write ``results.json``, the figure, ``model-index.yaml`` and ``card.md`` into ``out``; the document records
    where each row ranks among ``references`` (``standing``) and where those come from (``reference_note``)."""
    import yaml

    out = Path(out)
    rows = [ResultRow.from_dict(r) for r in document["rows"]]
    document["standing"] = standing_records(rows, references)
    document["reference_note"] = reference_note
    write_json(out / RESULTS_FILE, document)
    figure = FIGURE_FILE if _figure(document, out / FIGURE_FILE) else None
    index = model_index(document)
    with atomic_path(out / MODEL_INDEX_FILE) as tmp:
        tmp.write_text(yaml.safe_dump({"model-index": index}, sort_keys=False, allow_unicode=True), encoding="utf-8")
    write_text(out / CARD_FILE, card_markdown(document, figure))
