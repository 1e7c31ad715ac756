"""QueerBench on generative LMs: choose the method, load the model through the layer, predict a chunk of sentences.

``queerbench run --method auto|mlm|scored|instructed`` (:func:`resolve_method`): ``auto`` reads the model's
configuration (never its weights) and picks ``mlm`` for a masked LM and ``scored`` for a local causal LM;
``--endpoint URL`` means ``instructed`` (``--method scored`` with it: a completions endpoint's log-probabilities,
:mod:`queerbench.llm.scored_endpoint`). A mismatch (a causal LM with ``mlm``, a masked LM with ``scored`` or
``instructed``, an endpoint with ``mlm``) is one clear error before anything loads.

:func:`load_predictor` returns an object with ``metadata()`` (method, model fingerprint, decoding settings: recorded in
every output) and ``predict(ids, sentences, tick)`` → the prediction columns of those sentences, which
:mod:`queerbench.run` stores chunk by chunk like a masked LM's (so resume and reuse work the same way).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "GENERATIVE_METHODS",
    "METHODS",
    "InstructedPredictor",
    "ScoredPredictor",
    "load_predictor",
    "model_fingerprint",
    "model_kind",
    "resolve_method",
    "same_weights",
]

METHODS: tuple[str, ...] = ("auto", "mlm", "scored", "instructed")
GENERATIVE_METHODS: tuple[str, ...] = ("scored", "instructed")


def _default_model() -> str:
    from queerbench.llm import DEFAULT_MODEL

    return DEFAULT_MODEL


def model_kind(model: str, revision: str | None = None) -> tuple[str, str]:
    """``(kind, architecture)`` from the configuration only (the layer's :func:`~queerbench.llm.describe_model`):
    kind ``masked``, ``causal``, ``seq2seq`` or ``other``."""
    from queerbench.llm import describe_model

    return describe_model(model, revision)


def resolve_method(method: str, model: str | None, endpoint: str | None, revision: str | None = None) -> str:
    """The concrete method (``mlm``, ``scored`` or ``instructed``) for these options, or a one-line ``ValueError``."""
    if method not in METHODS:
        raise ValueError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    if endpoint:
        if not model:
            raise ValueError("--endpoint needs --model NAME (the model name the endpoint serves, e.g. gpt-4o-mini)")
        if method == "mlm":
            raise ValueError(
                "--endpoint runs --method instructed (replies) or scored (a completions endpoint's log-probabilities), "
                "not a masked LM; drop --method mlm or use --method instructed"
            )
        return "scored" if method == "scored" else "instructed"
    if model is None:
        return "scored" if method == "auto" else method
    kind, arch = model_kind(model, revision)
    if method == "auto":
        return "scored" if kind == "causal" else "mlm"
    if method == "mlm" and kind == "causal":
        raise ValueError(
            f"{model!r} is a causal LM ({arch}), not a masked LM: --method mlm needs a masked LM; "
            "use --method scored (or instructed, or auto)"
        )
    if method in GENERATIVE_METHODS and kind == "masked":
        raise ValueError(
            f"{model!r} is a masked LM ({arch}): --method {method} needs a causal LM; use --method mlm (or auto)"
        )
    return method


def model_fingerprint(model: str, endpoint: str | None = None, revision: str | None = None) -> dict[str, Any]:
    """What identifies the weights, so that a resume never mixes two models' rows.

    The generation layer's :func:`~queerbench.llm.local.weights_fingerprint` (embedded sha256, local file hashes
    via :mod:`queerbench.fingerprint`, Hub commit — resolved here from the model's configuration at ``revision``);
    an endpoint: URL and model name (all one can know).
    """
    from queerbench.llm.local import weights_fingerprint

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


class ScoredPredictor:
    """``scored`` on a local causal LM (see :mod:`queerbench.llm.scored`)."""

    method = "scored"

    def __init__(
        self, model: str, *, top_k: int, device: str, dtype: str, batch_size: int, revision: str | None = None
    ) -> None:
        from queerbench.llm import load_causal_lm
        from queerbench.llm.scored import ScoredLM

        self.model_id, self.top_k, self.batch_size = model, top_k, batch_size
        local = None if model == _default_model() else model
        lm, tokenizer = load_causal_lm(local, device=device, dtype=dtype, revision=revision)
        self.lm = ScoredLM(lm, tokenizer)
        from queerbench.llm.local import weights_fingerprint

        # what was loaded: a Hub model's commit at --revision (the config records it), else the files themselves
        self.fingerprint = weights_fingerprint(local, getattr(lm.config, "_commit_hash", None))

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
        requests_per_minute: float = 600.0,
        prompt_id: str | None,
        max_new_tokens: int | None,
        cache_path: Path,
        log: Callable[[str], None] = print,
        revision: str | None = None,
    ) -> None:
        from queerbench.llm import ResponseCache, load_runner
        from queerbench.llm.instructed import instructed_settings, load_prompts

        self.model_id, self.endpoint, self.top_k = model, endpoint, top_k
        self.prompt_id = prompt_id or load_prompts()["default_prompt"]
        self.settings = instructed_settings(top_k, seed, batch_size, max_new_tokens)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            local = None if model == _default_model() else model
            self.runner = load_runner(
                model if endpoint else local,
                endpoint,
                device=device,
                dtype=dtype,
                concurrency=concurrency,
                requests_per_minute=requests_per_minute,
                revision=revision,
            )
        for w in caught:  # e.g. "no chat template: plain prompt" — said once, here, and recorded in the metadata
            log(f"note: {w.message}")
        self.cache = ResponseCache(cache_path)
        weights = getattr(self.runner, "weights", None)  # a local runner fingerprinted what it loaded
        self.fingerprint = weights if weights is not None and not endpoint else model_fingerprint(model, endpoint)
        # a local model at temperature 0 would repeat an empty reply: it is not asked again
        self.reask_empty = bool(endpoint) or self.settings.temperature > 0

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
        )
        return {c: frame[c].tolist() for c in frame.columns if c != "id"}

    def close(self) -> None:
        """Close the reply cache."""
        self.cache.close()


def load_predictor(options: Any, cache_path: Path, log: Callable[[str], None] = print) -> Any:
    """The predictor for a run's ``options`` (``options.method`` already resolved to scored or instructed)."""
    model = options.model
    if options.method == "scored" and options.endpoint:
        from queerbench.llm.scored_endpoint import EndpointScoredPredictor

        return EndpointScoredPredictor(
            model,
            endpoint=options.endpoint,
            top_k=options.top_k,
            cache_path=cache_path,
            concurrency=options.concurrency,
            requests_per_minute=options.requests_per_minute,
            log=log,
        )
    if options.method == "scored":
        return ScoredPredictor(
            model,
            top_k=options.top_k,
            device=options.device,
            dtype=options.dtype,
            batch_size=options.batch_size,
            revision=options.revision,
        )
    return InstructedPredictor(
        model,
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
    )


def same_weights(stored: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether two run metadata records name the same model weights (their fingerprints match)."""
    return json.dumps(stored.get("fingerprint"), sort_keys=True) == json.dumps(now.get("fingerprint"), sort_keys=True)
