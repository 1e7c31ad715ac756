"""What every runner shares: decoding settings, the reply record, the runner protocol, per-call seeds."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from queerbench.base.http import DEFAULT_CONCURRENCY, DEFAULT_REQUEST_TIMEOUT, DEFAULT_REQUESTS_PER_MINUTE
from queerbench.models.fingerprint import DEFAULT_EMBEDDED
from queerbench.models.requests import decoding_key, item_seed  # item_seed: re-exported, where it always was

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MODEL",
    "DEFAULT_REQUESTS_PER_MINUTE",
    "DEFAULT_REQUEST_TIMEOUT",
    "EndpointError",
    "EndpointUnreachableError",
    "GenerationSettings",
    "MethodUnsupportedError",
    "Reply",
    "RunAbortedError",
    "Runner",
    "item_seed",
]

DEFAULT_MODEL = DEFAULT_EMBEDDED
"""The model used when neither ``--model`` nor ``--endpoint`` is given: SmolLM2-135M-Instruct (Q4_1 GGUF, pinned)."""


@dataclass(frozen=True)
class GenerationSettings:
    """Decoding settings. SCM paper: temperature 0.9 for GPT/Gemini, 0.6 with top-p 0.9 for LLaMA (Section 3.2).

    ``temperature == 0`` is greedy decoding. ``top_p=None`` means no nucleus filtering (and, for endpoints, the
    parameter is not sent). Every field but ``samples`` and ``batch_size`` is part of the cache key.
    """

    temperature: float = 0.6
    top_p: float | None = 0.9
    max_new_tokens: int = 200
    seed: int = 0
    samples: int = 1
    batch_size: int = 8

    def __post_init__(self) -> None:
        if self.temperature < 0 or (self.top_p is not None and not 0 < self.top_p <= 1):
            raise ValueError("--temperature must be >= 0 and --top-p in (0, 1]")
        if self.max_new_tokens < 1 or self.samples < 1 or self.batch_size < 1:
            raise ValueError("--max-new-tokens, --samples and --batch-size must be at least 1")

    def decoding(self) -> dict[str, Any]:
        """The settings that change a reply (part of the cache key); batch size and sample count are not."""
        return decoding_key(self.temperature, self.top_p, self.max_new_tokens, self.seed)


@dataclass
class Reply:
    """One model reply: ``text`` or, for a failed call, ``error``; ``meta`` records how it was produced.

    ``meta["finish_reason"]`` is ``"stop"`` (the model ended its reply), ``"length"`` (cut at ``max_new_tokens``)
    or what the endpoint reported (e.g. ``"content_filter"``); :attr:`truncated` says whether it hit the cap.
    """

    text: str | None
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        """True when the reply stopped at the token cap rather than by itself."""
        return self.meta.get("finish_reason") == "length"


class RunAbortedError(RuntimeError):
    """Too many consecutive failures (e.g. the endpoint is down); everything collected so far is in the cache."""


class EndpointError(ValueError):
    """A failure no retry can fix (401/403 key rejected, 404 unknown model or URL): the run stops at once.

    A ``ValueError`` so that the CLI prints it as one line; replies that arrived before it are in the cache.
    """


class MethodUnsupportedError(EndpointError):
    """The server answered, and it cannot serve the method asked of it (no ``/completions`` route, no echoed
    log-probabilities, log-probabilities that fail the consistency check): no retry or rerun changes that, and the
    other methods may still run (``queerbench eval`` lists such a part as skipped, with this reason)."""


class EndpointUnreachableError(EndpointError):
    """Nothing listens at the endpoint (connection refused, unknown host, connect timeout): fails in seconds."""


class Runner(Protocol):
    """What :func:`~queerbench.models.generation.collect.collect` needs from a model backend."""

    name: str

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the model (part of the cache key)."""
        ...

    def generate(
        self, prompts: Sequence[str], seeds: Sequence[int], settings: GenerationSettings
    ) -> Iterator[tuple[int, Reply]]:
        """Yield ``(index into prompts, reply)`` as each reply arrives."""
        ...
