"""Function words among the completions: how many there are per group, and leaving them out when asked.

A causal LM that fills ``The person is [MASK].`` with "a", "is" or "one" names nothing about the person, yet such
completions score zero on every lexicon and dilute a group's score. The closed-class English word list
(``queerbench/data/function_words.json``: the closed classes of the Penn Treebank tag set, its source and what it
leaves out recorded in the file) decides what a function word is, by exact lower-cased match.

- :func:`function_word_summary` → the ``function_words`` block of ``scores.json``: per group (and overall) the
  number of completions, how many are function words and their share, the most frequent ones, the sentences with no
  other word, and whether they were excluded. It is computed on every completion, before any exclusion.
- :func:`content_only` → the completions without function words and the sentences that keep at least one word: what
  ``--exclude-function-words`` (off by default) scores instead.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = [
    "FunctionWords",
    "content_inputs",
    "content_only",
    "full_per_sentence",
    "function_word_summary",
    "load_function_words",
    "schema_problems",
    "signature_field",
]

_FILE = "function_words.json"
_ENTRY = re.compile(r"^[a-z]+(?:'[a-z]+)?$")
TOP = 5
"""How many of a group's most frequent function words the summary lists."""


@dataclass(frozen=True)
class FunctionWords:
    """The word list (``words``), where it comes from (``source``) and the data file's sha256 (provenance)."""

    words: frozenset[str]
    source: str
    sha256: str

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and word.lower() in self.words


@functools.cache
def load_function_words() -> FunctionWords:
    """The closed-class word list, schema-checked (:func:`schema_problems`; any problem is a ``ValueError``)."""
    raw = resources.files("queerbench.data").joinpath(_FILE).read_bytes()
    data = json.loads(raw.decode("utf-8"))
    problems = schema_problems(data)
    if problems:
        raise ValueError(f"queerbench/data/{_FILE}: " + "; ".join(problems))
    words = frozenset(w for ws in data["classes"].values() for w in ws)
    return FunctionWords(words, data["source"], hashlib.sha256(raw).hexdigest())


def schema_problems(data: Any) -> list[str]:
    """What is wrong with a word-list document: it needs ``schema_version`` 1, a ``source``, and ``classes`` mapping
    each class name to a non-empty list of distinct lower-case words (letters, one inner apostrophe at most)."""
    if not isinstance(data, dict):
        return ["the file must hold a JSON object"]
    problems = []
    if data.get("schema_version") != 1:
        problems.append("schema_version must be 1")
    if not isinstance(data.get("source"), str) or not data["source"].strip():
        problems.append("source must say where the list comes from")
    classes = data.get("classes")
    if not isinstance(classes, dict) or not classes:
        problems.append("classes must map class names to word lists")
        classes = {}
    for name, words in classes.items():
        if not isinstance(words, list) or not words:
            problems.append(f"class {name!r} must be a non-empty list of words")
            continue
        bad = [w for w in words if not isinstance(w, str) or not _ENTRY.fullmatch(w)]
        if bad:
            problems.append(f"class {name!r}: {bad[:3]} are not lower-case words")
        dupes = sorted(w for w, n in Counter(words).items() if n > 1)
        if dupes:
            problems.append(f"class {name!r} lists {dupes[:3]} twice")
    return problems


def content_only(predictions: Sequence[Sequence[str]]) -> tuple[list[list[str]], list[int]]:
    """The predictions without function words, for the sentences that keep at least one word, and the indices of
    those sentences in ``predictions`` (a sentence whose every completion is a function word is not scored)."""
    fw = load_function_words()
    kept: list[list[str]] = []
    index: list[int] = []
    for i, words in enumerate(predictions):
        rest = [str(w) for w in words if str(w) not in fw]
        if rest:
            kept.append(rest)
            index.append(i)
    return kept, index


def _counts(predictions: Sequence[Sequence[str]]) -> dict[str, Any]:
    fw = load_function_words()
    words = [str(w).lower() for ws in predictions for w in ws]
    found = Counter(w for w in words if w in fw)
    n_fw = sum(found.values())
    only = sum(1 for ws in predictions if ws and all(str(w) in fw for w in ws))
    return {
        "n_completions": len(words),
        "n_function_words": n_fw,
        "share": n_fw / len(words) if words else None,
        "most_frequent": [[w, n] for w, n in found.most_common(TOP)],
        "sentences_only_function_words": only,
    }


def function_word_summary(
    predictions: Sequence[Sequence[str]], groups: Sequence[str], *, excluded: bool
) -> dict[str, Any]:
    """Per group and overall: completions, function words among them, their share, the :data:`TOP` most frequent
    and the sentences with no other word; ``excluded`` records whether the scores left them out."""
    fw = load_function_words()
    by_group: dict[str, list[Sequence[str]]] = {}
    for words, group in zip(predictions, groups, strict=True):
        by_group.setdefault(str(group), []).append(words)
    return {
        "excluded": bool(excluded),
        "list": {"file": f"queerbench/data/{_FILE}", "sha256": fw.sha256, "n_words": len(fw.words)},
        "groups": {g: _counts(p) for g, p in by_group.items()},
        "overall": _counts(predictions),
    }


def content_inputs(
    predictions: Sequence[Sequence[str]],
    groups: Sequence[str],
    sentences: Sequence[str] | None,
    template_ids: Sequence[Any] | None,
    toxicity_counts: Sequence[Sequence[int]] | None,
) -> tuple[list[list[str]], list[str], list[str] | None, list[Any] | None, list[int]]:
    """The scoring inputs without function words (see :func:`content_only`): predictions, groups, sentences and
    template ids of the sentences that keep a word, and their indices. One-line ``ValueError`` for stored toxicity
    counts (they count all k completions, so they cannot follow the exclusion) and for nothing left to score."""
    if toxicity_counts is not None:
        raise ValueError(
            "--exclude-function-words cannot use stored toxicity counts (--toxicity precomputed counts all k "
            "completions); choose a scorer that reads the completions (embedded, hf:<id>, perspective) or none"
        )
    kept, index = content_only(predictions)
    if not kept:
        raise ValueError("every completion is a function word: nothing is left to score with --exclude-function-words")

    def take(seq: Sequence[Any] | None) -> list[Any] | None:
        return None if seq is None else [seq[i] for i in index]

    return kept, [groups[i] for i in index], take(sentences), take(template_ids), index


_EMPTY_WORDS: dict[str, Any] = {
    "words": [],
    "word_afinn": [],
    "word_hurtlex": [],
    "hurtlex_category_counts": {},
    "toxicity_counts": None,
    "word_toxicity": None,
}


def full_per_sentence(frame: Any, index: Sequence[int], n: int) -> Any:
    """The per-sentence table of the kept sentences (``frame``, one row per ``index``) back at all ``n`` sentences:
    a sentence left out has no words and no scores (NaN)."""
    import pandas as pd

    blank = {c: _EMPTY_WORDS.get(c, float("nan")) for c in frame.columns}
    rows: list[dict[str, Any]] = [dict(blank) for _ in range(n)]
    for i, rec in zip(index, frame.to_dict("records"), strict=True):
        rows[i] = rec
    return pd.DataFrame(rows, columns=frame.columns)


def signature_field(scores: dict[str, Any]) -> tuple[str, str]:
    """The function-word rule's part of a run's signature: whether they were excluded from the scored words."""
    return ("fw", "excluded" if (scores.get("function_words") or {}).get("excluded") else "included")
