"""Template × subject expansion: the sentence sets of QueerBench's ``paper`` and ``default`` tasks.

The upstream QueerBench files (templates, nouns, pronouns) are fetched through :mod:`queerbench.base.sources`; the rules
that turn them into sentences live here, and the project's own corrections (verb forms, the one template typo, group
maps) live in versioned data files under ``queerbench/data`` with a schema check.

- ``paper``: exactly what the paper's code generated (``template_complete.csv``), bugs included: a capitalised "The"
  everywhere, pronouns lowercase, the ``they`` plural hack (``they ha learning …``), duplicate templates and the
  duplicate pronoun ``e`` — 106 × (62 + 16) = 8,268 sentences.
- ``default``: the same material done right — duplicates removed (103 × (62 + 15) = 7,931), real verb agreement,
  accusative forms in object position, possessives that agree with pronoun subjects, "the" lowercase inside a
  sentence, a capital letter at the start, and the "has learning a living" typo fixed.

Every row also carries ``neutral_sentence``: the template rendered grammatically with the subject "the person".
Which set a task gets is its ``published_sentences`` setting in ``tasks.json`` (``paper``: true).
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import pandas as pd

from queerbench.base.sources import fetch
from queerbench.tasks.base import load_specs

__all__ = [
    "COLUMNS",
    "SPLITS",
    "Subject",
    "TemplateError",
    "build_sentences",
    "load_pronouns",
    "load_templates",
    "load_terms",
    "render_default",
    "render_paper",
    "subjects",
]

MASK = "[MASK]"
TARGET = "<target>"
SUBJECT_PLACEHOLDER = "[SUBJECT]"
SPLITS: tuple[str, ...] = ("nouns", "pronouns")
COLUMNS: tuple[str, ...] = (
    "id",
    "template_id",
    "template",
    "template_type",
    "subject",
    "subject_text",
    "group",
    "category",
    "masked_sentence",
    "neutral_sentence",
)


class TemplateError(ValueError):
    """A template, noun or pronoun file is malformed."""


@dataclass(frozen=True)
class Subject:
    """One subject (a noun or a pronoun) with the forms the renderers need."""

    key: str  # unique within its split, used in the row id ("e", "e-2", "drag_king")
    name: str  # as listed upstream ("agender", "he")
    kind: str  # "noun" or "pronoun"
    group: str
    category: str
    nominative: str  # "the agender person", "he"
    accusative: str  # "the agender person", "him"
    possessive: str  # "their", "his"
    plural: bool  # verb agreement ("they" takes plural verbs)
    paper_text: str  # what the paper's code inserted ("The agender person", "he")
    paper_markers: tuple[tuple[str, str], ...]  # the paper's <be>/<have>/<were> forms for this subject


# ---------------------------------------------------------------------------------------------------- data files
@cache
def _project_data(name: str) -> str:
    return resources.files("queerbench.data").joinpath(name).read_text(encoding="utf-8")


@cache
def _groups_config() -> dict:
    cfg = json.loads(_project_data("subject_groups.json"))
    for key in (
        "nouns",
        "pronouns",
        "group_order",
        "splits",
        "verb_markers",
        "sentence_adverbs",
        "adverbs_before_verb",
        "neutral_subject",
    ):
        if key not in cfg:
            raise TemplateError(f"queerbench/data/subject_groups.json lacks the key {key!r}")
    return cfg


@cache
def _verb_forms() -> tuple[dict[str, str], dict[str, str]]:
    """(singular → plural, plural → singular) for verbs written right after a subject."""
    rows = list(csv.DictReader(io.StringIO(_project_data("verb_forms.csv"))))
    if not rows or set(rows[0]) != {"singular", "plural"}:
        raise TemplateError("queerbench/data/verb_forms.csv must have exactly the columns singular,plural")
    to_plural = {r["singular"]: r["plural"] for r in rows}
    return to_plural, {v: k for k, v in to_plural.items()}


@cache
def _corrections() -> dict[str, str]:
    rows = list(csv.DictReader(io.StringIO(_project_data("template_corrections.csv"))))
    if rows and set(rows[0]) != {"upstream", "corrected", "reason"}:
        raise TemplateError("queerbench/data/template_corrections.csv must have the columns upstream,corrected,reason")
    return {r["upstream"]: r["corrected"] for r in rows}


def _read_semicolon_csv(path: Path, required: list[str], what: str) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, sep=";", dtype=str, keep_default_na=False)
    except Exception as exc:  # pandas raises many types for malformed text
        raise TemplateError(f"{what} file {path} could not be parsed as ';'-separated CSV: {exc}") from exc
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise TemplateError(
            f"{what} file {path} lacks the column(s) {missing}; expected a ';'-separated header with {required}"
        )
    return frame


def load_templates(path: str | Path | None = None) -> pd.DataFrame:
    """The upstream templates (``template``, ``type``; 106 rows), validated.

    Each template needs exactly one ``[MASK]`` and one ``<target>``; a malformed row is a :class:`TemplateError`
    naming the row and the fix.
    """
    file = fetch("queerbench_templates") if path is None else Path(path)
    frame = _read_semicolon_csv(Path(file), ["template", "type"], "template")
    for i, (template, kind) in enumerate(zip(frame["template"], frame["type"], strict=True)):
        if template.count(MASK) != 1:
            raise TemplateError(
                f"template row {i + 1} ({template!r}) has {template.count(MASK)} '{MASK}' placeholders; "
                f"each template needs exactly one {MASK} where the model predicts a word"
            )
        if template.count(TARGET) != 1:
            raise TemplateError(
                f"template row {i + 1} ({template!r}) has {template.count(TARGET)} '{TARGET}' placeholders; "
                f"each template needs exactly one {TARGET} (the paper's [SUBJECT]) where the subject goes"
            )
        if kind not in ("role", "societal"):
            raise TemplateError(f"template row {i + 1} has type {kind!r}; expected 'role' or 'societal'")
    return frame


def load_terms(path: str | Path | None = None) -> pd.DataFrame:
    """The upstream nouns (``queerness``, ``name``, ``type``, ``the``; 62 rows), validated."""
    file = fetch("queerbench_terms") if path is None else Path(path)
    frame = _read_semicolon_csv(Path(file), ["queerness", "name", "type", "the"], "terms")
    cfg = _groups_config()["nouns"]
    for i, (_, row) in enumerate(frame.iterrows()):  # read_csv's frame: its index is the row number
        if (
            row["queerness"] not in cfg["groups"]
            or row["type"] not in cfg["categories"]
            or row["the"] not in ("y", "n")
        ):
            raise TemplateError(
                f"terms row {i + 1} ({row.to_dict()}) is malformed: queerness must be one of {list(cfg['groups'])}, "
                f"type one of {cfg['categories']}, the 'y' or 'n'"
            )
    return frame


def load_pronouns(path: str | Path | None = None) -> pd.DataFrame:
    """The upstream pronoun rows (16, including the duplicate ``e``), validated."""
    file = fetch("queerbench_pronouns") if path is None else Path(path)
    required = ["type", "name", "acc", "pos_dep", "pos_ind", "ref", "<be>", "<have>", "<were>"]
    frame = _read_semicolon_csv(Path(file), required, "pronouns")
    groups = _groups_config()["pronouns"]["groups"]
    bad = frame[~frame["type"].isin(list(groups))]
    if len(bad):
        raise TemplateError(f"pronouns rows {list(bad.index + 1)} have a type outside {list(groups)}")
    return frame


@cache
def _published() -> dict[str, bool]:
    """Each QueerBench task's ``published_sentences`` setting (``tasks.json``): the paper's sentences as its code
    generated them (bugs and duplicates included), or the grammatical set."""
    specs = load_specs(Path(__file__).with_name("tasks.json"))
    return {name: bool(spec.extra.get("published_sentences")) for name, spec in specs.items()}


def published_sentences(config: str) -> bool:
    """Whether the QueerBench task ``config`` uses the sentences as published; a one-line ``ValueError`` naming the
    QueerBench tasks for any other name."""
    if config not in _published():
        raise ValueError(
            f"unknown config {config!r} for QueerBench's sentences; choose one of: {', '.join(_published())}"
        )
    return _published()[config]


# ---------------------------------------------------------------------------------------------------- subjects
def subjects(config: str = "default") -> dict[str, list[Subject]]:
    """The nouns and pronouns of ``config`` (the grammatical set drops the duplicate pronoun ``e``), by kind."""
    return _subjects(load_terms(), load_pronouns(), dedupe=not published_sentences(config))


def _subjects(terms: pd.DataFrame, pronouns: pd.DataFrame, *, dedupe: bool) -> dict[str, list[Subject]]:
    cfg = _groups_config()
    nouns: list[Subject] = []
    for _, row in terms.iterrows():
        base = f"{row['name']} person" if row["the"] == "y" else row["name"]
        nouns.append(
            Subject(
                key=row["name"].replace(" ", "_"),
                name=row["name"],
                kind="noun",
                group=cfg["nouns"]["groups"][row["queerness"]],
                category=row["type"],
                nominative=f"the {base}",
                accusative=f"the {base}",
                possessive="their",
                plural=False,
                paper_text=f"The {base}",
                paper_markers=tuple(cfg["verb_markers"]["singular"].items()),
            )
        )
    prons: list[Subject] = []
    seen: dict[str, int] = {}
    for _, row in pronouns.iterrows():
        name = row["name"]
        seen[name] = seen.get(name, 0) + 1
        if dedupe and seen[name] > 1:
            continue
        plural = row["<be>"] == "are"
        prons.append(
            Subject(
                key=name if seen[name] == 1 else f"{name}-{seen[name]}",
                name=name,
                kind="pronoun",
                group=cfg["pronouns"]["groups"][row["type"]],
                category=cfg["pronouns"]["category"],
                nominative=name,
                accusative=row["acc"],
                possessive=row["pos_dep"],
                plural=plural,
                paper_text=name,
                paper_markers=tuple((m, row[m]) for m in ("<be>", "<have>", "<were>")),
            )
        )
    return {"nouns": nouns, "pronouns": prons}


NEUTRAL_SUBJECT = Subject(
    key="person",
    name="person",
    kind="noun",
    group="neutral-subject",
    category="neutral-subject",
    nominative="the person",
    accusative="the person",
    possessive="their",
    plural=False,
    paper_text="The person",
    paper_markers=(("<be>", "is"), ("<have>", "has"), ("<were>", "was")),
)


# ---------------------------------------------------------------------------------------------------- renderers
def render_paper(template: str, subject: Subject) -> str:
    """Fill ``template`` the way the paper's code did, bugs included (see the module docstring)."""
    sentence = template.replace(TARGET, subject.paper_text)
    for marker, form in subject.paper_markers:
        sentence = sentence.replace(marker, form)
    if subject.kind == "pronoun" and subject.name == "they":
        # upstream `plural_form`: drop a trailing "s" from the second whitespace token, by regex over the sentence
        second = sentence.split(" ")[1]
        if second.endswith("s"):
            sentence = re.sub(second, second[:-1], sentence)
    return sentence


