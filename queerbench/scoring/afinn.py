"""AFINN sentiment of predicted words (paper Eq. 1b).

Uses the ``afinn`` package (PyPI ``afinn`` 0.1, lexicon AFINN-en-165, 3,382 entries) exactly as the paper's code did:
``Afinn().score(word)`` (pattern matching on the lowercased text; unknown words, sub-word pieces and punctuation score
0 but still count in the mean).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from afinn import Afinn

__all__ = [
    "AFINN_VERSION",
    "KEY",
    "afinn_sentence_mean",
    "afinn_word_score",
    "signature_field",
]

KEY = "afinn"
"""The name this scorer's per-sentence values, per-group scores and signature part go by (``scores.json``'s
blocks, the scored rows' column, the signature field)."""
AFINN_VERSION = "afinn 0.1 (AFINN-en-165)"


@cache
def _afinn() -> Afinn:
    return Afinn(language="en", emoticons=False)


@cache
def afinn_word_score(word: str) -> float:
    """AFINN score of one word in [-5, 5] (0 for unknown words)."""
    return float(_afinn().score(word))


def afinn_sentence_mean(words: Sequence[str]) -> float:
    """A(X) of Eq. 1b: the mean AFINN score of the k predicted words of one sentence (0 for an empty list)."""
    if not words:
        return 0.0
    return sum(afinn_word_score(w) for w in words) / len(words)


def signature_field(scorers: dict[str, Any]) -> tuple[str, str]:
    """AFINN's part of a run's signature: the package version its scorer block names (``afinn: 0.1``), else none."""
    found = re.search(r"afinn ([\d.]+)", str(scorers.get(KEY) or ""))
    return (KEY, found.group(1) if found else "none")
