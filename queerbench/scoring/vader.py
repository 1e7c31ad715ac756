"""VADER sentiment of predicted words, as QueerGen scores it (offline: ``vaderSentiment`` ships its lexicon).

QueerGen scores the **word alone**: ``round(SentimentIntensityAnalyzer().polarity_scores(word)['compound'], 2)``;
for top-k, the mean of the k rounded word scores of a sentence. Compound is in [-1, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib.metadata import version

from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

__all__ = ["VADER_DECIMALS", "vader_row", "vader_version", "vader_word"]

VADER_DECIMALS = 2


@cache
def _analyzer() -> SentimentIntensityAnalyzer:
    return SentimentIntensityAnalyzer()


@cache
def vader_word(word: str, decimals: int | None = VADER_DECIMALS) -> float:
    """VADER compound score of one word, rounded to ``decimals`` (QueerGen: 2; ``None`` keeps full precision)."""
    score = float(_analyzer().polarity_scores(str(word))["compound"])
    return score if decimals is None else round(score, decimals)


def vader_row(words: Sequence[str], decimals: int | None = VADER_DECIMALS) -> float:
    """Mean VADER compound of the k predicted words of one sentence (each rounded first, as QueerGen does)."""
    if isinstance(words, str) or not words:
        raise ValueError(f"vader_row needs a non-empty list of words, got {words!r}")
    return sum(vader_word(w, decimals) for w in words) / len(words)


def vader_version() -> str:
    """The scorer's name and version, for result provenance."""
    return f"vaderSentiment {version('vaderSentiment')} (compound of the word, {VADER_DECIMALS} dp)"
