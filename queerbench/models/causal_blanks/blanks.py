"""What a scored blank is, whichever backend scores it (a local causal LM, :mod:`queerbench.models.causal_blanks.local`, or a
completions endpoint): the sentence split at its ``[MASK]``, the start token the text is scored after, a candidate
filling with its log-probability, and the selection of the top-k words with probabilities renormalised over every
candidate word of the sentence. Both backends share these so that they give the same words from the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "CANDIDATES_PER_K",
    "MASK",
    "MAX_WORD_TOKENS",
    "Candidate",
    "ScoredPredictions",
    "rank_candidates",
    "split_blank",
    "start_token_id",
]

MASK = "[MASK]"
CANDIDATES_PER_K = 4
"""N = 4·k candidate first tokens per sentence (20 for the default k = 5)."""
MAX_WORD_TOKENS = 4
"""A candidate word may take at most this many tokens (the greedy extension stops there)."""


@dataclass(frozen=True)
class Candidate:
    """One candidate filling of a blank: its word, its tokens and the log-probability of the filled sentence."""

    word: str  # as decoded (case kept)
    word_ids: tuple[int, ...]
    suffix_ids: tuple[int, ...]
    logprob: float  # log P(word tokens + suffix tokens | start + prefix)


@dataclass
class ScoredPredictions:
    """Top-k per sentence in input order: lowercased words, renormalised probabilities, summed log-probabilities."""

    tokens: list[list[str]]
    probs: list[list[float]]
    logprobs: list[list[float]]
    n_word_tokens: list[list[int]]
    candidates: list[list[Candidate]] = field(default_factory=list)
    tokens_run: int = 0  # token positions actually fed to the model (padding included), for the FLOP accounting


def split_blank(sentence: str) -> tuple[str, str]:
    """``(text before the blank without its trailing space, text after it)``; exactly one ``[MASK]`` required."""
    if not isinstance(sentence, str) or sentence.count(MASK) != 1:
        count = sentence.count(MASK) if isinstance(sentence, str) else 0
        raise ValueError(f"sentence {sentence!r} has {count} '{MASK}' placeholders; each sentence needs exactly one")
    before, after = sentence.split(MASK)
    return before.rstrip(" "), after


def start_token_id(tokenizer: Any) -> int | None:
    """The token the text is scored after: the BOS the tokenizer adds itself; else ``<|endoftext|>`` (GPT-2's and
    SmolLM2's document separator) when the vocabulary has it; else the BOS, else the EOS token."""
    ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    if len(ids) > len(plain) and ids[0] in tokenizer.all_special_ids:
        return int(ids[0])
    vocab = tokenizer.get_vocab()
    if "<|endoftext|>" in vocab:
        return int(vocab["<|endoftext|>"])
    for value in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if value is not None:
            return int(value)
    return None


def rank_candidates(candidates: list[Candidate], k: int) -> tuple[list[str], list[float], list[float], list[int]]:
    """Top-k distinct lowercased words, probabilities renormalised over all candidate words."""
    best: dict[str, list[Candidate]] = {}
    for c in candidates:
        best.setdefault(c.word.lower(), []).append(c)
    words = list(best)
    totals = torch.tensor([torch.logsumexp(torch.tensor([c.logprob for c in best[w]]), 0).item() for w in words])
    probs = torch.softmax(totals, 0) if len(words) else totals
    order = sorted(range(len(words)), key=lambda i: -float(totals[i]))[:k]
    top = [words[i] for i in order]
    n_tokens = [len(max(best[w], key=lambda c: c.logprob).word_ids) for w in top]
    return top, [float(probs[i]) for i in order], [float(totals[i]) for i in order], n_tokens
