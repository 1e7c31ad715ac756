"""``queerbench view DIR``: a run, eval or task folder in the local Gradio app.

For each part of the folder (a run; an eval's runs; a task's own folder such as an ``scm run``) the app shows its
report (``card.md`` or ``report.md``), its figures and its per-item table: for a run, every sentence with its
completions, the reply labels of a generative run, the HurtLex categories and toxicity flags per word (from the run's
``sentences.parquet``; a run of an earlier version gets its HurtLex categories looked up here and no toxicity flags),
and whether any completion is harmful; for a task folder, the table the task gives (the SCM replies with their parse
and refusal kind). The table filters by group, subject, template, reply label, refusal kind and harmful flag; harmful
completions stay hidden, under the content note, until asked for; the filtered table exports as CSV with every
completion shown. Nothing is scored or predicted again.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.files import read_json_object, read_parquet
from queerbench.hub.space.ui import HIDDEN, ui_errors
from queerbench.reporting.report import CONTENT_NOTE
from queerbench.results.folders import folder_kind
from queerbench.tasks import all_tasks

__all__ = ["FILTERS", "ViewPart", "build_viewer", "filter_table", "load_parts"]

FILTERS = ("group", "subject", "template", "label", "refusal_kind", "harmful")
"""The columns a table can be filtered on (those it has)."""
_ALL = "(all)"


@dataclass
class ViewPart:
    """One part of a folder: its name, report text, figures and per-item table (harmful completions unredacted)."""

    name: str
    report: str
    figures: list[str] = field(default_factory=list)
    table: pd.DataFrame = field(default_factory=pd.DataFrame)
    words: list[list[str]] = field(default_factory=list)
    """Per row of ``table``: its completions; ``flags`` says which are harmful."""
    flags: list[list[bool]] = field(default_factory=list)


def _read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def _run_table(folder: Path) -> tuple[pd.DataFrame, list[list[str]], list[list[bool]]]:
    """A run's sentences with their completions and per-word harm (see the module doc)."""
    from queerbench.scoring.hurtlex import load_hurtlex

    fix = "rerun the same `queerbench run` (it reuses the predictions)"
    preds = read_parquet(folder / "predictions.parquet", fix=fix)
    scored = folder / "sentences.parquet"
    per = read_parquet(scored, fix=fix).set_index("id") if scored.is_file() else None
    lexicon = None if per is not None else load_hurtlex()
    words_all, flags_all, rows = [], [], []
    for rec in preds.to_dict("records"):
        words = [str(w) for w in list(rec.get("tokens") if rec.get("tokens") is not None else [])]
        if per is not None and rec["id"] in per.index:
            cats = [list(c) for c in per.at[rec["id"], "word_hurtlex"]]
            tox_raw = per.at[rec["id"], "word_toxicity"] if "word_toxicity" in per.columns else None
            tox = (
                [list(t) for t in tox_raw] if tox_raw is not None and len(tox_raw) == len(words) else [[]] * len(words)
            )
        else:
            cats = [sorted(lexicon.categories(w)) if lexicon is not None else [] for w in words]
            tox = [[] for _ in words]
        if len(cats) != len(words):
            cats = [[] for _ in words]
        flags = [bool(c) or bool(t) for c, t in zip(cats, tox, strict=True)]
        labels = rec.get("label")
        rows.append(
            {
                "group": rec["group"],
                "subject": rec.get("subject"),
                "template": rec.get("template_id"),
                "sentence": rec["masked_sentence"],
                "label": ", ".join(sorted(set(map(str, labels)))) if labels is not None and len(labels) else "",
                "harmful": any(flags),
                "HurtLex": "; ".join(f"{w}: {'/'.join(c)}" for w, c in zip(words, cats, strict=True) if c),
                "toxicity flags": "; ".join(f"{w}: {'/'.join(t)}" for w, t in zip(words, tox, strict=True) if t),
            }
        )
        words_all.append(words)
        flags_all.append(flags)
    return pd.DataFrame(rows), words_all, flags_all


def _part(name: str, folder: Path) -> ViewPart:
    kind = folder_kind(folder)
    figures = sorted(str(p) for p in folder.glob("*.png"))
    if kind == "eval":
        return ViewPart(name, _read_text(folder / "card.md"), figures)
    if kind == "run":
        table, words, flags = _run_table(folder)
        return ViewPart(name, _read_text(folder / "report.md"), figures, table, words, flags)
    table = all_tasks()[kind].folder_table(folder)
    table = table if table is not None else pd.DataFrame()
    return ViewPart(name, _read_text(folder / "report.md"), figures, table)  # its replies are in the table itself