def _in_object_position(template: str) -> bool:
    """True when the subject slot is an object: anything but a sentence start, a comma-ended lead-in ("Among
    all, …") or leading adverbs ("Very soon …") comes before it ("… the best choice for [SUBJECT]", "I met [SUBJECT]")."""
    head = template.split(TARGET, 1)[0].strip()
    if not head or head.endswith(","):
        return False
    return not all(word.lower() in _groups_config()["sentence_adverbs"] for word in head.split())


def render_default(template: str, subject: Subject) -> str:
    """Fill ``template`` grammatically for ``subject`` (the ``default`` rules in the module docstring)."""
    return _render_default(template, subject)[0]


def _inserted_default(template: str, subject: Subject) -> str:
    """The subject exactly as :func:`render_default` inserts it (form and capitalisation)."""
    text = subject.accusative if _in_object_position(template) else subject.nominative
    return text[0].upper() + text[1:] if template.startswith(TARGET) else text


def _render_default(template: str, subject: Subject) -> tuple[str, str]:
    template = _corrections().get(template, template)
    return _render_default_sentence(template, subject), _inserted_default(template, subject)


def _render_default_sentence(template: str, subject: Subject) -> str:
    cfg = _groups_config()
    to_plural, to_singular = _verb_forms()
    if _in_object_position(template):
        # the real subject is [MASK]: verbs in 3rd person singular, the subject takes its accusative form
        sentence = template.replace(TARGET, subject.accusative)
        for marker, form in cfg["verb_markers"]["singular"].items():
            sentence = sentence.replace(marker, form)
    else:
        number = "plural" if subject.plural else "singular"
        head, tail = template.split(TARGET, 1)
        words = tail.split(" ")
        # words[0] == "" (the space after the subject); agree the verb right after it, past one listed adverb
        i = 2 if len(words) > 2 and words[1] in cfg["adverbs_before_verb"] else 1
        if i < len(words) and words[i] not in cfg["verb_markers"][number]:
            word = words[i]
            words[i] = to_plural.get(word, word) if subject.plural else to_singular.get(word, word)
        tail = " ".join(words)
        for marker, form in cfg["verb_markers"][number].items():
            tail = tail.replace(marker, form)
        if subject.kind == "pronoun":
            tail = re.sub(r"\btheir\b", subject.possessive, tail)
        sentence = head + subject.nominative + tail
    return sentence[0].upper() + sentence[1:] if sentence[0].isalpha() else sentence


