"""Which vocabulary entries count as whole words, per tokenizer family, and how tokens are shown.

QueerBench scores the *words* a model puts in the blank. A raw top-k over the full vocabulary mixes in special tokens,
punctuation, digits and sub-word pieces that cannot stand alone (``##ing``, BPE pieces without the ``Ġ`` word-start
marker, SentencePiece pieces without ``▁``, BERTweet pieces ending in ``@@``); the scorers then count these as neutral
words. The ``default`` configuration therefore ranks only whole-word entries (built once per tokenizer as a boolean
mask over the model's output ids), while ``paper`` keeps the raw tokens and strips markers the way the paper's code did.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a table is built: the word rule alone (WORD) needs none
    import torch

__all__ = ["FAMILIES", "WORD", "detect_family", "paper_token", "sentence_start_table", "whole_word", "whole_word_table"]

FAMILIES: tuple[str, ...] = ("wordpiece", "bpe", "sentencepiece", "bertweet", "other")

WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
"""The whole-word rule of the library: letters only, with inner apostrophes or hyphens allowed (``o'clock``,
``self-made``); no digits or punctuation. The masked-LM engine, ``scored`` and ``instructed`` all apply it."""


def detect_family(tokenizer: object) -> str:
    """The tokenizer family, one of :data:`FAMILIES`, from its class and the markers its vocabulary uses.

    BERTweet (fastBPE, ``@@`` marks a piece that continues) is recognised by its class; the others by the most common
    marker in the vocabulary: ``##`` (WordPiece), ``Ġ`` (byte-level BPE), ``▁`` (SentencePiece). A vocabulary with none
    of them (e.g. word-level) is ``other``.
    """
    if "bertweet" in type(tokenizer).__name__.lower():
        return "bertweet"
    vocab: dict[str, int] = tokenizer.get_vocab()  # type: ignore[attr-defined]
    counts = {"wordpiece": 0, "bpe": 0, "sentencepiece": 0}
    for token in vocab:
        if token.startswith("##"):
            counts["wordpiece"] += 1
        elif token.startswith("Ġ"):
            counts["bpe"] += 1
        elif token.startswith("▁"):
            counts["sentencepiece"] += 1
    family, count = max(counts.items(), key=lambda item: item[1])
    return family if count > 0 else "other"


def whole_word(token: str, family: str, tokenizer: object | None = None) -> str | None:
    """The word a vocabulary entry stands for when it can stand alone as a whole word, else ``None``.

    The word-start marker is stripped (``Ġdoctor`` → ``doctor``, ``▁doctor`` → ``doctor``); continuation pieces,
    punctuation, digits and empty strings give ``None``. Byte-level BPE entries are decoded with the tokenizer (when
    given) so that ``Ġcaf`` + byte characters become ``café``.
    """
    if family == "bpe":
        if not token.startswith("Ġ"):
            return None
        # the tokenizer's byte-level decoder turns byte characters back into text ("Ã©" → "é")
        word = tokenizer.convert_tokens_to_string([token]).strip() if tokenizer is not None else token[1:]  # type: ignore[attr-defined]
    elif family == "sentencepiece":
        if not token.startswith("▁"):
            return None
        word = token[1:]
    else:
        # WordPiece continuations ("##ing") and BERTweet ones ("doc@@") carry non-letters: the pattern rejects them
        word = token
    return word if WORD.fullmatch(word) else None


def _special_ids(tokenizer: object) -> set[int]:
    """Ids of special tokens: the tokenizer's own and every added token marked special."""
    special = set(tokenizer.all_special_ids)  # type: ignore[attr-defined]
    added = tokenizer.added_tokens_decoder  # type: ignore[attr-defined]
    return special | {i for i, token in added.items() if token.special}


def _mask(words: Sequence[str | None]) -> torch.Tensor:
    """A boolean mask, True where an id stands for a word."""
    import torch

    allowed = torch.zeros(len(words), dtype=torch.bool)
    allowed[[i for i, w in enumerate(words) if w is not None]] = True
    return allowed


def whole_word_table(tokenizer: object, family: str, output_size: int) -> tuple[torch.Tensor, list[str | None]]:
    """(allowed mask of shape ``[output_size]``, word per id) for the ``default`` top-k.

    ``output_size`` is the model's output dimension, which may exceed the tokenizer's vocabulary (padded embedding
    matrices); such ids, and every special or added special token, are never allowed.
    """
    tokens: Sequence[str | None] = tokenizer.convert_ids_to_tokens(list(range(min(len(tokenizer), output_size))))  # type: ignore[attr-defined,arg-type]
    special = _special_ids(tokenizer)
    words: list[str | None] = [None] * output_size
    for i, token in enumerate(tokens):
        if token is not None and i not in special:
            words[i] = whole_word(token, family, tokenizer)
    return _mask(words), words


def sentence_start_table(
    tokenizer: object, family: str, output_size: int
) -> tuple[torch.Tensor, list[str | None]] | None:
    """For byte-level BPE: the whole words as they appear at the very start of a text, else ``None``.

    A byte-level BPE marks a word start with ``Ġ`` (a preceding space), so the first word of a sentence has no marker
    (``He``, not ``ĠHe``). When the mask is the first token of the sentence, the ``default`` top-k ranks these entries
    instead of the ``Ġ`` ones. Other families mark word starts the same way everywhere.
    """
    if family != "bpe":
        return None
    tokens: Sequence[str | None] = tokenizer.convert_ids_to_tokens(list(range(min(len(tokenizer), output_size))))  # type: ignore[attr-defined,arg-type]
    special = _special_ids(tokenizer)
    words: list[str | None] = [None] * output_size
    for i, token in enumerate(tokens):
        if token is None or i in special or token.startswith("Ġ"):
            continue
        word = tokenizer.convert_tokens_to_string([token]).strip()  # type: ignore[attr-defined]
        words[i] = word if WORD.fullmatch(word) else None
    return _mask(words), words


def paper_token(token: str | None) -> str:
    """A raw vocabulary entry as the paper's code reported it: the ``Ġ`` (RoBERTa, BERTweet) and ``▁`` (ALBERT)
    word-start markers removed, ``##`` kept, no lowercasing, nothing filtered."""
    if token is None:
        return ""
    return token.replace("Ġ", "").replace("▁", "")
