"""The request backends: a model as tasks see it (:class:`~queerbench.models.requests.Backend`).

:func:`open_backend` opens the backend of a checked model reference (:func:`~queerbench.models.registry.model_ref`)
for the request type a task asks:

- a masked LM (:class:`~queerbench.models.backends.masked.MaskedBackend`): ``fill_mask`` and ``loglikelihood``
  (a pseudo-log-likelihood);
- a local causal LM, the embedded SmolLM2 and a GGUF file included
  (:class:`~queerbench.models.backends.causal.CausalBackend`): ``fill_mask`` (the top-k words of a blank, proposed
  and ranked by the whole sentence's probability), ``loglikelihood`` and ``generate``;
- an OpenAI-compatible endpoint (:class:`~queerbench.models.backends.endpoint.EndpointBackend`): ``generate``
  (chat), and ``loglikelihood`` and top-k ``fill_mask`` (a completions route that echoes prompt log-probabilities).

A backend that answers the top-k words of a blank (:class:`BlanksBackend`: a causal LM's, local or served) is made
ready for a ``k`` before any work (``prepare_blanks``: an endpoint is probed, each failure one line) and says how it
found them (``blanks_metadata``); a served one also hands out each result as its last reply arrives
(:class:`StreamingBlanksBackend`).

A backend that answers ``generate`` through a generation-layer runner (:class:`GenerateBackend`: a local causal LM,
an endpoint) hands out that runner (``generator()``) and keeps its replies in a reply cache when it is given one
(``open_backend(..., reply_cache=)``): a request it holds is not asked again.
:func:`backend_request_types` says what a model answers from its configuration alone, and
:func:`check_request_type` refuses, in one line and before any weight loads, a request type its kind cannot answer.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from queerbench.base.redact import redact_url
from queerbench.models.backends.common import RequestFailedError
from queerbench.models.generation.cache import ResponseCache
from queerbench.models.generation.settings import Runner
from queerbench.models.registry import ModelRef
from queerbench.models.requests import (
    FILL_MASK,
    GENERATE,
    LOGLIKELIHOOD,
    REQUEST_TYPES,
    Backend,
    FillMask,
    FillMaskResult,
    Generate,
    GenerateResult,
    UnsupportedRequestError,
)
from queerbench.models.spec import ModelSpec

if TYPE_CHECKING:
    from queerbench.models.generation.collect import ErrorStreak, StreamCollector

__all__ = [
    "REQUEST_TYPES_OF_KIND",
    "BlanksBackend",
    "GenerateBackend",
    "RequestFailedError",
    "StreamingBackend",
    "StreamingBlanksBackend",
    "backend_request_types",
    "check_request_type",
    "open_backend",
    "scores_chat_replies",
]

REQUEST_TYPES_OF_KIND: dict[str, frozenset[str]] = {
    "masked": frozenset({FILL_MASK, LOGLIKELIHOOD}),
    "causal": frozenset({FILL_MASK, LOGLIKELIHOOD, GENERATE}),
    "endpoint": frozenset({FILL_MASK, GENERATE, LOGLIKELIHOOD}),
}
"""The request types each kind of model answers (:meth:`ModelRef.kind`); a seq2seq or headless model answers none.
A causal LM's ``fill_mask``, local or served, is the top-k form (the words of a blank); its backend refuses a
candidate-word request in one line, and no method asks one of it (``mlm``, which does, is refused for a causal LM
or an endpoint when the run is resolved)."""


@runtime_checkable
class GenerateBackend(Backend, Protocol):
    """A backend that answers ``generate`` through a generation-layer runner (a local causal LM, a chat endpoint):
    the runner itself (:meth:`generator`, what a reply cache keys replies by, by its fingerprint, and an endpoint
    streams through) and where its replies are kept (``reply_cache``, None: not kept)."""

    reply_cache: ResponseCache | None

    def generator(self) -> Runner:
        """The runner that answers this backend's ``generate`` requests."""
        ...


