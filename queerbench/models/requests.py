"""Request types: the one seam between tasks and models (lm-evaluation-harness's ``LM`` interface as the model).

A task turns each of its items into requests of three types and never asks what model answers them; a backend
(:mod:`queerbench.models.backends`: a masked LM, a local causal LM, a chat endpoint, a completions endpoint)
answers the types it can:

- :class:`FillMask` — how likely each candidate word is in the ``[MASK]`` of a text (a masked LM's probabilities),
  or, asked for its ``top_k``, the words the model itself puts there (a masked LM's top fills, or a causal LM's
  proposed words ranked by the probability of the whole sentence);
- :class:`Loglikelihood` — the log-probability of a continuation after a context, or of a whole text when the
  context is empty (for a masked LM, a pseudo-log-likelihood);
- :class:`Generate` — the text a model writes for a prompt (a chat turn, or a completion).

A backend states the types it answers in :attr:`Backend.request_types`; :func:`require` refuses, in one line and
before any work, a task that needs one it lacks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "FILL_MASK",
    "FILL_MASK_MODES",
    "GENERATE",
    "LOGLIKELIHOOD",
    "REQUEST_TYPES",
    "Backend",
    "FillMask",
    "FillMaskResult",
    "Generate",
    "GenerateResult",
    "Loglikelihood",
    "LoglikelihoodResult",
    "Request",
    "Result",
    "UnsupportedRequestError",
    "decoding_key",
    "item_seed",
    "request_type",
    "require",
]

FILL_MASK = "fill_mask"
LOGLIKELIHOOD = "loglikelihood"
GENERATE = "generate"
REQUEST_TYPES = (FILL_MASK, LOGLIKELIHOOD, GENERATE)
MASK = "[MASK]"
FILL_MASK_MODES: tuple[str, ...] = ("whole_word", "raw")
"""How a top-k fill is read: whole words only (word-piece markers stripped), or the raw top-k tokens as the papers'
code read them (a task's ``mlm_mode``)."""


@dataclass(frozen=True)
class FillMask:
    """At the one ``[MASK]`` of ``text``: each of ``candidates``' log-probability there; or, with ``top_k`` and no
    candidates, the model's own ``top_k`` fills there with their probabilities, read as ``mode`` says
    (:data:`FILL_MASK_MODES`): the open prediction a fill-in-the-blank benchmark scores. ``item``: the id of the
    task's item the request is for, where a backend that answers through calls of its own (a completions endpoint's
    top-k) names and seeds those calls by it (None: by the request's position in its batch)."""

    text: str
    candidates: tuple[str, ...] = ()
    top_k: int = 0
    mode: str = FILL_MASK_MODES[0]
    item: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or self.text.count(MASK) != 1:
            raise ValueError(f"a fill_mask request needs one {MASK} in its text, got {self.text!r}")
        if self.top_k:
            if self.candidates or not isinstance(self.top_k, int) or self.top_k < 1:
                raise ValueError(f"a top-k fill_mask request needs top_k >= 1 and no candidates, got {self!r}")
            if self.mode not in FILL_MASK_MODES:
                raise ValueError(
                    f"a fill_mask request's mode is one of {', '.join(FILL_MASK_MODES)}, got {self.mode!r}"
                )
        elif not self.candidates or not all(isinstance(c, str) and c.strip() for c in self.candidates):
            raise ValueError(
                f"a fill_mask request needs non-empty candidate words (or a top_k), got {self.candidates!r}"
            )


@dataclass(frozen=True)
class Loglikelihood:
    """The log-probability of ``continuation`` after ``context`` (an empty context: of the whole continuation as
    the model's tokenizer encodes it by default, every token after the first predicted from those before it).

    With ``chat``, the context is a prompt the model replies to: the backend formats it as its model reads a prompt
    (a chat template's user turn with the assistant's turn opened, or the plain prompt) and appends ``reply_prefix``
    (the reply's opening, e.g. ``Rating:``); the continuation is encoded on its own, as the first tokens of the reply
    (an answer option, scored as the model would write it there)."""

    context: str
    continuation: str
    chat: bool = False
    reply_prefix: str = ""

    def __post_init__(self) -> None:
        if self.reply_prefix and not self.chat:
            raise ValueError(
                "a loglikelihood request's reply_prefix opens a chat reply: set chat=True or put it in the context"
            )
        if self.chat and not self.continuation:
            raise ValueError("a chat loglikelihood request needs a continuation (the reply's tokens to score)")


def item_seed(seed: int, prompt_id: str, sample: int) -> int:
    """A per-call seed derived from the run seed, the prompt id and the sample index (stable across runs)."""
    return int(hashlib.sha256(f"{seed}:{prompt_id}:{sample}".encode()).hexdigest()[:8], 16)


def decoding_key(temperature: float, top_p: float | None, max_new_tokens: int, seed: int) -> dict[str, Any]:
    """The decoding settings that change a reply, as a reply cache keys them (the run's ``seed`` included): one
    shape for a :class:`Generate` request and a run's
    :class:`~queerbench.models.generation.settings.GenerationSettings`, so both find the same replies."""
    return {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens, "seed": seed}


@dataclass(frozen=True)
class Generate:
    """The text a model writes for ``prompt`` (a user turn for a chat model), at most ``max_new_tokens`` tokens.

    Greedy by default (``temperature`` 0). A sampled request (``temperature`` > 0, ``top_p`` None for no nucleus
    filtering) draws with :attr:`call_seed`, so asking the same request again gives the same reply wherever the
    backend can seed its sampler (a local model; an endpoint that honours ``seed``).

    Without ``item``, ``seed`` is the call's own seed. With ``item`` (the id of the task's item the request is for),
    ``seed`` is the run's seed and ``sample`` says which of the item's independent replies this is (0 for the
    first): the call draws with :func:`item_seed` of the three, and a reply
    cache keeps it under the model, the prompt, ``sample`` and :meth:`decoding`
    (:func:`~queerbench.models.generation.collect.request_key`), so two items with one prompt share their replies
    and a rerun asks nothing again."""

    prompt: str
    max_new_tokens: int = 32
    temperature: float = 0.0
    top_p: float | None = None
    seed: int = 0
    item: str | None = None
    sample: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"a generate request needs max_new_tokens >= 1, got {self.max_new_tokens}")
        if self.temperature < 0 or (self.top_p is not None and not 0 < self.top_p <= 1):
            raise ValueError(f"a generate request needs temperature >= 0 and top_p in (0, 1], got {self!r}")
        if self.sample < 0 or (self.sample and self.item is None):
            raise ValueError(f"a generate request's sample is >= 0, and needs the item it samples, got {self!r}")

    @property
    def call_seed(self) -> int:
        """The seed this call draws with: ``seed`` itself, or, for an item's request, the seed derived from the
        run's ``seed``, the item and the sample index (stable across runs)."""
        return self.seed if self.item is None else item_seed(self.seed, self.item, self.sample)

    def decoding(self) -> dict[str, Any]:
        """The settings that change a reply, as a reply cache keys them (with the run's ``seed``)."""
        return decoding_key(self.temperature, self.top_p, self.max_new_tokens, self.seed)


