"""The two generative methods as predictors: ``scored`` (a local causal LM ranks candidate words) and ``instructed``
(a chat model, local or behind an OpenAI-compatible endpoint, is asked for the word).

Both have the interface of :class:`queerbench.methods.Predictor` (the registry that resolves a method by name):
``from_options`` builds one from a run's options, ``metadata()`` names the method, the model's fingerprint and the
decoding settings (recorded in every output), ``predict(ids, sentences, tick)`` gives the prediction columns of those
sentences, which :mod:`queerbench.run` stores chunk by chunk like a masked LM's (so resume and reuse work the same
way), and ``close()`` closes the reply cache.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from queerbench.llm.settings import DEFAULT_MODEL, DEFAULT_REQUESTS_PER_MINUTE

__all__ = ["InstructedPredictor", "ScoredPredictor", "model_fingerprint"]


def model_fingerprint(model: str, endpoint: str | None = None, revision: str | None = None) -> dict[str, Any]:
    """What identifies the weights, so that a resume never mixes two models' rows.

    The generation layer's :func:`~queerbench.llm.loading.weights_fingerprint` (embedded sha256, local file hashes
    via :mod:`queerbench.fingerprint`, Hub commit — resolved here from the model's configuration at ``revision``);
    an endpoint: URL and model name (all one can know).
    """
    from queerbench.llm.loading import weights_fingerprint

    if endpoint:
        return {"kind": "endpoint", "base_url": endpoint.rstrip("/"), "model": model}
    if model.startswith("embedded:") or Path(model).expanduser().exists():
        return weights_fingerprint(None if model.startswith("embedded:") else model)
    from transformers import AutoConfig

    try:
        kwargs = {"revision": revision} if revision else {}
        commit = getattr(AutoConfig.from_pretrained(model, trust_remote_code=False, **kwargs), "_commit_hash", None)
    except (OSError, ValueError):
        commit = None
    return weights_fingerprint(model, commit)


def _preflight_local(options: Any) -> None:
    """A local causal LM's checks before the run claims its folder (config only: kind, device, memory)."""
    if getattr(options, "endpoint", None):
        return
    from queerbench.llm.loading import check_causal_lm_loads

    check_causal_lm_loads(
        None if options.model == DEFAULT_MODEL else options.model,
        device=options.device,
        dtype=options.dtype,
        revision=options.revision,
        device_map=getattr(options, "device_map", None),
    )


class ScoredPredictor:
    """``scored`` on a local causal LM (see :mod:`queerbench.llm.scored`)."""

    method = "scored"

    def __init__(
        self,
        model: str,
        *,
        top_k: int,
        device: str,
        dtype: str,
        batch_size: int,
        revision: str | None = None,
        device_map: str | None = None,
    ) -> None:
        from queerbench.llm import load_causal_lm
        from queerbench.llm.scored import ScoredLM

        self.model_id, self.top_k, self.batch_size = model, top_k, batch_size
        local = None if model == DEFAULT_MODEL else model
        lm, tokenizer = load_causal_lm(local, device=device, dtype=dtype, revision=revision, device_map=device_map)
        self.lm, self.device_map = ScoredLM(lm, tokenizer), device_map
        from queerbench.llm.loading import weights_fingerprint

        # what was loaded: a Hub model's commit at --revision (the config records it), else the files themselves
        self.fingerprint = weights_fingerprint(local, getattr(lm.config, "_commit_hash", None))

    preflight = staticmethod(_preflight_local)
    """The loading checks that need no weights (a model too large for the free memory is refused here)."""

    @classmethod
    def from_options(cls, options: Any, **_: Any) -> ScoredPredictor:
        """The predictor for a run's ``options`` (nothing to resume from: a resume re-checks the fingerprint)."""
        return cls(
            options.model,
            top_k=options.top_k,
            device=options.device,
            dtype=options.dtype,
            batch_size=options.batch_size,
            revision=options.revision,
            device_map=getattr(options, "device_map", None),
        )

    def metadata(self) -> dict[str, Any]:
        """Method, model and its fingerprint, and the scoring settings."""
        import torch
        import transformers

        from queerbench.llm.scored import CANDIDATES_PER_K, MAX_WORD_TOKENS

        return {
            "method": self.method,
            "model": self.model_id,
            "fingerprint": self.fingerprint,
            **self.lm.metadata(),
            "device_map": self.device_map,
            "params": int(sum(p.numel() for p in self.lm.model.parameters())),
            "decoding": {
                "candidates": CANDIDATES_PER_K * self.top_k,
                "candidates_per_k": CANDIDATES_PER_K,
                "max_word_tokens": MAX_WORD_TOKENS,
                "ranking": "log P(word + text after the blank | start token + text before the blank), summed",
                "prompt_format": "raw",
            },
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
        }

    def predict(self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None]) -> dict[str, list]:
        """tokens (lowercased top-k words), probs (renormalised over candidates), logprobs, n_word_tokens."""
        from queerbench.llm.scored import score_blanks

        res = score_blanks(self.lm, sentences, self.top_k, batch_size=self.batch_size, progress=tick)
        return {"tokens": res.tokens, "probs": res.probs, "logprobs": res.logprobs, "n_word_tokens": res.n_word_tokens}

    def close(self) -> None:
        """Nothing to release (the model goes with the predictor)."""