@runtime_checkable
class StreamingBackend(GenerateBackend, Protocol):
    """A backend that answers ``generate`` requests through concurrent slots (an endpoint) and hands each reply out
    as it arrives (:meth:`stream_generate`), so that a run keeps every slot busy across its parts and a slow or
    retried request holds up nothing but itself; it needs a reply cache."""

    def stream_generate(
        self, requests: Iterable[Generate], tick: Callable[[int], None] | None = None
    ) -> Generator[tuple[int, GenerateResult], None, None]:
        """``(index, reply)`` of each of ``requests`` as it arrives; a request that got no reply raises one line
        once every other was answered."""
        ...

    def reply_stream(self, *, streak: ErrorStreak | None = None) -> StreamCollector:
        """A stream to ask ``generate`` requests of at any time and read each answer as it arrives, under the tag it
        was asked with, through the reply cache (a caller that asks again what an answer calls for, such as an
        empty reply, while reading); ``streak`` counts failed calls in a row across a run's streams."""
        ...


@runtime_checkable
class BlanksBackend(Backend, Protocol):
    """A backend that answers the top-k whole words of a blank (a causal LM's, local or at a completions endpoint):
    made ready for a ``top_k`` before any work, and saying how it found the words."""

    def prepare_blanks(self, top_k: int, *, probe_path: Path | None = None, logprobs: int | None = None) -> Any:
        """Ready for top-``top_k`` ``fill_mask`` requests, each reason it cannot be one line now (an endpoint is
        probed; ``probe_path``: where its probe's replies are kept; ``logprobs``: how many next tokens its propose
        step asks for)."""
        ...

    def blanks_metadata(self, top_k: int) -> dict[str, Any]:
        """What a run records of how its top-``top_k`` words were found: the weights' fingerprint, the engine's or
        the server's settings, the decoding."""
        ...


@runtime_checkable
class StreamingBlanksBackend(BlanksBackend, Protocol):
    """A :class:`BlanksBackend` whose calls go through concurrent slots (an endpoint): each request's result is
    handed out as its last reply arrives."""

    def stream_fill_mask(
        self, requests: Sequence[FillMask], tick: Callable[[int], None] | None = None
    ) -> Generator[tuple[int, FillMaskResult], None, None]:
        """``(index, result)`` of each top-k request as it is done, in any order."""
        ...


_KIND_NAMES = {
    "masked": "a masked LM",
    "causal": "a causal LM",
    "endpoint": "an OpenAI-compatible endpoint",
    "seq2seq": "an encoder-decoder (seq2seq) model",
}
_WHO_ANSWERS = {
    FILL_MASK: (
        "a masked LM (e.g. bert-base-uncased, roberta-base) or, for the top-k words of a blank, a causal LM (local, "
        "or at an --endpoint with a completions route)"
    ),
    LOGLIKELIHOOD: "a masked LM, a causal LM or an --endpoint with a completions route",
    GENERATE: "a causal LM (e.g. embedded:smollm2-135m-instruct) or an --endpoint",
}


def backend_request_types(ref: ModelRef) -> frozenset[str]:
    """The request types ``ref`` answers, from its configuration alone (no weights read)."""
    return REQUEST_TYPES_OF_KIND.get(ref.kind(), frozenset())


def _shown(ref: ModelRef) -> str:
    return f"{ref.name} at {redact_url(ref.endpoint)}" if ref.endpoint else ref.name


_OTHER_CHOICE = "choose a task or --method that asks for those"
"""What a refusal suggests besides another model, unless the caller knows better (a command without ``--method``)."""


def check_request_type(
    ref: ModelRef, request_type: str, *, other_choice: str | None = _OTHER_CHOICE, kind: str | None = None
) -> None:
    """A one-line :class:`UnsupportedRequestError` unless ``ref``'s kind answers ``request_type`` (read from the
    configuration, nothing loads; ``kind``: the kind already known, e.g. of a model loaded already, then nothing is
    read unless the request type is refused); a one-line ``ValueError`` for a request type that does not exist.
    ``other_choice`` is what the message suggests besides another model (the command's own way to ask for the
    request types the model answers; None: nothing)."""
    if request_type not in REQUEST_TYPES:
        raise ValueError(f"unknown request type {request_type!r}; the request types are {', '.join(REQUEST_TYPES)}")
    answers = REQUEST_TYPES_OF_KIND.get(kind if kind is not None else ref.kind(), frozenset())
    if request_type in answers:
        return
    kind, architecture = ref.description
    said = ", ".join(sorted(answers)) or "no request type"
    what = _KIND_NAMES.get(kind, "a model without a language-model head")
    what = what if kind == "endpoint" else f"{what} ({architecture})"
    fix = f"{other_choice}, or a model" if other_choice and answers else "give a model"
    raise UnsupportedRequestError(
        f"--model {_shown(ref)} is {what} and cannot answer {request_type} requests; it answers {said}: {fix} that "
        f"answers {request_type}: {_WHO_ANSWERS[request_type]}"
    )


