"""The ``scored`` method: QueerBench's fill-in-the-blank on a local causal LM, ranked by whole-sentence probability.

A causal LM cannot look at the text after a blank, so reading its next-token distribution at the blank (what HONEST
does for prefix templates) ignores the words that follow: "The gay person was appointed as a [MASK] in their
organization." would be ranked as if it ended at the blank. This module ranks every candidate by the log-probability
of the **whole** sentence with the word in place:

1. **Propose.** The text before ``[MASK]`` is encoded once (after a start token, see :func:`start_token_id`) and the
   next-token distribution at its end gives the top ``N = candidates_per_k · k`` (default ``4k``) *word-start*
   tokens: tokens that begin a new word and are alphabetic (``Ġdoctor``; at the very start of a sentence, the
   sentence-initial forms ``He``/``The`` of a byte-level BPE, the rule of the masked-LM engine). Each is extended
   greedily to a whole word: while the most likely next token is an alphabetic continuation piece (no word-start
   marker), it is appended, up to ``max_word_tokens`` tokens; a candidate still unfinished there is dropped.
2. **Rank.** ``s(w) = log P(w's tokens | prefix) + log P(suffix tokens | prefix, w)``, where the suffix is the text
   after the blank including the final ``.``. Sums, not means: every candidate shares the same suffix, so the sum is
   the joint probability of the filled sentence given the prefix (the prefix term is common to all candidates and
   cancels). For blanks at the end the suffix is ``.``, which penalises words that cannot end a sentence.
3. **Select.** Candidates are grouped by their lowercased word (two spellings of one word add their probabilities,
   ``logsumexp``), only whole words pass (:data:`queerbench.models.masked.vocab_filter.WORD`: letters with inner ``'``/``-``), and
   the ``k`` best are returned with their probabilities renormalised over all candidate words of the sentence.

Speed: the prefix is run once per sentence and its KV cache is shared by all ``N`` candidates. The first pass runs
a sentence's candidates as ``N`` branches ``[first token, suffix…]`` side by side in **one row** on that cache (less
the suffix's last token, which is only a target and never fed): a 4-D attention mask lets each branch see the
prefix and its own earlier tokens only, and each branch's positions restart after the prefix, so no candidate needs
a copy of the prefix cache. The few candidates whose greedy extension needs more tokens are re-run one row each on
a copy of their sentence's cache. Sentences are batched too. Positions are always passed explicitly, so left
padding is safe for models with absolute position embeddings (GPT-2) as well as rotary ones (Llama).
``benchmarks/scored_speed.py`` measures this against one forward pass per candidate sentence.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from queerbench.models.causal_blanks.blanks import (
    CANDIDATES_PER_K,
    MAX_WORD_TOKENS,
    Candidate,
    ScoredPredictions,
    rank_candidates,
    split_blank,
    start_token_id,
)
from queerbench.models.masked.vocab_filter import (
    WORD,  # the whole-word rule of the masked-LM `default` mode
    detect_family,
    sentence_start_table,
    whole_word_table,
)

__all__ = [
    "CANDIDATES_PER_K",
    "MAX_WORD_TOKENS",
    "Candidate",
    "ScoredLM",
    "ScoredPredictions",
    "score_blanks",
    "split_blank",
    "start_token_id",
]

MAX_ROWS = 640
"""At most this many candidate rows share one prefix batch (32 sentences × 20 candidates)."""
MAX_POSITIONS = 1280
"""At most this many token positions per continuation batch: large enough for efficient matrix products, small
enough to bound the logits' memory (1,280 × a 49k vocabulary × 4 bytes = 250 MB)."""
LSE_CHUNK_BYTES = 2**21
"""Float32 logits per log-sum-exp call (about a CPU core's L2 cache; 10 positions of a 49k vocabulary)."""


def _output_size(model: Any) -> int:
    out = model.get_output_embeddings()
    if out is not None and getattr(out, "weight", None) is not None:
        return int(out.weight.shape[0])
    return int(model.config.vocab_size)


