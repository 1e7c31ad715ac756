"""``queerbench compare``: one table and one heatmap of several runs' QueerBench scores (``compare.md``,
``compare.csv``, ``compare_n.csv``, ``compare_heatmap.png``), with the caveats a reader needs to trust a cell.

Every cell shows its n (scored sentences), a cell with fewer than 30 carries the small-sample mark, a group a run
has no data for says "no data", and :func:`compare_warnings` says when the runs differ in what makes their scores
comparable — read from each run's signature (:mod:`queerbench.run.signature`): the sentence set (the task's benchmark,
then ``--limit``), k, the method, the toxicity scorer, ``--exclude-function-words``. A task adds its own sections
(QueerGen's scores side by side) through :meth:`queerbench.tasks.base.Task.compare_sections`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.files import atomic_path, write_text
from queerbench.methods.registry import in_label, recorded_method
from queerbench.reporting.figures import heatmap_figure, model_label
from queerbench.reporting.tables import NO_DATA, fmt, markdown_table
from queerbench.run.signature import parse
from queerbench.scoring.aggregate import GAP_BLOCK, GROUP_ORDER
from queerbench.scoring.caveats import small_n, small_n_threshold
from queerbench.scoring.toxicity_base import KEY as TOXICITY
from queerbench.tasks import all_tasks

__all__ = [
    "check_scores_document",
    "compare_cells",
    "compare_labels",
    "compare_runs",
    "compare_warnings",
    "refuse_repeats",
]

_RESCORE = "delete it and rerun `queerbench run` for that folder (it re-scores the predictions)"


def check_scores_document(scores: Any, where: str | Path) -> dict[str, Any]:
    """``scores`` (a run's ``scores.json``, read from ``where``) if it holds what a comparison reads — an object with
    ``n`` (scored sentences per group) and ``queerbench`` (the score per group) — else a one-line ``ValueError``
    naming the file, what is missing and the fix (instead of a bare ``KeyError`` such as ``error: n``)."""
    if not isinstance(scores, dict):
        raise ValueError(f"{where} holds a JSON {type(scores).__name__}, not a run's scores (an object); {_RESCORE}")
    for key, what in (("n", "the scored sentences per group"), (GAP_BLOCK, "the QueerBench score per group")):
        if key not in scores:
            raise ValueError(f"{where} lacks {key!r} ({what}); it is not a finished run's scores.json: {_RESCORE}")
        if not isinstance(scores[key], dict):
            raise ValueError(f"{where}: {key!r} must map each group to {what}, got {scores[key]!r}; {_RESCORE}")
    return scores


def refuse_repeats(keys: Sequence[Hashable], labels: Sequence[str], folders: Sequence[str]) -> None:
    """The rule ``compare`` and ``leaderboard show`` share: one result is one line. When two entries have one key
    (``compare``: the row label; ``leaderboard show``: :func:`~queerbench.reporting.rows.row_identity`), a one-line
    ``ValueError`` names the folder(s) and the line they would share, instead of showing (or ranking) it twice."""
    seen: dict[Hashable, int] = {}
    for i, key in enumerate(keys):
        if key in seen:
            first, again = str(folders[seen[key]]), str(folders[i])
            given = f"{again} is given twice" if first == again else f"{first} and {again} hold the same result"
            raise ValueError(f"{given}: two runs would share the row {labels[i]!r}; pass each run folder once")
        seen[key] = i


def _benchmark(config: Any) -> str:
    """The benchmark a task belongs to (runs of two benchmarks score different sentence sets); an unknown task is
    its own."""
    task = all_tasks().get(str(config))
    return task.benchmark if task is not None else str(config)


def _run_facts(run: dict[str, Any]) -> dict[str, Any]:
    """What may differ between two runs of one comparison, from the run's signature (runs of earlier versions,
    without one, from their run record): model, task, k, templates, method, toxicity scorer, ..."""
    meta, scores = run.get("meta") or {}, run["scores"]
    signed = parse(scores["signature"]) if scores.get("signature") else {}

    def signed_limit() -> Any:
        value = signed.get("limit")
        return None if value in (None, "all", "subset") else int(value)

    return {
        "model": signed.get("model", meta.get("model")),
        "method": signed.get("method", meta.get("method")),
        "config": signed.get("task", scores.get("config")),
        "k": scores.get("k"),
        "n_sentences": meta.get("n_sentences", sum(scores.get("n", {}).values())),
        "limit": signed_limit() if signed else meta.get("limit"),
        "sentences": signed.get("sentences", meta.get("sentences")),  # an imported run of other sentences
        "coverage": meta.get("coverage"),
        TOXICITY: (scores.get("scorers", {}).get(TOXICITY) or {}).get("name"),
        "toxicity_input": meta.get("toxicity_input"),
        "revision": meta.get("revision"),
        "dtype": signed.get("dtype", meta.get("dtype")),
        "exclude_function_words": (scores.get("function_words") or {}).get("excluded"),
    }


def compare_labels(runs: Sequence[dict[str, Any]]) -> list[str]:
    """Row labels for a comparison: ``<model> · <config> · top-<k>``, plus what tells apart runs that share those
    (toxicity scorer, templates, revision, dtype), plus the run folder's name as the last resort."""
    facts = [_run_facts(r) for r in runs]
    labels = [
        f"{model_label(f['model'])} · {f['config']} · top-{f['k']}"
        + (f" · {f['method']}" if in_label(f["method"]) else "")
        for f in facts
    ]
    for label in set(labels):
        same = [i for i, other in enumerate(labels) if other == label]
        if len(same) < 2:
            continue
        extra: dict[int, list[str]] = {i: [] for i in same}
        for fact, show in (
            (TOXICITY, lambda v: f"toxicity {v}"),
            ("limit", lambda v: "all templates" if v is None else f"{v} templates"),
            ("sentences", lambda v: "first templates" if v is None else f"sentences {v}"),
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
    benchmarks = {_benchmark(c) for c in configs}
    if len(benchmarks) > 1:  # two benchmarks: different sentences, not a different --limit
        shown = ", ".join(
            f"{lab}: {f['n_sentences']} {_benchmark(f['config'])} sentences"
            + (f" (--limit {f['limit']})" if f["limit"] else "")
            for lab, f in zip(labels, facts, strict=True)
        )
        warnings.append(
            f"the runs score different sentence sets ({shown}); their QB is not the same measurement, "
            "so compare a group's QB only between runs of one config"
        )
    for config in sorted(configs, key=str):  # within one sentence set: the same templates, the same sentences?
        same = [(lab, f) for lab, f in zip(labels, facts, strict=True) if f["config"] == config]
        if len({(f["n_sentences"], f["limit"], f["sentences"]) for _, f in same}) > 1:
            if any(f["sentences"] for _, f in same):  # an imported run of other sentences than the first templates
                shown = ", ".join(f"{lab}: {_coverage(f)}" for lab, f in same)
                warnings.append(
                    f"the runs cover different sentences ({shown}); their scores are not the same measurement: "
                    "compare runs of the same sentences (imports of lm_eval runs with the same --limit)"
                )
                continue
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
    scorers = {f[TOXICITY] for _, f in scored}
    if len(scorers) > 1:
        shown = ", ".join(f"{lab}: {f[TOXICITY]}" for lab, f in scored)
        warnings.append(
            f"the runs used different toxicity scorers ({shown}); their P and QB are not comparable — "
            "rescore with one --toxicity (queerbench score)"
        )
    for bench in sorted(benchmarks):  # one benchmark's tasks: the same sentences, other scoring rules
        mixed = sorted(str(c) for c in configs if _benchmark(c) == bench)
        if len(mixed) > 1:
            warnings.append(f"the runs mix the {' and '.join(mixed)} configs, whose scores follow different rules")
    for fact, what, why in _DIFFERENCES:
        values = {
            _show(fact, f[fact]) for f, r in zip(facts, runs, strict=True) if r["scores"].get("scored") is not False
        }
        if len(values) > 1:
            shown = ", ".join(f"{lab}: {_show(fact, f[fact])}" for lab, f in zip(labels, facts, strict=True))
            warnings.append(f"the runs differ in {what} ({shown}); {why}")
    return warnings


def _coverage(fact: dict[str, Any]) -> str:
    """A run's sentences for a warning: ``77 sentences (--limit 1)``, ``77 sentences (sentences 77@…: template 5
    (77 of 77))`` for an imported subset, ``7931 sentences`` for every template."""
    if fact["sentences"]:
        where = str(fact["coverage"] or "").split(": ", 1)[-1]
        return f"{fact['n_sentences']} sentences (sentences {fact['sentences']}" + (f": {where})" if where else ")")
    return f"{fact['n_sentences']} sentences" + (f" (--limit {fact['limit']})" if fact["limit"] else "")


_DIFFERENCES = (
    ("k", "k", "a top-k score sums over k completions per sentence, so compare runs of one --top-k"),
    (
        "method",
        "method",
        "a masked LM's fill, a causal LM's ranked words and a chat model's answers are different measurements; "
        "compare a group's score between runs of one --method",
    ),
    (
        "exclude_function_words",
        "--exclude-function-words",
        "scores without closed-class completions are higher than with them; compare runs made the same way",
    ),
)


def _show(fact: str, value: Any) -> str:
    if fact == "k":
        return f"top-{value}"
    if fact == "method":
        return recorded_method(value)
    if fact == "exclude_function_words":
        return "excluded" if value else "included"  # runs older than the flag included them
    return str(value)


def compare_cells(runs: Sequence[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The comparison's QB values (runs × groups, NaN where missing), the n of every cell (scored sentences; 0 for
    a group the run has no data for) and the cells as shown: ``12.34 (n=80)``, ``⚠`` after a small n (< 30),
    ``no data`` for n = 0, ``—`` for a group scored without a toxicity scorer (no QB)."""
    for run in runs:
        check_scores_document(run.get("scores"), Path(str(run.get("dir", "a run"))) / "scores.json")
    labels = compare_labels(runs)
    refuse_repeats(labels, labels, [str(run.get("dir", "a run")) for run in runs])
    present = list(dict.fromkeys(g for run in runs for g in run["scores"]["n"]))
    ordered = [g for g in GROUP_ORDER if g in present] + [g for g in present if g not in GROUP_ORDER]
    values = pd.DataFrame(
        [[run["scores"][GAP_BLOCK].get(g) for g in ordered] for run in runs], index=labels, columns=ordered
    ).astype(float)
    counts = pd.DataFrame(
        [[int(run["scores"]["n"].get(g) or 0) for g in ordered] for run in runs], index=labels, columns=ordered
    )

    def cell(value: float, n: int) -> str:
        if not n:
            return NO_DATA
        return f"{fmt(value)} (n={n}){' ⚠' if small_n(n) else ''}"

    shown = pd.DataFrame(
        [[cell(values.iat[i, j], counts.iat[i, j]) for j in range(len(ordered))] for i in range(len(labels))],
        index=labels,
        columns=ordered,
    )
    shown.index.name = "run"
    return values, counts, shown


def _labelled(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs as a task's :meth:`~queerbench.tasks.base.Task.compare_sections` gets them: each with
    ``method_in_label``, whether its method belongs in a label (the method registry's
    :func:`~queerbench.methods.registry.in_label`; a task knows no method)."""
    return [{**run, "method_in_label": in_label((run.get("meta") or {}).get("method"))} for run in runs]


def compare_runs(runs: Sequence[dict[str, Any]], out: Path) -> tuple[pd.DataFrame, Path]:
    """One Table-4-like table (rows = runs, columns = groups) and a heatmap across runs; returns (QB table, md path).

    Rows are labelled ``<model> · <config> · top-<k>`` (:func:`compare_labels`); every cell carries its n
    (:func:`compare_cells`; ``compare_n.csv`` next to ``compare.csv``), and :func:`compare_warnings` lists what
    makes rows not comparable, which ``compare.md`` and the heatmap's subtitle repeat.
    """
    table, counts, shown = compare_cells(runs)
    out.mkdir(parents=True, exist_ok=True)
    warnings = compare_warnings(runs)
    heatmap_figure(
        table,
        out / "compare_heatmap.png",
        "QueerBench score per run and group",
        subtitle="rows: model · config · top-k" + (" (not all comparable: see compare.md)" if warnings else ""),
        value_label="QueerBench score (higher = more harmful)",
        counts=counts,
    )
    with atomic_path(out / "compare.csv") as tmp:
        table.to_csv(tmp)
    with atomic_path(out / "compare_n.csv") as tmp:
        counts.to_csv(tmp)
    extra = [  # each task of the runs adds its own sections (QueerGen: its scores side by side)
        line
        for config in dict.fromkeys(str(f["config"]) for f in (_run_facts(r) for r in runs))
        if config in all_tasks()
        for line in all_tasks()[config].compare_sections(_labelled(runs), out)
    ]
    notes = [f"> **Warning:** {w}" for w in warnings]
    notes.append("> n = the run's scored sentences in that group.")
    if (counts.gt(0) & counts.lt(small_n_threshold())).any().any():
        notes.append(
            f"> ⚠ = fewer than {small_n_threshold()} scored sentences: indicative only (see the run's report for the "
            "CI width)."
        )
    if counts.eq(0).any().any():
        notes.append(f"> {NO_DATA} = the run scored no sentence of that group.")
    if (table.isna() & counts.gt(0)).any().any():
        notes.append("> — = no QB: the run had no toxicity scorer.")
    md = "\n".join(
        [
            "# QueerBench comparison",
            "",
            *notes,
            "",
            markdown_table(shown),
            "",
            "![heatmap](compare_heatmap.png)",
            *extra,
            "",
        ]
    )
    return table, write_text(out / "compare.md", md)
