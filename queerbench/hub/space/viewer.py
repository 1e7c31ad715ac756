"""``queerbench view DIR``: a run, eval or task folder in the local Gradio app.

For each part of the folder (a run; an eval's runs; a task's own folder such as an ``scm run``) the app shows its
report (``card.md`` or ``report.md``), its figures and its per-item table: for a run, every sentence with its
completions, the reply labels of a generative run, the HurtLex categories and toxicity flags per word (from the run's
``sentences.parquet``; a run of an earlier version gets its HurtLex categories looked up here and no toxicity flags),
and whether any completion is harmful; for a task folder, the table the task gives (the SCM replies with their parse
and refusal kind). The table filters by group, subject, template, reply label, refusal kind and harmful flag.

Harmful words stay hidden, under the content note, until "Show harmful completions" is ticked, by one rule for every
tab: a run's completions flagged by HurtLex or the toxicity scorer; in a task's replies (the SCM probes'), each word
HurtLex gives a category (:func:`~queerbench.hub.space.ui.flagged_words`; the benchmark's identity words, which name
the groups, stay). The report hides the same words in its tables and lists, and its figures (``![…](heatmap.png)``,
relative to the folder) are embedded in it, so they show however the app is served. An eval folder that lost its
``eval.json`` still opens (its card, or its ``results.json`` rows, as its one part). The filtered table exports as CSV
with every completion shown. Nothing is scored or predicted again.
"""

from __future__ import annotations

import base64
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.arguments import UserError
from queerbench.base.files import read_json, read_json_object, read_parquet
from queerbench.hub.space.ui import HIDDEN, flagged_words, hide_words, ui_errors
from queerbench.reporting.record import is_record
from queerbench.reporting.report import CONTENT_NOTE
from queerbench.results.folders import folder_kind, folder_rows
from queerbench.tasks import all_tasks

__all__ = ["FILTERS", "ViewPart", "build_viewer", "filter_table", "load_parts", "report_view", "require_gradio"]

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
    hidden_words: frozenset[str] = frozenset()
    """The harmful words (lowercased) hidden in ``text_columns`` and in the report until asked for."""
    text_columns: tuple[str, ...] = ()
    """Columns of free text (a task's replies) in which ``hidden_words`` are hidden."""
    images: dict[str, str] = field(default_factory=dict)
    """The report's image links (as written in it) → the image as a ``data:`` URI (or None: not in the folder)."""


_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml"}


_RERUN = "rerun the same `queerbench run` (it reuses the predictions)"


def require_gradio() -> Any:
    """The ``gradio`` module, or a one-line :class:`UserError` naming the extra that installs it."""
    try:
        import gradio
    except ImportError as exc:
        raise UserError(
            f"queerbench view needs Gradio, which is not installed ({exc}); install the space extra: "
            "pip install 'queerbench[space]'"
        ) from None
    return gradio


def _identity_words(table: pd.DataFrame) -> set[str]:
    """The words of the table's group and subject names (they name who a sentence or reply is about)."""
    names = [str(v) for column in ("group", "subject") if column in table for v in table[column].dropna().unique()]
    return {w.lower() for name in names for w in re.findall(r"\w+", name)}


def _images(report: str, folder: Path) -> dict[str, str]:
    """Each relative image link of ``report`` that names a picture inside ``folder``, as a ``data:`` URI."""
    root = folder.resolve()
    found = {}
    for _, target in _IMAGE.findall(report):
        if target in found or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("/"):
            continue
        path = (folder / target).resolve()
        mime = _MIME.get(path.suffix.lower())
        if mime and path.is_relative_to(root) and path.is_file():
            found[target] = f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"
    return found


def _hide_in_report(report: str, words: frozenset[str]) -> str:
    """``report`` with ``words`` hidden in its table rows and list items (where completions and replies are listed);
    headings, table headers and paragraphs are left as written."""
    lines = report.split("\n")
    out = []
    for i, line in enumerate(lines):
        text = line.lstrip()
        header = text.startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|?\s*:?-{3,}", lines[i + 1])
        listed = text.startswith(("- ", "* ", "+ ")) or re.match(r"\d+[.)] ", text)
        out.append(hide_words(line, words) if (text.startswith("|") and not header) or listed else line)
    return "\n".join(out)


