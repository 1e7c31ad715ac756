"""The one generation layer: local causal LMs (transformers) and OpenAI-compatible chat endpoints.

Every benchmark that talks to a causal LM or an endpoint (QueerBench's ``scored``/``instructed`` methods, the SCM
probes) goes through here:

- :class:`GenerationSettings` (decoding), :class:`Reply` (one reply or error), the :class:`Runner` protocol:
  ``runner.generate(prompts, seeds, settings)`` yields ``(index, Reply)`` as replies arrive;
- :class:`TransformersRunner` (local) and :class:`OpenAIChatRunner` (endpoint);
- :func:`collect` ``(runner, rows, settings, cache, ...)``: rows × samples through the :class:`ResponseCache`
  (SQLite; each reply committed the moment it arrives, so a killed run resumes);
- :func:`load_runner` ``(model=None, endpoint=None, *, device="cpu", dtype="float32", concurrency=8,
  system_prompt=None, api_key_env="OPENAI_API_KEY", requests_per_minute=60.0, **endpoint_options)`` → a runner:
  with ``endpoint`` an :class:`OpenAIChatRunner` for the served model name ``model``, else a
  :class:`TransformersRunner` for ``model`` (``None`` = the embedded SmolLM2-135M-Instruct);
- :func:`load_causal_lm` ``(model=None, *, device="cpu", dtype="float32")`` → ``(model, tokenizer)`` for direct
  scoring, and :func:`resolve_device` (``auto`` → cuda → mps → cpu).
"""

from __future__ import annotations

from typing import Any

from queerbench.llm.cache import ResponseCache, cache_key
from queerbench.llm.collect import collect, settings_dict
from queerbench.llm.endpoint import OpenAIChatRunner
from queerbench.llm.local import TransformersRunner, load_causal_lm, resolve_device, resolve_model
from queerbench.llm.settings import DEFAULT_MODEL, GenerationSettings, Reply, RunAbortedError, Runner, item_seed

__all__ = [
    "DEFAULT_MODEL",
    "GenerationSettings",
    "OpenAIChatRunner",
    "Reply",
    "ResponseCache",
    "RunAbortedError",
    "Runner",
    "TransformersRunner",
    "cache_key",
    "collect",
    "item_seed",
    "load_causal_lm",
    "load_runner",
    "resolve_device",
    "resolve_model",
    "settings_dict",
]


def load_runner(
    model: str | None = None,
    endpoint: str | None = None,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    concurrency: int = 8,
    system_prompt: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    requests_per_minute: float = 60.0,
    **endpoint_options: Any,
) -> Runner:
    """A runner for ``--endpoint URL --model NAME`` (endpoint) or ``--model ID_OR_PATH`` (local; None = embedded)."""
    if endpoint:
        return OpenAIChatRunner(
            endpoint,
            model or "",
            api_key_env=api_key_env,
            requests_per_minute=requests_per_minute,
            **endpoint_options,
        )
    return TransformersRunner(model, device=device, dtype=dtype, system_prompt=system_prompt)
