"""Parse free-text answers: a 1–5 rating, the selected term, five elicited keywords, and refusals.

Rules (documented so results are reproducible):

- **rating**: echoes of the scale ("1=not at all", "5=extremely", "5-point", "1-5", "1 to 5") are removed first;
  then an explicit form wins ("rating: 4", "rate … as 4", "4/5", "4 out of 5"); else the first standalone number in
  [1, 5] that is not a list number ("1. …") (decimals such as 3.5 kept). Nothing found → ``None`` (a parse failure).
- **selection**: an explicit "answer/attribute/choose/select …: term" wins; else the terms the reply mentions
  (whole words, hyphen-insensitive). A reply naming more than ``max_terms`` distinct terms is an echo of the list
  and gives ``None``; otherwise the first term mentioned.
- **keywords**: numbered or bulleted list items (the part before ":"/" - "), else a comma-separated line; each
  keyword is cut to its first two words (the prompt's limit), lower-cased, at most ``k`` kept.
- **refusal**: the rule in ``data/refusal_patterns.json`` (paper Appendix B): empty, prompt echo, or an apology /
  inability pattern near the start — for survey prompts only when nothing parsable was found.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from queerbench.scm.data import load_refusal_rules

__all__ = ["is_refusal", "parse_keywords", "parse_rating", "parse_selection", "words"]

_SCALE_ECHO = re.compile(
    r"\(?\b1\s*=\s*not at all\b[^)\n]*\)?|\b5\s*=\s*extremely\b|\b5[- ]point\b|\b1\s*(?:-|–|to)\s*5\b|\(1\s*-\s*5\)",
    re.IGNORECASE,
)
_NUM = r"([1-5](?:\.\d+)?)(?![\d.]*\d)"
_EXPLICIT = [
    re.compile(r"\brating\b[^0-9\n]{0,30}?" + _NUM, re.IGNORECASE),
    re.compile(r"\brate[sd]?\b[^0-9\n]{0,40}?" + _NUM, re.IGNORECASE),
    re.compile(r"(?<![\d.])" + _NUM + r"\s*(?:/\s*5|out of 5)\b", re.IGNORECASE),
]
_LIST_MARKER = re.compile(r"^\s*\d+[.)]\s", re.MULTILINE)
_ANY = re.compile(r"(?<![\d.\-/])([1-5](?:\.\d+)?)(?![\d]|\.\d|\s*%)")


def parse_rating(text: str | None) -> float | None:
    """The 1–5 rating in ``text`` by the rule above, or ``None`` when there is none."""
    if not text:
        return None
    clean = _SCALE_ECHO.sub(" ", text)
    for pattern in _EXPLICIT:
        m = pattern.search(clean)
        if m:
            value = float(m.group(1))
            if 1 <= value <= 5:
                return value
    m = _ANY.search(_LIST_MARKER.sub(" ", clean))  # "1. Caring: ..." is a list number, not a rating
    if m:
        value = float(m.group(1))
        return value if 1 <= value <= 5 else None
    return None


def _norm(text: str) -> str:
    return re.sub(r"[-‐–]", " ", text.lower())


def parse_selection(text: str | None, terms: Sequence[str], max_terms: int = 3) -> str | None:
    """The one term of ``terms`` the reply selects, or ``None`` (no term, or the list echoed back)."""
    if not text:
        return None
    low = _norm(text)
    found: list[tuple[int, str]] = []
    for term in terms:
        m = re.search(r"\b" + re.escape(_norm(term)) + r"\b", low)
        if m:
            found.append((m.start(), term))
    if not found:
        return None
    for term in terms:  # explicit answer line wins
        if re.search(
            r"\b(?:answer|attribute|choose|chosen|select(?:ed|ion)?|choice)\b[^.\n]{0,20}?[:\-]?\s*\**\s*"
            + re.escape(_norm(term))
            + r"\b",
            low,
        ):
            return term
    if len({t for _, t in found}) > max_terms:
        return None
    return min(found)[1]


_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+(.+)$", re.MULTILINE)


def _clean_keyword(raw: str) -> str:
    head = re.split(r":|\s[-–—]\s|\(", raw, maxsplit=1)[0]
    head = re.sub(r"[*_\"'`]", "", head).strip().lower()
    head = re.sub(r"[^a-z\- ]", " ", head)
    return " ".join(head.split()[:2])


def parse_keywords(text: str | None, k: int = 5) -> list[str]:
    """Up to ``k`` elicited keywords (see the module rules); an empty list when none can be found."""
    if not text:
        return []
    items = _ITEM.findall(text)
    if not items:
        for line in text.splitlines():
            if line.count(",") >= 2:
                line = line.split(":", 1)[-1]
                items = line.split(",")
                break
    out = []
    for item in items:
        kw = _clean_keyword(item)
        if kw and kw not in out:
            out.append(kw)
        if len(out) == k:
            break
    return out


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters, apostrophes and hyphens)."""
    return re.findall(r"[a-z][a-z'\-]*", text.lower())


def is_refusal(text: str | None, prompt: str = "", *, parsed: bool = False, survey: bool = True) -> bool:
    """Whether a reply is a refusal under the documented rule (``data/refusal_patterns.json``, Appendix B).

    ``parsed`` says whether a rating/term/keyword was found; survey replies with a parsable answer are never
    refusals (the paper: a refusal is a failure to output a score or keyword).
    """
    rules = load_refusal_rules()
    if text is None or not text.strip():
        return True
    reply_words = words(text)
    if survey and parsed and len(reply_words) <= rules.echo_min_new_words:
        return False  # a bare answer such as "nice" or "4" is not an echo even though the prompt contains it
    prompt_words = set(words(prompt))
    if prompt_words and reply_words:
        overlap = sum(w in prompt_words for w in reply_words) / len(reply_words)
        new = len({w for w in reply_words if w not in prompt_words})
        if overlap >= rules.echo_overlap and new < rules.echo_min_new_words:
            return True
    if survey and parsed:
        return False
    head = text[: rules.window_chars]
    return any(p.search(head) for p in rules.patterns)
