"""The one generation layer: local causal LMs (transformers) and OpenAI-compatible chat endpoints.

Every benchmark that talks to a causal LM or an endpoint (QueerBench's ``scored``/``instructed`` methods, the SCM
probes) goes through here:

- :class:`GenerationSettings` (decoding), :class:`Reply` (one reply or error), the :class:`Runner` protocol:
  ``runner.generate(prompts, seeds, settings)`` yields ``(index, Reply)`` as replies arrive;
- :class:`TransformersRunner` (local) and :class:`OpenAIChatRunner` (endpoint);
- :func:`collect` ``(runner, rows, settings, cache, ...)``: rows × samples through the :class:`ResponseCache`
  (SQLite; each reply committed the moment it arrives, so a killed run resumes);
- :func:`load_runner` builds either runner from CLI-style arguments::

      load_runner(model: str | None = None, endpoint: str | None = None, *, device: str = "auto",
                  dtype: str = "float32", concurrency: int = 8, system_prompt: str | None = None,
                  api_key_env: str = "OPENAI_API_KEY", requests_per_minute: float | None = 600.0,
                  extra_body: dict | None = None, **endpoint_options) -> Runner

  With ``endpoint`` an :class:`OpenAIChatRunner` for the served model name ``model`` (``concurrency`` requests in
  flight; ``endpoint_options`` go to it: ``max_retries``, ``backoff_base``, ``backoff_max``, ``timeout``,
  ``connect_timeout``, ``sleep``); else a :class:`TransformersRunner` for ``model`` (``None`` = the embedded
  SmolLM2-135M-Instruct), whose architecture is checked before its weights load. Bad arguments (``concurrency <
  1``, a missing API key for a remote host, a missing folder, a masked LM) raise one-line ``ValueError``/
  ``FileNotFoundError`` before anything runs.
- :func:`load_causal_lm` ``(model=None, *, device="auto", dtype="float32", revision=None)`` → ``(model,
  tokenizer)`` for direct scoring (left padding, a pad token; the architecture checked first),
  :func:`model_kind` ``(model, revision=None)`` → ``causal``/``masked``/``seq2seq``/``other`` from the config
  alone (:func:`describe_model` also gives the architecture name), :func:`check_causal_lm` (a one-line
  ``ModelLoadError`` naming the mismatch); the device rule (:func:`queerbench.models.device.resolve_device`) and the
  weights' fingerprint (:func:`queerbench.models.fingerprint.fingerprint_model`, part of the local runner's
  fingerprint, so a cache never serves replies from other weights) are the library's one each.
- Errors: :class:`EndpointError` (401/403/404: the run stops at once) and its subclass
  :class:`EndpointUnreachableError` (connection refused: fails in seconds, naming the URL) are ``ValueError``s, so
  the CLI prints them as one line; :class:`RunAbortedError` after too many failures in a row.

Importing this package does not import torch or transformers (they load with the first local model).
"""

from __future__ import annotations

from typing import Any

from queerbench.models.generation.cache import ResponseCache, cache_key
from queerbench.models.generation.collect import collect, settings_dict
from queerbench.models.generation.endpoint import OpenAIChatRunner, is_loopback
from queerbench.models.generation.loading import (
    check_causal_lm,
    describe_model,
    load_causal_lm,
    model_kind,
    resolve_model,
)
from queerbench.models.generation.local import TransformersRunner
from queerbench.models.generation.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MODEL,
    DEFAULT_REQUESTS_PER_MINUTE,
    EndpointError,
    EndpointUnreachableError,
    GenerationSettings,
    Reply,
    RunAbortedError,
    Runner,
    item_seed,
)

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MODEL",
    "DEFAULT_REQUESTS_PER_MINUTE",
    "EndpointError",
    "EndpointUnreachableError",
    "GenerationSettings",
    "OpenAIChatRunner",
    "Reply",
    "ResponseCache",
    "RunAbortedError",
    "Runner",
    "TransformersRunner",
    "cache_key",
    "check_causal_lm",
    "collect",
    "describe_model",
    "is_loopback",
    "item_seed",
    "load_causal_lm",
    "load_runner",
    "model_kind",
    "resolve_model",
    "settings_dict",
]


def load_runner(
    model: str | None = None,
    endpoint: str | None = None,
    *,
    device: str = "auto",
    dtype: str = "float32",
    concurrency: int = DEFAULT_CONCURRENCY,
    system_prompt: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    requests_per_minute: float | None = DEFAULT_REQUESTS_PER_MINUTE,
    extra_body: dict[str, Any] | None = None,
    revision: str | None = None,
    device_map: str | None = None,
    **endpoint_options: Any,
) -> Runner:
    """A runner for ``--endpoint URL --model NAME`` (endpoint) or ``--model ID_OR_PATH`` (local; None = embedded).

    ``concurrency`` is validated for both (it only matters for endpoints); see the package docstring.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"--concurrency must be a whole number >= 1, got {concurrency!r}")
    if endpoint:
        if revision:
            raise ValueError("--revision pins a Hub model's commit; an --endpoint serves its own weights: drop it")
        if device_map:
            raise ValueError("--device-map places a local model's layers; an --endpoint serves its own: drop it")
        return OpenAIChatRunner(
            endpoint,
            model or "",
            api_key_env=api_key_env,
            concurrency=concurrency,
            requests_per_minute=requests_per_minute,
            system_prompt=system_prompt,
            extra_body=extra_body,
            **endpoint_options,
        )
    if extra_body or endpoint_options:
        raise ValueError("extra_body and endpoint options need --endpoint")
    return TransformersRunner(
        model, device=device, dtype=dtype, system_prompt=system_prompt, revision=revision, device_map=device_map
    )