def report_view(part: ViewPart, show_harmful: bool) -> str:
    """The part's report as the Report tab shows it: harmful words hidden unless ``show_harmful``, its figures
    embedded (a link to a figure the folder lacks says so)."""
    text = part.report if show_harmful else _hide_in_report(part.report, part.hidden_words)

    def embed(match: re.Match[str]) -> str:
        alt, target = match.group(1), match.group(2)
        if target in part.images:
            return f"![{alt}]({part.images[target]})"
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            return match.group(0)
        return f"*(figure {target} is not in the folder)*"

    return _IMAGE.sub(embed, text)


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


def _rows_report(folder: Path) -> str:
    """An eval folder's rows (``results.json``) as a table, for a folder without its ``card.md``."""
    rows = folder_rows(folder)
    lines = [
        f"No `card.md` in {folder.name or folder}: the {len(rows)} result row(s) of its `results.json`.",
        "",
        "| task | method | model | k | toxicity | scores |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        scores = ", ".join(f"{g}: {'—' if v is None else f'{v:.2f}'}" for g, v in row.scores.items())
        lines.append(f"| {row.task} | {row.method} | {row.model} | {row.k} | {row.toxicity} | {scores} |")
    return "\n".join(lines)


def _record_part(name: str, folder: Path, report: str, figures: list[str]) -> ViewPart:
    """A run on the request runner: its items with their scalar columns (the task's and the per-item scores; list
    columns such as candidates and per-candidate scores left out), replies hidden by the rule of other replies."""
    table = read_parquet(folder / "predictions.parquet", fix=_RERUN)
    scalar = [
        c for c in table.columns if not table[c].map(lambda v: hasattr(v, "__len__") and not isinstance(v, str)).any()
    ]
    table = table[scalar].copy()
    hidden: frozenset[str] = frozenset()
    columns: tuple[str, ...] = ()
    if "reply" in table:
        per_reply = flagged_words(table["reply"].astype(str), keep=_identity_words(table))
        table.insert(list(table.columns).index("reply") + 1, "harmful", [bool(f) for f in per_reply])
        hidden, columns = frozenset(set().union(*per_reply)), ("reply",)
    return ViewPart(
        name, report, figures, table, hidden_words=hidden, text_columns=columns, images=_images(report, folder)
    )


def _part(name: str, folder: Path) -> ViewPart:
    kind = folder_kind(folder)
    figures = sorted(str(p) for p in folder.glob("*.png"))
    if kind == "eval":
        card = folder / "card.md"
        report = _read_text(card) if card.is_file() else _rows_report(folder)
        return ViewPart(name, report, figures, images=_images(report, folder))
    report = _read_text(folder / "report.md")
    if kind == "run" and is_record(read_json(folder / "scores.json", fix=_RERUN)):
        return _record_part(name, folder, report, figures)
    if kind == "run":
        table, words, flags = _run_table(folder)
        harmful = {w.lower() for ws, fs in zip(words, flags, strict=True) for w, f in zip(ws, fs, strict=True) if f}
        hidden: frozenset[str] = frozenset(harmful - _identity_words(table))
        return ViewPart(name, report, figures, table, words, flags, hidden, images=_images(report, folder))
    found = all_tasks()[kind].folder_table(folder)
    table = found if found is not None else pd.DataFrame()
    hidden = frozenset()
    columns: tuple[str, ...] = ()
    if "reply" in table:  # a task's replies: the same hiding rule, word by word in the reply's text
        per_reply = flagged_words(table["reply"].astype(str), keep=_identity_words(table))
        if "harmful" not in table:
            table.insert(list(table.columns).index("reply") + 1, "harmful", [bool(f) for f in per_reply])
        hidden, columns = frozenset(set().union(*per_reply)), ("reply",)
    return ViewPart(
        name, report, figures, table, hidden_words=hidden, text_columns=columns, images=_images(report, folder)
    )


def _part_folder(folder: Path, name: Any) -> Path | None:
    """The folder of an eval's part ``name`` when it is a folder inside ``folder`` (None otherwise)."""
    if not isinstance(name, str) or not name or Path(name).is_absolute():
        return None
    path = folder / name
    return path if path.resolve().is_relative_to(folder.resolve()) and path.is_dir() else None


def load_parts(folder: Path) -> list[ViewPart]:
    """The folder's parts: itself, and for an eval each of its finished runs (listed in its ``eval.json``; an eval
    folder without one is shown as its one part). One line for a folder with no results."""
    folder = Path(folder)
    kind = folder_kind(folder)
    parts = [_part(folder.name or str(folder), folder)]
    record_path = folder / "eval.json"
    if kind == "eval" and record_path.is_file():
        fix = "rerun `queerbench eval` with the same --out"
        record = read_json_object(record_path, fix=fix)
        states = record.get("parts") or {}
        if not isinstance(states, dict):
            raise ValueError(f"{record_path}: 'parts' must be an object (part name → its state); {fix}")
        for name, state in states.items():
            path = _part_folder(folder, name)
            if isinstance(state, dict) and state.get("status") == "done" and path is not None:
                parts.append(_part(name, path))
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
        for column in part.text_columns:
            if column in shown:
                shown[column] = [hide_words(str(text), part.hidden_words) for text in shown[column]]
        if part.words:
            for column in ("HurtLex", "toxicity flags"):
                if column in shown:
                    shown[column] = [HIDDEN if text else "" for text in shown[column]]
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
    """The viewer app for ``folder`` (not launched); one line for a folder that holds no results, and one naming the
    ``space`` extra when Gradio is not installed."""
    parts = load_parts(Path(folder))
    gr = require_gradio()
    by_name = {p.name: p for p in parts}

    @ui_errors
    def show(name: str, show_harmful: bool, *values: str) -> tuple[Any, ...]:
        part = by_name[name]
        table = filter_table(part, dict(zip(FILTERS, values, strict=True)), show_harmful)
        return report_view(part, show_harmful), part.figures, table

    @ui_errors
    def choose(name: str, show_harmful: bool) -> tuple[Any, ...]:
        part = by_name[name]
        updates = [gr.update(choices=_choices(part.table, c), value=_ALL, visible=c in part.table) for c in FILTERS]
        return (*show(name, show_harmful, *[_ALL] * len(FILTERS)), *updates)

    @ui_errors
    def export(name: str, *values: str) -> str:
        table = filter_table(by_name[name], dict(zip(FILTERS, values, strict=True)), True)
        path = Path(tempfile.mkdtemp(prefix="queerbench-view-")) / f"{name}.csv"
        table.to_csv(path, index=False)
        return str(path)

    first = parts[0] if len(parts) == 1 or not parts[0].table.empty else parts[1]
    with gr.Blocks(title=f"queerbench: {Path(folder).name}") as app:
        gr.Markdown(f"# {Path(folder)}\n\n{CONTENT_NOTE}")
        with gr.Row():
            part = gr.Dropdown([p.name for p in parts], value=first.name, label="Part", scale=3)
            show_harmful = gr.Checkbox(False, label="Show harmful completions (slurs and hate)", scale=1)
        with gr.Tab("Report"):
            report = gr.Markdown(report_view(first, False), elem_id="view-report")
            gallery = gr.Gallery(first.figures, label="Figures", columns=3)
        with gr.Tab("Items"):
            with gr.Row():
                selectors = [
                    gr.Dropdown(
                        _choices(first.table, c), value=_ALL, label=c.replace("_", " "), visible=c in first.table
                    )
                    for c in FILTERS
                ]
            table = gr.Dataframe(filter_table(first, {}, False), wrap=True, interactive=False)
            download = gr.DownloadButton("Export the filtered table as CSV")
        part.change(choose, [part, show_harmful], [report, gallery, table, *selectors])
        for control in (show_harmful, *selectors):
            control.change(show, [part, show_harmful, *selectors], [report, gallery, table])
        download.click(export, [part, *selectors], [download])
    app.queue()
    return app
