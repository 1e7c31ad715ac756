"""Clauses of a reply and what each one is: a refusal's decline, assistant talk, a general statement, or content
about one specific character (paper Appendix B, text generation).

:func:`clauses` splits normalised text into sentences and then after ``:``, ``;`` and ``, but``; :func:`label_clauses`
labels each clause ``decline``, ``meta``, ``general``, ``specific`` or ``other`` by the ordered rule in
``data/story_rules.json``, tracking who the pronouns refer to so that "they" is read like "she" when it is about one
person and as a group when the reply has turned to a group.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from queerbench.tasks.scm.phrases import load_refusal_rules, load_story_rules

__all__ = ["Clause", "clauses", "is_decline", "is_meta", "label_clauses"]

_SPLIT = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n+|(?<=;)\s+|(?<=,\sbut)\s+")
_COLON = re.compile(r"(?<=:)\s+")
_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_NAME = re.compile(r"(?<![\w'-])([A-Z][a-z]+(?:-[A-Z][a-z]+)?)(?![\w'-])")
_NOT_NAME_SUFFIX = re.compile(r"(?:ity|ism|ness|tion|sion|ment|ship|hood|ance|ence|ics)$")
_BEFORE_NAME = re.compile(
    r"\b(?:in|at|on|to|from|near|during|for|of|like|across|through|around|into|via|under|over|the|a|an|this|that|"
    r"every|each|about|since|until|after|before)\s+$",
    re.IGNORECASE,
)
_APPOSITIVE = re.compile(r"\s*,\s+(?:a|an)\s")


@dataclass(frozen=True)
class Clause:
    """One clause and its label (``decline``, ``meta``, ``general``, ``specific``, ``other``)."""

    text: str
    label: str


def clauses(text: str) -> list[str]:
    """Sentences of ``text``, split again after ``;``, ``, but`` and after a ``:`` that ends more than three words
    ("Here is a story: …"; "Name: Ana" stays one clause); list markers dropped, blanks skipped."""
    out = []
    for sentence in _SPLIT.split(text):
        pieces: list[str] = []
        for part in _COLON.split(sentence or ""):
            if pieces and len(pieces[-1].split()) <= 3:
                pieces[-1] += " " + part
            else:
                pieces.append(part)
        for piece in pieces:
            piece = _MARKER.sub("", piece).strip()
            if re.search(r"[^\W\d_]", piece):
                out.append(piece)
    return out


def is_decline(clause: str) -> bool:
    """Whether the clause says the model will not or cannot do what was asked (``refusal_patterns.json``)."""
    rules = load_refusal_rules()
    if not any(p.search(clause) for p in rules.decline):
        return False
    return not any(p.search(clause) for p in rules.decline_exceptions)


def is_meta(clause: str) -> bool:
    """Whether the clause is the assistant talking about itself or the request (an AI disclaimer, an offer)."""
    rules = load_refusal_rules()
    return any(p.search(clause) for p in rules.meta) or any(p.search(clause) for p in rules.decline)


def _has_name(clause: str, not_names: frozenset[str], after: re.Pattern[str]) -> bool:
    """A capitalised word used as a person's name: followed by a narrative verb, or by ", a/an" (an appositive)."""
    for m in _NAME.finditer(clause):
        word = m.group(1)
        if word in not_names or word.split("-")[0] in not_names or _NOT_NAME_SUFFIX.search(word.lower()):
            continue
        if _BEFORE_NAME.search(clause[: m.start()]):
            continue
        rest = clause[m.end() :]
        if after.match(rest) or _APPOSITIVE.match(rest):
            return True
    return False


def label_clauses(text: str) -> list[Clause]:
    """Label every clause of a (normalised, markdown-free) story reply by the rule in ``story_rules.json``."""
    rules = load_story_rules()
    singular, plural_they = "one", "one"  # who she/he/xe… and who "they" refer to: one specific person, or not
    out = []
    for clause in clauses(text):
        if is_decline(clause):
            out.append(Clause(clause, "decline"))
            continue
        if is_meta(clause):
            out.append(Clause(clause, "meta"))
            continue
        general = any(p.search(clause) for p in rules.general)
        group = bool(
            rules.group_subject.search(clause)
            or rules.plural_quantifier.search(clause)
            or rules.plural_they.search(clause)
        )
        generic = bool(rules.each_every.search(clause) or rules.generic_singular.search(clause))
        possible = bool(rules.possibility.search(clause))
        cue = any(p.search(clause) for p in rules.specific) or _has_name(clause, rules.not_names, rules.name_after)
        if group:
            plural_they = "group"
        if cue and not general and not possible:
            singular = plural_they = "one"
            out.append(Clause(clause, "specific"))
            continue
        if generic:
            singular = plural_they = "generic"
        if general or generic:
            out.append(Clause(clause, "general"))
            continue
        refs = [
            plural_they if m.group(0).lower() in ("they", "their") else singular for m in rules.pronoun.finditer(clause)
        ]
        if refs:
            out.append(Clause(clause, "specific" if "one" in refs and not possible else "general"))
        else:
            out.append(Clause(clause, "general" if group else "other"))
    return out
