"""A masked LM as a request backend (:class:`MaskedBackend`): ``fill_mask`` and a pseudo-log-likelihood.

**fill_mask, top-k.** A request with ``top_k`` (no candidates) asks for the model's own fills: the masked-LM engine's
top-k at the mask (:func:`queerbench.models.masked.predict.predict`, read whole-word or raw as the request's
``mode`` says), requests of one ``top_k`` and mode in one call at the backend's batch size.

**fill_mask.** A candidate's score is its log-probability at the text's ``[MASK]``. The ``[MASK]`` becomes the
model's mask token and the text is encoded as the masked-LM engine encodes it (:mod:`queerbench.models.masked.predict`:
the tokenizer's special tokens added). A candidate of several word pieces is scored in one forward pass with as many
mask tokens in place of the one as it has pieces (all masked at once); its log-probability is the sum of each
piece's log-softmax at its own position. Candidates with the same number of pieces share that pass.

*Which pieces* (the rule): a candidate is encoded as the word appears in the sentence. The text before the
``[MASK]`` is encoded without its trailing spaces, then with a space (when the ``[MASK]`` follows one) and the
candidate; the candidate's pieces are what the second encoding adds to the first. So a byte-level BPE (RoBERTa,
GPT-2 style) gives ``Ġword`` after a space and ``word`` at the very start of a sentence, a WordPiece (BERT) gives the
lowercased ``word ##piece`` pieces, a SentencePiece (ALBERT) ``▁word``. When the two encodings do not share their
start (a tokenizer that merges across the boundary), the candidate is encoded on its own, with that space before it.

**loglikelihood** is Salazar et al.'s pseudo-log-likelihood (*Masked Language Model Scoring*, ACL 2020): the
context and continuation are encoded together (special tokens added), each token of the continuation is masked in
turn (one forward pass per token, the others unmasked) and the log-probabilities of the true tokens are summed. The
context's tokens are never masked and never scored; ``n_tokens`` is the number scored. Which tokens are the
continuation's: lm-evaluation-harness's rule (the context's trailing spaces move to the continuation, and the
continuation's tokens are those after as many tokens as the context alone encodes to).

Rows are sorted by length and padded per batch with an attention mask (``batch_size`` rows per forward pass); a
result does not depend on the batch size (to float rounding). The LM head runs at the scored positions only wherever
the architecture exposes it as one module (:attr:`~queerbench.models.masked.predict.MaskedLM.head`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from queerbench.models.backends.common import batches, by_length, check_batch_size, refuse_chat, split_context, ticker
from queerbench.models.masked import predict as engine
from queerbench.models.masked.predict import MaskedLM
from queerbench.models.registry import ModelRef
from queerbench.models.requests import (
    FILL_MASK,
    GENERATE,
    LOGLIKELIHOOD,
    MASK,
    FillMask,
    FillMaskResult,
    Generate,
    GenerateResult,
    Loglikelihood,
    LoglikelihoodResult,
    require,
)

__all__ = ["MaskedBackend", "candidate_pieces"]

_Row = tuple[list[int], list[int], list[list[int]]]
"""One forward row: token ids, the positions scored, and target ids per position for each thing scored there."""


def candidate_pieces(tokenizer: Any, before: str, candidate: str) -> list[int]:
    """The token ids of ``candidate`` as it is written after ``before`` (the text before the ``[MASK]``): the module
    doc's rule. A one-line ``ValueError`` for a candidate that encodes to no token."""
    head = before.rstrip()
    space = " " if head != before else ""
    word = candidate.strip()
    pieces: list[int] = []
    if head:
        base = tokenizer(head, add_special_tokens=False)["input_ids"]
        full = tokenizer(head + space + word, add_special_tokens=False)["input_ids"]
        if len(full) > len(base) and full[: len(base)] == base:
            pieces = list(full[len(base) :])
    if not pieces:
        pieces = list(tokenizer(space + word, add_special_tokens=False)["input_ids"])
    if not pieces:
        raise ValueError(f"candidate {candidate!r} encodes to no token with this tokenizer; drop it")
    return pieces