def _display_template(template: str) -> str:
    return template.replace(TARGET, SUBJECT_PLACEHOLDER)


# ---------------------------------------------------------------------------------------------------- builder
def build_sentences(
    config: str,
    split: str | None = None,
    *,
    templates_path: str | Path | None = None,
    terms_path: str | Path | None = None,
    pronouns_path: str | Path | None = None,
) -> pd.DataFrame:
    """All sentences of the QueerBench task ``config`` (one split, or both in template-major order) with the dataset
    columns.

    As published (``paper``): 8,268 rows in the order of the published ``template_complete.csv`` (per template: 62
    nouns then 16 pronouns). Grammatical (``default``): 7,931 rows in the same order, duplicates removed.
    """
    published = published_sentences(config)
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    templates = load_templates(templates_path)
    subjects = _subjects(load_terms(terms_path), load_pronouns(pronouns_path), dedupe=not published)

    def render(template: str, subject: Subject) -> tuple[str, str]:
        if published:
            return render_paper(template, subject), subject.paper_text
        return _render_default(template, subject)

    rows: list[dict] = []
    seen_templates: set[str] = set()
    for template_id, (template, kind) in enumerate(zip(templates["template"], templates["type"], strict=True)):
        if not published:
            if template in seen_templates:
                continue
            seen_templates.add(template)
        neutral = render_default(template, NEUTRAL_SUBJECT)
        shown = _display_template(template if published else _corrections().get(template, template))
        for split_name in SPLITS:
            if split is not None and split_name != split:
                continue
            for subject in subjects[split_name]:
                sentence, inserted = render(template, subject)
                rows.append(
                    {
                        "id": f"{config}-{template_id:03d}-{subject.key}",
                        "template_id": template_id,
                        "template": shown,
                        "template_type": kind,
                        "subject": subject.name,
                        "subject_text": inserted,
                        "group": subject.group,
                        "category": subject.category,
                        "masked_sentence": sentence,
                        "neutral_sentence": neutral,
                        "split": split_name,
                    }
                )
    frame = pd.DataFrame(rows)
    return frame
