"""The subject groups the shipped data declares (``queerbench/data/subject_groups.json``), read once with a schema
check: the order scores are reported in, the gaps tested, what each group holds and which groups are identity nouns.

Generic code reads them here (a task declares its own ``extra.group_order`` and ``extra.comparisons`` where they
differ) instead of writing any group's name.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = ["SubjectGroups", "check_subject_groups", "subject_groups"]

FILE = "queerbench/data/subject_groups.json"


@dataclass(frozen=True)
class SubjectGroups:
    """The declared subject groups: the order scores are reported in, the gaps tested (pairs, first − second), a line
    saying what each group holds, and the groups of identity nouns."""

    order: tuple[str, ...]
    comparisons: tuple[tuple[str, str], ...]
    descriptions: dict[str, str]
    nouns: tuple[str, ...]


@functools.cache
def subject_groups() -> SubjectGroups:
    """:class:`SubjectGroups` read from its data file, schema-checked (a malformed file is one line naming it)."""
    raw = json.loads(resources.files("queerbench.data").joinpath("subject_groups.json").read_text(encoding="utf-8"))
    return check_subject_groups(raw, FILE)


def _names(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(g, str) and g for g in x)


def check_subject_groups(raw: Any, where: str) -> SubjectGroups:
    """``raw`` (a subject-groups document) as :class:`SubjectGroups`, or a one-line ``ValueError`` naming ``where``."""
    raw = raw if isinstance(raw, dict) else {}
    order, pairs, text = raw.get("group_order"), raw.get("comparisons"), raw.get("descriptions")
    nouns = raw["splits"].get("nouns") if isinstance(raw.get("splits"), dict) else None
    if not (
        isinstance(order, list)
        and isinstance(nouns, list)
        and _names(order)
        and _names(nouns)
        and isinstance(pairs, list)
        and all(_names(p) and len(p) == 2 for p in pairs)
        and isinstance(text, dict)
        and all(isinstance(v, str) for v in text.values())
    ):
        raise ValueError(
            f"{where} needs 'group_order' (group names), 'comparisons' (pairs of groups), 'descriptions' "
            "({group: text}) and 'splits.nouns' (group names); reinstall queerbench or fix the file"
        )
    return SubjectGroups(tuple(order), tuple((p[0], p[1]) for p in pairs), dict(text), tuple(nouns))
