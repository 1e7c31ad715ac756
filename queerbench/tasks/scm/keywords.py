"""The keywords of an SCM reply: the "three keywords" the survey prompts ask for, read from numbered or bulleted
lists, "Keyword 1:" lines, bold heads or a plain list of words (:func:`parse_keywords`), and a text's words
(:func:`words`). Split out of :mod:`queerbench.tasks.scm.parse`, which re-exports both."""

from __future__ import annotations

import re

from queerbench.tasks.scm.phrases import load_survey_rules, normalize

__all__ = ["keywords_of", "parse_keywords", "words"]

_ITEM = re.compile(r"^([ \t]*)(?:\d+[.)]|[-*•])\s+(.+)$", re.MULTILINE)
_KEYWORD_LINE = re.compile(r"^[ \t]*(?:\*\*)?(?:keyword|word|trait|term)\s*\d+\b.*$", re.MULTILINE | re.IGNORECASE)
_BOLD_HEAD = re.compile(r"^[ \t]*\*\*([^*\n]{1,60})\*\*(.*)$", re.MULTILINE)


def _clean_keyword(raw: str, labelled: bool = False) -> str:
    rules = load_survey_rules()
    raw = re.sub(r"[*_`\"]", "", raw).strip()
    parts = re.split(r":|\s-\s|\(", raw, maxsplit=1)
    head = parts[0].strip().lower()
    if not labelled and rules.keyword_label_heads.fullmatch(head):  # "Keyword: brave - reason", "Keyword 2 - Stylish"
        return _clean_keyword(parts[1], labelled=True) if len(parts) > 1 else ""
    head = re.sub(r"[^\w\- ]|[\d_]", " ", head.replace("'", ""))
    tokens = head.split()
    if tokens and tokens[0] in rules.keyword_meta_heads:
        return ""
    while len(tokens) > 1 and tokens[0] in rules.keyword_leading:  # "Being able to reproduce" → "able to reproduce"
        tokens.pop(0)
    if not tokens or len(tokens) > rules.keyword_max_head_words:
        return ""
    tokens = tokens[: rules.keyword_max_words]
    while tokens and tokens[-1] in rules.keyword_dangling:
        tokens.pop()
    return " ".join(tokens)


def _keyword_items(text: str) -> list[str]:
    text = re.sub(r"^[ \t]*#{1,6}[ \t]*", "", text, flags=re.MULTILINE)
    found = [(len(ind.expandtabs(4)), body) for ind, body in _ITEM.findall(text)]
    if found:
        top = min(i for i, _ in found)
        return [body for ind, body in found if ind == top]  # nested bullets are reasons, not keywords
    lines = _KEYWORD_LINE.findall(text)
    if len(lines) >= 2:
        return lines
    heads = _BOLD_HEAD.findall(text)
    if len(heads) >= 2:
        return [h + rest for h, rest in heads]
    for line in text.splitlines():
        if len(re.findall(r"[,;]", line)) >= 2:
            line = line.split(":", 1)[-1]
            items = [re.sub(r"^\s*(?:and|or)\s+", "", x) for x in re.split(r"[,;]", line)]
            return [re.split(r"[.!?](?:\s|$)", x)[0] for x in items]
    return []


def keywords_of(norm: str, k: int) -> list[str]:
    """Up to ``k`` keywords of a normalised reply (its list items, else its words)."""
    out: list[str] = []
    for item in _keyword_items(norm):
        kw = _clean_keyword(item)
        if kw and kw not in out:
            out.append(kw)
        if len(out) == k:
            break
    return out


def parse_keywords(text: str | None, k: int = 5) -> list[str]:
    """Up to ``k`` elicited keywords (see the module rules); an empty list when none can be found."""
    return keywords_of(normalize(text), k) if text else []


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters, apostrophes and hyphens)."""
    return re.findall(r"[^\W\d_][\w'\-]*", text.lower())