Request = FillMask | Loglikelihood | Generate


@dataclass(frozen=True)
class FillMaskResult:
    """One log-probability per candidate of a :class:`FillMask`, in the request's order; for a top-k request, its
    fills (``words``, most probable first) and their probabilities, with a masked LM's vocabulary ids, or a causal
    LM's summed log-probability that ranked each word (``logprobs``) and its number of tokens (``n_tokens``)."""

    logprobs: tuple[float, ...] = ()
    words: tuple[str, ...] = ()
    token_ids: tuple[int, ...] = ()
    probs: tuple[float, ...] = ()
    n_tokens: tuple[int, ...] = ()
    n_proposed: int | None = None
    """A top-k fill whose candidates come from a list of next tokens the backend was given (a completions
    endpoint's top ``logprobs``): how many word-start candidates that list held, up to the number asked for (None:
    the backend proposes from the whole vocabulary)."""


@dataclass(frozen=True)
class LoglikelihoodResult:
    """The summed log-probability of the scored tokens and how many were scored (their mean is ``-loss``)."""

    logprob: float
    n_tokens: int

    @property
    def mean(self) -> float:
        """The mean log-probability per scored token (minus a causal LM's mean token loss)."""
        return self.logprob / max(self.n_tokens, 1)


@dataclass(frozen=True)
class GenerateResult:
    """The generated text, and whether it stopped at the token limit."""

    text: str
    truncated: bool = False


Result = FillMaskResult | LoglikelihoodResult | GenerateResult

_TYPES: dict[type, str] = {FillMask: FILL_MASK, Loglikelihood: LOGLIKELIHOOD, Generate: GENERATE}


def request_type(request: Request) -> str:
    """The type name of ``request`` (``fill_mask``, ``loglikelihood`` or ``generate``)."""
    return _TYPES[type(request)]


class UnsupportedRequestError(ValueError):
    """A backend asked for a request type it does not answer (raised before any work)."""


class Backend(Protocol):
    """A model as tasks see it: the request types it answers and one call per type, each taking a batch of
    requests and returning one result per request, in order. ``tick(n)`` is called after every ``n`` done."""

    name: str
    """What answers: the model's name (and an endpoint's URL without credentials)."""
    request_types: frozenset[str]

    def fingerprint(self) -> dict[str, Any]:
        """The weights' fingerprint (what a run's signature and resume check record)."""
        ...

    def metadata(self) -> dict[str, Any]:
        """The backend, model, device and settings, recorded with a run's results."""
        ...

    def fill_mask(
        self, requests: Sequence[FillMask], tick: Callable[[int], None] | None = None
    ) -> list[FillMaskResult]: ...

    def loglikelihood(
        self, requests: Sequence[Loglikelihood], tick: Callable[[int], None] | None = None
    ) -> list[LoglikelihoodResult]: ...

    def generate(
        self, requests: Sequence[Generate], tick: Callable[[int], None] | None = None
    ) -> list[GenerateResult]: ...

    def close(self) -> None:
        """Release what the backend holds open (a connection pool); a reply cache given to it is its owner's to
        close."""
        ...


def require(backend: Backend, types: Iterable[str], *, why: str = "") -> None:
    """A one-line :class:`UnsupportedRequestError` unless ``backend`` answers every request type in ``types``."""
    missing = [t for t in types if t not in backend.request_types]
    if missing:
        answers = ", ".join(sorted(backend.request_types)) or "no request type"
        because = f" ({why})" if why else ""
        raise UnsupportedRequestError(
            f"{backend.name} cannot answer {', '.join(missing)} requests{because}; it answers {answers}: "
            "choose another --method or model"
        )
