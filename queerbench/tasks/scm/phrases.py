"""The reply parser's phrase data: load and schema-check the data files, and normalise a reply once.

Every phrase the parser matches lives in ``queerbench/tasks/scm/data/`` (``normalize.json``, ``refusal_patterns.json``,
``survey_rules.json``, ``story_rules.json``, ``term_exclusions.json``). The patterns are written for text that
:func:`normalize` has already rewritten — straight apostrophes and quotes, plain hyphens, contractions spelt out
("I'm" → "I am", "can't" → "cannot", "don't" → "do not") — so no pattern spells a contraction or a curly
apostrophe itself. A bad edit to a data file fails at load time with the file, the fault and the fix.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from typing import Any

from queerbench.tasks.scm.data import _fail, _json, load_terms

__all__ = [
    "RefusalRules",
    "StoryRules",
    "SurveyRules",
    "load_refusal_rules",
    "load_story_rules",
    "load_survey_rules",
    "load_term_exclusions",
    "normalize",
    "plain",
]


def _compile(name: str, value: Any, key: str, flags: int = re.IGNORECASE) -> re.Pattern[str]:
    if not isinstance(value, str) or not value:
        raise _fail(name, f"{key!r} must be a non-empty regular expression string")
    try:
        return re.compile(value, flags)
    except re.error as exc:
        raise _fail(name, f"{key!r} is not a valid regular expression ({exc})") from None


def _compile_list(name: str, raw: dict[str, Any], key: str, flags: int = re.IGNORECASE) -> tuple[re.Pattern[str], ...]:
    items = raw.get(key)
    if not isinstance(items, list) or not items:
        raise _fail(name, f"{key!r} must be a non-empty list of regular expressions")
    return tuple(_compile(name, p, f"{key}[{i}]", flags) for i, p in enumerate(items))


def _words(name: str, raw: dict[str, Any], key: str) -> tuple[str, ...]:
    items = raw.get(key)
    if not isinstance(items, list) or not items or not all(isinstance(w, str) and w for w in items):
        raise _fail(name, f"{key!r} must be a non-empty list of strings")
    return tuple(items)


@dataclass(frozen=True)
class _Normalizer:
    characters: dict[str, str]
    contractions: re.Pattern[str]
    expansions: dict[str, str]
    suffixes: tuple[tuple[re.Pattern[str], str], ...]


@cache
def _normalizer() -> _Normalizer:
    name = "normalize.json"
    raw = _json(name)
    chars, contr, suffixes = raw.get("characters"), raw.get("contractions"), raw.get("suffixes")
    if not isinstance(chars, dict) or not all(isinstance(k, str) and len(k) == 1 for k in chars):
        raise _fail(name, "'characters' must map single characters to their replacement")
    if not isinstance(contr, dict) or not contr or not all(isinstance(v, str) for v in contr.values()):
        raise _fail(name, "'contractions' must map words to their expansion")
    if not isinstance(suffixes, list) or not all(isinstance(s, list) and len(s) == 2 for s in suffixes):
        raise _fail(name, "'suffixes' must be a list of [suffix, replacement] pairs")
    keys = sorted(contr, key=len, reverse=True)
    alts = "|".join(re.escape(k).replace("'", r"\s?'").replace(r"\ ", r"\s+") for k in keys)
    pattern = re.compile(r"(?<![\w'])(?:" + alts + r")(?![\w'])", re.IGNORECASE)
    suff = tuple(
        (re.compile(r"(?<=[A-Za-z])\s?" + re.escape(s).replace("'", "'") + r"(?![\w'])", re.IGNORECASE), r)
        for s, r in suffixes
    )
    return _Normalizer(dict(chars), pattern, {k.lower(): v for k, v in contr.items()}, suff)


def normalize(text: str) -> str:
    """The one normalisation every parser rule sees (``data/normalize.json``); idempotent.

    NFKC, then curly apostrophes and quotes made straight and dashes made hyphens, then contractions spelt out
    ("I’m" → "I am", "can't" → "cannot", "they'd" → "they would"; also "I 'm" as some tokenisers write it).
    """
    norm = _normalizer()
    out = unicodedata.normalize("NFKC", text)
    out = "".join(norm.characters.get(c, c) for c in out)

    def expand(m: re.Match[str]) -> str:
        key = re.sub(r"\s+", " ", re.sub(r"\s'", "'", m.group(0).lower()))
        exp = norm.expansions.get(key, m.group(0))
        return exp[0].upper() + exp[1:] if m.group(0)[:1].isupper() and exp[:1].islower() else exp

    out = norm.contractions.sub(expand, out)
    for pattern, repl in norm.suffixes:
        out = pattern.sub(repl, out)
    return re.sub(r"[ \t]{2,}", " ", out)


_EMPHASIS = re.compile(r"\*\*|__|(?<!\w)[*_](?=\w)|(?<=\w)[*_](?!\w)|`")
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]*", re.MULTILINE)
_BULLET = re.compile(r"^([ \t]*)[*•·▪◦]\s+", re.MULTILINE)


def plain(text: str) -> str:
    """``text`` without markdown emphasis, heading marks or ``*``/``•`` bullets (those become ``-``)."""
    return _EMPHASIS.sub("", _HEADING.sub("", _BULLET.sub(r"\1- ", text)))


@dataclass(frozen=True)
class RefusalRules:
    """``refusal_patterns.json``: the decline / meta / pivot phrases and the echo thresholds."""

    rule: str
    decline: tuple[re.Pattern[str], ...]
    decline_exceptions: tuple[re.Pattern[str], ...]
    meta: tuple[re.Pattern[str], ...]
    pivots: tuple[re.Pattern[str], ...]
    echo_overlap: float
    echo_min_new_words: int
    echo_min_words: int


@cache
def load_refusal_rules() -> RefusalRules:
    """The refusal phrases, compiled case-insensitively (``(?-i:...)`` marks case-sensitive parts)."""
    name = "refusal_patterns.json"
    raw = _json(name, version=3)
    try:
        echo = (float(raw["echo_overlap"]), int(raw["echo_min_new_words"]), int(raw["echo_min_words"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise _fail(name, f"echo_overlap, echo_min_new_words and echo_min_words must be numbers ({exc})") from None
    if not 0 < echo[0] <= 1 or not isinstance(raw.get("rule"), str):
        raise _fail(name, "echo_overlap must be in (0, 1] and 'rule' must describe the rule")
    return RefusalRules(
        raw["rule"],
        _compile_list(name, raw, "decline"),
        _compile_list(name, raw, "decline_exceptions"),
        _compile_list(name, raw, "meta"),
        _compile_list(name, raw, "pivots"),
        *echo,
    )


@dataclass(frozen=True)
class SurveyRules:
    """``survey_rules.json``: score statements, scale echoes, selection forms and keyword heads."""

    number_words: dict[str, float]
    scale_echoes: tuple[re.Pattern[str], ...]
    explicit_rating: tuple[re.Pattern[str], ...]
    structured_rating: tuple[re.Pattern[str], ...]
    trait_line: re.Pattern[str]
    overall_labels: frozenset[str]
    range: re.Pattern[str]
    range_max_width: int
    explicit_selection: tuple[str, ...]
    keyword_label_heads: re.Pattern[str]
    keyword_meta_heads: frozenset[str]
    keyword_leading: frozenset[str]
    keyword_dangling: frozenset[str]
    keyword_max_head_words: int
    keyword_max_words: int


@cache
def load_survey_rules() -> SurveyRules:
    """The rating / selection / keyword rules with ``{NUM}``, ``{DIG}`` filled in (``{TERM}`` stays a template)."""
    name = "survey_rules.json"
    raw = _json(name)
    words = raw.get("number_words")
    if not isinstance(words, dict) or not all(isinstance(v, int) and 1 <= v <= 5 for v in words.values()):
        raise _fail(name, "'number_words' must map words to scores 1-5")
    count = _compile(name, raw.get("count_nouns"), "count_nouns").pattern  # checked, kept as its text
    tail = r"(?![\d%]|\.\d|\s*(?:%|percent\b)|" + count + ")"
    num = r"(?P<n>[1-5](?:\.\d+)?|" + "|".join(map(re.escape, words)) + r")\b" + tail
    dig = r"(?P<n>[1-5](?:\.\d+)?)(?!\w)" + tail

    def fill(key: str) -> tuple[re.Pattern[str], ...]:
        items = raw.get(key)
        if not isinstance(items, list) or not items:
            raise _fail(name, f"{key!r} must be a non-empty list of regular expressions")
        return tuple(
            _compile(name, p.replace("{NUM}", num).replace("{DIG}", dig), f"{key}[{i}]", re.IGNORECASE | re.MULTILINE)
            for i, p in enumerate(items)
        )

    sel = raw.get("explicit_selection")
    if not isinstance(sel, list) or not all(isinstance(p, str) and "{TERM}" in p for p in sel):
        raise _fail(name, "'explicit_selection' must be a list of regexes that each contain {TERM}")
    for i, p in enumerate(sel):
        _compile(name, p.replace("{TERM}", "x"), f"explicit_selection[{i}]")
    try:
        limits = int(raw["range_max_width"]), int(raw["keyword_max_head_words"]), int(raw["keyword_max_words"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _fail(
            name, f"range_max_width, keyword_max_head_words, keyword_max_words must be integers ({exc})"
        ) from None
    return SurveyRules(
        {k.lower(): float(v) for k, v in words.items()},
        fill("scale_echoes"),
        fill("explicit_rating"),
        fill("structured_rating"),
        _compile(name, str(raw.get("trait_line", "")).replace("{NUM}", num), "trait_line", re.I | re.M),
        frozenset(w.lower() for w in _words(name, raw, "overall_labels")),
        _compile(name, raw.get("range"), "range"),
        limits[0],
        tuple(sel),
        _compile(name, raw.get("keyword_label_heads"), "keyword_label_heads"),
        frozenset(_words(name, raw, "keyword_meta_heads")),
        frozenset(_words(name, raw, "keyword_leading")),
        frozenset(_words(name, raw, "keyword_dangling")),
        limits[1],
        limits[2],
    )


@dataclass(frozen=True)
class StoryRules:
    """``story_rules.json``: what makes a clause general, specific, or about which referent."""

    rule: str
    general: tuple[re.Pattern[str], ...]
    specific: tuple[re.Pattern[str], ...]
    group_subject: re.Pattern[str]
    plural_quantifier: re.Pattern[str]
    each_every: re.Pattern[str]
    generic_singular: re.Pattern[str]
    possibility: re.Pattern[str]
    plural_they: re.Pattern[str]
    pronoun: re.Pattern[str]
    name_after: re.Pattern[str]
    not_names: frozenset[str]


@cache
def load_story_rules() -> StoryRules:
    """The story rules, compiled; pronouns and possessives become one word-boundary pattern."""
    name = "story_rules.json"
    raw = _json(name)
    pronouns = _words(name, raw, "pronouns")
    possessives = _words(name, raw, "possessives")
    not_noun = _words(name, raw, "possessive_not_noun")
    pron = (
        r"\b(?:" + "|".join(map(re.escape, pronouns)) + r")\b"
        r"|\b(?:"
        + "|".join(map(re.escape, possessives))
        + r")\b(?!\s+(?:"
        + "|".join(map(re.escape, not_noun))
        + r")\b)"
    )
    after = _compile(name, raw.get("name_verbs"), "name_verbs").pattern  # checked, kept as their text
    adverb = _compile(name, raw.get("name_adverb"), "name_adverb").pattern
    groups = raw.get("not_names")
    if not isinstance(groups, dict) or not all(isinstance(v, list) for v in groups.values()):
        raise _fail(name, "'not_names' must map a category to a list of capitalised words")
    if not isinstance(raw.get("rule"), str):
        raise _fail(name, "'rule' must describe the rule")
    return StoryRules(
        raw["rule"],
        _compile_list(name, raw, "general"),
        _compile_list(name, raw, "specific"),
        _compile(name, raw.get("group_subject"), "group_subject"),
        _compile(name, raw.get("plural_quantifier"), "plural_quantifier"),
        _compile(name, raw.get("each_every"), "each_every"),
        _compile(name, raw.get("generic_singular"), "generic_singular"),
        _compile(name, raw.get("possibility"), "possibility"),
        _compile(name, raw.get("plural_they"), "plural_they"),
        re.compile(pron, re.IGNORECASE),
        re.compile(r"\s+(?:" + adverb + r"\s+)?" + after),
        frozenset(w for v in groups.values() for w in v),
    )


@dataclass(frozen=True)
class TermExclusions:
    """Common-word uses of the Table 1 terms that are not selections ("kind of", "able to")."""

    exclusions: dict[str, tuple[re.Pattern[str], ...]]


@cache
def load_term_exclusions() -> TermExclusions:
    """``term_exclusions.json``, compiled; every key must be one of the 22 terms."""
    name = "term_exclusions.json"
    raw = _json(name, version=2)
    terms = {t.term for t in load_terms()}
    excl = raw.get("exclusions")
    if not isinstance(excl, dict) or set(excl) - terms:
        raise _fail(
            name, f"'exclusions' must map Table 1 terms to regex lists; unknown: {sorted(set(excl or {}) - terms)}"
        )
    return TermExclusions(
        {k: tuple(_compile(name, p, f"exclusions.{k}[{i}]") for i, p in enumerate(v)) for k, v in excl.items()}
    )