class MaskedBackend:
    """A loaded masked LM answering ``fill_mask`` and ``loglikelihood`` requests (see the module doc)."""

    kind = "masked_lm"

    def __init__(
        self, lm: MaskedLM, ref: ModelRef, *, batch_size: int = 16, log: Callable[[str], None] = print
    ) -> None:
        self.lm, self.ref = lm, ref
        self.batch_size = check_batch_size(batch_size)
        self.name = ref.name
        self.request_types = frozenset({FILL_MASK, LOGLIKELIHOOD})
        self.log = log
        tok = lm.tokenizer
        limit = tok.model_max_length
        self._limit = limit if isinstance(limit, int) and limit < 10**6 else None
        pad = tok.pad_token_id if tok.pad_token_id is not None else getattr(lm.model.config, "pad_token_id", None)
        self._pad = int(pad) if pad is not None else 0
        self._fingerprint: dict[str, Any] | None = None

    # ----------------------------------------------------------------------------------------------- records --
    def fingerprint(self) -> dict[str, Any]:
        """The weights' fingerprint (:meth:`ModelRef.fingerprint`, the commit the files resolved to)."""
        if self._fingerprint is None:
            self._fingerprint = self.ref.fingerprint(loaded=True, commit=self.lm.commit_hash)
        return self._fingerprint

    def metadata(self) -> dict[str, Any]:
        """The backend, the masked LM's own record (model, revision, device, dtype, tokenizer) and the batch size."""
        return {"backend": self.kind, **self.lm.metadata(), "batch_size": self.batch_size}

    def close(self) -> None:
        """Nothing is held open beyond the model (released with this object)."""
        return None

    # ------------------------------------------------------------------------------------------------ requests --
    def fill_mask(
        self, requests: Sequence[FillMask], tick: Callable[[int], None] | None = None
    ) -> list[FillMaskResult]:
        """Each candidate's log-probability at the ``[MASK]`` of its request's text, in order; a top-k request's
        fills (see the module doc)."""
        if any(r.top_k for r in requests):
            return self._top_k(requests, tick)
        done = ticker(tick)
        results: list[FillMaskResult] = []
        for group in batches(range(len(requests)), self.batch_size):
            rows: list[_Row] = []
            wanted: list[list[tuple[int, int]]] = []  # per request: (row, index of the target set) per candidate
            for r in group:
                wanted.append(self._fill_rows(requests[r], rows))
            scores = self._score_rows(rows)
            results += [FillMaskResult(tuple(scores[row][k] for row, k in want)) for want in wanted]
            done(len(group))
        return results

    def _top_k(self, requests: Sequence[FillMask], tick: Callable[[int], None] | None) -> list[FillMaskResult]:
        """Top-k requests by the engine, candidate ones as scores; each kind in one call, results in order."""
        results: list[FillMaskResult | None] = [None] * len(requests)
        groups: dict[tuple[int, str], list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((r.top_k, r.mode), []).append(i)
        for (k, mode), rows in groups.items():
            if not k:  # candidates to score
                for i, result in zip(rows, self.fill_mask([requests[i] for i in rows], tick), strict=True):
                    results[i] = result
                continue
            found = engine.predict(
                self.lm, [requests[i].text for i in rows], k, mode=mode, batch_size=self.batch_size, progress=tick
            )
            for at, i in enumerate(rows):
                results[i] = FillMaskResult(
                    words=tuple(found.tokens[at]), token_ids=tuple(found.ids[at]), probs=tuple(found.probs[at])
                )
        return [r for r in results if r is not None]

    def loglikelihood(
        self, requests: Sequence[Loglikelihood], tick: Callable[[int], None] | None = None
    ) -> list[LoglikelihoodResult]:
        """The pseudo-log-likelihood of each continuation after its context, in order (see the module doc)."""
        refuse_chat(self.name, requests, "a masked LM has no prompt to reply to")
        done = ticker(tick)
        results: list[LoglikelihoodResult] = []
        for group in batches(range(len(requests)), self.batch_size):
            rows: list[_Row] = []
            owners: list[list[int]] = []
            for r in group:
                ids, scored = self._pll_positions(requests[r])
                owners.append(list(range(len(rows), len(rows) + len(scored))))
                for p in scored:
                    masked = [*ids[:p], self.lm.tokenizer.mask_token_id, *ids[p + 1 :]]
                    rows.append((masked, [p], [[ids[p]]]))
            scores = self._score_rows(rows)
            results += [LoglikelihoodResult(float(sum(scores[i][0] for i in own)), len(own)) for own in owners]
            done(len(group))
        return results

    def generate(self, requests: Sequence[Generate], tick: Callable[[int], None] | None = None) -> list[GenerateResult]:
        """A masked LM writes no text: a one-line :class:`~queerbench.models.requests.UnsupportedRequestError`."""
        require(self, [GENERATE])
        return []

    # ----------------------------------------------------------------------------------------------- encoding --
    def _check_length(self, text: str, ids: Sequence[int]) -> None:
        if self._limit is not None and len(ids) > self._limit:
            raise ValueError(f"text {text[:80]!r} is {len(ids)} tokens long; {self.name} takes at most {self._limit}")

    def _fill_rows(self, request: FillMask, rows: list[_Row]) -> list[tuple[int, int]]:
        """Add the rows ``request`` needs (one per distinct piece count) and say where each candidate's score is."""
        tok = self.lm.tokenizer
        mask_id = tok.mask_token_id
        ids = tok(request.text.replace(MASK, tok.mask_token))["input_ids"]
        hits = [i for i, t in enumerate(ids) if t == mask_id]
        if len(hits) != 1:
            raise ValueError(f"text {request.text!r} gives {len(hits)} mask tokens after tokenization; expected one")
        pos = hits[0]
        before = request.text.split(MASK, 1)[0]
        by_count: dict[int, int] = {}
        out = []
        for candidate in request.candidates:
            pieces = candidate_pieces(tok, before, candidate)
            n = len(pieces)
            if n not in by_count:
                row_ids = [*ids[:pos], *([mask_id] * n), *ids[pos + 1 :]]
                self._check_length(request.text, row_ids)
                by_count[n] = len(rows)
                rows.append((row_ids, list(range(pos, pos + n)), []))
            targets = rows[by_count[n]][2]
            targets.append(pieces)
            out.append((by_count[n], len(targets) - 1))
        return out

    def _pll_positions(self, request: Loglikelihood) -> tuple[list[int], list[int]]:
        """The encoded text and the positions of the continuation's tokens (lm-evaluation-harness's rule)."""
        tok = self.lm.tokenizer
        context, continuation = split_context(request.context, request.continuation)
        enc = tok(context + continuation, return_special_tokens_mask=True)
        ids = list(enc["input_ids"])
        self._check_length(context + continuation, ids)
        body = [i for i, special in enumerate(enc["special_tokens_mask"]) if not special]
        n_context = len(tok(context, add_special_tokens=False)["input_ids"]) if context else 0
        return ids, body[n_context:]

    # ----------------------------------------------------------------------------------------------- scoring --
    def _logits_at(self, input_ids: torch.Tensor, attention: torch.Tensor | None, rows: Any, cols: Any) -> Any:
        """Vocabulary logits at ``(rows[i], cols[i])``, shape ``[len(rows), vocab]``."""
        lm = self.lm
        if lm.head is not None:
            hidden = lm.model.base_model(input_ids=input_ids, attention_mask=attention).last_hidden_state
            # with a device map the last layer (and the head) may sit on another device than the inputs
            return lm.head(hidden.to(rows.device)[rows, cols]).to(rows.device)
        return lm.model(input_ids=input_ids, attention_mask=attention).logits[rows, cols]

    def _score_rows(self, rows: Sequence[_Row]) -> list[list[float]]:
        """Per row, per target set: the summed log-softmax of the targets at the row's positions."""
        out: list[list[float]] = [[] for _ in rows]
        order = by_length([len(r[0]) for r in rows])
        device = self.lm.device
        with torch.inference_mode():
            for batch in batches(order, self.batch_size):
                width = len(rows[batch[0]][0])
                input_ids = torch.full((len(batch), width), self._pad, dtype=torch.long)
                attention = torch.zeros((len(batch), width), dtype=torch.long)
                sel_rows: list[int] = []
                sel_cols: list[int] = []
                for b, i in enumerate(batch):
                    ids, positions, _ = rows[i]
                    input_ids[b, : len(ids)] = torch.tensor(ids)
                    attention[b, : len(ids)] = 1
                    sel_rows += [b] * len(positions)
                    sel_cols += positions
                padded = len(rows[batch[-1]][0]) < width
                logits = self._logits_at(
                    input_ids.to(device),
                    attention.to(device) if padded else None,
                    torch.tensor(sel_rows, device=device),
                    torch.tensor(sel_cols, device=device),
                )
                logp = torch.log_softmax(logits.float(), dim=-1).cpu()
                at = 0
                for i in batch:
                    _, positions, target_sets = rows[i]
                    block = logp[at : at + len(positions)]
                    at += len(positions)
                    index = torch.arange(len(positions))
                    out[i] = [float(block[index, torch.tensor(t)].sum()) for t in target_sets]
        return out