def load_parts(folder: Path) -> list[ViewPart]:
    """The folder's parts: itself, and for an eval each of its runs (one line for a folder with no results)."""
    folder = Path(folder)
    kind = folder_kind(folder)
    parts = [_part(folder.name or str(folder), folder)]
    if kind == "eval":
        record = read_json_object(folder / "eval.json", fix="rerun `queerbench eval` with the same --out")
        for name, state in (record.get("parts") or {}).items():
            if state.get("status") == "done" and (folder / name).is_dir():
                parts.append(_part(name, folder / name))
    return parts


def filter_table(part: ViewPart, filters: dict[str, Any], show_harmful: bool) -> pd.DataFrame:
    """``part``'s table with the rows matching ``filters`` (column → value; ``(all)`` or None matches any; the
    ``label`` filter matches a label among a row's), completions shown or harmful ones hidden."""
    table = part.table
    if table.empty:
        return table
    keep = pd.Series(True, index=table.index)
    for column, value in filters.items():
        if value in (None, _ALL, "") or column not in table:
            continue
        if column == "harmful":
            keep &= table["harmful"] == (value == "yes")
        elif column == "label":
            keep &= table["label"].astype(str).str.split(", ").map(lambda labels, v=value: v in labels)
        else:
            keep &= table[column].astype(str) == str(value)
    shown = table[keep].copy()
    if part.words:
        shown.insert(
            4 if len(shown.columns) >= 4 else len(shown.columns),
            "completions",
            [
                ", ".join(
                    w if show_harmful or not bad else HIDDEN
                    for w, bad in zip(part.words[i], part.flags[i], strict=True)
                )
                for i in shown.index
            ],
        )
        if not show_harmful:
            for column in ("HurtLex", "toxicity flags"):
                if column in shown:
                    shown[column] = ["███ (hidden)" if text else "" for text in shown[column]]
    if "harmful" in shown:
        shown["harmful"] = shown["harmful"].map({True: "⚠ yes", False: ""})
    return shown.reset_index(drop=True)


def _choices(table: pd.DataFrame, column: str) -> list[str]:
    if column not in table:
        return [_ALL]
    if column == "harmful":
        return [_ALL, "yes", "no"]
    if column == "label":
        values = sorted({v for text in table["label"].astype(str) for v in text.split(", ") if v})
    else:
        values = sorted({str(v) for v in table[column].dropna()})
    return [_ALL, *values]


def build_viewer(folder: Path) -> Any:
    """The viewer app for ``folder`` (not launched); one line for a folder that holds no results."""
    import gradio as gr

    parts = load_parts(Path(folder))
    by_name = {p.name: p for p in parts}

    @ui_errors
    def show(name: str, show_harmful: bool, *values: str) -> tuple[Any, ...]:
        part = by_name[name]
        table = filter_table(part, dict(zip(FILTERS, values, strict=True)), show_harmful)
        return part.report, part.figures, table

    @ui_errors
    def choose(name: str) -> tuple[Any, ...]:
        part = by_name[name]
        updates = [gr.update(choices=_choices(part.table, c), value=_ALL, visible=c in part.table) for c in FILTERS]
        return (*show(name, False, *[_ALL] * len(FILTERS)), *updates)

    @ui_errors
    def export(name: str, *values: str) -> str:
        table = filter_table(by_name[name], dict(zip(FILTERS, values, strict=True)), True)
        path = Path(tempfile.mkdtemp(prefix="queerbench-view-")) / f"{name}.csv"
        table.to_csv(path, index=False)
        return str(path)

    first = parts[0] if len(parts) == 1 or not parts[0].table.empty else parts[1]
    with gr.Blocks(title=f"queerbench: {Path(folder).name}") as app:
        gr.Markdown(f"# {Path(folder)}\n\n{CONTENT_NOTE}")
        part = gr.Dropdown([p.name for p in parts], value=first.name, label="Part")
        with gr.Tab("Report"):
            report = gr.Markdown(first.report)
            gallery = gr.Gallery(first.figures, label="Figures", columns=3)
        with gr.Tab("Items"):
            with gr.Row():
                selectors = [
                    gr.Dropdown(
                        _choices(first.table, c), value=_ALL, label=c.replace("_", " "), visible=c in first.table
                    )
                    for c in FILTERS
                ]
            show_harmful = gr.Checkbox(False, label="Show harmful completions (slurs and hate)")
            table = gr.Dataframe(filter_table(first, {}, False), wrap=True, interactive=False)
            download = gr.DownloadButton("Export the filtered table as CSV")
        part.change(choose, [part], [report, gallery, table, *selectors])
        for control in (show_harmful, *selectors):
            control.change(show, [part, show_harmful, *selectors], [report, gallery, table])
        download.click(export, [part, *selectors], [download])
    app.queue()
    return app
