"""Load and schema-check the project-authored SCM data files in ``queerbench/tasks/scm/data/``.

Groups, Warmth/Competence terms, prompt templates and thresholds are data, not code (the reply parser's phrase
files are loaded by :mod:`queerbench.tasks.scm.phrases`): every loader checks the file's shape and raises ``ValueError``
naming the file, the fault and the fix, so a bad edit fails early.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "AXES",
    "TASKS",
    "Group",
    "PromptTemplate",
    "Term",
    "load_embedder_thresholds",
    "load_groups",
    "load_paper_defaults",
    "load_prompts",
    "load_terms",
    "paper_decoding",
    "reference_rankings",
]

AXES: tuple[str, ...] = ("Warmth", "Competence")
TASKS: tuple[str, ...] = ("rating", "selection", "elicitation", "generation")
_PLACEHOLDERS = {"term", "group_plural", "group_name", "terms_list", "a_singular", "subject", "object", "be"}


@dataclass(frozen=True)
class Group:
    """One social group with the word forms the prompt templates need."""

    id: str
    label: str
    plural: str
    singular: str
    article: str
    subject: str
    object: str
    be: str


@dataclass(frozen=True)
class Term:
    """One Warmth or Competence attribute (paper Table 1)."""

    term: str
    axis: str
    human_subset: bool
    order: int


@dataclass(frozen=True)
class PromptTemplate:
    """One prompt type: a template with ``{placeholders}`` and whether it is instantiated once per term."""

    prompt_type: str
    task: str
    variant: int
    per_term: bool
    template: str
    note: str
    split: str


def _read(name: str) -> str:
    return resources.files("queerbench.tasks.scm").joinpath("data").joinpath(name).read_text(encoding="utf-8")


def _fail(name: str, problem: str) -> ValueError:
    return ValueError(f"queerbench/tasks/scm/data/{name}: {problem}; fix the data file (see its 'source' notes)")


def _json(name: str, version: int = 1) -> dict[str, Any]:
    raw = json.loads(_read(name))
    if not isinstance(raw, dict) or raw.get("schema_version") != version:
        raise _fail(name, f"expected a JSON object with schema_version {version}")
    return raw


@cache
def load_groups() -> tuple[Group, ...]:
    """The seven groups of Table 1, in the paper's order."""
    name = "groups.json"
    raw = _json(name)
    fields = set(Group.__dataclass_fields__)
    out = []
    for entry in raw.get("groups", []):
        if set(entry) != fields or not all(isinstance(v, str) and v for v in entry.values()):
            raise _fail(name, f"group {entry!r} must have exactly the non-empty string keys {sorted(fields)}")
        if entry["be"] not in ("is", "are"):
            raise _fail(name, f"group {entry['id']!r}: 'be' must be 'is' or 'are'")
        out.append(Group(**entry))
    ids = [g.id for g in out]
    if len(out) != 7 or len(set(ids)) != len(ids):
        raise _fail(name, f"expected 7 groups with distinct ids, got {ids}")
    return tuple(out)


@cache
def reference_rankings() -> dict[str, list[str]]:
    """Reference group rankings from the paper (ascending), keyed by name, e.g. ``competence_ascending_human``."""
    name = "groups.json"
    raw = _json(name)
    ids = {g.id for g in load_groups()}
    out = {}
    for key, entry in raw.get("reference_rankings", {}).items():
        groups = entry.get("groups", [])
        if sorted(groups) != sorted(ids):
            raise _fail(name, f"reference ranking {key!r} must list every group id exactly once")
        out[key] = list(groups)
    return out


@cache
def load_terms() -> tuple[Term, ...]:
    """The 11 Warmth and 11 Competence terms of Table 1, in table order."""
    name = "terms.csv"
    rows = list(csv.DictReader(io.StringIO(_read(name))))
    out = []
    for row in rows:
        if set(row) != {"term", "axis", "human_subset", "order"}:
            raise _fail(name, f"columns must be term,axis,human_subset,order; got {sorted(row)}")
        if row["axis"] not in AXES or row["human_subset"] not in ("true", "false") or not row["term"].strip():
            raise _fail(name, f"bad row {row!r}: axis in {AXES}, human_subset true/false, non-empty term")
        out.append(Term(row["term"].strip(), row["axis"], row["human_subset"] == "true", int(row["order"])))
    counts = {a: sum(t.axis == a for t in out) for a in AXES}
    if counts != {"Warmth": 11, "Competence": 11} or len({t.term for t in out}) != 22:
        raise _fail(name, f"expected 11 distinct terms per axis, got {counts}")
    return tuple(sorted(out, key=lambda t: t.order))