class InstructedPredictor:
    """``instructed`` on a local chat model or an OpenAI-compatible endpoint (see :mod:`queerbench.llm.instructed`)."""

    method = "instructed"

    def __init__(
        self,
        model: str,
        *,
        endpoint: str | None,
        top_k: int,
        device: str,
        dtype: str,
        batch_size: int,
        concurrency: int,
        seed: int,
        requests_per_minute: float = DEFAULT_REQUESTS_PER_MINUTE,
        prompt_id: str | None,
        max_new_tokens: int | None,
        cache_path: Path,
        log: Callable[[str], None] = print,
        revision: str | None = None,
        device_map: str | None = None,
    ) -> None:
        from queerbench.llm import ResponseCache, load_runner
        from queerbench.llm.instructed import instructed_settings, load_prompts

        self.model_id, self.endpoint, self.top_k = model, endpoint, top_k
        self.prompt_id = prompt_id or load_prompts()["default_prompt"]
        self.settings = instructed_settings(top_k, seed, batch_size, max_new_tokens)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            local = None if model == DEFAULT_MODEL else model
            self.runner = load_runner(
                model if endpoint else local,
                endpoint,
                device=device,
                dtype=dtype,
                concurrency=concurrency,
                requests_per_minute=requests_per_minute,
                revision=revision,
                device_map=device_map,
            )
        for w in caught:  # e.g. "no chat template: plain prompt" — said once, here, and recorded in the metadata
            log(f"note: {w.message}")
        self.cache = ResponseCache(cache_path)
        from queerbench.llm.collect import ErrorStreak

        self.streak = ErrorStreak()  # failed calls in a row, across the parts of the run
        weights = getattr(self.runner, "weights", None)  # a local runner fingerprinted what it loaded
        self.fingerprint = weights if weights is not None and not endpoint else model_fingerprint(model, endpoint)
        # a local model at temperature 0 would repeat an empty reply: it is not asked again
        self.reask_empty = bool(endpoint) or self.settings.temperature > 0

    preflight = staticmethod(_preflight_local)
    """A local model's loading checks that need no weights; nothing for an endpoint (its probe comes first)."""

    @classmethod
    def from_options(
        cls, options: Any, *, cache_path: Path, log: Callable[[str], None] = print, **_: Any
    ) -> InstructedPredictor:
        """The predictor for a run's ``options``; replies are kept in the SQLite cache at ``cache_path``."""
        return cls(
            options.model,
            endpoint=options.endpoint,
            top_k=options.top_k,
            device=options.device,
            dtype=options.dtype,
            batch_size=options.batch_size,
            concurrency=options.concurrency,
            requests_per_minute=options.requests_per_minute,
            seed=options.seed,
            prompt_id=options.prompt_id,
            max_new_tokens=options.max_new_tokens,
            cache_path=cache_path,
            log=log,
            revision=options.revision,
            device_map=getattr(options, "device_map", None),
        )

    def metadata(self) -> dict[str, Any]:
        """Method, model/endpoint and fingerprints, prompt and decoding settings."""
        from queerbench.llm.instructed import load_prompts

        runner_fp = self.runner.fingerprint()
        dec = load_prompts()["decoding"]
        return {
            "method": self.method,
            "model": self.model_id,
            "endpoint": self.endpoint,
            "fingerprint": self.fingerprint,
            "runner": runner_fp,
            "prompt_format": runner_fp.get("prompt_format", "chat"),
            "prompt_id": self.prompt_id,
            "prompt": load_prompts()["prompts"][self.prompt_id]["text"],
            "system_prompt": None,
            "decoding": {
                **self.settings.decoding(),
                "samples": self.settings.samples,
                "empty_reasks": int(dec["empty_reasks"]) if self.reask_empty else 0,
                "kind": "greedy" if self.top_k == 1 else f"{self.top_k} samples, duplicates allowed",
            },
            "device": getattr(self.runner, "device", None),
            "device_map": getattr(self.runner, "device_map", None),
        }

    def predict(self, ids: Sequence[str], sentences: Sequence[str], tick: Callable[[int], None]) -> dict[str, list]:
        """tokens (the ``ok`` words), reply and label per sample, n_distinct, reasks, prompt_format."""
        from queerbench.llm.instructed import predict_instructed

        frame = predict_instructed(
            self.runner,
            ids,
            sentences,
            self.settings,
            self.cache,
            prompt_id=self.prompt_id,
            reask_empty=self.reask_empty,
            progress=tick,
            show_progress=False,  # the run's bar counts these sentences as their replies arrive
            streak=self.streak,
        )
        return {c: frame[c].tolist() for c in frame.columns if c != "id"}

    def close(self) -> None:
        """Close the reply cache."""
        self.cache.close()