class ScoredLM:
    """A causal LM and tokenizer prepared for :func:`score_blanks` (vocabulary tables built once)."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.family = detect_family(tokenizer)
        size = _output_size(model)
        allowed, _ = whole_word_table(tokenizer, self.family, size)
        self.word_start = allowed.to(self.device)
        start = sentence_start_table(tokenizer, self.family, size)
        self.sentence_start = self.word_start if start is None else start[0].to(self.device)
        self.continuation = self._continuation_table(size).to(self.device)
        self.start_id = start_token_id(tokenizer)
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._logits_to_keep = "logits_to_keep" in params
        self.pad_id = next(
            (int(v) for v in (tokenizer.pad_token_id, tokenizer.eos_token_id, self.start_id) if v is not None), 0
        )

    def _continuation_table(self, size: int) -> torch.Tensor:
        """Ids of alphabetic pieces that continue a word (no word-start marker, not special).

        A piece that starts a word fails the alphabetic test by itself: a byte-level BPE one decodes with its leading
        space (``Ġdoctor`` → `` doctor``) and a SentencePiece one keeps its ``▁``, which is not a letter."""
        tok = self.tokenizer
        tokens = tok.convert_ids_to_tokens(list(range(min(len(tok), size))))
        # added tokens (chat markers and the like) never continue a word
        special = set(tok.all_special_ids) | set(tok.added_tokens_decoder)
        allowed = torch.zeros(size, dtype=torch.bool)
        for i, token in enumerate(tokens):
            if token is None or i in special:
                continue
            if self.family == "wordpiece":
                if not token.startswith("##"):
                    continue
                text = token[2:]
            elif self.family == "bpe":
                text = tok.convert_tokens_to_string([token])
            else:
                text = token
            allowed[i] = bool(text) and text.isalpha()
        return allowed

    def metadata(self) -> dict[str, Any]:
        """What a run records about the scoring set-up."""
        return {
            "tokenizer_family": self.family,
            "start_token": None if self.start_id is None else self.tokenizer.convert_ids_to_tokens(self.start_id),
            "device": str(self.device),
            "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch."),
            "architecture": type(self.model).__name__,
        }

    # ----------------------------------------------------------------------------------------- model calls ---
    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any = None, last_only: bool = False
    ) -> Any:
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        kwargs["use_cache"] = True
        if cache is not None:
            kwargs[self._cache_arg] = cache
        if last_only and self._logits_to_keep:  # the prefix pass needs the distribution at its end only
            kwargs["logits_to_keep"] = 1
        return self.model(**kwargs)

    @staticmethod
    def _cache_of(output: Any) -> Any:
        cache = getattr(output, "cache", None)
        return output.past_key_values if cache is None else cache

    @staticmethod
    def _layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in cache.layers]

    @staticmethod
    def _cache_from(layers: Sequence[tuple[torch.Tensor, torch.Tensor]], rows: torch.Tensor) -> Any:
        """A fresh cache holding ``rows`` of the prefix cache (the stored prefix tensors are never modified)."""
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=[(k.index_select(0, rows), v.index_select(0, rows)) for k, v in layers])


@dataclass
class _Sentence:
    prefix: list[int]  # start token + tokens before the blank
    suffix: list[int]  # tokens after the word, incl. the final "."
    at_start: bool  # nothing but the start token before the blank


def _encode(lm: ScoredLM, sentence: str) -> _Sentence:
    before, after = split_blank(sentence)
    tok = lm.tokenizer
    start = [] if lm.start_id is None else [lm.start_id]
    prefix = start + (tok(before, add_special_tokens=False)["input_ids"] if before else [])
    # the suffix as it is tokenized after a word: encode "<before> word<after>" and take what follows "… word"
    probe = f"{before} word" if before else "Word"
    whole = tok(probe + after, add_special_tokens=False)["input_ids"]
    head = tok(probe, add_special_tokens=False)["input_ids"]
    # (a merge across the word boundary would break that: then the suffix is tokenized on its own)
    suffix = whole[len(head) :] if whole[: len(head)] == head else tok(after, add_special_tokens=False)["input_ids"]
    return _Sentence(prefix, suffix, not before)


def _gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log-softmax of ``logits`` at ``targets`` without materialising the full log-softmax.

    The log-sum-exp runs over :data:`LSE_CHUNK_BYTES` of positions at a time, so its temporaries stay in the CPU's
    cache: on a ``[16, 80, 49152]`` block, 29 ms instead of 110 ms in one call, with the same values (each position's
    sum is its own). A lone last position joins the chunk before it (a one-row call takes another kernel path)."""
    logits = logits.float()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    flat = logits.reshape(-1, logits.shape[-1])
    rows = max(2, LSE_CHUNK_BYTES // (4 * flat.shape[1]))  # a vocabulary of 0 fails in the gather above
    bounds = [*range(0, flat.shape[0], rows), flat.shape[0]]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
        del bounds[-2]
    if len(bounds) < 2:  # no positions at all
        return picked
    lse = torch.cat([torch.logsumexp(flat[a:b], dim=-1) for a, b in itertools.pairwise(bounds)])
    return picked - lse.view(picked.shape)


def _n_inputs(word: Sequence[int], suffix: Sequence[int]) -> int:
    """How many tokens of ``[word…, suffix…]`` must be fed: all but the last when there is a suffix (its last token
    is only ever a target, the logits after it are never read), else the whole word (the logits after its last
    token say whether the word goes on)."""
    return len(word) + len(suffix) - 1 if suffix else len(word)


def _continue(
    lm: ScoredLM,
    layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
    prefix_mask: torch.Tensor,
    prefix_len: torch.Tensor,
    rows: list[int],
    conts: list[list[int]],
    n_inputs: list[int],
    word_ends: list[int],
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Run the first ``n_inputs[i]`` tokens of continuation ``conts[i]`` on the prefix cache of sentence ``rows[i]``,
    all in one batch.

    Returns ``(logprob of conts[i][j+1] given everything before it, zero where there is no such token, shape
    [n, W]; the most likely token after position ``word_ends[i]`` (the word's last token), shape [n]; positions
    run)``, ``W = max(n_inputs)``. Inputs are
    right-padded (the padding comes after every real token, so it cannot affect them); positions continue from each
    row's own prefix length.
    """
    dev = lm.device
    width = max(n_inputs)
    ids = torch.full((len(conts), width), lm.pad_id, dtype=torch.long)
    targets = torch.full((len(conts), width), lm.pad_id, dtype=torch.long)
    cmask = torch.zeros((len(conts), width), dtype=torch.long)
    valid = torch.zeros((len(conts), width), dtype=torch.bool)
    for r, (cont, n_in) in enumerate(zip(conts, n_inputs, strict=True)):
        ids[r, :n_in] = torch.tensor(cont[:n_in])
        cmask[r, :n_in] = 1
        targets[r, : len(cont) - 1] = torch.tensor(cont[1:], dtype=torch.long)
        valid[r, : len(cont) - 1] = True
    index = torch.tensor(rows, device=dev)
    ids, cmask, targets, valid = ids.to(dev), cmask.to(dev), targets.to(dev), valid.to(dev)
    mask = torch.cat([prefix_mask.index_select(0, index), cmask], dim=1)
    positions = prefix_len.index_select(0, index)[:, None] + torch.arange(width, device=dev)[None, :]
    out = lm._forward(ids, mask, positions, lm._cache_from(layers, index))
    logits = out.logits
    after = logits[torch.arange(len(conts), device=dev), torch.tensor(word_ends, device=dev)].argmax(-1)
    lp = _gather_logprobs(logits, targets) * valid
    return lp, after, len(conts) * width


def _first_pass(
    lm: ScoredLM,
    layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
    prefix_mask: torch.Tensor,
    prefix_len: torch.Tensor,
    batch: list[_Sentence],
    top_ids: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Every sentence's ``n`` candidate first tokens as one-token words, all in **one row** on its prefix cache.

    Row ``r`` holds ``n`` branches ``[t_j, suffix…]`` (less the suffix's last token) side by side; a 4-D attention
    mask lets each branch see the prefix and its own earlier tokens only, and each branch's positions restart at
    the prefix length, so every branch computes exactly what it would alone — without a copy of the prefix cache per
    candidate. Returns ``(sum of the suffix's log-probabilities per candidate, [B, n]; the most likely token after
    the one-token word, [B, n]; positions run)``.
    """
    dev = lm.device
    n = top_ids.shape[1]
    sums = torch.zeros(top_ids.shape, dtype=torch.float32, device=dev)
    after = torch.zeros(top_ids.shape, dtype=torch.long, device=dev)
    run = 0
    by_len: dict[int, list[int]] = {}
    for r, s in enumerate(batch):
        by_len.setdefault(_n_inputs([0], s.suffix), []).append(r)
    dtype = next(lm.model.parameters()).dtype
    for width, members in by_len.items():
        tree = torch.kron(torch.eye(n), torch.tril(torch.ones(width, width))).bool().to(dev)  # own branch, causal
        step = max(1, MAX_POSITIONS // (n * width))
        for start in range(0, len(members), step):
            rows = members[start : start + step]
            index = torch.tensor(rows, device=dev)
            fed = torch.full((len(rows), n, width), lm.pad_id, dtype=torch.long)
            targets = torch.full((len(rows), n, width), lm.pad_id, dtype=torch.long)
            valid = torch.zeros((len(rows), n, width), dtype=torch.bool)
            for b, r in enumerate(rows):
                suffix = batch[r].suffix
                if width > 1:
                    fed[b, :, 1:] = torch.tensor(suffix[: width - 1])
                if suffix:
                    targets[b, :, : len(suffix)] = torch.tensor(suffix)
                    valid[b, :, : len(suffix)] = True
            fed[:, :, 0] = top_ids.index_select(0, index).cpu()
            fed, targets, valid = fed.to(dev), targets.to(dev), valid.to(dev)
            positions = (prefix_len.index_select(0, index)[:, None, None] + torch.arange(width, device=dev)).expand(
                -1, n, -1
            )
            seen = torch.cat(
                [
                    prefix_mask.index_select(0, index).bool()[:, None, :].expand(-1, n * width, -1),
                    tree.expand(len(rows), -1, -1),
                ],
                dim=-1,
            )
            # additive float mask (0 = attend), which every attention implementation that takes a mask reads alike
            mask4d = torch.zeros(seen.shape, dtype=dtype, device=dev).masked_fill(~seen, torch.finfo(dtype).min)
            out = lm._forward(
                fed.reshape(len(rows), -1),
                mask4d[:, None],
                positions.reshape(len(rows), -1),
                lm._cache_from(layers, index),
            )
            logits = out.logits.reshape(len(rows), n, width, -1)
            sums[index] = (_gather_logprobs(logits, targets) * valid).sum(-1)
            after[index] = logits[:, :, 0].argmax(-1)
            run += len(rows) * n * width
    return sums, after, run


def _score_batch(
    lm: ScoredLM, batch: list[_Sentence], n_first: int, max_word_tokens: int
) -> tuple[list[list[Candidate]], int]:
    dev = lm.device
    width = max(len(s.prefix) for s in batch)
    ids = torch.full((len(batch), width), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for r, s in enumerate(batch):  # left padding: every prefix ends at the right edge
        ids[r, width - len(s.prefix) :] = torch.tensor(s.prefix)
        mask[r, width - len(s.prefix) :] = 1
    ids, mask = ids.to(dev), mask.to(dev)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    prefix_len = mask.sum(-1)
    out = lm._forward(ids, mask, positions, last_only=True)
    tokens_run = ids.numel()
    layers = lm._layers(lm._cache_of(out))
    first_logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
    allowed = torch.stack([lm.sentence_start if s.at_start else lm.word_start for s in batch])
    # a sentence with fewer allowed first tokens than n_first gets -inf ones in its row: dropped below, so that its
    # candidates never depend on which sentences share its batch (only a tiny vocabulary has so few)
    top_lp, top_ids = torch.topk(first_logp.masked_fill(~allowed, float("-inf")), min(n_first, allowed.shape[-1]))
    n = top_ids.shape[1]

    # every candidate runs as [word so far, suffix…] (less its last token, which is only a target) on the shared
    # prefix cache: one pass gives both the sentence's log-probability with that word and the model's most likely
    # token after the word (does it continue the word?).
    # The first pass runs all candidates as one-token words (a sentence's candidates side by side in one row, see
    # _first_pass); later passes only the few whose word goes on (greedy).
    rows = [r for r in range(len(batch)) for _ in range(n)]
    first_lp = top_lp.reshape(-1).tolist()
    words: list[list[int]] = [[t] for t in top_ids.reshape(-1).tolist()]
    dropped = {j for j, lp in enumerate(first_lp) if lp == float("-inf")}  # not allowed in its sentence
    sums0, after0, run = _first_pass(lm, layers, mask, prefix_len, batch, top_ids)
    tokens_run += run
    scores = [a + b for a, b in zip(first_lp, sums0.reshape(-1).tolist(), strict=True)]
    goes_on0 = lm.continuation[after0.reshape(-1)].tolist()
    active = []
    for j, (more, tok) in enumerate(zip(goes_on0, after0.reshape(-1).tolist(), strict=True)):
        if more and j not in dropped:
            if max_word_tokens <= 1:
                dropped.add(j)  # still unfinished at the cap: not a whole word
            else:
                words[j].append(tok)
                active.append(j)
    while active:  # the few words that go on: one row each, on a copy of their sentence's prefix cache
        grow: list[int] = []
        step = max(1, MAX_POSITIONS // max(_n_inputs(words[j], batch[rows[j]].suffix) for j in active))
        groups = [active[i : i + step] for i in range(0, len(active), step)]
        for group in groups:
            conts = [[*words[j], *batch[rows[j]].suffix] for j in group]
            n_in = [_n_inputs(words[j], batch[rows[j]].suffix) for j in group]
            ends = [len(words[j]) - 1 for j in group]
            lp, after, run = _continue(lm, layers, mask, prefix_len, [rows[j] for j in group], conts, n_in, ends)
            tokens_run += run
            sums = lp.sum(-1).tolist()
            goes_on = lm.continuation[after].tolist()
            nxt = after.tolist()
            for i, j in enumerate(group):
                scores[j] = first_lp[j] + sums[i]
                if goes_on[i]:
                    if len(words[j]) >= max_word_tokens:
                        dropped.add(j)  # still unfinished at the cap: not a whole word
                    else:
                        words[j].append(nxt[i])
                        grow.append(j)
        active = grow
    result: list[list[Candidate]] = [[] for _ in batch]
    for j, r in enumerate(rows):
        if j in dropped:
            continue
        word = lm.tokenizer.decode(words[j]).strip()
        if WORD.fullmatch(word):
            result[r].append(Candidate(word, tuple(words[j]), tuple(batch[r].suffix), scores[j]))
    return result, tokens_run


def score_blanks(
    lm: ScoredLM,
    sentences: Sequence[str],
    k: int = 5,
    *,
    candidates_per_k: int = CANDIDATES_PER_K,
    max_word_tokens: int = MAX_WORD_TOKENS,
    batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
) -> ScoredPredictions:
    """Top-k whole-word fills of the single ``[MASK]`` of each sentence, ranked by whole-sentence log-probability.

    ``batch_size`` sentences (at most :data:`MAX_ROWS` candidates in all) share one prefix pass; their
    ``candidates_per_k · k`` candidates each run together in one continuation batch. Results do not depend on the batch size (to float rounding). ``progress`` is called
    with the number of sentences finished after each batch. A sentence whose candidates give fewer than ``k``
    distinct whole words (rare) gets fewer.
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if candidates_per_k < 1 or max_word_tokens < 1 or batch_size < 1:
        raise ValueError("candidates_per_k, max_word_tokens and batch_size must be at least 1")
    encoded = [_encode(lm, s) for s in sentences]
    limit = getattr(lm.model.config, "n_positions", None) or getattr(lm.model.config, "max_position_embeddings", None)
    for s, e in zip(sentences, encoded, strict=True):
        if limit and len(e.prefix) + max_word_tokens + len(e.suffix) > limit:
            raise ValueError(f"sentence {s!r} is too long for the model's {limit} positions")
    # batches of like shapes: sentences of one template share the text after the blank, so sorting by (suffix,
    # prefix) length keeps the padding of the continuation batch (its width is 1 + the longest suffix) minimal
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i].suffix), len(encoded[i].prefix)), reverse=True)
    batch_size = max(1, min(batch_size, MAX_ROWS // (candidates_per_k * k)))
    cands: list[list[Candidate]] = [[] for _ in encoded]
    tokens_run = 0
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            found, run = _score_batch(lm, [encoded[i] for i in idx], candidates_per_k * k, max_word_tokens)
            tokens_run += run
            for i, c in zip(idx, found, strict=True):
                cands[i] = c
            if progress is not None:
                progress(len(idx))
    ranked = [rank_candidates(c, k) for c in cands]
    return ScoredPredictions(
        tokens=[r[0] for r in ranked],
        probs=[r[1] for r in ranked],
        logprobs=[r[2] for r in ranked],
        n_word_tokens=[r[3] for r in ranked],
        candidates=cands,
        tokens_run=tokens_run,
    )


def sentence_logprob_reference(model: Any, prefix: Sequence[int], continuation: Sequence[int]) -> float:
    """``log P(continuation | prefix)`` from one plain forward pass over the whole sequence (no cache, no padding).

    The brute-force reference the tests and the benchmark compare :func:`score_blanks` against.
    """
    ids = torch.tensor([[*prefix, *continuation]], device=next(model.parameters()).device)
    with torch.inference_mode():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    n = len(prefix)
    return float(sum(logp[n - 1 + j, t] for j, t in enumerate(continuation)))