@cache
def load_prompts() -> tuple[PromptTemplate, ...]:
    """All prompt types: the five survey prompts and the five text-generation prompts."""
    name = "prompts.json"
    raw = _json(name)
    out = []
    for split in ("survey", "generation"):
        for entry in raw.get(split, []):
            try:
                tpl = PromptTemplate(split=split, **entry)
            except TypeError as exc:
                raise _fail(name, f"prompt entry {entry!r} has wrong keys ({exc})") from None
            if tpl.task not in TASKS or (split == "generation") != (tpl.task == "generation"):
                raise _fail(name, f"prompt {tpl.prompt_type!r}: task {tpl.task!r} does not fit split {split!r}")
            used = set(re.findall(r"{(\w+)}", tpl.template))
            if used - _PLACEHOLDERS:
                raise _fail(
                    name, f"prompt {tpl.prompt_type!r} uses unknown placeholders {sorted(used - _PLACEHOLDERS)}"
                )
            if tpl.per_term != ("term" in used):
                raise _fail(name, f"prompt {tpl.prompt_type!r}: per_term must be true exactly when it uses {{term}}")
            out.append(tpl)
    types = [p.prompt_type for p in out]
    if len(set(types)) != len(types) or sum(p.split == "generation" for p in out) != 5:
        raise _fail(name, f"expected distinct prompt types and 5 generation prompts, got {types}")
    return tuple(out)


@cache
def load_embedder_thresholds() -> dict[str, dict[str, Any]]:
    """``embedders.json``: embedder name → calibrated threshold and the agreement it was chosen by."""
    name = "embedders.json"
    raw = _json(name)
    out = {}
    for key, entry in raw.get("embedders", {}).items():
        thr = entry.get("threshold") if isinstance(entry, dict) else None
        if not isinstance(thr, (int, float)) or not -1 <= thr <= 1:
            raise _fail(name, f"embedder {key!r} needs a numeric 'threshold' in [-1, 1]")
        out[key] = dict(entry)
    return out


@cache
def load_paper_defaults() -> dict[str, Any]:
    """``paper_defaults.json``: decoding per model family, sample counts and token limits (paper §3.2, §4.1, §5)."""
    name = "paper_defaults.json"
    raw = _json(name)
    fams = raw.get("families")
    if not isinstance(fams, list) or not fams or fams[-1].get("match") != []:
        raise _fail(name, "'families' must be a list ending with the catch-all family (match: [])")
    for fam in fams:
        t, p = fam.get("temperature"), fam.get("top_p")
        if not isinstance(t, (int, float)) or t < 0 or not (p is None or (isinstance(p, (int, float)) and 0 < p <= 1)):
            raise _fail(name, f"family {fam.get('family')!r}: temperature >= 0 and top_p in (0, 1] or null")
    for key in ("survey_samples", "story_samples", "survey_max_new_tokens", "story_max_new_tokens"):
        if not isinstance(raw.get(key), int) or raw[key] < 1:
            raise _fail(name, f"{key!r} must be a positive integer")
    return raw


def paper_decoding(model_name: str | None) -> dict[str, Any]:
    """The paper's temperature / top-p for a model name: the first family whose ``match`` substring it contains
    (case-insensitive), else the catch-all. Returns ``{"family", "temperature", "top_p", "note"}``."""
    name = (model_name or "").lower()
    for fam in load_paper_defaults()["families"]:
        if not fam["match"] or any(m in name for m in fam["match"]):
            return {k: fam[k] for k in ("family", "temperature", "top_p", "note")}
    raise AssertionError("unreachable: the last family matches everything")
