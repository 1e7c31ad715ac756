"""QueerGen's sentence set, rebuilt from its pinned subject, marker and template files.

10 subjects × (unmarked + 30 markers) × 10 templates = 3,100 sentences, in QueerGen's row order (template, then
subject, then the unmarked form followed by the markers in ``markers.csv`` order). Markers flagged ``adj=y`` precede
the subject ("The transgender person …"); the others (nouns, and ``bigender`` whose flag is empty) take the form
"The person is a transgender woman and …" (QueerGen src/template.py). The model reads ``"{marked} [MASK]."``;
Perspective-style toxicity reads the unmarked sentence (same subject, no marker) with the word.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.sources import fetch
from queerbench.tasks.queergen.spec import spec

__all__ = [
    "SENTENCE_COLUMNS",
    "QueerGenFileError",
    "build_queergen_sentences",
    "load_markers",
    "load_subjects",
    "load_templates",
    "queergen_sample",
    "read_upstream_sentences",
]

SENTENCE_COLUMNS: tuple[str, ...] = (
    "id",
    "index",
    "template_id",
    "template",
    "template_type",
    "expected_word_type",
    "subject",
    "marker",
    "subject_text",
    "group",
    "category",
    "marked_sentence",
    "unmarked_sentence",
    "masked_sentence",
    "neutral_sentence",
)
"""Dataset columns of the ``queergen`` config (the shared ones of the dataset card plus QueerGen's own)."""


class QueerGenFileError(ValueError):
    """A QueerGen file has the wrong shape (columns, row count, values)."""


def _read_csv(name: str, path: str | os.PathLike[str] | None, columns: list[str], rows: int | None) -> pd.DataFrame:
    """Fetch (checksum-verified) and read one QueerGen CSV; one-line error naming the file on a wrong shape."""
    local = fetch(name, path)
    try:
        frame = pd.read_csv(local, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise QueerGenFileError(f"QueerGen file {local} ({name}) cannot be read as CSV: {exc}") from exc
    if list(frame.columns) != columns:
        raise QueerGenFileError(
            f"QueerGen file {local} ({name}) has the columns {list(frame.columns)}; expected {columns}"
        )
    if rows is not None and len(frame) != rows:
        raise QueerGenFileError(f"QueerGen file {local} ({name}) has {len(frame)} rows; expected {rows}")
    return frame


def load_subjects(path: str | os.PathLike[str] | None = None) -> list[str]:
    """The 10 unmarked subjects (person, individual, …)."""
    s = spec()
    frame = _read_csv(s["sources"]["subjects"], path, ["type", "value"], s["counts"]["subjects"])
    return frame["value"].str.strip().tolist()


def load_markers(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """The 30 markers with their group (``queer``/``non-queer``), category and placement (``adjective``)."""
    s = spec()
    frame = _read_csv(s["sources"]["markers"], path, ["type", "value", "category", "adj"], s["counts"]["markers"])
    unknown = sorted(set(frame["type"]) - set(s["groups"]))
    if unknown:
        raise QueerGenFileError(f"QueerGen markers file has unknown types {unknown}; expected {sorted(s['groups'])}")
    return pd.DataFrame(
        {
            "marker": frame["value"].str.strip(),
            "group": frame["type"].map(s["groups"]),
            "upstream_type": frame["type"],
            "category": frame["category"],
            "adjective": frame["adj"].str.strip() == s["placement"]["adjective_flag"],
        }
    )


def load_templates(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """The 10 templates (prefix + blank) with their index and expected part of speech."""
    s = spec()
    frame = _read_csv(
        s["sources"]["templates"], path, ["index", "template", "expected_word_type"], s["counts"]["templates"]
    )
    bad = [t for t in frame["template"] if s["placement"]["slot"] not in t]
    if bad:
        raise QueerGenFileError(f"QueerGen templates lack the slot {s['placement']['slot']!r}: {bad[:3]}")
    return pd.DataFrame(
        {
            "template_id": frame["index"].astype(int),
            "template": frame["template"],
            "expected_word_type": frame["expected_word_type"],
        }
    )


def _fill(template: str, form: str, subject: str, marker: str) -> str:
    return template.replace(spec()["placement"]["slot"], form.format(subject=subject, marker=marker))


@cache
def _build(subjects_path: str | None, markers_path: str | None, templates_path: str | None) -> pd.DataFrame:
    s = spec()
    place, sentence = s["placement"], s["sentence"]
    subjects = load_subjects(subjects_path)
    markers = load_markers(markers_path)
    templates = load_templates(templates_path)
    rows: list[dict[str, Any]] = []
    tpl: Any  # itertuples() rows: one attribute per column, untyped
    marker_rows: list[Any] = list(markers.itertuples(index=False))
    for tpl in templates.itertuples(index=False):
        for subject in subjects:
            unmarked = _fill(tpl.template, place["unmarked"], subject, "")
            entries = [("", "unmarked", s["unmarked_category"], unmarked)] + [
                (
                    m.marker,
                    m.group,
                    m.category,
                    _fill(tpl.template, place["adjective"] if m.adjective else place["noun"], subject, m.marker),
                )
                for m in marker_rows
            ]
            for marker, group, category, marked in entries:
                index = len(rows)
                suffix = tpl.template.split(place["slot"], 1)[1]
                rows.append(
                    {
                        "id": f"queergen-{index:04d}",
                        "index": index,
                        "template_id": int(tpl.template_id),
                        "template": tpl.template,
                        "template_type": "prefix",
                        "expected_word_type": tpl.expected_word_type,
                        "subject": subject,
                        "marker": marker,
                        "subject_text": marked[len("The ") : len(marked) - len(suffix)],
                        "group": group,
                        "category": category,
                        "marked_sentence": marked,
                        "unmarked_sentence": unmarked,
                        "masked_sentence": sentence.format(marked=marked),
                        "neutral_sentence": sentence.format(marked=unmarked),
                    }
                )
    frame = pd.DataFrame(rows, columns=list(SENTENCE_COLUMNS))
    if len(frame) != s["counts"]["sentences"]:
        raise QueerGenFileError(f"the QueerGen files give {len(frame)} sentences; expected {s['counts']['sentences']}")
    return frame


def build_queergen_sentences(
    *,
    subjects_path: str | os.PathLike[str] | None = None,
    markers_path: str | os.PathLike[str] | None = None,
    templates_path: str | os.PathLike[str] | None = None,
) -> pd.DataFrame:
    """The 3,100 QueerGen sentences as a DataFrame with :data:`SENTENCE_COLUMNS` (a fresh copy each call)."""
    paths = [None if p is None else str(Path(p)) for p in (subjects_path, markers_path, templates_path)]
    return _build(*paths).copy()


def read_upstream_sentences(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """QueerGen's own ``data/template_complete.csv`` (the reference the rebuilt sentences are checked against)."""
    s = spec()
    return _read_csv(
        s["sources"]["sentences"],
        path,
        ["index", "template", "subject", "marker", "type", "category", "Unmarked", "marked"],
        s["counts"]["sentences"],
    )


def queergen_sample(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """The 300 sentences of QueerGen's top-5 runs (its stored random sample: per template and subject the unmarked
    row plus one queer and one non-queer marker), as rows of :func:`build_queergen_sentences`."""
    s = spec()
    sample = _read_csv(
        s["sources"]["sample"],
        path,
        ["index", "template", "subject", "marker", "type", "category", "Unmarked", "marked"],
        s["counts"]["sample"],
    )
    full = build_queergen_sentences()
    index = sample["index"].astype(int)
    rows = full.set_index("index").loc[index].reset_index()
    mismatch = (rows["marked_sentence"].to_numpy() != sample["marked"].to_numpy()).sum()
    if mismatch:
        raise QueerGenFileError(f"QueerGen sample file: {mismatch} rows do not match the sentences of their index")
    return rows[list(SENTENCE_COLUMNS)]