def scores_chat_replies(backend: Backend) -> bool:
    """Whether ``backend`` answers ``loglikelihood`` requests of a reply to a chat prompt (``chat=True``): a local
    causal LM's does (it formats the prompt as its model reads one); a masked LM's and an endpoint's completions
    route score plain text only."""
    return LOGLIKELIHOOD in backend.request_types and getattr(backend, "kind", None) == "causal_lm"


def _loaded_kind(loaded: Any) -> str:
    """The kind of a model :func:`~queerbench.models.registry.load_model` loaded: a causal LM's ``(model,
    tokenizer)``, else a masked LM (no configuration is read for it again)."""
    return "causal" if isinstance(loaded, tuple) else "masked"


def open_backend(
    ref: ModelRef,
    request_type: str,
    spec: ModelSpec | None = None,
    *,
    share_prefixes: bool = True,
    log: Callable[[str], None] = print,
    loaded: Any = None,
    reply_cache: ResponseCache | None = None,
    announce: bool = True,
    system_prompt: str | None = None,
    other_choice: str | None = _OTHER_CHOICE,
    model_kind: str | None = None,
    model_kind_for: str | None = None,
    **endpoint_options: Any,
) -> Backend:
    """The backend of ``ref`` for a task that asks ``request_type`` requests (checked first, before anything loads:
    :func:`check_request_type`).

    ``spec`` is how the model runs (:class:`~queerbench.models.spec.ModelSpec`; None: its defaults): a local model's
    ``device`` (``auto``: cuda, then mps, then cpu), ``dtype``, ``device_map`` and ``batch_size`` (rows per forward
    pass); an endpoint's ``batch_size`` (prompts per completions request), ``concurrency`` (requests in flight),
    ``requests_per_minute`` and ``request_timeout`` (seconds each reply may take). ``share_prefixes`` is for a
    local causal LM (its ``loglikelihood`` runs the common prefix of rows that begin alike once:
    :class:`~queerbench.models.backends.causal.CausalBackend`), and ``endpoint_options`` go to an endpoint's runners
    (``api_key_env``, ``max_retries``, ``system_prompt``, …).

    ``loaded``: the model :func:`~queerbench.models.registry.load_model` already loaded for ``ref`` (a masked LM, or
    a causal LM's ``(model, tokenizer)``; the Space's cached models), answered from instead of loading it again.

    ``reply_cache``: where a backend that answers ``generate`` keeps each reply as it arrives and finds it again
    (:class:`~queerbench.models.generation.cache.ResponseCache`, keyed by the model, prompt, sample and decoding): a
    run that stopped asks only the requests whose replies are not saved. ``announce``: log which backend answers, on
    which device (a caller that reports its model itself passes False). ``system_prompt``: the system turn before
    every prompt of a model that answers ``generate`` (a local causal LM or an endpoint; None: none), part of its
    runner's fingerprint and so of every reply's cache key. ``other_choice``: what a refusal of ``request_type``
    suggests besides another model (:func:`check_request_type`). ``model_kind``: the kind of model the caller runs on
    (``masked``, ``causal``, ``endpoint``; a method that needs one), another refused in one line before anything
    loads, the message naming what needs it (``model_kind_for``, e.g. ``scored``).

    Nothing is read twice: a ``loaded`` model's kind is that of the object (no configuration is read for it), and
    a causal LM's files are fingerprinted once, for its backend and its runner.
    """
    if ref.endpoint and loaded is not None:
        raise ValueError(f"{_shown(ref)} is served by its endpoint: there is no loaded model to answer from")
    kind = _loaded_kind(loaded) if loaded is not None else ref.kind()
    check_request_type(ref, request_type, other_choice=other_choice, kind=kind)
    if model_kind is not None and kind != model_kind:
        from queerbench.models.device import ModelLoadError

        shown = _KIND_NAMES.get(kind, "a model without a language-model head")
        raise ModelLoadError(
            f"--model {_shown(ref)} is {shown}; {model_kind_for or 'this'} runs on {_KIND_NAMES[model_kind]}: give "
            "such a model"
        )
    spec = spec if spec is not None else ModelSpec()
    spec.check_endpoint(ref.endpoint)
    if kind != "endpoint" and endpoint_options:
        raise ValueError(f"{', '.join(sorted(endpoint_options))}: endpoint options need --endpoint")
    if kind == "masked" and system_prompt is not None:
        raise ValueError(f"--model {_shown(ref)} is a masked LM: a system prompt is for a model that generates text")
    if kind == "endpoint":
        from queerbench.models.backends.endpoint import EndpointBackend

        options: dict[str, Any] = {
            "requests_per_minute": spec.requests_per_minute,
            "timeout": spec.request_timeout,
            **({"system_prompt": system_prompt} if system_prompt is not None else {}),
            **endpoint_options,
        }
        backend: Backend = EndpointBackend(
            ref, batch_size=spec.batch_size, concurrency=spec.concurrency, log=log, **options
        )
    elif kind == "masked":
        from queerbench.models.backends.masked import MaskedBackend
        from queerbench.models.masked.predict import load_masked_lm

        lm = loaded or load_masked_lm(
            ref.name,
            device=spec.device,
            dtype=spec.dtype,
            revision=ref.revision,
            allow_pickle=not spec.safetensors_only,
            device_map=spec.device_map,
        )
        backend = MaskedBackend(lm, ref, batch_size=spec.batch_size, log=log)
    else:
        backend = _causal_backend(ref, request_type, spec, loaded, system_prompt, share_prefixes, log)
    if reply_cache is not None and isinstance(backend, GenerateBackend):
        backend.reply_cache = reply_cache
    if not announce:
        return backend
    meta = backend.metadata()
    log(
        f"{backend.name}: {meta['backend']} backend on {meta['device']} ({meta['dtype'] or 'served'}) for {request_type}"
    )
    return backend


