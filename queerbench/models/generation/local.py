"""Local causal LMs through transformers as a generation-layer runner: sampling.

:class:`TransformersRunner` wraps a model loaded by :func:`queerbench.models.generation.loading.load_causal_lm` (a folder, Hub id,
``.gguf`` file or the embedded SmolLM2) as a :class:`~queerbench.models.generation.settings.Runner`; the
request backend of a local causal LM (:class:`~queerbench.models.backends.causal.CausalBackend`) scores text on it.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from queerbench.models.fingerprint import fingerprint_model
from queerbench.models.generation.loading import load_causal_lm
from queerbench.models.generation.settings import DEFAULT_MODEL, GenerationSettings, Reply

__all__ = ["TransformersRunner"]


class _TransformersSteps:
    """Decoding steps through the model's own forward: its own KV cache (passed back as it was returned), and an
    attention mask grown by one column per step."""

    def __init__(self, model: Any, cache: Any, mask: Any, cache_arg: str) -> None:
        self.model, self.cache, self.mask, self.cache_arg = model, cache, mask, cache_arg

    def keep(self, rows: Any) -> bool:
        """Keep only ``rows`` of the batch, if the cache can drop rows (else nothing changes and ``False``)."""
        if not hasattr(self.cache, "batch_select_indices"):
            return False
        self.cache.batch_select_indices(rows)
        self.mask = self.mask[rows]
        return True

    def step(self, tokens: Any, positions: Any) -> Any:
        """Feed one token per row (``[rows]``, at ``positions``) and return the next-token logits."""
        import torch

        self.mask = torch.cat([self.mask, self.mask.new_ones((len(tokens), 1))], dim=1)
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=self.mask,
            position_ids=positions[:, None],
            use_cache=True,
            **{self.cache_arg: self.cache},
        )
        self.cache = getattr(out, self.cache_arg)
        return out.logits[:, -1, :]


class TransformersRunner:
    """A local ``AutoModelForCausalLM`` with its chat template (or a plain prompt when it has none).

    Without a chat template the prompt is fed as plain text; this is warned about once and recorded in every
    reply's ``meta['prompt_format']`` (``chat`` or ``plain``) and in the run report. ``loaded``: a ``(model,
    tokenizer)`` that :func:`load_causal_lm` already loaded for ``model`` (the Space's cached models), wrapped instead
    of loading the weights again, with ``weights``, their fingerprint when the caller took it already.
    ``prompts=False``: a model loaded only to score text, which formats no prompt (no note on a missing template).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "auto",
        dtype: str = "float32",
        system_prompt: str | None = None,
        revision: str | None = None,
        device_map: str | None = None,
        loaded: tuple[Any, Any] | None = None,
        weights: dict[str, Any] | None = None,
        prompts: bool = True,
    ) -> None:
        self.model_id = model or DEFAULT_MODEL
        self.name = self.model_id
        self.model, self.tokenizer = loaded or load_causal_lm(
            model, device=device, dtype=dtype, revision=revision, device_map=device_map
        )
        self.device = str(self.model.device)  # the first device of a device map: inputs go there
        self.device_map = device_map
        self.revision = revision
        # the fingerprint of the files loaded, unless the caller took it already (a Hub id's commit is asked once)
        self.weights = weights if weights is not None else fingerprint_model(model, hub="commit", revision=revision)
        self.system_prompt = system_prompt
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        if not self.has_chat_template and prompts:
            warnings.warn(
                f"model {self.model_id!r} has no chat template: prompts are fed as plain text "
                "(recorded as prompt_format='plain' in the outputs)",
                stacklevel=2,
            )

    @property
    def prompt_format(self) -> str:
        """``chat`` when the tokenizer's chat template is used, else ``plain``."""
        return "chat" if self.has_chat_template else "plain"

    def fingerprint(self) -> dict[str, Any]:
        """Model id, class, parameter count, weights (:func:`~queerbench.models.fingerprint.fingerprint_model`), prompt format, system prompt.

        Part of every cache key: replies from other weights (a folder retrained between a killed run and its
        resume) or another system prompt are never reused.
        """
        n_params = sum(p.numel() for p in self.model.parameters())
        return {
            "kind": "transformers",
            "model": self.model_id,
            "class": type(self.model).__name__,
            "params": int(n_params),
            "weights": self.weights,
            "prompt_format": self.prompt_format,
            "system": self.system_prompt,
        }

    def format_prompt(self, prompt: str) -> str:
        """The text the model sees: the chat template with a generation prompt, or the plain prompt + newline."""
        if not self.has_chat_template:
            return (f"{self.system_prompt}\n\n" if self.system_prompt else "") + prompt + "\n"
        messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [
            {"role": "user", "content": prompt}
        ]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def stop_token_ids(self) -> set[int]:
        """Token ids that end a reply: the generation config's EOS id(s) and the tokenizer's EOS."""
        ids: set[int] = set()
        for value in (getattr(self.model.generation_config, "eos_token_id", None), self.tokenizer.eos_token_id):
            if value is not None:
                ids.update(value if isinstance(value, (list, tuple)) else [value])
        return ids

    def generate(
        self, prompts: Sequence[str], seeds: Sequence[int], settings: GenerationSettings
    ) -> Iterator[tuple[int, Reply]]:
        """Sample one reply per prompt, ``settings.batch_size`` prompts at a time, yielding each batch as it ends.

        Prompts are grouped by token length (less padding); the result does not depend on the grouping: each reply
        is a function of (prompt, seed) only (see :meth:`decode`). A batch that fails yields an error per prompt.
        """
        add_special = not self.has_chat_template  # chat templates already contain BOS and friends
        encoded = [self.tokenizer(self.format_prompt(p), add_special_tokens=add_special)["input_ids"] for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), settings.batch_size):
            idx = order[start : start + settings.batch_size]
            try:
                outs = self.decode([encoded[i] for i in idx], [seeds[i] for i in idx], settings)
            except Exception as exc:  # one bad batch (e.g. out of memory) must not lose the others
                for i in idx:
                    yield i, Reply(None, f"{type(exc).__name__}: {exc}", {"prompt_format": self.prompt_format})
                continue
            for i, (tokens, finish) in zip(idx, outs, strict=True):
                text = self.tokenizer.decode(tokens, skip_special_tokens=True).strip()
                meta = {
                    "prompt_format": self.prompt_format,
                    "seed": seeds[i],
                    "new_tokens": len(tokens),
                    "finish_reason": finish,
                }
                yield i, Reply(text, None, meta)

    def decode(
        self, seqs: Sequence[Sequence[int]], seeds: Sequence[int], settings: GenerationSettings
    ) -> list[tuple[list[int], str]]:
        """Decode a batch of token sequences: ``(new token ids, finish_reason)`` per row (``stop`` or ``length``).

        One prefill over the left-padded batch (identical sequences, such as the k samples of one prompt, are
        prefilled once and their KV cache copied), then one token per step with the KV cache. Explicit position ids
        (0 at each row's first real token) keep absolute-position models (GPT-2) from seeing padding as text.
        Greedy when ``temperature == 0``; otherwise temperature and nucleus (``top_p``) sampling, each row drawing
        from its **own** ``torch.Generator`` seeded with its seed (on the CPU, so a seed means the same on every
        device): a row's reply depends on (prompt, seed) only, not on which rows share its batch. A row that has
        finished leaves the batch and its KV cache, so the others do not pay for it. Every step is the model's own
        forward on its own cache (transformers' ``DynamicCache``). The stop token itself is not returned.
        """
        import torch

        n = len(seqs)
        pad = self.tokenizer.pad_token_id
        stop = self.stop_token_ids()
        # identical prompts (the k samples of one sentence) are prefilled once and their KV cache copied per row
        unique: dict[tuple[int, ...], int] = {}
        source = [unique.setdefault(tuple(seq), len(unique)) for seq in seqs]
        width = max(len(s) for s in unique)
        ids = torch.full((len(unique), width), pad, dtype=torch.long)
        mask = torch.zeros((len(unique), width), dtype=torch.long)
        for r, seq in enumerate(unique):
            ids[r, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
            mask[r, width - len(seq) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        generators = [torch.Generator().manual_seed(int(seed)) for seed in seeds]
        dev = self.model.device
        ids, mask, positions = ids.to(dev), mask.to(dev), positions.to(dev)
        # transformers 5 calls the KV cache ``cache`` (argument and output); 4.x called it ``past_key_values``;
        # the prefill computes the LM head at the last position only (``logits_to_keep``, ``num_…`` before 4.49)
        params = inspect.signature(self.model.forward).parameters
        cache_arg = "cache" if "cache" in params else "past_key_values"
        keep = next(({k: 1} for k in ("logits_to_keep", "num_logits_to_keep") if k in params), {})
        new: list[list[int]] = [[] for _ in range(n)]
        finish: list[str | None] = [None] * n
        active = list(range(n))  # original row of each row still in the batch
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **keep)
            cache = getattr(out, cache_arg)
            logits = out.logits[:, -1, :]
            if len(unique) < n:
                rows = torch.tensor(source, device=dev)
                cache.reorder_cache(rows)
                logits, mask, positions = logits[rows], mask[rows], positions[rows]
            steps = _TransformersSteps(self.model, cache, mask, cache_arg)
            del out, cache  # the steps hold the KV cache now
            next_pos = positions[:, -1] + 1
            for step in range(settings.max_new_tokens):
                picked = self._pick(logits, [generators[r] for r in active], settings)
                for r, tok in zip(active, picked, strict=True):
                    if finish[r] is not None:  # finished, still in the batch (a cache that cannot drop rows)
                        continue
                    if tok in stop:
                        finish[r] = "stop"
                    else:
                        new[r].append(tok)
                if step == settings.max_new_tokens - 1:
                    break
                keep_rows = [k for k, r in enumerate(active) if finish[r] is None]
                if not keep_rows:
                    break
                sel = torch.tensor(keep_rows, device=dev)
                if len(keep_rows) < len(active) and steps.keep(sel):
                    # rows that finished leave the batch (and the KV cache): later steps compute only live rows
                    next_pos = next_pos[sel]
                    picked = [picked[k] for k in keep_rows]
                    active = [active[k] for k in keep_rows]
                feed = torch.tensor([pad if finish[r] else t for r, t in zip(active, picked, strict=True)], device=dev)
                logits = steps.step(feed, next_pos)
                next_pos = next_pos + 1
        return [(toks, f or "length") for toks, f in zip(new, finish, strict=True)]

    @staticmethod
    def _pick(logits: Any, generators: Sequence[Any], settings: GenerationSettings) -> list[int]:
        """The next token of every row: argmax, or a draw from the row's own generator (temperature, top-p).

        Nucleus: the smallest set of most likely tokens whose mass reaches ``top_p`` (the most likely token is
        always kept), renormalised. It is looked for among the row's top 64 tokens first and the full vocabulary
        is sorted only when those do not reach ``top_p``; which path runs depends on the row alone.
        """
        import torch

        logits = logits.float()
        if settings.temperature == 0:
            return [int(t) for t in logits.argmax(-1).tolist()]
        probs = torch.softmax(logits / settings.temperature, dim=-1).cpu()
        if settings.top_p is None or settings.top_p >= 1:
            return [int(torch.multinomial(probs[r], 1, generator=g)) for r, g in enumerate(generators)]
        top_vals, top_idx = probs.topk(min(64, probs.shape[-1]), dim=-1)
        picked = []
        for r, g in enumerate(generators):
            vals, idx = top_vals[r], top_idx[r]
            if float(vals.sum()) < settings.top_p:
                vals, idx = probs[r].sort(descending=True)
            vals = vals.masked_fill(vals.cumsum(0) - vals >= settings.top_p, 0.0)
            picked.append(int(idx[torch.multinomial(vals, 1, generator=g)]))
        return picked
