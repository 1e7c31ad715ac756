"""Type checks of the metric's inputs, before ``evaluate``'s own format check and before any scoring.

``evaluate`` answers a non-string token with a generic "inputs don't match the expected format", a ``None`` row
with a ``TypeError`` deep inside, and turns a ``None`` group into a group called ``"None"``. These checks name the
input, its position and the fix instead; :mod:`queerbench.scoring.aggregate` then checks lengths and values.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

__all__ = ["check_types"]


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _as_sequence(value: Any, name: str) -> Sequence[Any]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or not hasattr(value, "__getitem__"):
        raise ValueError(f"{name} must be a list, got {type(value).__name__}")
    return value


def check_types(
    predictions: Any = None,
    groups: Any = None,
    sentences: Any = None,
    toxicity_counts: Any = None,
) -> None:
    """Raise ``ValueError`` (one line: which input, where, the fix) when ``predictions`` is not a list of lists of
    strings, ``groups`` not a list of string labels, ``sentences`` not a list of strings, or ``toxicity_counts`` not
    a list of lists of whole numbers. ``None`` inputs are not checked (the metric says which are required)."""
    if predictions is not None:
        for i, words in enumerate(_as_sequence(predictions, "predictions")):
            if _is_missing(words):
                raise ValueError(
                    f"predictions[{i}] is None: every sentence needs its list of top-k predicted words, e.g. "
                    "['hero', 'nurse']; drop the sentence (and its group) or fill in what the model predicted"
                )
            if isinstance(words, (str, bytes)) or not hasattr(words, "__len__"):
                raise ValueError(
                    f"predictions[{i}] must be a list of words (top-k), got {type(words).__name__} {words!r}"
                )
            for j, word in enumerate(words):
                if _is_missing(word):
                    raise ValueError(
                        f"predictions[{i}][{j}] is None: every predicted word must be a string; drop it (a sentence may "
                        "list fewer than k words). '' is no neutral filler: it still counts as one of the k words, "
                        "and the paper rules score it as a HurtLex hit, as the paper's code did"
                    )
                if not isinstance(word, str):
                    raise ValueError(
                        f"predictions[{i}][{j}] is {word!r} ({type(word).__name__}), not a string: pass the predicted "
                        "words, not token ids (decode ids with tokenizer.convert_ids_to_tokens)"
                    )
    if groups is not None:
        for i, group in enumerate(_as_sequence(groups, "groups")):
            if _is_missing(group):
                raise ValueError(
                    f"groups[{i}] is None: every sentence needs a group label (e.g. 'queer', 'non-queer'); a missing "
                    "label would otherwise become a group named 'None'"
                )
            if not isinstance(group, str):
                raise ValueError(f"groups[{i}] is {group!r} ({type(group).__name__}); group labels must be strings")
    if sentences is not None:
        for i, sentence in enumerate(_as_sequence(sentences, "sentences")):
            if not isinstance(sentence, str):
                raise ValueError(
                    f"sentences[{i}] is {sentence!r} ({type(sentence).__name__}); every sentence must be a string "
                    "with one [MASK]"
                )
    if toxicity_counts is not None:
        for i, counts in enumerate(_as_sequence(toxicity_counts, "toxicity_counts")):
            if _is_missing(counts) or isinstance(counts, (str, bytes)) or not hasattr(counts, "__len__"):
                raise ValueError(
                    f"toxicity_counts[{i}] is {counts!r}; pass 5 whole numbers per sentence (flags for TOXICITY, "
                    "IDENTITY_ATTACK, INSULT, PROFANITY, THREAT)"
                )
            for j, count in enumerate(counts):
                if isinstance(count, bool) or not isinstance(count, numbers.Real) or not float(count).is_integer():
                    raise ValueError(
                        f"toxicity_counts[{i}][{j}] is {count!r} ({type(count).__name__}); each count must be a whole "
                        "number of flagged completions"
                    )