def _causal_backend(
    ref: ModelRef,
    request_type: str,
    spec: ModelSpec,
    loaded: Any,
    system_prompt: str | None,
    share_prefixes: bool,
    log: Callable[[str], None],
) -> Backend:
    """A local causal LM's backend. Opened for ``generate``, its runner is the one a generative run opens
    (:func:`~queerbench.models.registry.open_generator`: the weights' fingerprint its replies are cached under, a
    note when the model has no chat template). Opened to score text (``fill_mask``, ``loglikelihood``), the model is
    loaded as such (:func:`~queerbench.models.registry.load_model`) and says nothing of a chat template (a chat
    ``loglikelihood`` request, which none of these callers asks, still formats its prompt as the model reads one),
    and its files are fingerprinted once, for the backend and its runner alike."""
    from queerbench.models.backends.causal import CausalBackend
    from queerbench.models.generation.local import TransformersRunner
    from queerbench.models.registry import load_model, open_generator

    runner: Runner
    weights: dict[str, Any] | None = None
    if request_type != GENERATE:
        weights = ref.fingerprint(loaded=True)
        model = loaded or load_model(ref, "causal_lm", device=spec.device, dtype=spec.dtype, device_map=spec.device_map)
        runner = TransformersRunner(
            None if ref.is_embedded else ref.name,
            dtype=spec.dtype,
            revision=ref.revision,
            device_map=None if loaded is not None else spec.device_map,  # a loaded model was placed by its loader
            loaded=model,
            weights=weights,
            system_prompt=system_prompt,
            prompts=False,
        )
    elif loaded is not None:
        runner = TransformersRunner(
            None if ref.is_embedded else ref.name,
            dtype=spec.dtype,
            revision=ref.revision,
            loaded=loaded,
            system_prompt=system_prompt,
        )
    else:
        runner = open_generator(
            ref,
            device=spec.device,  # resolved by the loader (the library's one device rule)
            dtype=spec.dtype,
            device_map=spec.device_map,
            system_prompt=system_prompt,
        )
    if not isinstance(runner, TransformersRunner):  # a local reference opens a local runner
        raise TypeError(f"{ref.name}: expected a local causal LM runner, got {type(runner).__name__}")
    return CausalBackend(
        runner,
        ref,
        dtype=spec.dtype,
        batch_size=spec.batch_size,
        share_prefixes=share_prefixes,
        log=log,
        fingerprint=weights,
    )
