"""A local causal LM as a request backend (:class:`CausalBackend`): ``fill_mask`` (top-k), ``loglikelihood`` and
``generate``.

The model is loaded once, as the generation layer's :class:`~queerbench.models.generation.local.TransformersRunner`
(a folder, Hub id, ``.gguf`` file or the embedded SmolLM2), which also writes the replies.

**loglikelihood.** With an empty context, the text is encoded by the tokenizer's default call (``tokenizer(text)``,
its default special tokens: a BOS for Llama-style tokenizers, none for GPT-2) and tokens 2..n are scored, each from
the tokens before it (``n_tokens = n - 1``), so that ``-result.mean`` is the model's own mean token loss for that
text, ``model(input_ids, labels=input_ids).loss``. With a context, lm-evaluation-harness's rule: the context's
trailing spaces move to the continuation, context + continuation are encoded together (the same default call), and
the continuation's tokens (those after as many as the context alone encodes to) are scored. A ``chat`` request's
context is the prompt as the model reads one to reply to (the runner's chat template with the assistant's turn
opened, or the plain prompt), then its ``reply_prefix``, encoded with special tokens only where no chat template
supplies them; its continuation is encoded on its own and every one of its tokens scored (the reply's first
tokens, as the model would write them after the prompt). Rows are sorted by
length and padded on the right with an attention mask, ``batch_size`` rows per forward pass; a row's score does not
depend on the rows it shares a batch with (to float rounding).

With ``share_prefixes`` (the default), the rows of one call whose token ids share a long common prefix (sentences
that differ only from one slot on, as a task's candidates in one sentence) run that prefix once and their suffixes
on its KV cache (:mod:`queerbench.models.backends.prefixes`); the other rows run as above. The values are the same
to float rounding. A model whose cache cannot be shared that way (no cache, sliding-window layers) or whose layers
accelerate placed over several devices (a ``device_map``) runs every row whole, and ``metadata()`` records
``share_prefixes`` as false.

**fill_mask.** A causal LM sees no mask, so a top-k request is answered by proposing and ranking
(:mod:`queerbench.models.causal_blanks.local`): whole-word candidates from the next-token distribution after the text
before the blank, ranked by the log-probability of the whole sentence with each in place; the result holds the
``top_k`` words, their probabilities renormalised over the candidates, the summed log-probability that ranked each
and its number of tokens. ``batch_size`` sentences share a prefix pass. A candidate-word request (or the ``raw``
mode, a masked LM's vocabulary entries) is refused in one line: ask ``loglikelihood`` of each filled sentence.

**generate.** Greedy decoding of at most ``max_new_tokens`` tokens through the runner: the tokenizer's chat template
(a user turn, the generation prompt) when it has one, else the plain prompt (warned once by the runner).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import transformers

from queerbench.models.backends.common import (
    RequestFailedError,
    batches,
    by_length,
    by_top_k,
    check_batch_size,
    split_context,
    ticker,
)
from queerbench.models.backends.generate import generate_with
from queerbench.models.backends.prefixes import PrefixScorer, group_by_prefix
from queerbench.models.generation.local import TransformersRunner
from queerbench.models.registry import ModelRef
from queerbench.models.requests import (
    FILL_MASK,
    GENERATE,
    LOGLIKELIHOOD,
    FillMask,
    FillMaskResult,
    Generate,
    GenerateResult,
    Loglikelihood,
    LoglikelihoodResult,
)

if TYPE_CHECKING:
    from queerbench.models.causal_blanks.local import ScoredLM
    from queerbench.models.generation.cache import ResponseCache

__all__ = ["CausalBackend", "loglikelihood_positions"]


def loglikelihood_positions(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """The token ids a :class:`Loglikelihood` request is scored on and the positions scored (see the module doc)."""
    context, continuation = split_context(context, continuation)
    enc = tokenizer(context + continuation, return_special_tokens_mask=True)
    ids = list(enc["input_ids"])
    if not context:
        return ids, list(range(1, len(ids)))
    body = [i for i, special in enumerate(enc["special_tokens_mask"]) if not special]
    n_context = len(tokenizer(context, add_special_tokens=False)["input_ids"])
    return ids, [p for p in body[n_context:] if p >= 1]


class CausalBackend:
    """A loaded causal LM answering ``fill_mask`` (top-k), ``loglikelihood`` and ``generate`` requests (see the
    module doc)."""

    kind = "causal_lm"

    def __init__(
        self,
        runner: TransformersRunner,
        ref: ModelRef,
        *,
        dtype: str = "float32",
        batch_size: int = 16,
        share_prefixes: bool = True,
        log: Callable[[str], None] = print,
        fingerprint: dict[str, Any] | None = None,
    ) -> None:
        """``fingerprint``: the weights' fingerprint when the caller took it already (else taken at first use)."""
        self.runner, self.ref, self.dtype = runner, ref, dtype
        self.model, self.tokenizer = runner.model, runner.tokenizer
        self.batch_size = check_batch_size(batch_size)
        self.name = ref.name
        self.request_types = frozenset({FILL_MASK, LOGLIKELIHOOD, GENERATE})
        self.log = log
        self.reply_cache: ResponseCache | None = None
        """Where ``generate`` replies are kept as they arrive and found again (None: not kept)."""
        self._pad = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
        self._fingerprint: dict[str, Any] | None = fingerprint
        self.share_prefixes = bool(share_prefixes) and runner.device_map is None  # a placed model: rows run whole
        self._prefixes: PrefixScorer | None = None  # built (and checked) at the first call that shares
        self._blanks: ScoredLM | None = None  # the top-k engine's tables, built at the first fill_mask call

    # ----------------------------------------------------------------------------------------------- records --
    def fingerprint(self) -> dict[str, Any]:
        """The weights' fingerprint (:meth:`ModelRef.fingerprint`, the commit the files resolved to)."""
        if self._fingerprint is None:
            self._fingerprint = self.ref.fingerprint(loaded=True)
        return self._fingerprint

    def metadata(self) -> dict[str, Any]:
        """The backend, model, architecture, device, dtype, batch size, prefix sharing and prompt format."""
        return {
            "backend": self.kind,
            "model": self.ref.name,
            "revision": self.ref.revision,
            "architecture": type(self.model).__name__,
            "device": self.runner.device,
            "device_map": self.runner.device_map,
            "dtype": self.dtype,
            "batch_size": self.batch_size,
            "share_prefixes": self.share_prefixes,
            "prompt_format": self.runner.prompt_format,
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
        }

    def close(self) -> None:
        """Nothing is held open beyond the model (released with this object)."""
        return None

    # ------------------------------------------------------------------------------------------------ requests --
    def fill_mask(
        self, requests: Sequence[FillMask], tick: Callable[[int], None] | None = None
    ) -> list[FillMaskResult]:
        """The top-k whole words of each request's blank, proposed and ranked (see the module doc), in order; a
        one-line :class:`~queerbench.models.requests.UnsupportedRequestError` for a candidate-word or ``raw``
        request, before any forward pass."""
        from queerbench.models.causal_blanks.local import score_blanks

        by_k = by_top_k(self.name, requests)
        done = ticker(tick)
        results: list[FillMaskResult | None] = [None] * len(requests)
        for k, idx in by_k.items():
            got = score_blanks(
                self.blank_filler(), [requests[i].text for i in idx], k, batch_size=self.batch_size, progress=done
            )
            for j, i in enumerate(idx):
                results[i] = FillMaskResult(
                    logprobs=tuple(got.logprobs[j]),
                    words=tuple(got.tokens[j]),
                    probs=tuple(got.probs[j]),
                    n_tokens=tuple(got.n_word_tokens[j]),
                )
        return [r for r in results if r is not None]

    def blank_filler(self) -> ScoredLM:
        """The model prepared for top-k fills (:class:`~queerbench.models.causal_blanks.local.ScoredLM`: its
        vocabulary tables, built once): what ``fill_mask`` runs on, and whose ``metadata()`` (tokenizer family,
        start token, device, dtype) a run records."""
        if self._blanks is None:
            from queerbench.models.causal_blanks.local import ScoredLM

            self._blanks = ScoredLM(self.model, self.tokenizer)
        return self._blanks

    def prepare_blanks(self, top_k: int, **_: Any) -> None:
        """Ready for top-k ``fill_mask`` requests (the engine's vocabulary tables built now, not at the first
        request); a local model needs no other check before the work."""
        self.blank_filler()

    def blanks_metadata(self, top_k: int) -> dict[str, Any]:
        """What a run records of how its top-``k`` words were found: the weights' fingerprint, the engine's
        settings (tokenizer family, start token, device, dtype), the placement, the size and the decoding."""
        from queerbench.models.causal_blanks.local import CANDIDATES_PER_K, MAX_WORD_TOKENS

        lm = self.blank_filler()
        return {
            "fingerprint": self.fingerprint(),
            **lm.metadata(),
            "device_map": self.runner.device_map,
            "params": int(sum(p.numel() for p in lm.model.parameters())),
            "decoding": {
                "candidates": CANDIDATES_PER_K * top_k,
                "candidates_per_k": CANDIDATES_PER_K,
                "max_word_tokens": MAX_WORD_TOKENS,
                "ranking": "log P(word + text after the blank | start token + text before the blank), summed",
                "prompt_format": "raw",
            },
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
        }

    def loglikelihood(
        self, requests: Sequence[Loglikelihood], tick: Callable[[int], None] | None = None
    ) -> list[LoglikelihoodResult]:
        """The log-probability of each continuation after its context, in order (see the module doc)."""
        done = ticker(tick)
        encoded = [self._encode(r) for r in requests]
        self._check_lengths(requests, encoded)
        results: list[LoglikelihoodResult | None] = [None] * len(requests)
        device = self.runner.device
        scored = [i for i, (_, positions) in enumerate(encoded) if positions]
        for i, (_, positions) in enumerate(encoded):
            if not positions:  # nothing to score (a text of one token, an empty continuation)
                results[i] = LoglikelihoodResult(0.0, 0)
        if len(scored) < len(requests):
            done(len(requests) - len(scored))
        with torch.inference_mode():
            alone = scored
            if self._sharing(device) and self._prefixes is not None:
                groups, rest = group_by_prefix([encoded[i][0] for i in scored])
                alone = [scored[k] for k in rest]
                if groups:
                    rows = [encoded[i] for i in scored]
                    values = self._prefixes.score(rows, groups, self.batch_size, device, done)
                    for k, value in values.items():
                        results[scored[k]] = LoglikelihoodResult(value, len(rows[k][1]))
            for batch in batches(by_length([len(encoded[i][0]) for i in alone]), self.batch_size):
                idx = [alone[k] for k in batch]
                for i, value in zip(idx, self._score([encoded[i] for i in idx], device), strict=True):
                    results[i] = LoglikelihoodResult(value, len(encoded[i][1]))
                done(len(batch))
        return [r for r in results if r is not None]

    def _encode(self, request: Loglikelihood) -> tuple[list[int], list[int]]:
        """A request's token ids and scored positions: :func:`loglikelihood_positions`, or for a ``chat`` request
        the prompt as the runner formats it (chat template or plain) with the reply prefix, encoded with special
        tokens only where no template supplies them, then the continuation encoded on its own, every token scored."""
        if not request.chat:
            return loglikelihood_positions(self.tokenizer, request.context, request.continuation)
        context = self.runner.format_prompt(request.context) + request.reply_prefix
        ids = list(self.tokenizer(context, add_special_tokens=not self.runner.has_chat_template)["input_ids"])
        reply = list(self.tokenizer(request.continuation, add_special_tokens=False)["input_ids"])
        return ids + reply, list(range(len(ids), len(ids) + len(reply)))

    def _sharing(self, device: str) -> bool:
        """Whether this call shares prefixes: switched on and, checked once, the model's cache can be shared (else
        switched off, said once, and recorded in ``metadata()``)."""
        if self.share_prefixes and self._prefixes is None:
            self._prefixes = PrefixScorer(self.model, self._pad)
            if not self._prefixes.usable(device):
                self.share_prefixes, self._prefixes = False, None
                self.log(f"{self.name}: its KV cache cannot be shared by rows; every loglikelihood row runs whole")
        return self.share_prefixes

    def _check_lengths(self, requests: Sequence[Loglikelihood], encoded: Sequence[tuple[list[int], list[int]]]) -> None:
        """A one-line :class:`RequestFailedError` for a text longer than the model's positions, before any forward
        pass (torch would fail deep inside the embedding with an index error)."""
        config = self.model.config
        limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        if not isinstance(limit, int):
            return
        for request, (ids, _) in zip(requests, encoded, strict=True):
            if len(ids) > limit:
                text = (request.context + request.continuation)[:60]
                raise RequestFailedError(
                    f"{self.name} takes at most {limit} tokens, and the text {text!r}… is {len(ids)}: use a model "
                    "with a longer context"
                )

    def _score(self, rows: Sequence[tuple[list[int], list[int]]], device: str) -> list[float]:
        """One forward pass over ``rows`` (right-padded): each row's summed log-probability at its positions."""
        width = max(len(ids) for ids, _ in rows)
        input_ids = torch.full((len(rows), width), self._pad, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        sel_rows: list[int] = []
        sel_cols: list[int] = []
        targets: list[int] = []
        for b, (ids, positions) in enumerate(rows):
            input_ids[b, : len(ids)] = torch.tensor(ids)
            attention[b, : len(ids)] = 1
            sel_rows += [b] * len(positions)
            sel_cols += [p - 1 for p in positions]  # the logits before a token predict it
            targets += [ids[p] for p in positions]
        logits = self.model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits
        picked = logits[torch.tensor(sel_rows, device=logits.device), torch.tensor(sel_cols, device=logits.device)]
        logp = torch.log_softmax(picked.float(), dim=-1)
        values = logp.gather(-1, torch.tensor(targets, device=logp.device)[:, None]).squeeze(-1).cpu().tolist()
        out, at = [], 0
        for _, positions in rows:
            out.append(float(sum(values[at : at + len(positions)])))
            at += len(positions)
        return out

    def generator(self) -> TransformersRunner:
        """The runner that answers ``generate`` (the loaded model's)."""
        return self.runner

    def generate(self, requests: Sequence[Generate], tick: Callable[[int], None] | None = None) -> list[GenerateResult]:
        """Replies, ``batch_size`` prompts at a time (requests with equal decoding settings together), each sampled
        with its own seed when its ``temperature`` is above 0."""
        return generate_with(self.runner, self.name, requests, self.batch_size, ticker(tick), self.reply_cache)
